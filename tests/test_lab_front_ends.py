"""The listening lab in the real front ends: a prompt grid and a blind comparison opened from two of its cells, in
JupyterLab 4, Notebook 7 and marimo, driven through Debian's Chromium against the embedded sandbox (no key).

The grid shows each cell's estimate and the total before anything is sent, Run makes every cell's songs, two
picked songs open the comparison under the grid (the board's child view, so marimo shows it too), which is
blind until the vote, answers its keys inside a notebook (where "2" would otherwise make a heading), keeps the
place in the song when switching A↔B, and reveals the labels after the vote. Screenshots: artifacts/browser/.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import nbformat
import pytest
from browser_utils import (
    FINAL_AUDIO,
    FIRST_AUDIO_MS,
    NARROW,
    STEP_MS,
    jupyter_server,
    marimo_server,
    notebook_page,
    one_cell_notebook,
    open_notebook,
    overflowing,
    shot,
)
from playwright.sync_api import Browser, Locator, Page, expect

from benchmarks._browser import run_all

pytestmark = pytest.mark.slow  # real front ends in Chromium

GRID_CELL = (
    "import uuid\n"
    "from ipymusicgen import grid\n"
    "lab = grid({'action': 'auto'}, style=['lo-fi rain', 'sea shanty'], mv=['MFV2.0', 'MFV3.0'],\n"
    "           name='lab-' + uuid.uuid4().hex[:8])\n"
    "lab"
)
MARIMO_APP = textwrap.dedent(
    """
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import uuid

        import marimo as mo

        from ipymusicgen import grid
        from ipymusicgen.widgets.grid import grid_view

        lab = grid({"action": "auto"}, style=["lo-fi rain", "sea shanty"], mv=["MFV2.0", "MFV3.0"],
                   name="marimo-" + uuid.uuid4().hex[:8])
        view = grid_view(lab)
        board = mo.ui.anywidget(view.board)
        board
        return


    if __name__ == "__main__":
        app.run()
    """
)
VOTE_AT_ONCE = {"MUSICGEN_MIN_LISTEN_S": "0"}
"""The vote here counts at once: the listening minimum is tested on its own (tests/test_compare_browser.py)."""
POSITION_KEPT = "([a, at]) => a.readyState >= 1 && Math.abs(a.currentTime - at) < 0.3"
"""Checked on the element (marimo draws in shadow roots, which `document.querySelector` does not enter)."""


@pytest.fixture(scope="module", params=("lab", "notebook"))
def jupyter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A JupyterLab or Notebook 7 serving a notebook with the grid; (front end, URL)."""
    front_end: str = request.param
    home = tmp_path_factory.mktemp(f"lab-{front_end}")
    root = home / "root"
    root.mkdir()
    nbformat.write(one_cell_notebook(GRID_CELL), root / "grid.ipynb")
    with jupyter_server(front_end, home, root, f"{front_end}-lab-server.log", **VOTE_AT_ONCE) as url:
        yield front_end, url


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with marimo_server(MARIMO_APP, tmp_path_factory.mktemp("marimo-lab"), "marimo-lab.log", **VOTE_AT_ONCE) as url:
        yield url


def grid_to_compare(page: Page, name: str) -> None:
    """From the plan to a revealed blind vote; screenshots named after `name`."""
    board = page.locator(".ipymusicgen-grid").first
    expect(board.locator(".ims-grid-total")).to_have_text("4 rows, about 10 credits in all (estimate)", timeout=STEP_MS)
    expect(board.locator(".ims-grid-meta").first).to_contain_text("credits (estimate)")
    expect(board.locator("button.ims-primary:visible")).to_have_count(1)  # one primary button: Run
    board.get_by_role("button", name="Make the grid's songs").click()
    expect(board.locator(FINAL_AUDIO)).to_have_count(8, timeout=FIRST_AUDIO_MS)  # two takes in each of four cells
    picks = board.locator("button.ims-grid-pick")
    picks.nth(0).click()
    expect(board.locator(".ims-grid-picks")).to_have_text("1 of 2 songs picked")
    picks.nth(7).click()
    expect(board.locator(".ims-grid-picks")).to_have_text("2 songs picked")
    board.scroll_into_view_if_needed()
    shot(page, f"{name}-grid-run")
    board.get_by_role("button", name="Compare blind").click()

    compare = page.locator(".ipymusicgen-compare")
    expect(compare).to_be_visible(timeout=STEP_MS)
    expect(compare).to_contain_text("hidden until you choose")
    expect(compare.locator(".ims-compare-title")).to_have_count(0)  # blind: no title, style or take
    for word in ("lo-fi", "sea shanty", "Take"):
        assert word not in compare.inner_text()
    audio = compare.locator("audio").first
    page.wait_for_function("a => a.readyState >= 1", arg=audio.element_handle(), timeout=STEP_MS)
    first = src(compare)
    audio.evaluate("a => { a.currentTime = 2.0; }")
    compare.focus()
    page.keyboard.press("2")
    expect(compare.locator(".ims-compare-player.ims-compare-current")).to_have_attribute("data-label", "B")
    page.wait_for_function(  # B's own sound comes from the kernel (a blob: URL of its own)
        "([a, first]) => a.src.startsWith('blob:') && a.getAttribute('src') !== first",
        arg=[audio.element_handle(), first],
        timeout=STEP_MS,
    )
    page.wait_for_function(POSITION_KEPT, arg=[audio.element_handle(), 2.0], timeout=STEP_MS)  # the place is kept
    assert page.locator(".jp-MarkdownCell").count() == 0  # the key was the comparison's, not a cell shortcut
    page.keyboard.press("1")
    expect(compare.locator(".ims-compare-player.ims-compare-current")).to_have_attribute("data-label", "A")
    assert src(compare) == first
    page.keyboard.press("ArrowLeft")  # A is better
    expect(compare.locator(".ims-compare-title")).to_have_count(2, timeout=STEP_MS)  # revealed after the vote
    expect(compare.locator(".ims-compare-choose")).to_have_count(0)
    compare.scroll_into_view_if_needed()
    shot(page, f"{name}-compare-revealed")
    page.set_viewport_size(NARROW)  # a narrow screen: nothing sticks out (the wide table scrolls in its own box)
    expect(compare.locator(".ims-compare-player").first).to_be_visible()
    if not name.startswith("marimo"):  # marimo draws in shadow roots, which the page's own query cannot see
        assert overflowing(page, ".ipymusicgen-grid") == [] and overflowing(page, ".ipymusicgen-compare") == []
    shot(page, f"{name}-narrow")


def src(compare: Locator) -> str:
    return compare.locator("audio").first.get_attribute("src") or ""


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    name = request.node.name.replace("[", "-").replace("]", "")
    with notebook_page(browser, f"99-last-{name}") as current:
        yield current


def test_grid_and_blind_compare_in_jupyter(jupyter: tuple[str, str], page: Page) -> None:
    front_end, url = jupyter
    open_notebook(page, url, front_end, "grid.ipynb")
    run_all(page)
    grid_to_compare(page, f"{front_end}-20")


def test_grid_and_blind_compare_in_marimo(marimo_app: str, browser: Browser) -> None:
    with notebook_page(browser, "99-last-marimo-lab") as page:
        page.goto(marimo_app)
        grid_to_compare(page, "marimo-20")
