"""Issue 39: the client's rules applied at the gateway too. The key never goes over plain http to another machine,
a ledger URL's password is never shown (banner, errors), a user's text reaches an admin's terminal escaped, and a
price no ledger could hold is refused before serving; the Host is checked before routing and nothing redirects."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayProcess, GatewayThread, add_user, cli, post
from pg_server import PostgresServer, postgres_server  # noqa: F401  (the session fixture)

from ipymusicgen.__main__ import main
from ipymusicgen.gateway.database_url import masked, shown_database
from ipymusicgen.models.costs import ENV_COSTS, CostTableError, price
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger


def _serve(*args: str) -> tuple[int, str]:
    """`gateway serve ...` in this process, expected to refuse: (exit code, stdout + stderr). Its port is taken,
    so a serve that wrongly goes on fails to listen rather than serving for ever."""
    out, err = io.StringIO(), io.StringIO()
    with (
        socket.create_server(("127.0.0.1", 0)) as taken,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(["gateway", "serve", *args, "--port", str(taken.getsockname()[1])])
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    "upstream",
    ["http://10.20.30.40:8123", "http://music.example.org", "HTTP://[2001:db8::7]:9000", "ftp://127.0.0.1:21"],
)
def test_serve_refuses_to_send_the_key_in_clear_to_another_machine(
    upstream: str, tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    database = str(tmp_path / "gateway.sqlite3")
    code, said = _serve("--database", database, "--upstream", upstream)
    assert code == 2 and "http" in said and CANARY_KEY not in said
    code, said = _serve("--database", database, "--upstream-v2", upstream)
    assert code == 2


def test_serve_refuses_a_price_no_ledger_could_hold(
    tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    for table in ("MFV3.0=3e21", "*=9223372036854775808", "lyrics=1000001"):
        monkeypatch.setenv(ENV_COSTS, table)
        code, said = _serve("--database", str(tmp_path / "g.sqlite3"))
        assert code == 2 and ENV_COSTS in said, (table, said)
    with pytest.raises(CostTableError):
        price(1e25, "set_costs")
    assert price("1000000", "ok") == 1_000_000


def test_a_paid_call_at_the_dearest_price_taken_is_reserved_not_a_503(
    tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_COSTS, "MFV2.0=1000000")
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "hal", budget=2_500_000)
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 10}) as upstream,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway,
    ):
        answered = post(gateway.url, "/v1/music/generate", token, {"action": "auto", "style": "s", "mv": "MFV2.0"})
    assert answered.status_code == 200, answered.text
    with open_ledger(database) as ledger:
        assert [c["estimated"] for c in ledger.calls()] == [1_000_000]


PASSWORD = "Pa%2Fss+w0rd%40x"
"""As written in the URL; percent-decoded it reads `Pa/ss+w0rd@x`."""


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://team:{PASSWORD}@127.0.0.1:1/ledger",
        f"postgresql://127.0.0.1:1/ledger?user=team&password={PASSWORD}&sslmode=disable",
        f"postgres://team@127.0.0.1:1/ledger?sslpassword={PASSWORD}",
    ],
)
def test_a_ledger_urls_password_is_never_shown(url: str, clean_env: None) -> None:
    shown = shown_database(url)
    assert "127.0.0.1" in shown and "Pa/ss" not in shown and "w0rd" not in shown
    driver_said = f'connection to "{url}" failed: password "Pa/ss+w0rd@x" rejected; also {PASSWORD}'
    text = masked(driver_said, url)
    assert "w0rd" not in text and "Pa/ss" not in text


@pytest.mark.slow
def test_serves_banner_and_errors_mask_the_ledger_password(
    tmp_path: Path, clean_env: None, request: pytest.FixtureRequest
) -> None:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    good = server.new_database().replace("postgres@", f"postgres:{PASSWORD}@") + f"?password={PASSWORD}"
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 10}) as upstream:
        log = tmp_path / "serve.log"
        with GatewayProcess(good, upstream.base_url, upstream.v2_base_url, log) as gateway:
            assert httpx.get(gateway.url + "/v1/music/tasks", timeout=10).status_code == 401
        said = log.read_text()
    assert "ledger: postgresql://***@127.0.0.1" in said and "w0rd" not in said, said
    refused = good.replace(f"/{good.rsplit('/', 1)[1].split('?')[0]}", "/no_such_db_here")
    run = subprocess.run(
        [sys.executable, "-m", "ipymusicgen", "gateway", "serve", "--database", refused, "--port", "1"],
        env={"MUSICGEN_UPSTREAM_KEY": CANARY_KEY, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "no_such_db_here" in run.stderr + run.stdout
    assert "w0rd" not in run.stderr + run.stdout and "Pa/ss" not in run.stderr + run.stdout


def test_spend_by_model_shows_a_users_escape_codes_escaped(tmp_path: Path, clean_env: None) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "ivy")
    hostile = "\x1b]0;owned\x07MFV\x1b[2J\t9\u202e"
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 10}) as upstream,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway,
    ):
        post(gateway.url, "/v1/music/generate", token, {"action": "auto", "style": "s", "mv": hostile})
    code, out = cli("spend", "--by", "model", "--database", database)
    assert code == 0 and "MFV" in out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert all(line.count("\t") == 4 for line in out.strip().splitlines())  # the tab stays inside its cell


def test_a_trailing_slash_is_never_redirected_and_a_foreign_host_is_refused_first(
    tmp_path: Path, clean_env: None
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    token = add_user(database, "jon")
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 10}) as upstream,
        GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway,
    ):
        for path in ("/v2/submit/", "/v1/music/generate/", "/v1/music/tasks/", "/nowhere/"):
            for host in ("rebind.attacker.test", "127.0.0.1.attacker.test:8790"):
                foreign = httpx.post(
                    gateway.url + path, json={}, headers={"host": host, "x-api-key": token}, timeout=10
                )
                assert foreign.status_code == 403 and "location" not in foreign.headers, (path, host)
            own = httpx.post(gateway.url + path, json={}, headers={"x-api-key": token}, timeout=10)
            assert own.status_code in (404, 405) and "location" not in own.headers, path
    with open_ledger(database) as ledger:
        assert ledger.calls() == []
