"""The package's shape a maintainer relies on: small modules (none over 700 lines but the sandbox's audio
synthesis), and a batch changed only through its public methods (the engine never sets its private fields)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "ipymusicgen"
MAX_LINES = 700
LONG_ALLOWED = {"sandbox/audio.py"}
"""The sandbox's audio synthesis: one job (sound from a seed), allowed over the limit by the guide."""


def test_no_module_is_over_700_lines_but_the_sandboxs_audio_synthesis() -> None:
    lengths = {
        str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.rglob("*.py")
    }
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONG_ALLOWED}
    assert not too_long, f"split these along their own sections: {too_long}"


def private_batch_attributes(source: str) -> list[str]:
    """`batch._x` or `self.batch._x` read or written: a private field of a `Batch` used from outside it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "batch":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_checker_sees_a_private_batch_field() -> None:
    assert private_batch_attributes("self.batch._done.set()\nbatch._wakers.append(1)\nbatch.changed()") == [
        "line 1: self.batch._done",
        "line 2: batch._wakers",
    ]


def test_nothing_in_the_package_sets_or_reads_a_batchs_private_fields() -> None:
    used = {
        str(path.relative_to(PACKAGE)): found
        for path in PACKAGE.rglob("*.py")
        if path.name != "result.py" and (found := private_batch_attributes(path.read_text(encoding="utf-8")))
    }
    assert not used, f"use the batch's public methods (batch/result.py): {used}"
