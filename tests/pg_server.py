"""A real PostgreSQL server for the tests, started by them: initdb + pg_ctl from the machine's binaries.

PostgreSQL refuses to run as root, so as root the server runs as `nobody` (its data folder owned by it) on a
free loopback port, with trust authentication on loopback only; it is stopped and removed afterwards.
Use it as a session fixture: `from tests.pg_server import postgres_url` in a conftest or test module.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 60.0


def server_binaries() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb and pg_ctl, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *command] if os.geteuid() == 0 else command


class PostgresServer:
    """One throwaway cluster; `url(dbname)` makes a fresh database on it."""

    def __init__(self) -> None:
        binaries = server_binaries()
        if binaries is None:
            pytest.skip("no PostgreSQL server binaries (scripts/setup installs Debian's postgresql)")
        self.bin = binaries
        self.root = Path(tempfile.mkdtemp(prefix="ipymusicgen-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._count = 0
        if os.geteuid() == 0:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, "nobody", "nogroup")

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _as_server_user([str(self.bin / command[0]), *command[1:]]),
            check=check,
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=START_TIMEOUT,
        )

    def start(self) -> PostgresServer:
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server on its data folder (its output to a log file: a pipe would keep `run` waiting)."""
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
        self.run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def halt(self) -> None:
        """Stop the server, disconnecting every client (as a crash or a restart does)."""
        self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.halt()
        self.resume()

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        self._count += 1
        name = f"ledger_{self._count}_{os.getpid()}"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(self.url(), autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                return self.url(name)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="database", params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])  # slow: a server
def ledger_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A gateway ledger on each engine: a SQLite file in the test's folder, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "gateway.sqlite3")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()
