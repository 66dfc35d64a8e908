"""The team gateway's documentation, run: the JupyterHub service config in docs/team-gateway.md, loaded by
JupyterHub's own config loader and checked against the gateway's own command line; and the README's team section,
its five admin commands and a user's settings run as written against a SQLite ledger and the sandbox upstream."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gateway_helpers import CANARY_KEY, free_port, wait_for_port

from ipymusicgen.gateway.cli import DEFAULT_PORT
from ipymusicgen.sandbox import Sandbox

GATEWAY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "team-gateway.md"


def hub_config(tmp_path: Path) -> Path:
    section = GATEWAY_PAGE.read_text(encoding="utf-8")
    found = re.search(r"\*\*As a JupyterHub service\*\*.*?```python\n(.*?)\n```", section, re.S)
    assert found, "no JupyterHub config in docs/team-gateway.md"
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(found.group(1), encoding="utf-8")
    return path


def test_the_readme_jupyterhub_service_config_loads_and_starts_the_gateway_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jupyterhub_app = pytest.importorskip("jupyterhub.app")
    from jupyterhub.services.service import Service

    from ipymusicgen.__main__ import main

    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", "k-hub-canary")
    hub = jupyterhub_app.JupyterHub()
    hub.load_config_file(str(hub_config(tmp_path)))
    (spec,) = hub.services
    service = Service(**{k: v for k, v in spec.items() if k != "name"}, name=spec["name"])
    assert service.managed and service.environment == {"MUSICGEN_UPSTREAM_KEY": "k-hub-canary"}
    command = service.command
    assert command[:3] == ["python", "-m", "ipymusicgen"]
    port = command[command.index("--port") + 1]
    spawner = hub.config.Spawner.environment
    assert spawner["MUSICGEN_BASE_URL"] == spawner["MUSICGEN_V2_BASE_URL"] == f"http://127.0.0.1:{port}"
    started: dict = {}
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.update(kwargs))
    assert main(command[3:]) == 0  # the gateway's own command line, as the hub runs it
    assert started["database"] == "postgresql://gateway@127.0.0.1/musicgen" and started["port"] == int(port)
    assert started["host"] == "127.0.0.1" and started["key"] == "k-hub-canary"


# -- the README's team section: its commands, run as written -------------------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"
UPSTREAM_KEY_PLACEHOLDER = "MUSICGEN_UPSTREAM_KEY=..."
TOKEN_PLACEHOLDER = "mgw_..."


def team_blocks() -> tuple[list[str], list[str]]:
    """The README's team section: the admin's bash block and the user's, as command lines (comments kept)."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## A team\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no '## A team' section"
    blocks = re.findall(r"```bash\n(.*?)\n```", section.group(1), re.S)
    assert len(blocks) == 2, "the team section shows the admin's commands, then what a user sets"
    return blocks[0].splitlines(), blocks[1].splitlines()


def _command(line: str) -> str:
    """A line without its trailing `# comment`."""
    return re.sub(r"\s+#\s.*$", "", line).strip()


@pytest.mark.slow  # several processes: each command, the gateway, a user's client
def test_the_readme_team_section_runs_as_written_on_sqlite_with_the_sandbox_upstream(
    tmp_path: Path, clean_env: None
) -> None:
    admin, user = team_blocks()
    database_line, *commands = admin
    assert database_line.startswith("DB=postgresql://"), "the team's database is PostgreSQL"
    assert len(commands) == 5 and all("python -m ipymusicgen gateway" in c for c in commands)
    assert all("--database $DB" in c for c in commands), "every command on the one ledger"
    database = tmp_path / "gateway.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python`: this venv's
    env["MUSICGEN_JOURNAL"] = str(tmp_path / "journal.sqlite3")

    def run(line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", f"DB={database}\n{_command(line)}"], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    team, add, budget, serve, spend = commands
    assert run(team).strip() == "team budget 500"
    added = run(add).strip().splitlines()
    token = added[-1]
    assert token.startswith("mgw_") and "ada" in added[0] and token not in "\n".join(added[:-1])
    assert run(budget).strip() == "ada: budget 90"
    listed = subprocess.run(
        [sys.executable, "-m", "ipymusicgen", "gateway", "user", "list", "--database", str(database)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.stdout.splitlines() == ["ada\tbudget 90\tspent 0"]

    assert UPSTREAM_KEY_PLACEHOLDER in serve and f"127.0.0.1:{DEFAULT_PORT}" in serve
    port = free_port()
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as upstream:
        served = _command(serve).replace(UPSTREAM_KEY_PLACEHOLDER, f"MUSICGEN_UPSTREAM_KEY={CANARY_KEY}")
        served += f" --port {port} --upstream {upstream.base_url} --upstream-v2 {upstream.v2_base_url}"
        log = (tmp_path / "serve.log").open("wb")
        gateway = subprocess.Popen(
            ["bash", "-c", f"DB={database}\n{served}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the shell and the gateway it runs: one process group, ended together
        )
        try:
            wait_for_port(port, gateway)
            user_env = dict(env)
            for line in user:
                for assignment in _command(line).removeprefix("export ").split():
                    name, _, value = assignment.partition("=")
                    value = value.replace(f":{DEFAULT_PORT}", f":{port}").replace(TOKEN_PLACEHOLDER, token)
                    user_env[name] = value
            assert set(user_env) >= {"MUSICGEN_BASE_URL", "MUSICGEN_V2_BASE_URL", "MUSICGEN_API_KEY"}
            notebook = (
                "from ipymusicgen.client.faces import MusicClient\n"
                "with MusicClient(timeout=30) as client:\n"
                "    print(len(client.generate(action='auto', style='rain', mv='MFV3.0').ids))\n"
                "    print(client.key_info().key_name)\n"
            )
            made = subprocess.run(
                [sys.executable, "-c", notebook], env=user_env, capture_output=True, text=True, timeout=120
            )
            assert made.returncode == 0, made.stderr
            assert made.stdout.split() == ["2", "ada"], "a user's client works through the gateway with their token"
            lines = run(spend).splitlines()
        finally:
            os.killpg(gateway.pid, signal.SIGTERM)
            gateway.wait(10)
            log.close()
        assert upstream.request_counts().get("/v1/music/generate") == 1
    assert lines[0] == "user\tcalls\testimated\tmeasured\tunknown"
    assert lines[1].split("\t")[:3] == ["ada", "1", "3"] and lines[1].endswith("\t0")
    assert CANARY_KEY not in (tmp_path / "serve.log").read_text()


def test_the_tls_proxy_example_serves_the_name_the_proxy_passes_on(
    monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    from ipymusicgen.__main__ import main
    from ipymusicgen.gateway.app import Gateway

    text = GATEWAY_PAGE.read_text(encoding="utf-8")
    caddy = re.search(r"```text\n# Caddyfile\n(\S+) \{\n\s+reverse_proxy (\S+)\n\}\n```", text)
    serve = re.search(r"```bash\n(MUSICGEN_UPSTREAM_KEY=\.\.\. python -m ipymusicgen gateway serve .*)\n```", text)
    assert caddy and serve, "docs/team-gateway.md shows a Caddyfile and the serve command behind it"
    site, target = caddy.groups()
    assert target == f"127.0.0.1:{DEFAULT_PORT}", "the proxy reaches the gateway on loopback, its default port"
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", "k-proxy")
    started: dict = {}
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.update(kwargs))
    argv = serve.group(1).replace("$DB", "postgresql://gateway@127.0.0.1/musicgen").split()
    assert main(argv[argv.index("ipymusicgen") + 1 :]) == 0
    assert started["host"] == "127.0.0.1" and started["port"] == DEFAULT_PORT
    gateway = Gateway(None, None, host=started["host"], allow_hosts=started["allow_hosts"])  # type: ignore[arg-type]
    assert gateway.host_allowed(site) and gateway.host_allowed(f"{site}:443"), "the Host Caddy passes on"
    assert not gateway.host_allowed("evil.example")
