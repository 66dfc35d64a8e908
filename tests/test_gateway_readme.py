"""The JupyterHub service config for the team gateway in docs/team-gateway.md (the README links it), loaded by
JupyterHub's own config loader and checked against the gateway's own command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
