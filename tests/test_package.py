"""The package's face: every public name resolves, and importing it stays light."""

from __future__ import annotations

import os
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


def test_the_shared_session_closes_its_connections_at_exit() -> None:
    code = "from ipymusicgen import session; session.get_client().key_info()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["MUSICGEN_SANDBOX_STAGE_SECONDS"] = "0.1"
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    assert "sandbox mode" in done.stdout and "ResourceWarning" not in done.stderr, done.stderr
