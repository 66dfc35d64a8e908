"""`%load_ext ipymusicgen` loads the magics and nothing a first cell does not need (figure 3 times it): the paid
extras' machinery, the removed-names finder's ABCs and the journal file's connection, `Database` and song queries
wait for first use, as the widgets, the sandbox and the audio stack do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

LATER = (
    "numpy",
    "fastapi",
    "uvicorn",
    "ipywidgets",
    "anywidget",
    "lameenc",
    "miniaudio",
    "mutagen",
    "mcp",
    "importlib.abc",
    "importlib.resources",
    "ipymusicgen.archive.extras",
    "ipymusicgen.storage.extras",
    "ipymusicgen.widgets",
    "ipymusicgen.sandbox",
    "ipymusicgen.lab.grid",
    "ipymusicgen.storage.shared_connection",
    "ipymusicgen.storage.database",
    "ipymusicgen.storage.songs",
)
LOAD = f"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = set(sys.modules)
shell.run_line_magic("load_ext", "ipymusicgen")
magics = shell.magics_manager.magics["line"]
print(json.dumps({{
    "loaded": [m for m in {LATER!r} if m in sys.modules and m not in before],
    "extras_magics": [m for m in ("musicgen_wav", "musicgen_mp4", "musicgen_vibe") if m in magics],
}}))
"""


def test_load_ext_leaves_the_paid_extras_and_the_heavy_parts_for_first_use() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"loaded": [], "extras_magics": ["musicgen_wav", "musicgen_mp4", "musicgen_vibe"]}
