"""The library view in marimo (which runs anywidget natively), served headless and opened in Debian's Chromium.

A small marimo app makes two songs on the embedded sandbox (no key, fast clock) with a client that
archives them, then shows `LibraryView` through `mo.ui.anywidget`. The test waits until the two takes
render as cards in one call group, with a waveform drawn from the stored peaks and a player holding the
final MP3 (marimo has no Jupyter files API, so the player uses the song's own URL). Screenshot:
artifacts/browser/marimo-library.png. Helpers come from the watcher's marimo test and the library's
JupyterLab test.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright
from test_browser_library import PEAKS_DRAWN
from test_browser_marimo import FINAL_AUDIO, SCREENSHOTS, STEP_MS, free_port, sandbox_env

CHROMIUM = "/usr/bin/chromium"
SERVER_START = 90.0
APP = textwrap.dedent(
    """
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import marimo as mo

        import ipymusicgen
        from ipymusicgen import MusicClient
        from ipymusicgen.archive import archiver_of
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
    (home / "app.py").write_text(APP)
    port = free_port()
    log = home / "marimo.log"
    marimo = str(Path(sys.executable).with_name("marimo"))
    command = [marimo, "run", "app.py", "--headless", "--no-token", "--host", "127.0.0.1", "--port", str(port)]
    env = sandbox_env(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), MARIMO_SKIP_UPDATE_CHECK="1")
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"marimo exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"marimo did not answer:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield url, home
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()  # this test's own server only
                process.wait(timeout=10)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / "marimo-library.log").write_bytes(log.read_bytes())


def test_library_renders_in_marimo(marimo_library: tuple[str, Path]) -> None:
    url, home = marimo_library
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
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
        finally:
            browser.close()
