"""What the notebook and browser tests share: the demo notebooks, and a kernel environment that is the sandbox's.

The notebooks must never reach the real (paid) service from a test, so every MUSICGEN_* variable
that could point them elsewhere is dropped, and the embedded sandbox is given a fast clock.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "artifacts"
NOTEBOOK_NAMES = ("quickstart", "magics-tour", "widgets-studio", "python-api", "batch", "library")
FAST_SANDBOX = {
    "MUSICGEN_SANDBOX_STAGE_SECONDS": "0.3",
    "MUSICGEN_SANDBOX_SONG_SECONDS": "4",
    "MUSICGEN_POLL_INTERVAL": "0.25",
}
"""A song finishes in about a second; watchers and `wait()` poll four times a second."""
QUICK_SANDBOX = {"MUSICGEN_SANDBOX_STAGE_SECONDS": "0.03", "MUSICGEN_POLL_INTERVAL": "0.02"}
"""For a fresh Python process that only waits on its songs' state (no kernel, nothing shown live): a song in
a tenth of a second, polled as often, instead of idling through FAST_SANDBOX's stages."""
DROPPED_PREFIXES = ("MUSICGEN_",)


def sandbox_env(**extra: str) -> dict[str, str]:
    """This process's environment without any MUSICGEN_* setting (no key, no host, no faults), plus the fast sandbox."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(DROPPED_PREFIXES)}
    env.update(FAST_SANDBOX)
    env.update(extra)
    return env


def notebook_path(name: str) -> Path:
    return NOTEBOOKS / f"{name}.ipynb"
