"""The package's face: every public name resolves, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import ipymusicgen


def test_every_public_name_resolves() -> None:
    assert [name for name in ipymusicgen.__all__ if not hasattr(ipymusicgen, name)] == []
    assert issubclass(ipymusicgen.InsufficientCreditsError, ipymusicgen.EnvelopeError)


def test_import_leaves_the_heavy_parts_for_later() -> None:
    heavy = ("numpy", "fastapi", "uvicorn", "ipywidgets", "IPython", "asyncio", "lameenc")
    code = f"import sys, ipymusicgen; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""
