"""The front-end files of each view: `esm(view)` = common.js + <view>.js, `css(view)` = common.css + <view>.css.

common.js is the front-end kit (buttons, option lists, the song card): plain functions (no `export`), so every
view's module can call them once both are joined; there is no JS build step. Files are read once and cached.
Every view declares its front end one way: `_esm, _css = front_end("grid")` (docs/frontend.md).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import traitlets

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


def front_end(view: str) -> tuple[traitlets.Unicode, traitlets.Unicode]:
    """A view's `_esm` and `_css` as synced traits of its class: `_esm, _css = front_end("grid")`. Declared on the
    class, anywidget adds no traits per instance (a page of cards stays cheap)."""
    return traitlets.Unicode(esm(view)).tag(sync=True), traitlets.Unicode(css(view)).tag(sync=True)
