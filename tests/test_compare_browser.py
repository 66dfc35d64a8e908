"""The blind comparison in a real Chromium: nothing but A and B before the vote, one player that keeps its place
when switching, keys, a vote sent as an intent, and the labels revealed as text after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_utils import DARK, blank_page, low_contrast, mount, shot
from helpers import HOSTILE
from playwright.sync_api import Browser, Page

from ipymusicgen.library import Library
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.compare import CompareView

STEP_MS = 30_000
READY = "() => document.querySelector('.ipymusicgen-compare audio').readyState >= 1"


@pytest.fixture
def view(sandbox: Sandbox, tmp_path: Path) -> Iterator[CompareView]:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="custom", style="night bus", title=f"Night {HOSTILE}", lyrics="la").ids)
        client.wait(ids)
    library = Library(path)
    yield CompareView([library.song(i) for i in ids], library=library, seed=2)
    library.close()


@pytest.fixture
def page(browser: Browser, view: CompareView) -> Iterator[Page]:
    with blank_page(browser, viewport={"width": 900, "height": 700}) as blank:
        mount(blank, "compare", data=view.data, width="800px")
        yield blank


def audio_src(page: Page) -> str:
    return page.evaluate("document.querySelector('.ipymusicgen-compare audio').getAttribute('src')")


def test_a_blind_vote_by_keys_then_the_reveal(page: Page, view: CompareView) -> None:
    root = page.locator(".ipymusicgen-compare")
    text = root.inner_text()
    assert "Night" not in text and "night bus" not in text and "hidden until you choose" in text
    assert [b.inner_text() for b in page.locator(".ims-compare-label").all()] == ["A", "B"]
    a_url, b_url = (p["audio"] for p in view.data["players"])
    assert audio_src(page) == a_url
    page.wait_for_function(
        "() => document.querySelector('.ipymusicgen-compare audio').readyState >= 1", timeout=STEP_MS
    )
    page.evaluate("document.querySelector('.ipymusicgen-compare audio').currentTime = 2.0")
    root.focus()
    page.keyboard.press("2")
    assert audio_src(page) == b_url
    page.wait_for_function(
        "() => { const a = document.querySelector('.ipymusicgen-compare audio');"
        " return a.readyState >= 1 && Math.abs(a.currentTime - 2.0) < 0.3; }",
        timeout=STEP_MS,
    )  # switching kept the place in the song
    assert page.locator(".ims-compare-player.ims-compare-current").get_attribute("data-label") == "B"
    page.keyboard.press("1")
    assert audio_src(page) == a_url
    page.keyboard.press("ArrowRight")
    sent: list[dict[str, Any]] = page.evaluate("window.sent")
    assert sent == [{"kind": "pick", "label": "B"}]
    for message in sent:
        view._handle_custom_msg(message, [])
    page.evaluate("data => window.change(data)", view.data)
    titles = [t.inner_text() for t in page.locator(".ims-compare-title").all()]
    assert titles == [f"Night {HOSTILE}"] * 2  # revealed, and a hostile title stays text
    assert page.locator(".ims-compare-title img").count() == 0 and page.locator(".ims-compare-choose").count() == 0
    assert "kept in the library" in root.inner_text()
    # the fixture's songs are not archived (no kernel peaks): each waveform is read from its audio, not a flat line
    page.wait_for_function("() => document.querySelectorAll('.ims-compare-player[data-peaks=browser]').length === 2")
    assert low_contrast(page, ".ipymusicgen-compare") == []
    shot(page, "compare-revealed", root)
    page.evaluate(DARK)
    assert low_contrast(page, ".ipymusicgen-compare") == []  # JupyterLab's dark theme: at least 4.5:1 too
    shot(page, "compare-revealed-dark", root)


def test_dragging_on_a_waveform_loops_that_region(page: Page) -> None:
    audio = ".ipymusicgen-compare audio"
    page.wait_for_function(READY, timeout=STEP_MS)
    wave = page.locator(".ims-compare-player[data-label='A'] canvas")
    box = wave.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y)
    page.mouse.up()
    page.wait_for_function(
        f"() => Math.abs(document.querySelector('{audio}').currentTime - 1.0) < 0.3", timeout=STEP_MS
    )
    page.evaluate(f"() => {{ const a = document.querySelector('{audio}'); a.muted = true; return a.play(); }}")
    page.wait_for_function(  # it plays past the region's end (2 s of the 4 s song) and comes back to its start
        f"() => {{ const a = document.querySelector('{audio}');"
        " window.seen = Math.max(window.seen || 0, a.currentTime);"
        " return window.seen > 1.5 && a.currentTime < 1.5 && !a.paused; }",
        timeout=STEP_MS,
    )
    assert page.evaluate(f"document.querySelector('{audio}').currentTime") < 2.2
