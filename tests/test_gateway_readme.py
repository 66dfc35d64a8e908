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
    # the hub's own Python, which has the gateway installed; a bare `python` is whatever the hub's PATH finds first
    assert command[:3] == [sys.executable, "-m", "ipymusicgen"]
    port = command[command.index("--port") + 1]
    spawner = hub.config.Spawner.environment
    assert spawner["MUSICGEN_BASE_URL"] == spawner["MUSICGEN_V2_BASE_URL"] == f"http://127.0.0.1:{port}"
    started: dict = {}
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.update(kwargs))
    assert main(command[3:]) == 0  # the gateway's own command line, as the hub runs it
    assert started["database"] == "postgresql://gateway@127.0.0.1/musicgen" and started["port"] == int(port)
    assert started["host"] == "127.0.0.1" and started["key"] == "k-hub-canary"


# -- the README's team section: its commands, run as written ------------------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"
UPSTREAM_KEY_PLACEHOLDER = "MUSICGEN_UPSTREAM_KEY=..."
TOKEN_PLACEHOLDER = "mgw_..."
VENV_PYTHON = ".venv/bin/python -m ipymusicgen"


def team_blocks() -> tuple[list[str], list[str], list[str]]:
    """The README's team section: the admin's bash block, the user's, and the sandbox trial's (lines as written)."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## A team\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no '## A team' section"
    blocks = re.findall(r"```bash\n(.*?)\n```", section.group(1), re.S)
    assert len(blocks) == 3, "the team section shows the admin's commands, what a user sets, and a sandbox trial"
    admin, user, trial = (block.splitlines() for block in blocks)
    return admin, user, trial


def _command(line: str) -> str:
    """A line without its trailing `# comment`."""
    return re.sub(r"\s+#\s.*$", "", line).strip()


def _commands(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def clean_shell(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A newcomer's shell after `./scripts/setup`: in a folder holding the checkout's `.venv` (this venv), with no
    MUSICGEN_* set, no DB, and a PATH without the venv (so a bare `python` is not the venv's); their own home."""
    venv = Path(sys.executable).parents[1]
    work = tmp_path / "checkout"
    work.mkdir()
    (work / ".venv").symlink_to(venv, target_is_directory=True)
    path = [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != (venv / "bin").resolve()
    ]
    env = {
        "PATH": os.pathsep.join(path) or "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "data"),  # the journal's folder, and the default ledger's beside it
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path),
    }
    python = subprocess.run(["bash", "-c", "command -v python || true"], env=env, capture_output=True, text=True)
    assert not python.stdout.strip() or Path(python.stdout.strip()).resolve() != Path(sys.executable).resolve()
    return env, work


def test_every_shell_command_in_the_readme_and_docs_runs_the_venvs_python() -> None:
    """`./scripts/setup` makes `.venv` and activates nothing: a bare `python -m ipymusicgen` or `ipymusicgen` is not
    on PATH after it, so no command a newcomer copies may start with one."""
    root = README.parent
    bare = re.compile(r"(^|[\s;&|(])(python3? -m ipymusicgen|python3? -c|ipymusicgen (mcp|gateway|demo|generate))")
    venv = re.compile(r"\.venv/bin/python -m ipymusicgen|\.venv/bin/python|\.venv/bin/ipymusicgen")
    found = []
    for page in [README, *sorted((root / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                code = _command(line) if not line.lstrip().startswith("#") else ""
                if bare.search(venv.sub("VENV", code)):
                    found.append(f"{page.name}: {line}")
    assert found == []


@pytest.mark.slow  # several processes: each command, the gateway, a user's client
def test_the_readme_team_section_runs_as_written_on_the_sqlite_default_with_the_sandbox_upstream(
    tmp_path: Path,
) -> None:
    admin, user, _ = team_blocks()
    commands = _commands(admin)
    assert len(commands) == 5 and all(f"{VENV_PYTHON} gateway" in c for c in commands)
    env, work = clean_shell(tmp_path)
    ledger = tmp_path / "data" / "ipymusicgen" / "gateway.sqlite3"

    def run(line: str) -> str:
        done = subprocess.run(["bash", "-c", line], env=env, cwd=work, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"ledger: {ledger}" in done.stderr.splitlines(), "each admin command says which ledger it opened"
        return done.stdout

    team, add, budget, serve, spend = commands
    assert run(team).strip() == "team budget 500"
    added = run(add).strip().splitlines()
    token = added[-1]
    assert token.startswith("mgw_") and "ada" in added[0] and token not in "\n".join(added[:-1])
    assert run(budget).strip() == "ada: budget 90"
    assert run(f"{VENV_PYTHON} gateway user list").splitlines() == ["ada\tbudget 90\tspent 0"]

    assert UPSTREAM_KEY_PLACEHOLDER in serve and f"127.0.0.1:{DEFAULT_PORT}" in serve
    port = free_port()
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as upstream:
        served = _command(serve).replace(UPSTREAM_KEY_PLACEHOLDER, f"MUSICGEN_UPSTREAM_KEY={CANARY_KEY}")
        served += f" --port {port} --upstream {upstream.base_url} --upstream-v2 {upstream.v2_base_url}"
        log = (tmp_path / "serve.log").open("wb")
        gateway = subprocess.Popen(
            ["bash", "-c", served],
            env=env,
            cwd=work,
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
    said = (tmp_path / "serve.log").read_text()
    assert CANARY_KEY not in said and str(ledger) in said


@pytest.mark.slow  # the gateway and its sandbox, an admin command, a user's generate
def test_the_readme_sandbox_trial_runs_as_written_in_two_terminals(tmp_path: Path) -> None:
    _, _, trial = team_blocks()
    split = next(i for i, line in enumerate(trial) if line.startswith("# terminal 2"))
    first, second = _commands(trial[:split]), _commands(trial[split:])
    assert len(first) == 1 and "gateway serve --sandbox" in first[0] and "MUSICGEN_UPSTREAM_KEY" not in first[0]
    env, work = clean_shell(tmp_path)
    port = free_port()
    quick = {**env, "MUSICGEN_SANDBOX_STAGE_SECONDS": "0.1", "MUSICGEN_SANDBOX_SONG_SECONDS": "4"}  # speed only
    log = (tmp_path / "terminal1.log").open("wb")
    gateway = subprocess.Popen(
        ["bash", "-c", f"{_command(first[0])} --port {port}"],
        env=quick,
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_port(port, gateway)
        script = "set -e\n" + "\n".join(line.replace(f":{DEFAULT_PORT}", f":{port}") for line in second)
        done = subprocess.run(["bash", "-c", script], env=env, cwd=work, capture_output=True, text=True, timeout=180)
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(15)
        log.close()
    assert done.returncode == 0, done.stdout + done.stderr
    ledger = work / "trial-ledger.sqlite3"
    assert done.stderr.splitlines().count(f"ledger: {ledger}") == 2, done.stderr  # user add, then spend
    assert len(re.findall(r"^saved songs/.+\.mp3$", done.stdout, re.M)) == 2, done.stdout
    assert re.search(r"^ada\t1\t3\t", done.stdout, re.M), done.stdout
    started = (tmp_path / "terminal1.log").read_text()
    assert "upstream: a local sandbox" in started and f"ledger: {ledger}" in started, started
    assert "Traceback" not in started, started


def test_serve_on_the_sandbox_refuses_an_upstream_too(capsys: pytest.CaptureFixture[str]) -> None:
    from ipymusicgen.__main__ import main

    assert main(["gateway", "serve", "--sandbox", "--upstream", "https://elsewhere.example"]) == 2
    assert "--sandbox is the upstream" in capsys.readouterr().err


def test_an_admin_command_names_a_server_ledger_masked(capsys: pytest.CaptureFixture[str], clean_env: None) -> None:
    pytest.importorskip("psycopg")
    from ipymusicgen.__main__ import main

    url = "postgresql://admin:s3cret-pw@127.0.0.1:1/team"  # nothing listens on port 1: refused at once
    assert main(["gateway", "user", "list", "--database", url]) == 2
    said = capsys.readouterr().err
    # one line: the ledger it could not open, named masked (an opened one gets its own "ledger: ..." line)
    assert said.startswith("error: could not open the ledger at postgresql://***@127.0.0.1:1/team"), said
    assert len(said.strip().splitlines()) == 1 and "s3cret" not in said


def test_the_tls_proxy_example_serves_the_name_the_proxy_passes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    from ipymusicgen.__main__ import main
    from ipymusicgen.gateway.app import Gateway
    from ipymusicgen.gateway.upstream import Upstream
    from ipymusicgen.storage.ledger_engines import open_ledger

    text = GATEWAY_PAGE.read_text(encoding="utf-8")
    caddy = re.search(r"```text\n# Caddyfile\n(\S+) \{\n\s+reverse_proxy (\S+)\n\}\n```", text)
    serve = re.search(
        r"```bash\n(MUSICGEN_UPSTREAM_KEY=\.\.\. \.venv/bin/python -m ipymusicgen gateway serve .*)\n```", text
    )
    assert caddy and serve, "docs/team-gateway.md shows a Caddyfile and the serve command behind it"
    site, target = caddy.groups()
    assert target == f"127.0.0.1:{DEFAULT_PORT}", "the proxy reaches the gateway on loopback, its default port"
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", "k-proxy")
    started: dict = {}
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.update(kwargs))
    argv = serve.group(1).split()
    assert main(argv[argv.index("ipymusicgen") + 1 :]) == 0
    assert started["host"] == "127.0.0.1" and started["port"] == DEFAULT_PORT
    upstream = Upstream("http://127.0.0.1:9", "http://127.0.0.1:9", "k-proxy")  # never called
    ledger = open_ledger(str(tmp_path / "ledger.sqlite3"))
    gateway = Gateway(ledger, upstream, host=started["host"], allow_hosts=started["allow_hosts"])
    try:
        assert gateway.host_allowed(site) and gateway.host_allowed(f"{site}:443"), "the Host Caddy passes on"
        assert not gateway.host_allowed("evil.example")
    finally:
        gateway.close()
