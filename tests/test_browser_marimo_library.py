"""The library view in marimo (which runs anywidget natively), served headless and opened in Debian's Chromium.

A small marimo app makes two songs on the embedded sandbox (no key, fast clock) with a client that
archives them, then shows `LibraryView` through `mo.ui.anywidget`. The test waits until the two takes
render as cards in one call group, with a waveform drawn from the stored peaks and a player holding the
final MP3 (marimo has no Jupyter files API, so the player uses the song's own URL). Screenshot:
artifacts/browser/marimo-library.png. Helpers come from the watcher's marimo test and the library's
JupyterLab test.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_utils import FINAL_AUDIO, SCREENSHOTS, STEP_MS, marimo_server
from playwright.sync_api import Browser, expect
from test_browser_library import PEAKS_DRAWN

pytestmark = pytest.mark.slow  # marimo in Chromium

APP = textwrap.dedent(
    """
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import marimo as mo

        import ipymusicgen
        from ipymusicgen import MusicClient
        from ipymusicgen.archive.archiver import archiver_of
        from ipymusicgen.widgets.library import LibraryView

        shared = ipymusicgen.get_client()  # the embedded sandbox: no key in this process
        client = MusicClient(settings=shared.settings, journal=shared.journal, archive="songs")
        ids = client.generate(action="custom", title="Marimo <b>harbour</b>", style="harp, rain",
                              lyrics="[Verse]\\ndrizzle on the quay").ids
        client.wait(ids)
        assert archiver_of(client).join(60)
        view = mo.ui.anywidget(LibraryView(ipymusicgen.library()))
        view
        return


    if __name__ == "__main__":
        app.run()
    """
)


@pytest.fixture(scope="module")
def marimo_library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`marimo run app.py --headless` on a free port: its URL and its folder (where the songs are archived)."""
    home = tmp_path_factory.mktemp("marimo-library")
    with marimo_server(APP, home, "marimo-library.log") as url:
        yield url, home


def test_library_renders_in_marimo(marimo_library: tuple[str, Path], browser: Browser) -> None:
    url, home = marimo_library
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(STEP_MS)
    page.goto(url)
    library = page.locator(".ipymusicgen-library")
    cards = library.locator(".ims-call .ipymusicgen-song")
    try:
        expect(cards).to_have_count(2, timeout=STEP_MS * 2)
        first = cards.nth(0)
        expect(first.locator(".ims-title")).to_have_text("Marimo <b>harbour</b>")  # text, not markup
        expect(first.locator(".ims-title b")).to_have_count(0)
        expect(first.locator(".ims-badge")).to_contain_text("Ready")
        canvas = first.locator(".ipymusicgen-waveform canvas")
        expect(canvas).to_be_visible()
        page.wait_for_function(PEAKS_DRAWN, arg=canvas.element_handle(), timeout=STEP_MS)
        expect(library.locator(FINAL_AUDIO)).to_have_count(2)
        assert first.locator("audio").evaluate("a => !a.autoplay && !a.loop")
        expect(first.get_by_role("button", name="Play")).to_be_enabled()
        assert len(list((home / "songs").glob("*.mp3"))) == 2  # archived where the app said
        search = library.get_by_label("Search songs")  # the grid answers intents in marimo too
        search.fill("nothing-like-this")
        expect(library.locator(".ims-library-status")).to_have_text("No songs match.")
        search.fill("quay")
        expect(cards).to_have_count(2)
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "marimo-library.png"))
