"""The agent-host configs in the docs start the server by its full `.venv/bin/ipymusicgen` path (issue 42 item 1):
a host started outside the checkout's unactivated `.venv` (Claude Desktop, VS Code, Jupyter AI's server) finds no
bare `ipymusicgen` on its PATH, so a config copied as written would not start."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["command"]] if isinstance(node.get("command"), str) else []
        return found + [c for value in node.values() for c in _commands(value)]
    if isinstance(node, list):
        return [c for value in node for c in _commands(value)]
    return []


def test_every_json_host_config_in_the_docs_names_the_venvs_server() -> None:
    commands = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```json\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S):
            for command in _commands(json.loads(block)):
                commands.setdefault(page.name, []).append(command)
    assert commands, "the agent configs are in the docs"
    bare = {page: [c for c in found if not c.endswith("/.venv/bin/ipymusicgen")] for page, found in commands.items()}
    assert not any(bare.values()), f"commands a host started outside the venv cannot find: {bare}"
