"""The library view in a real JupyterLab, driven through Debian's Chromium.

A notebook makes two songs in the embedded sandbox with a client that archives under the server's
root, then shows `LibraryView`. The test checks a card's waveform is drawn from the stored peaks, its
player plays the archived file through the server's files API, and search narrows the grid.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from browser_utils import (
    AUDIO_LOADED,
    FIRST_AUDIO_MS,
    STEP_MS,
    jupyter_server,
    notebook_page,
    one_cell_notebook,
    open_notebook,
    shot,
)
from playwright.sync_api import Browser, Page, expect

from benchmarks._browser import run_all

pytestmark = pytest.mark.slow  # a real JupyterLab in Chromium
NOTEBOOK = "library-browser.ipynb"
SOURCE = """\
import ipymusicgen
from ipymusicgen import MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.widgets.library import LibraryView

shared = ipymusicgen.get_client()  # the embedded sandbox (no key in this kernel)
client = MusicClient(settings=shared.settings, journal=shared.journal, archive="songs")  # under the server root
ids = client.generate(action="custom", title="Harbour <b>lights</b>", style="harp, rain",
                      lyrics="[Verse]\\ndrizzle on the quay").ids
client.wait(ids)
assert archiver_of(client).join(60)
view = LibraryView(ipymusicgen.library())
view"""
PEAKS_DRAWN = """canvas => {
  const ctx = canvas.getContext("2d");
  if (!canvas.width || !canvas.height) return false;
  const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
  return painted > canvas.width * 2;  // bars, not the flat line drawn while there are no peaks
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("library-lab")
    root = home / "root"
    root.mkdir()
    nbformat.write(one_cell_notebook(SOURCE), root / NOTEBOOK)
    with jupyter_server("lab", home, root, "library-server.log") as url:
        yield url, root


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with notebook_page(browser, "99-last-library") as current:
        yield current


def test_library_grid_shows_cards_with_waveform_and_archived_player(lab: tuple[str, Path], page: Page) -> None:
    url, root = lab
    open_notebook(page, url, "lab", NOTEBOOK)  # the quickstart test's way in (kernel connected and idle)
    run_all(page)

    library = page.locator(".ipymusicgen-library")
    cards = library.locator(".ims-call .ipymusicgen-song")
    expect(cards).to_have_count(2, timeout=FIRST_AUDIO_MS)
    first = cards.nth(0)
    expect(first.locator(".ims-title")).to_have_text("Harbour <b>lights</b>")  # text, not markup
    expect(first.locator(".ims-title b")).to_have_count(0)
    expect(first.locator(".ims-badge")).to_contain_text("Ready")
    canvas = first.locator(".ipymusicgen-waveform canvas")
    expect(canvas).to_be_visible()
    page.wait_for_function(PEAKS_DRAWN, arg=canvas.element_handle(), timeout=STEP_MS)

    # the player plays the archived file from the server root, through the files API
    audio = first.locator("audio")
    src = audio.get_attribute("src") or ""
    assert "/files/songs/" in src and src.endswith(".mp3"), src
    assert audio.evaluate("a => !a.autoplay && !a.loop")
    page.wait_for_function(AUDIO_LOADED, arg=audio.element_handle(), timeout=STEP_MS)
    assert len(list((root / "songs").glob("*.mp3"))) == 2
    expect(first.get_by_role("button", name="Play")).to_be_enabled()
    expect(first.locator(".ims-library-keep")).to_have_text("Keep")
    expect(library.locator(".ims-spend-day")).to_have_count(1)
    chart = library.locator(".ims-spend-chart")  # a labelled chart: axes, a value on each bar, a description
    expect(chart).to_have_attribute("role", "img")
    assert "Credits spent per day (estimate)" in (chart.get_attribute("aria-label") or "")
    expect(library.locator(".ims-spend-value")).to_have_text(re.compile(r"^~\d+$"))
    expect(library.locator(".ims-spend-axis").first).to_contain_text("Credits per day (estimate")
    shot(page, "lab-10-library")

    # keep a take, favourite it, and search narrows the grid
    first.locator(".ims-library-keep").click()
    expect(library.locator(".ims-library-keep[aria-pressed='true']")).to_have_count(1)
    search = library.get_by_label("Search songs")
    search.fill("quay")
    expect(library.locator(".ims-library-status")).to_have_text("1–2 of 2 song(s)")
    search.fill("nothing-like-this")
    expect(library.locator(".ims-library-status")).to_have_text("No songs match.")
    expect(cards).to_have_count(0)
