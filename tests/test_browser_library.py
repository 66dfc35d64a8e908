"""The library view in a real JupyterLab, driven through Debian's Chromium.

A notebook makes two songs in the embedded sandbox with a client that archives under the server's
root, then shows `LibraryView`. The test checks a card's waveform is drawn from the stored peaks, its
player plays the archived file through the server's files API, and search narrows the grid.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_utils import sandbox_env
from playwright.sync_api import Browser, Page, expect, sync_playwright
from test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FIRST_AUDIO_MS,
    SCREENSHOTS,
    STEP_MS,
    free_port,
    open_notebook,
    run_all,
    server_command,
    shot,
    stop,
    wait_for_server,
    write_lab_settings,
)

NOTEBOOK = "library-browser.ipynb"
SOURCE = """\
import ipymusicgen
from ipymusicgen import MusicClient
from ipymusicgen.archive import archiver_of
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
ARCHIVED_AUDIO = "audio => audio.readyState >= 1 && Math.abs(audio.duration - 4) < 0.5"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("library-lab")
    root = home / "root"
    root.mkdir()
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SOURCE)], metadata={"kernelspec": kernel})
    nbformat.write(notebook, root / NOTEBOOK)
    write_lab_settings(home / "settings")
    env = sandbox_env(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
    )
    port = free_port()
    log = home / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_command("lab", port, root), env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(url, process, log)
        yield url, root
    finally:
        stop(process)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, SCREENSHOTS / "library-server.log")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(STEP_MS)
    try:
        current = context.new_page()
        yield current
        shot(current, "99-last-library")
    finally:
        context.close()


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
    page.wait_for_function(ARCHIVED_AUDIO, arg=audio.element_handle(), timeout=STEP_MS)
    assert len(list((root / "songs").glob("*.mp3"))) == 2
    expect(first.get_by_role("button", name="Play")).to_be_enabled()
    expect(first.locator(".ims-library-keep")).to_have_text("Keep")
    expect(library.locator(".ims-spend-day")).to_have_count(1)
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
