"""The blind comparison in a real Chromium: nothing but A and B before the vote, each player's sound from the kernel
over the widget channel (a blob: URL per player), one player that keeps its place when switching, keys, a vote
sent as an intent naming its round, and the labels revealed as text after it."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_utils import DARK, HARNESS, blank_page, low_contrast, shot
from helpers import HOSTILE
from playwright.sync_api import Browser, Page

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets._static import css, esm
from ipymusicgen.widgets.compare import CompareView

pytestmark = pytest.mark.slow  # a real Chromium

STEP_MS = 30_000
AUDIO = ".ipymusicgen-compare audio"
READY = (
    f"() => {{ const a = document.querySelector('{AUDIO}'); return a.src.startsWith('blob:') && a.readyState >= 1; }}"
)
CHANNEL_HARNESS = (
    HARNESS.replace(
        "send(message) { window.sent.push(message); },",
        "send(message) { window.sent.push(message); if (window.kernel) window.kernel(message); },",
    )
    .replace(
        'for (const callback of listeners["msg:custom"]) callback(message); };',
        'for (const callback of listeners["msg:custom"]) callback(message, buffers); };',
    )
    .replace(
        "window.deliver = (message) =>",
        "window.deliver = (message, buffers) =>",
    )
)
"""The harness's stand-in model, with a kernel behind it: what the view sends goes to `window.kernel`, and
`window.deliver(message, buffers)` hands the view a custom message with its buffers, as anywidget does."""
BRIDGE = """() => {
  window.kernel = (message) => {
    if (message.kind !== "audio") return;
    window.kernelAudio(message).then(({ content, bytes }) => {
      const buffers = bytes ? [new DataView(Uint8Array.from(atob(bytes), (c) => c.charCodeAt(0)).buffer)] : [];
      window.deliver(content, buffers);
    });
  };
}"""


def connect(page: Page, view: CompareView, width: str = "800px") -> None:
    """Draw the view in the page with the kernel behind it: each audio request goes to the view as the widget
    channel brings it, and its answer (bytes as a buffer) comes back to the page."""
    answers: list[tuple[dict[str, Any], list[bytes]]] = []
    came = threading.Condition()

    def send(content: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        with came:
            answers.append((content, list(buffers or ())))
            came.notify_all()

    def ask(message: dict[str, Any]) -> dict[str, Any]:
        start = len(answers)
        view._handle_custom_msg(message, [])

        def found() -> tuple[dict[str, Any], list[bytes]] | None:
            return next((a for a in answers[start:] if a[0].get("source") == message.get("source")), None)

        with came:
            came.wait_for(lambda: found() is not None, timeout=STEP_MS / 1000)
        answer = found()
        assert answer is not None, message
        content, buffers = answer
        return {"content": content, "bytes": base64.b64encode(buffers[0]).decode() if buffers else None}

    assert "window.kernel(message)" in CHANNEL_HARNESS and "callback(message, buffers)" in CHANNEL_HARNESS
    view.send = send  # type: ignore[method-assign]
    page.expose_function("kernelAudio", ask)
    page.evaluate(BRIDGE)
    page.evaluate(CHANNEL_HARNESS, [esm("compare"), css("compare"), view.data, width])


def songs_of(sandbox: Sandbox, tmp_path: Path) -> tuple[Library, list[str]]:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="custom", style="night bus", title=f"Night {HOSTILE}", lyrics="la").ids)
        client.wait(ids)
    return Library(path), ids


@pytest.fixture
def view(sandbox: Sandbox, tmp_path: Path) -> Iterator[CompareView]:
    library, ids = songs_of(sandbox, tmp_path)
    yield CompareView([library.song(i) for i in ids], library=library, seed=2, min_listen_s=0)  # see the last test
    library.close()


@pytest.fixture
def page(browser: Browser, view: CompareView) -> Iterator[Page]:
    with blank_page(browser, viewport={"width": 900, "height": 700}) as blank:
        connect(blank, view)
        yield blank


def audio_src(page: Page) -> str:
    return page.evaluate(f"document.querySelector('{AUDIO}').getAttribute('src')")


def test_a_blind_vote_by_keys_then_the_reveal(page: Page, view: CompareView) -> None:
    root = page.locator(".ipymusicgen-compare")
    text = root.inner_text()
    assert "Night" not in text and "night bus" not in text and "hidden until you choose" in text
    assert [b.inner_text() for b in page.locator(".ims-compare-label").all()] == ["A", "B"]
    page.wait_for_function(READY, timeout=STEP_MS)  # A's sound came from the kernel as the view was drawn
    a_src = audio_src(page)
    assert a_src.startswith("blob:") and not any(t.id in a_src for t in view.order)
    assert page.locator(".ims-compare-player[data-peaks=neutral]").count() == 2  # one neutral drawing for both
    page.evaluate(f"document.querySelector('{AUDIO}').currentTime = 2.0")
    root.focus()
    page.keyboard.press("2")
    page.wait_for_function(
        f"() => {{ const a = document.querySelector('{AUDIO}');"
        f" return a.src.startsWith('blob:') && a.getAttribute('src') !== {a_src!r}"
        " && a.readyState >= 1 && Math.abs(a.currentTime - 2.0) < 0.3; }",
        timeout=STEP_MS,
    )  # B's own sound, and switching kept the place in the song
    b_src = audio_src(page)
    assert page.locator(".ims-compare-player.ims-compare-current").get_attribute("data-label") == "B"
    page.keyboard.press("1")
    assert audio_src(page) == a_src  # A's sound is kept while the round lasts: asked of the kernel once
    page.evaluate(f"() => {{ const a = document.querySelector('{AUDIO}'); a.muted = true; return a.play(); }}")
    page.wait_for_function(  # it plays, from a blob: URL
        f"() => {{ const a = document.querySelector('{AUDIO}');"
        " return a.src.startsWith('blob:') && a.currentTime > 0.5; }",
        timeout=STEP_MS,
    )
    page.keyboard.press("ArrowRight")
    sent: list[dict[str, Any]] = page.evaluate("window.sent")
    assert [m["source"] for m in sent if m["kind"] == "audio"] == [p["source"] for p in view.data["players"]]
    picks = [m for m in sent if m["kind"] == "pick"]
    assert picks == [{"kind": "pick", "label": "B", "round": view.round}]
    for message in picks:
        view._handle_custom_msg(message, [])
    page.evaluate("data => window.change(data)", view.data)
    titles = [t.inner_text() for t in page.locator(".ims-compare-title").all()]
    assert titles == [f"Night {HOSTILE}"] * 2  # revealed, and a hostile title stays text
    assert page.locator(".ims-compare-title img").count() == 0 and page.locator(".ims-compare-choose").count() == 0
    assert "kept in the library" in root.inner_text()
    # the fixture's songs are not archived (no kernel peaks): after the vote each waveform is read from its sound
    page.wait_for_function("() => document.querySelectorAll('.ims-compare-player[data-peaks=browser]').length === 2")
    assert low_contrast(page, ".ipymusicgen-compare") == []
    shot(page, "compare-revealed", root)
    page.evaluate(DARK)
    assert low_contrast(page, ".ipymusicgen-compare") == []  # JupyterLab's dark theme: at least 4.5:1 too
    shot(page, "compare-revealed-dark", root)
    page.evaluate("window.cleanup()")  # the view is destroyed: its blob: URLs are released
    for src in (a_src, b_src):
        assert page.evaluate("url => fetch(url).then(() => 'read', () => 'released')", src) == "released"


def test_abx_x_plays_its_own_sound_and_every_switch_reloads(browser: Browser, sandbox: Sandbox, tmp_path: Path) -> None:
    library, ids = songs_of(sandbox, tmp_path)
    view = CompareView([library.song(i) for i in ids], library=library, mode="abx", seed=5)
    assert view.x is not None
    with blank_page(browser, viewport={"width": 900, "height": 700}) as page:
        connect(page, view)
        page.wait_for_function(READY, timeout=STEP_MS)
        page.evaluate(f"() => {{ window.loads = 0; document.querySelector('{AUDIO}').addEventListener('loadstart',"
                      " () => { window.loads += 1; }); }")  # fmt: skip
        root = page.locator(".ipymusicgen-compare")
        root.focus()
        seen = {"A": audio_src(page)}
        for key, label in (("3", "X"), ("2", "B"), ("3", "X"), ("1", "A"), ("3", "X")):
            before = page.evaluate("window.loads")
            page.keyboard.press(key)
            page.wait_for_function(
                f"n => window.loads > n && document.querySelector('{AUDIO}').readyState >= 1",
                arg=before,
                timeout=STEP_MS,
            )  # every switch reloads, X and its twin alike: no same-URL continuity to give X away
            seen.setdefault(label, audio_src(page))
            assert audio_src(page) == seen[label]
        assert len(set(seen.values())) == 3 and all(src.startswith("blob:") for src in seen.values())
        assert page.locator(".ims-compare-player[data-peaks=neutral]").count() == 3
    library.close()


def test_dragging_on_a_waveform_loops_that_region(page: Page) -> None:
    audio = AUDIO
    page.wait_for_function(READY, timeout=STEP_MS)
    wave = page.locator(".ims-compare-player[data-label='A'] canvas")
    box = wave.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y)
    page.mouse.up()
    # the round's players last 5 s (the 4 s songs and a second of silence: one length for both), so the
    # region is 1.25 s to 2.5 s
    duration = page.evaluate(f"document.querySelector('{audio}').duration")
    start, end = duration * 0.25, duration * 0.5
    page.wait_for_function(
        f"s => Math.abs(document.querySelector('{audio}').currentTime - s) < 0.3", arg=start, timeout=STEP_MS
    )
    page.evaluate(f"() => {{ const a = document.querySelector('{audio}'); a.muted = true; return a.play(); }}")
    page.wait_for_function(  # it plays past the region's end and comes back to its start
        f"([start, end]) => {{ const a = document.querySelector('{audio}');"
        " window.seen = Math.max(window.seen || 0, a.currentTime);"
        " return window.seen > (start + end) / 2 && a.currentTime < (start + end) / 2 && !a.paused; }",
        arg=[start, end],
        timeout=STEP_MS,
    )
    assert page.evaluate(f"document.querySelector('{audio}').currentTime") < end + 0.2


def test_a_new_pair_releases_the_last_rounds_sound_and_picks_name_the_new_round(page: Page, view: CompareView) -> None:
    page.wait_for_function(READY, timeout=STEP_MS)
    old_src, old_round = audio_src(page), view.round
    assert view.library is not None
    view.load([view.library.song(t.id) for t in reversed(view.order)], seed=7)  # the next pair, same view
    page.evaluate("data => window.change(data)", view.data)
    page.wait_for_function(
        f"old => {{ const a = document.querySelector('{AUDIO}');"
        " return a.src.startsWith('blob:') && a.getAttribute('src') !== old && a.readyState >= 1; }",
        arg=old_src,
        timeout=STEP_MS,
    )
    assert page.evaluate("url => fetch(url).then(() => 'read', () => 'released')", old_src) == "released"
    page.locator(".ipymusicgen-compare").focus()
    page.keyboard.press("ArrowLeft")
    picks = [m for m in page.evaluate("window.sent") if m["kind"] == "pick"]
    assert picks == [{"kind": "pick", "label": "A", "round": view.round}] and view.round != old_round


LISTEN_BRIDGE = """() => {
  const audio = window.kernel;
  window.kernel = (message) => {
    if (message.kind !== "listen") return audio(message);
    window.kernelListen(message).then((news) => { for (const content of news) window.deliver(content, []); });
  };
}"""
"""The page's play reports go to the view as the widget channel brings them; what the kernel tells back (the
seconds left) comes to the page."""
CHOOSE = ".ims-compare-choose"


def bridge_listening(page: Page, view: CompareView) -> None:
    told: list[dict[str, Any]] = []
    to_page = view.send

    def send(content: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        if content.get("kind") == "listened":
            told.append(content)
        else:
            to_page(content, buffers)

    def listen(message: dict[str, Any]) -> list[dict[str, Any]]:
        start = len(told)
        view._handle_custom_msg(message, [])
        return told[start:]

    view.send = send  # type: ignore[method-assign]
    page.expose_function("kernelListen", listen)
    page.evaluate(LISTEN_BRIDGE)


def test_four_choices_wait_for_each_take_to_play_then_buttons_and_keys_vote(
    browser: Browser, sandbox: Sandbox, tmp_path: Path
) -> None:
    """One second each (the kernel's clock; the default is 5 s): the four buttons say what is left and send
    nothing until the kernel says both took their second, then each button and key sends its choice."""
    library, ids = songs_of(sandbox, tmp_path)
    view = CompareView([library.song(i) for i in ids], library=library, seed=2, min_listen_s=1.0)
    with blank_page(browser, viewport={"width": 900, "height": 700}) as page:
        connect(page, view)
        bridge_listening(page, view)
        root = page.locator(".ipymusicgen-compare")
        buttons = page.locator(CHOOSE)
        assert [b.get_attribute("data-label") for b in buttons.all()] == ["A", "B", "tie", "both_bad"]
        texts = [b.inner_text() for b in buttons.all()]
        assert texts == [f"{t} · 2 s left" for t in ("A is better (←)", "B is better (→)", "Tie (↑)", "Both bad (↓)")]
        assert all(b.is_disabled() for b in buttons.all())
        assert "each take has played 1 s: A 1 s more, B 1 s more" in root.inner_text()
        shot(page, "compare-waiting", root)
        root.focus()
        for key in ("ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"):
            page.keyboard.press(key)
        buttons.nth(2).click(force=True)
        assert [m for m in page.evaluate("window.sent") if m["kind"] == "pick"] == []  # too early: nothing sent
        page.wait_for_function(READY, timeout=STEP_MS)
        page.evaluate(f"() => {{ const a = document.querySelector('{AUDIO}'); a.muted = true; return a.play(); }}")
        page.wait_for_function(  # A's second is counted by the kernel; B's is still to come
            f"() => [...document.querySelectorAll('{CHOOSE}')]"
            ".every((b) => b.disabled && b.innerText.endsWith('1 s left'))",
            timeout=STEP_MS,
        )
        assert "B 1 s more" in root.inner_text() and "A 1 s more" not in root.inner_text()
        page.keyboard.press("2")  # B, playing on from the same place
        page.wait_for_function(
            f"() => [...document.querySelectorAll('{CHOOSE}')]"
            ".every((b) => !b.disabled && !b.innerText.includes('left'))",
            timeout=STEP_MS,
        )
        assert view.listening.ready() and page.locator(".ims-compare-wait").inner_text() == ""
        for key in ("ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"):
            page.keyboard.press(key)
        for index in range(4):
            buttons.nth(index).click()
        picks = [m for m in page.evaluate("window.sent") if m["kind"] == "pick"]
        labels = ["A", "B", "tie", "both_bad"]
        assert picks == [{"kind": "pick", "label": label, "round": view.round} for label in labels * 2]
        reports = [m for m in page.evaluate("window.sent") if m["kind"] == "listen"]
        assert reports and all(set(m) == {"kind", "round", "source", "playing", "at"} for m in reports)
        view._handle_custom_msg(picks[3], [])  # the kernel takes the first it gets: both bad
        page.evaluate("data => window.change(data)", view.data)
        assert "You found both bad" in root.inner_text() and page.locator(CHOOSE).count() == 0
        assert [v["outcome"] for v in library.compare_results()] == ["both_bad"]
    library.close()
