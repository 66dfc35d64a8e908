"""The front-end files of each view: `esm(view)` = common.js + <view>.js, `css(view)` = common.css + <view>.css.

common.js holds plain functions (no `export`), the song card renderer among them, so every view's
module can call them once both are joined; there is no JS build step. Files are read once and cached.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).parent / "static"


@cache
def _read(name: str) -> str:
    path = STATIC / name
    return path.read_text(encoding="utf-8") if path.exists() else ""


@cache
def esm(view: str) -> str:
    """The ES module of a view: the shared helpers, then the view's own code (ending in `export default`)."""
    own = _read(f"{view}.js")
    if not own:
        raise FileNotFoundError(f"no front-end module for view {view!r} in {STATIC}")
    return f"{_read('common.js')}\n// ---- {view}.js ----\n{own}"


@cache
def css(view: str) -> str:
    """The style sheet of a view: the shared card styles, then the view's own (which may be absent)."""
    return f"{_read('common.css')}\n/* ---- {view}.css ---- */\n{_read(f'{view}.css')}"
