"""The watcher in marimo (which runs anywidget natively), served headless and opened in Debian's Chromium.

A small marimo app starts two songs on the embedded sandbox (no key, fast clock) and shows a `TaskWatcher`
through `mo.ui.anywidget`. The test waits until both takes render as cards in one call group with a
player holding the final MP3, the same front-end module as in Jupyter. Screenshot: artifacts/browser/.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_utils import ARTIFACTS, sandbox_env
from playwright.sync_api import expect, sync_playwright
from test_browser import CHROMIUM, CHROMIUM_ARGS, FINAL_AUDIO, STEP_MS, free_port, stop

SCREENSHOTS = ARTIFACTS / "browser"
SERVER_START = 90.0
APP = textwrap.dedent(
    """
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import marimo as mo

        from ipymusicgen import get_client
        from ipymusicgen.widgets import TaskWatcher

        client = get_client()
        ids = list(client.generate(action="auto", style="marimo test, warm synth pads").ids)
        watcher = TaskWatcher(ids, client=client)
        view = mo.ui.anywidget(watcher)
        view
        return


    if __name__ == "__main__":
        app.run()
    """
)


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`marimo run app.py --headless` on a free port; its URL."""
    home = tmp_path_factory.mktemp("marimo")
    app = home / "app.py"
    app.write_text(APP)
    port = free_port()
    log = home / "marimo.log"
    marimo = str(Path(sys.executable).with_name("marimo"))
    command = [marimo, "run", str(app), "--headless", "--no-token", "--host", "127.0.0.1", "--port", str(port)]
    env = sandbox_env(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), MARIMO_SKIP_UPDATE_CHECK="1")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"marimo exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"marimo did not answer:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.25)
        yield url
    finally:
        stop(process)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / "marimo.log").write_bytes(log.read_bytes())


def test_watcher_renders_in_marimo(marimo_app: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(STEP_MS)
            page.goto(marimo_app)
            takes = page.locator(".ipymusicgen-watcher .ims-call .ipymusicgen-song")
            try:
                expect(takes).to_have_count(2, timeout=STEP_MS * 2)
                expect(takes.nth(0)).to_have_attribute("data-take", "1")
                expect(takes.nth(1)).to_have_attribute("data-take", "2")
                expect(page.locator(FINAL_AUDIO)).to_have_count(2, timeout=STEP_MS * 2)
                expect(takes.first.locator(".ipymusicgen-waveform canvas")).to_be_visible()
                expect(page.locator(".ims-watcher-counts")).to_contain_text("2 ready")
            finally:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "marimo-watcher.png"))
        finally:
            browser.close()
