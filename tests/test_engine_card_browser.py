"""The song card marks the line being sung (issue 37), in a real Chromium: the watcher's ES module in a blank page
(as tests/test_widgets_cards_browser.py does), given the card the kernel's `TaskCard` makes of an engine's record
with word timestamps, playing the sandbox's real audio. Seeking into a line marks that line (and only it); the
lyrics stay text, whatever they hold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_utils import blank_page, mount
from playwright.sync_api import Browser, Page

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.widgets.card import TaskCard

pytestmark = pytest.mark.slow  # a real Chromium

STEP_MS = 30_000
LYRICS = 'one two\n\nthree <img src=x onerror="window.owned=1"> four'
WORDS = [("one", 0, 600), ("two", 600, 1200), ("three", 1800, 2300), ("<img", 2300, 2500), ("src=x", 2500, 2600),
         ('onerror="window.owned=1">', 2600, 2700), ("four", 2700, 3400)]  # fmt: skip


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with blank_page(browser, viewport={"width": 1280, "height": 900}) as blank:
        mount(blank, "watcher", width="1100px")
        yield blank


def test_the_card_marks_the_line_being_sung_as_the_audio_plays(page: Page, client: MusicClient) -> None:
    song = client.wait(client.generate(action="auto", style="timed").ids, timeout=60, interval=0.05)[0]
    record = TaskRecord.model_validate(
        {**song.model_dump(), "lyric": LYRICS, "provider": "elevenlabs", "timestamps": WORDS}
    )
    card = TaskCard(record.id, call="c")
    card.update(record)
    data = card.data()
    assert data["line_times"] == [[0.0, 1.2], None, [1.8, 3.4]]
    header = {"title": "1 song", "counts": "", "total": 1, "page": 0, "pages": 1}
    page.evaluate("m => window.deliver(m)", {"kind": "snapshot", "rev": 1, "header": header, "groups": [[data]]})
    page.locator(".ims-lyrics summary").first.click()
    lines = page.locator(".ims-lyrics span.ims-line")
    assert lines.count() == 3 and lines.nth(2).text_content() == LYRICS.split("\n")[2]
    assert page.locator(".ims-lyrics img").count() == 0 and not page.evaluate("window.owned")
    assert page.locator(".ims-sung").count() == 0  # nothing is sung before it plays
    page.wait_for_function("() => document.querySelector('.ipymusicgen-song audio').readyState >= 1", timeout=STEP_MS)
    page.evaluate("() => { document.querySelector('.ipymusicgen-song audio').currentTime = 2.0; }")
    page.wait_for_function("() => document.querySelector('.ims-sung')?.textContent.startsWith('three')",
                           timeout=STEP_MS)  # fmt: skip
    assert page.locator(".ims-sung").count() == 1
    assert page.locator(".ims-sung").get_attribute("aria-current") == "true"
    page.evaluate("() => { document.querySelector('.ipymusicgen-song audio').currentTime = 0.3; }")
    page.wait_for_function("() => document.querySelector('.ims-sung')?.textContent === 'one two'", timeout=STEP_MS)
    assert page.locator(".ims-sung").count() == 1 and page.locator("[aria-current]").count() == 1
