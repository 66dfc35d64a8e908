"""The shared song card and the watcher's front end in a real Chromium, fed by a real kernel-side watcher.

No Jupyter here (tests/test_browser*.py cover JupyterLab and Notebook): the watcher's ES module
(common.js + watcher.js, as `_static.esm` joins them) is loaded in a blank page with a stand-in for
anywidget's `model` (on / off / send), and the messages the real `TaskWatcher` publishes against the
sandbox are handed to it. So this checks the drawing and the intents: takes side by side, text never
becoming markup, buttons with labels, click-to-seek on the sandbox's real audio (byte ranges), gaps
in the diff numbering answered with a request for a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import comm
import pytest
from browser_utils import DARK, blank_page, low_contrast, mount, shot
from helpers import HOSTILE, ManualClock
from playwright.sync_api import Browser, Page

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.widgets import TaskWatcher

pytestmark = pytest.mark.slow  # a real Chromium

STEP_MS = 30_000


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with blank_page(browser, viewport={"width": 1280, "height": 900}) as blank:
        mount(blank, "watcher", width="1100px")
        yield blank  # no exception in the front end, whatever the test did


@pytest.fixture
def outbox(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Custom messages the kernel-side widgets publish (what the page is then handed)."""
    sent: list[dict[str, Any]] = []

    def publish_msg(self: comm.DummyComm, msg_type: str, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if msg_type == "comm_msg" and isinstance(data, dict) and data.get("method") == "custom":
            sent.append(data["content"])

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish_msg)
    return sent


def relay(page: Page, outbox: list[dict[str, Any]]) -> None:
    """Hand the page every message the kernel sent since the last relay."""
    while outbox:
        page.evaluate("message => window.deliver(message)", outbox.pop(0))


def browser_intents(page: Page) -> list[dict[str, Any]]:
    return page.evaluate("window.sent")


def answer_intents(page: Page, watcher: TaskWatcher, outbox: list[dict[str, Any]]) -> None:
    """Deliver the page's intents to the kernel widget, and its answers back to the page."""
    for message in page.evaluate("window.sent.splice(0)"):
        watcher._handle_custom_msg(message, [])
    relay(page, outbox)


@pytest.fixture
def live(
    client: MusicClient, clock: ManualClock, outbox: list[dict[str, Any]], page: Page
) -> Iterator[Callable[..., TaskWatcher]]:
    made: list[TaskWatcher] = []

    def make(**fields: object) -> TaskWatcher:
        body = {"action": "custom", "style": "lo-fi, piano", "title": "Rain", "lyrics": "[Verse]\nla la", **fields}
        watcher = TaskWatcher(list(client.generate(**body).ids), client=client, autostart=False)
        made.append(watcher)
        answer_intents(page, watcher, outbox)  # the page's hello -> a snapshot
        return watcher

    yield make
    for watcher in made:
        watcher.close()


def test_two_takes_side_by_side_with_text_only_titles_and_labelled_buttons(
    page: Page, live: Callable[..., TaskWatcher], clock: ManualClock, outbox: list[dict[str, Any]]
) -> None:
    watcher = live(title=HOSTILE, style=f"{HOSTILE}, piano")
    cards = page.locator(".ipymusicgen-watcher .ims-call .ipymusicgen-song")
    assert cards.count() == 2
    assert [cards.nth(i).get_attribute("data-take") for i in range(2)] == ["1", "2"]
    assert page.locator(".ims-take").all_text_contents() == ["Take 1", "Take 2"]
    assert page.locator(".ims-badge").first.text_content().startswith("Queued")
    assert page.locator(".ipymusicgen-waveform.ims-shimmer").count() == 2  # no peaks yet: a shimmer
    clock.stages(2)
    watcher.poll_once()
    relay(page, outbox)
    assert page.locator(".ims-title").all_text_contents() == [HOSTILE, HOSTILE]
    assert page.locator(".ipymusicgen-song img").count() == 2  # the covers only: the title made no <img>
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    assert page.locator(".ims-chip").first.text_content() == HOSTILE
    assert page.locator(".ims-badge").first.text_content().startswith("Ready")
    assert page.locator(".ims-watcher-counts").text_content() == "2 ready"
    # no kernel peaks yet: each card reads its own file (the sandbox's), then the shimmer ends with bars drawn
    page.wait_for_function("() => document.querySelectorAll('[data-peaks=browser]').length === 2", timeout=STEP_MS)
    assert page.locator(".ipymusicgen-waveform.ims-shimmer").count() == 0
    watcher.annotate(watcher.ids[0], peaks=[[-0.8 * (i % 5) / 5, 0.9 * (i % 7) / 7] for i in range(120)])
    relay(page, outbox)
    drawn = "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v > 0)"
    assert page.locator(".ipymusicgen-waveform canvas").first.evaluate(drawn)
    buttons = page.locator(".ipymusicgen-song button")
    for index in range(buttons.count()):
        button = buttons.nth(index)
        assert button.get_attribute("aria-label") and button.get_attribute("title")
    labels = (
        page.locator(".ipymusicgen-song")
        .first.locator(".ims-actions button")
        .evaluate_all("buttons => buttons.map(b => b.dataset.action)")
    )
    assert labels == ["keep", "extend", "concat", "download", "export", "wav", "mp4", "favourite", "copy_id"]
    words = page.locator(".ipymusicgen-song").first.locator(".ims-actions .ims-button-word").all_inner_texts()
    words_wanted = ["Keep", "Extend", "Join", "Download", "Export", "WAV", "MP4", "Favourite", "Copy id"]
    assert words == words_wanted  # a word beside each icon
    page.locator(".ipymusicgen-song").first.locator("button[data-action='copy_id']").click()
    assert browser_intents(page) == [{"kind": "copy_id", "id": watcher.ids[0]}]
    answer_intents(page, watcher, outbox)
    assert page.locator(".ims-note").first.text_content().startswith(f"Id: {watcher.ids[0]}")
    assert low_contrast(page, ".ipymusicgen-watcher") == []  # and light
    shot(page, "cards-watcher-light")
    page.evaluate(DARK)  # JupyterLab's dark theme variables: the card follows them
    background = page.locator(".ipymusicgen-song").first.evaluate("c => getComputedStyle(c).backgroundColor")
    assert background == "rgb(33, 33, 33)"  # --jp-layout-color1 of JupyterLab Dark
    assert low_contrast(page, ".ipymusicgen-watcher") == []  # every text and button word at least 4.5:1, dark
    shot(page, "cards-watcher-dark")


def test_clicking_the_waveform_seeks_the_real_audio(
    page: Page, live: Callable[..., TaskWatcher], clock: ManualClock, outbox: list[dict[str, Any]]
) -> None:
    watcher = live()
    clock.stages(2)
    watcher.poll_once()
    relay(page, outbox)
    audio = page.locator(".ipymusicgen-song audio").first
    assert audio.evaluate("a => a.autoplay === false && a.loop === false && a.getAttribute('src').endsWith('.mp3')")
    page.wait_for_function("() => document.querySelector('.ipymusicgen-song audio').readyState >= 1", timeout=STEP_MS)
    assert audio.evaluate("a => a.seekable.length > 0 && a.seekable.end(0) > 3")  # byte ranges: seekable
    wave = page.locator(".ipymusicgen-waveform").first
    box = wave.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "() => Math.abs(document.querySelector('.ipymusicgen-song audio').currentTime - 3) < 0.3", timeout=STEP_MS
    )
    assert audio.evaluate("a => a.paused")  # seeking does not start playback
    audio.evaluate("a => { a.muted = true; window.kept = a; return a.play(); }")
    page.wait_for_function("() => !window.kept.paused")
    watcher.add(["another-call-1", "another-call-2"])  # a new call on the page: a fresh snapshot
    relay(page, outbox)
    assert page.locator(".ims-call").count() == 2
    assert page.evaluate("document.querySelectorAll('.ipymusicgen-song audio')[2] === window.kept")
    assert page.evaluate("!window.kept.paused")  # the song playing goes on playing


def test_a_gap_in_the_diffs_asks_for_a_snapshot_and_paging_sends_intents(
    page: Page, client: MusicClient, live: Callable[..., TaskWatcher], outbox: list[dict[str, Any]]
) -> None:
    watcher = live()
    for _ in range(6):  # 7 calls at 10 per page... make it two pages with a small page size
        watcher.add([f"extra-{len(watcher.ids)}", f"extra-{len(watcher.ids) + 1}"])
    watcher.page_size = 3
    watcher.show_page(0)
    relay(page, outbox)
    assert page.locator(".ims-page-label").text_content() == "Page 1 of 3"
    assert page.locator(".ims-call").count() == 3
    page.get_by_label("Older songs").click()
    assert browser_intents(page) == [{"kind": "page", "page": 1}]
    answer_intents(page, watcher, outbox)
    assert page.locator(".ims-page-label").text_content() == "Page 2 of 3"
    page.evaluate("window.deliver({kind: 'diff', rev: 10 ** 6, cards: {}})")  # a message went missing
    assert browser_intents(page) == [{"kind": "hello"}]


def test_a_failed_call_is_one_row_with_retry_details_and_hide_failed(
    client: MusicClient, sandbox: Any, clock: ManualClock, outbox: list[dict[str, Any]], page: Page
) -> None:
    from ipymusicgen.models.schema import build_generate_request

    sandbox.set_faults([{"kind": "task_fail", "path": "/v1/music/generate", "count": 1, "fail_reason": HOSTILE}])
    request = build_generate_request({"action": "auto", "style": "sea shanty"})
    watcher = TaskWatcher(list(client.generate(request).ids), client=client, autostart=False, request=request)
    try:
        answer_intents(page, watcher, outbox)
        clock.stages(2)
        watcher.poll_once()
        relay(page, outbox)
        row = page.locator(".ims-failed-row")
        assert row.is_visible() and page.locator(".ims-call .ipymusicgen-song:visible").count() == 0  # one row
        assert row.locator(".ims-failed-why").inner_text() == HOSTILE and page.locator("img[src=x]").count() == 0
        hide = page.locator(".ims-hide-failed")
        assert hide.inner_text() == "Hide failed (1)" and hide.get_attribute("aria-pressed") == "false"
        shot(page, "watcher-failed-row", page.locator(".ipymusicgen-watcher"))
        row.get_by_role("button", name="Details").click()
        assert page.locator(".ims-call .ipymusicgen-song:visible").count() == 2  # the cards, on request
        row.get_by_role("button", name="Retry").click()
        assert browser_intents(page) == [{"kind": "retry", "id": watcher.ids[0]}]
        answer_intents(page, watcher, outbox)  # the sandbox key: sent at once, watched as a new call
        assert len(watcher.ids) == 4 and page.locator(".ims-call").count() == 2
        assert "sent again" in page.locator(".ims-failed-what").inner_text()
        assert page.locator(".ims-failed-retry").is_hidden()  # retried once: no second Retry
        hide.click()
        answer_intents(page, watcher, outbox)
        assert page.locator(".ims-failed-row").count() == 0 and hide.inner_text() == "Show failed (1)"
        assert low_contrast(page, ".ipymusicgen-watcher") == []
        shot(page, "watcher-failed-hidden")
    finally:
        watcher.close()


def test_a_running_songs_badge_claims_no_time_it_has_not_seen(page: Page) -> None:
    from ipymusicgen.widgets import song_card

    cards = [
        song_card(None, id="fresh", call="c", take=1, state="writing", state_label="Writing", elapsed_s=0.2),
        song_card(None, id="cooking", call="c", take=2, state="writing", state_label="Writing", elapsed_s=42.0),
    ]
    header = {"title": "2 songs", "counts": "2 running", "total": 2, "page": 0, "pages": 1}
    page.evaluate("m => window.deliver(m)", {"kind": "snapshot", "rev": 1, "header": header, "groups": [cards]})
    badges = page.locator(".ims-badge").all_text_contents()
    # not "0 s so far"; a loaded machine may take a second or more between the snapshot and this read
    assert badges[0].startswith("Writing") and "· 0 s" not in badges[0]
    seconds = badges[1].removeprefix("Writing · ").split(" s so far")[0]
    assert seconds.isdigit() and int(seconds) >= 42, badges[1]  # 42 s and counting, never 0


def test_a_card_sent_without_a_play_url_plays_its_audio_url_as_it_changes(
    page: Page, live: Callable[..., TaskWatcher], clock: ManualClock, outbox: list[dict[str, Any]]
) -> None:
    watcher = live()
    task_id = watcher.ids[0]
    for state in ("preview", "ready"):  # the preview's URL, then the final's replacing it
        clock.stages(1)
        watcher.poll_once()
        sent = [m["cards"][task_id] for m in outbox if m["kind"] == "diff" and task_id in m["cards"]]
        assert sent and "play_url" not in sent[-1] and sent[-1]["state"] == state  # the same URL is not sent twice
        relay(page, outbox)
        url = watcher.card(task_id).data()["play_url"]
        assert url == watcher.card(task_id).record.audio_url
        audio = page.locator(f".ipymusicgen-song[data-id='{task_id}'] audio")
        assert audio.get_attribute("src") == url
