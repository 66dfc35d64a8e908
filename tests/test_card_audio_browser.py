"""A kept song plays from its card in a real browser when the page cannot fetch it (issue 32, "Done when").

A notebook makes two songs in the embedded sandbox, archived OUTSIDE the server root, shown in a watcher and in
the library; then the sandbox forgets them, so the songs' URLs answer 404. Pressing a card's Play once plays the
song (the player's time advances) from a blob: URL the kernel's bytes came in over the widget channel, and no
request goes to the Jupyter server's files/ for it. JupyterLab and Notebook 7; once more with files/ removed
from the page entirely (every request to it refused).
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browser_utils import (
    FIRST_AUDIO_MS,
    KERNEL_READY_MS,
    STEP_MS,
    blank_page,
    jupyter_server,
    kernel_ready,
    marimo_server,
    notebook_page,
    one_cell_notebook,
    shot,
)
from playwright.sync_api import Browser, Locator, Page, Request, Route, expect

from benchmarks._browser import run_all
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets._static import css, esm

SOURCE = """\
import urllib.request, urllib.error
import ipymusicgen
from IPython.display import display
from ipymusicgen import MusicClient
from ipymusicgen.workspace import session
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.widgets.library import LibraryView
from ipymusicgen.widgets.watcher import TaskWatcher

shared = ipymusicgen.get_client()  # the embedded sandbox (no key in this kernel)
client = MusicClient(settings=shared.settings, journal=shared.journal, archive={outside!r})  # outside the root
ids = client.generate(action="custom", title="Tide", style="harp", lyrics="[Verse]\\\\nla").ids
watcher = TaskWatcher(ids, client=client)
display(watcher)
client.wait(ids)
assert archiver_of(client).join(60)
watcher.wait()
urls = [song.audio_url for song in ipymusicgen.library().songs()]
session.embedded_sandbox().reset()  # the service forgets them: their URLs answer 404 from now on
for url in urls:
    try:
        urllib.request.urlopen(url)
        raise AssertionError("still served")
    except urllib.error.HTTPError as error:
        assert error.code == 404
view = LibraryView(ipymusicgen.library())
display(view)
print("cards ready")"""
PLAYING = "a => a.getAttribute('src') && a.getAttribute('src').startsWith('blob:') && a.currentTime > 0.5"


@pytest.fixture(scope="module", params=["lab", "notebook"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    front_end = request.param
    home = tmp_path_factory.mktemp(f"card-audio-{front_end}")
    root = home / "root"
    root.mkdir()
    with jupyter_server(front_end, home, root, f"card-audio-{front_end}-server.log") as url:
        yield Server(url, front_end, root, home / "data" / "archive")


@dataclass(frozen=True)
class Server:
    url: str
    front_end: str
    root: Path
    outside: Path
    """Where the notebooks archive their songs: not under the server's root."""

    def open(self, page: Page, name: str) -> None:
        """A fresh notebook (its own kernel, sandbox and journal) of the songs above, opened alone in `page`."""
        path = self.root / f"{name}.ipynb"
        nbformat.write(one_cell_notebook(SOURCE.format(outside=str(self.outside / name))), path)
        where = f"/lab/tree/{path.name}?reset" if self.front_end == "lab" else f"/notebooks/{path.name}"
        page.goto(f"{self.url}{where}", timeout=KERNEL_READY_MS)  # ?reset: no tab of an earlier test reopened
        expect(page.locator(".jp-Notebook:visible").first).to_be_visible(timeout=KERNEL_READY_MS)
        kernel_ready(page, self.url, path.name)

    def stop_kernels(self) -> None:
        """End the sessions this test started, so the next test has the machine to itself."""
        with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=10) as response:
            sessions = json.load(response)
        for end in [f"{self.url}/api/sessions/{session['id']}" for session in sessions]:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(urllib.request.Request(end, method="DELETE"), timeout=30).close()


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    with notebook_page(browser, "99-last-card-audio") as current:
        yield current
    server.stop_kernels()


def files_requests(page: Page, url: str) -> list[str]:
    """Every request the page makes to the Jupyter server's files/ API, recorded from now on."""
    seen: list[str] = []

    def record(request: Request) -> None:
        if request.url.startswith(f"{url}/files/"):
            seen.append(request.url)

    page.on("request", record)
    return seen


def play_once(page: Page, card: Locator) -> None:
    """One press of the card's Play: its player's time advances, from the kernel's bytes (a blob: URL)."""
    expect(card.get_by_role("button", name="Play")).to_be_enabled(timeout=STEP_MS)
    card.get_by_role("button", name="Play").click()
    page.wait_for_function(PLAYING, arg=card.locator("audio").element_handle(), timeout=STEP_MS)
    card.get_by_role("button", name="Pause").click()


@pytest.mark.parametrize("files_api", ["served", "removed"])
def test_a_song_archived_outside_the_root_whose_url_answers_404_plays_from_its_cards(
    server: Server, page: Page, files_api: str
) -> None:
    url, front_end = server.url, server.front_end
    if files_api == "removed":  # no files/ route at all, as in marimo, VS Code or Colab
        page.route(f"{url}/files/**", lambda route: route.fulfill(status=404, body="no files API here"))
    asked = files_requests(page, url)
    server.open(page, f"outside-{files_api}")
    run_all(page)
    expect(page.locator(".jp-OutputArea-output", has_text="cards ready")).to_be_visible(timeout=FIRST_AUDIO_MS)

    library = page.locator(".ipymusicgen-library")
    library_cards = library.locator(".ipymusicgen-song")
    expect(library_cards).to_have_count(2, timeout=STEP_MS)
    play_once(page, library_cards.nth(0))
    second = library_cards.nth(1).locator("audio").element_handle()
    page.wait_for_function("a => !a.getAttribute('src')", arg=second, timeout=STEP_MS)  # its URL failed on the page
    wave = library_cards.nth(1).locator(".ipymusicgen-waveform")
    box = wave.bounding_box()
    assert box is not None
    wave.click(position={"x": box["width"] / 2, "y": box["height"] / 2})  # a seek loads the kernel's bytes there
    seeked = "a => (a.getAttribute('src') || '').startsWith('blob:') && a.paused && Math.abs(a.currentTime - 2) < 0.5"
    page.wait_for_function(seeked, arg=second, timeout=STEP_MS)
    play_once(page, library_cards.nth(1))

    # a search redraws every card: the played ones keep the kernel's copy, none tries the failed URLs again
    library_cards.nth(0).evaluate("card => { card.dataset.old = 'yes'; }")
    library.get_by_label("Search songs").fill("Tide")
    expect(library.locator(".ipymusicgen-song[data-old]")).to_have_count(0, timeout=STEP_MS)
    expect(library_cards).to_have_count(2)
    redrawn = page.evaluate("() => [...document.querySelectorAll('.ipymusicgen-library audio')].map(a => a.src)")
    assert all(src.startswith("blob:") for src in redrawn), redrawn

    watcher_cards = page.locator(".ipymusicgen-watcher .ipymusicgen-song")
    expect(watcher_cards).to_have_count(2, timeout=STEP_MS)
    play_once(page, watcher_cards.nth(0))
    shot(page, f"card-audio-{front_end}-{files_api}")
    assert asked == []
    for audio in page.locator(".ipymusicgen-song audio").all():  # no player's source names a song or a path
        src = audio.get_attribute("src") or ""
        assert src == "" or src.startswith(("blob:", "http://127.0.0.1")), src
    sources = page.evaluate("() => [...document.querySelectorAll('.ipymusicgen-song audio')].map(a => a.src)")
    assert not any("/files/" in s and s.startswith(url) for s in sources)


def test_a_view_destroyed_releases_its_blob_urls(server: Server, page: Page) -> None:
    server.open(page, "released")
    page.evaluate(
        """() => {
          window.revoked = [];
          const revoke = URL.revokeObjectURL.bind(URL);
          URL.revokeObjectURL = (u) => { window.revoked.push(u); revoke(u); };
        }"""
    )
    run_all(page)
    expect(page.locator(".jp-OutputArea-output", has_text="cards ready")).to_be_visible(timeout=FIRST_AUDIO_MS)
    card = page.locator(".ipymusicgen-library .ipymusicgen-song").nth(0)
    play_once(page, card)
    blob = card.locator("audio").get_attribute("src") or ""
    assert blob.startswith("blob:")
    page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()  # command mode on the cell
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below, where the views are closed from Python
    page.keyboard.press("Enter")
    page.keyboard.type("view.close(); watcher.close()")
    page.keyboard.press("Shift+Enter")
    page.wait_for_function("b => window.revoked.includes(b)", arg=blob, timeout=STEP_MS)
    expect(page.locator(".ipymusicgen-library")).to_have_count(0)


MARIMO_APP = """
import marimo

app = marimo.App(width="full")


@app.cell
def _():
    import marimo as mo

    import ipymusicgen
    from ipymusicgen import MusicClient
    from ipymusicgen.workspace import session
    from ipymusicgen.archive.archiver import archiver_of
    from ipymusicgen.widgets.library import LibraryView
    from ipymusicgen.widgets.watcher import TaskWatcher

    shared = ipymusicgen.get_client()  # the embedded sandbox: no key in this process
    client = MusicClient(settings=shared.settings, journal=shared.journal, archive={outside!r})
    ids = client.generate(action="custom", title="Tide", style="harp", lyrics="la").ids
    watcher = TaskWatcher(ids, client=client)
    client.wait(ids)
    assert archiver_of(client).join(60)
    watcher.wait()
    session.embedded_sandbox().reset()  # the songs' URLs answer 404 from now on
    view = mo.ui.anywidget(LibraryView(ipymusicgen.library()))
    mo.vstack([mo.ui.anywidget(watcher), view])
    return


if __name__ == "__main__":
    app.run()
"""


@pytest.fixture(scope="module")
def marimo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """marimo (no files/ API at all) running the app above: its URL."""
    home = tmp_path_factory.mktemp("card-audio-marimo")
    app = MARIMO_APP.format(outside=str(home / "data" / "archive"))
    with marimo_server(app, home, "card-audio-marimo.log") as url:
        yield url


def test_in_marimo_a_song_whose_url_answers_404_plays_from_its_cards(marimo: str, browser: Browser) -> None:
    with notebook_page(browser, "99-last-card-audio-marimo") as page:
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url) if "/files/" in request.url else None)
        page.goto(marimo)
        library_cards = page.locator(".ipymusicgen-library .ipymusicgen-song")
        expect(library_cards).to_have_count(2, timeout=FIRST_AUDIO_MS)
        play_once(page, library_cards.nth(0))
        watcher_cards = page.locator(".ipymusicgen-watcher .ipymusicgen-song")
        expect(watcher_cards).to_have_count(2, timeout=STEP_MS)
        play_once(page, watcher_cards.nth(1))
        shot(page, "card-audio-marimo")
        assert not [seen for seen in asked if seen.startswith(marimo)]  # the page never asks marimo for files/


BRIDGE = """() => {
  window.kernel = (message) => {
    window.kernelAnswer(message).then((answers) => {
      for (const { content, bytes } of answers) {
        const buffers = bytes ? [new DataView(Uint8Array.from(atob(bytes), (c) => c.charCodeAt(0)).buffer)] : [];
        window.deliver(content, buffers);
      }
    });
  };
}"""


@contextlib.contextmanager
def watcher_page(browser: Browser, sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Page, Any, list[Route]]]:
    """A real watcher of two archived songs drawn in a blank page behind the stand-in widget model, whose audio
    requests its channel answers; the songs' URLs answer nothing until the test says (the held routes)."""
    from test_compare_browser import CHANNEL_HARNESS

    from ipymusicgen.widgets.watcher import TaskWatcher

    journal = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal), archive=tmp_path / "outside") as client:
        ids = list(client.generate(action="custom", style="harp", title="Tide", lyrics="la").ids)
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
        watcher = TaskWatcher(ids, client=client, autostart=False)
        watcher.show(client.tasks(ids))
        with Library(journal) as library:  # what the archive's listener would have told a watcher made earlier
            for task_id in ids:
                watcher.annotate(task_id, archived_path=library.song(task_id).archive_path)
        sent: list[tuple[dict[str, Any], list[bytes]]] = []
        came = threading.Condition()

        def send(content: dict[str, Any], buffers: list[bytes] | None = None) -> None:
            with came:
                sent.append((content, list(buffers or ())))
                came.notify_all()

        def answer(message: dict[str, Any]) -> list[dict[str, Any]]:
            if message.get("kind") == "hello":
                return [{"content": watcher.snapshot(), "bytes": None}]
            if message.get("kind") != "audio":
                return []
            start = len(sent)
            watcher._handle_custom_msg(message, [])
            with came:
                assert came.wait_for(lambda: any(c.get("kind") == "audio" for c, _ in sent[start:]), STEP_MS / 1000)
            content, buffers = next((c, b) for c, b in sent[start:] if c.get("kind") == "audio")
            return [{"content": content, "bytes": base64.b64encode(buffers[0]).decode() if buffers else None}]

        watcher.send = send  # type: ignore[method-assign]
        held: list[Route] = []
        try:
            with blank_page(browser, viewport={"width": 900, "height": 700}) as page:
                page.route(f"{sandbox.base_url}/files/**", lambda route: held.append(route))  # no answer yet
                page.expose_function("kernelAnswer", answer)
                page.evaluate(BRIDGE)
                page.evaluate(CHANNEL_HARNESS, [esm("watcher"), css("watcher"), None, "800px"])
                yield page, watcher, held
                for route in held:  # every route is answered before the page goes
                    with contextlib.suppress(Exception):
                        route.fulfill(status=404, body="expired")
        finally:
            watcher.close()


def test_a_url_that_fails_only_when_the_player_starts_plays_the_kernels_bytes_on_the_same_press(
    browser: Browser, sandbox: Sandbox, tmp_path: Path
) -> None:
    """The card is drawn while its URL still answers nothing; Play is pressed; then the URL answers 404: the
    same press plays the kernel's bytes."""
    with watcher_page(browser, sandbox, tmp_path) as (page, _watcher, held):
        card = page.locator(".ipymusicgen-song").first
        expect(card.get_by_role("button", name="Play")).to_be_enabled(timeout=STEP_MS)
        assert (card.locator("audio").get_attribute("src") or "").startswith(sandbox.base_url)
        card.get_by_role("button", name="Play").click()
        expect(card.get_by_role("button", name="Pause")).to_be_visible()  # the press is in, the URL pending
        assert held  # the player asked for its URL and got no answer yet; now it fails
        page.route(f"{sandbox.base_url}/files/**", lambda route: route.fulfill(status=404, body="expired"))
        while held:
            held.pop().fulfill(status=404, body="expired")
        page.wait_for_function(PLAYING, arg=card.locator("audio").element_handle(), timeout=STEP_MS)
        asked = page.evaluate("() => window.sent.filter((m) => m.kind === 'audio').length")
        assert asked == 1  # one card played: one request for bytes


def test_a_song_above_the_download_cap_is_refused_in_one_line_on_its_card_and_no_bytes_come(
    browser: Browser, sandbox: Sandbox, tmp_path: Path
) -> None:
    with watcher_page(browser, sandbox, tmp_path) as (page, watcher, held):
        watcher.card_audio.channel.limit = lambda: 1000  # bytes: every song is larger
        page.route(f"{sandbox.base_url}/files/**", lambda route: route.fulfill(status=404, body="expired"))
        while held:
            held.pop().fulfill(status=404, body="expired")
        card = page.locator(".ipymusicgen-song").first
        audio = card.locator("audio").element_handle()
        page.wait_for_function("a => !a.getAttribute('src')", arg=audio, timeout=STEP_MS)
        card.get_by_role("button", name="Play").click()
        expect(card.locator(".ims-note")).to_contain_text("above the limit", timeout=STEP_MS)
        note = card.locator(".ims-note").inner_text()
        assert "\n" not in note.strip() and "max_download_mb" in note
        assert page.evaluate("a => a.getAttribute('src')", audio) is None
