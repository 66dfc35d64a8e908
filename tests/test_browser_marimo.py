"""The watcher in marimo (which runs anywidget natively), served headless and opened in Debian's Chromium.

A small marimo app starts two songs on the embedded sandbox (no key, fast clock) and shows a `TaskWatcher`
through `mo.ui.anywidget`. The test waits until both takes render as cards in one call group with a
player holding the final MP3, the same front-end module as in Jupyter. Screenshot: artifacts/browser/.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest
from browser_utils import FINAL_AUDIO, STEP_MS, marimo_server, shot
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.slow  # marimo in Chromium

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
    with marimo_server(APP, tmp_path_factory.mktemp("marimo"), "marimo.log") as url:
        yield url


def test_watcher_renders_in_marimo(marimo_app: str, browser: Browser) -> None:
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
        shot(page, "marimo-watcher")
