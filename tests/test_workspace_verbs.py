"""The package's verbs are defined once, each one line over the current workspace (issue 38: today `grid` is
defined twice and the verbs are split between `__init__.py` and `session.py`). Functions of the same name with
another meaning (the tempo's beat grid, a file's peak envelope, the extras' maker over a client) are named here."""

from __future__ import annotations

import ast
from pathlib import Path
from types import MappingProxyType

import ipymusicgen
import ipymusicgen.widgets

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"
VERBS = MappingProxyType(
    {
        "library": "workspace/session.py",
        "analyze": "workspace/session.py",
        "waveform": "workspace/session.py",
        "export": "workspace/session.py",
        "make_extra": "workspace/session.py",
        "get_client": "workspace/session.py",
        "grid": "__init__.py",
        "studio": "widgets/studio.py",
    }
)
OTHER_MEANINGS = frozenset({"lab/tempo.py:grid", "archive/waveform.py:waveform", "archive/extras.py:make_extra"})
"""Same-named functions that are not the verb: a beat grid, the envelope of a file, the extra made by a client."""


def top_level_defs() -> dict[str, list[tuple[str, ast.FunctionDef]]]:
    """Every verb's top-level definitions in the package, each file parsed once (not once per verb)."""
    found: dict[str, list[tuple[str, ast.FunctionDef]]] = {verb: [] for verb in VERBS}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            named = isinstance(node, ast.FunctionDef) and node.name in found
            if named and f"{where}:{node.name}" not in OTHER_MEANINGS:
                found[node.name].append((where, node))
    return found


def test_each_verb_is_defined_once_in_one_line() -> None:
    every = top_level_defs()
    for verb, home in VERBS.items():
        found = every[verb]
        assert [where for where, _ in found] == [home], verb
        (_, node) = found[0]
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        assert len(body) == 1, f"{verb}: {len(body)} statements"


def test_the_package_and_the_widgets_give_the_same_verb() -> None:
    assert ipymusicgen.studio is ipymusicgen.widgets.studio
    for verb in VERBS:
        assert callable(getattr(ipymusicgen, verb))
