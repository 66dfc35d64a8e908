"""One front-end kit: every view draws its buttons and option lists with common.js's helpers, and every widget
declares its front end one way (`_esm, _css = front_end(view)`). The browser tests drive the views themselves."""

from __future__ import annotations

import re
from pathlib import Path

import anywidget

import ipymusicgen.widgets as widgets
from ipymusicgen.widgets._static import STATIC, css, esm, front_end

VIEWS = sorted(p.stem for p in STATIC.glob("*.js") if p.stem != "common")
WIDGETS = Path(widgets.__file__).parent


def test_no_view_makes_a_button_or_an_option_list_of_its_own() -> None:
    for view in VIEWS:
        code = (STATIC / f"{view}.js").read_text()
        assert not re.search(r"""imsEl\(\s*["'](button|select|option)["']""", code), view
        assert not re.search(r"""createElement\(\s*["'](button|select|option)["']""", code), view
        assert not re.search(r"function \w*(Button|Select|Options)\s*\(", code), view
    kit = (STATIC / "common.js").read_text()
    for helper in (
        "function imsTextButton(",
        "function imsSelect(",
        "function imsOptions(",
        "function renderSongCard(",
    ):
        assert helper in kit


def test_every_widget_declares_its_front_end_one_way() -> None:
    declared = {}
    for path in WIDGETS.glob("*.py"):
        for line in path.read_text().splitlines():
            if re.match(r"\s+_(esm|css)\b", line):
                match = re.fullmatch(r'\s+_esm, _css = front_end\("(\w+)"\)', line)
                assert match, f"{path.name}: {line.strip()}"
                declared[path.stem] = match.group(1)
    assert sorted(declared.values()) == VIEWS


def test_front_end_is_the_joined_kit_and_view_as_class_traits() -> None:
    class Probe(anywidget.AnyWidget):
        _esm, _css = front_end("grid")

    probe = Probe()
    try:
        state = probe.get_state()
        assert state["_esm"] == esm("grid") and state["_esm"].startswith((STATIC / "common.js").read_text()[:80])
        assert state["_css"] == css("grid") and "_esm" in Probe.class_trait_names()
    finally:
        probe.close()
