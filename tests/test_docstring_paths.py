"""Every module a docstring in src/ names exists: a dotted name (`ipymusicgen.x.y`, down to an attribute of the
module it reaches) or a file path (`x/y.py`, from the package or from the repository). A docstring that sends a
maintainer to a module that was moved or never written is how a split goes stale."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "ipymusicgen"
DOTTED = re.compile(r"\bipymusicgen(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
SLASHED = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.(?:py|js|css|md))\b")


def docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Module, class and function docstrings, and the strings written under attributes as their docstrings."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for statement in body:
            value = statement.value if isinstance(statement, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield statement.lineno, value.value


def dotted_exists(name: str) -> bool:
    """The longest prefix of `name` that is a module exists, and the rest are attributes down from it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # not a package above it, or a removed path (which says what replaced it)
            found = False
        if not found:
            continue
        target: object = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def slashed_exists(path: str) -> bool:
    return (PACKAGE / path).exists() or (ROOT / path).exists() or (ROOT / "src" / path).exists()


def named_in_docstrings() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT)
        for line, text in docstrings(ast.parse(path.read_text(encoding="utf-8"))):
            found += [(f"{where}:{line}", m) for m in DOTTED.findall(text)]
            found += [(f"{where}:{line}", m) for m in SLASHED.findall(text)]
    return found


def test_every_module_a_docstring_names_exists() -> None:
    named = named_in_docstrings()
    assert len(named) > 10  # the scan reads docstrings at all
    missing = [
        f"{where}: {name}"
        for where, name in named
        if not (dotted_exists(name) if "/" not in name else slashed_exists(name))
    ]
    assert not missing, "docstrings name modules that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("name", "exists"),
    [
        ("ipymusicgen.batch.drivers", True),
        ("ipymusicgen.batch.run_batch", True),
        ("ipymusicgen.notebook.magics.load_ipython_extension", True),
        ("ipymusicgen.magics.load_ipython_extension", False),
        ("ipymusicgen.batch.drivers.no_such_name", False),
        ("batch/drivers.py", True),
        ("docs/frontend.md", True),
        ("batch/engine.py", False),
    ],
)
def test_the_checker_tells_a_real_module_from_a_missing_one(name: str, exists: bool) -> None:
    assert (dotted_exists(name) if "/" not in name else slashed_exists(name)) is exists
