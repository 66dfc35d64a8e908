"""The studio's text in real JupyterLab and Notebook 7, light and dark: labels, field hints and the placeholders
of its inputs and textareas all at 4.5:1 or more (WCAG asks it of placeholder text too), measured in Chromium with
the theme's own CSS, switched from the Settings menu as a person would."""

from __future__ import annotations

from collections.abc import Iterator

import nbformat
import pytest
from browser_utils import (
    CONTRAST,
    KERNEL_READY_MS,
    STEP_MS,
    jupyter_server,
    low_contrast,
    notebook_page,
    one_cell_notebook,
    open_notebook,
    shot,
)
from playwright.sync_api import Browser, Page, expect

from benchmarks._browser import run_all

FRONT_ENDS = ("lab", "notebook")
STUDIO = ".ipymusicgen-studio"
THEMES = {"JupyterLab Light": "true", "JupyterLab Dark": "false"}
SONGS = """\
import ipymusicgen
from ipymusicgen import MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.widgets.library import LibraryView

shared = ipymusicgen.get_client()  # the embedded sandbox (no key in this kernel)
client = MusicClient(settings=shared.settings, journal=shared.journal, archive="songs")
ids = client.generate(action="custom", title="Harbour lights", style="harp, rain", lyrics="[Verse]\\ndrizzle").ids
client.wait(ids)
assert archiver_of(client).join(60)
LibraryView(ipymusicgen.library())"""
"""Two archived songs of the sandbox, shown in the library view, then watched in a second cell."""


@pytest.fixture(scope="module", params=FRONT_ENDS)
def jupyter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    front_end: str = request.param
    home = tmp_path_factory.mktemp(f"contrast-{front_end}")
    root = home / "root"
    root.mkdir()
    nbformat.write(one_cell_notebook("from ipymusicgen.widgets import studio\nstudio()"), root / "studio.ipynb")
    cards = one_cell_notebook(SONGS)
    cards.cells.append(nbformat.v4.new_code_cell("from ipymusicgen.widgets import TaskWatcher\nTaskWatcher(ids)"))
    nbformat.write(cards, root / "cards.ipynb")
    with jupyter_server(front_end, home, root, f"{front_end}-contrast-server.log") as url:
        yield front_end, url


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    name = request.node.name.replace("[", "-").replace("]", "")
    with notebook_page(browser, f"99-last-{name}") as current:
        yield current


def choose_theme(page: Page, theme: str) -> None:
    """Settings → Theme → `theme` (JupyterLab and Notebook 7 share the menu); waits until the body says it."""
    if page.locator("body").get_attribute("data-jp-theme-name") == theme:
        return
    page.locator(".lm-MenuBar-item", has_text="Settings").first.click()
    page.locator(".lm-Menu-item", has_text="Theme").first.hover()
    page.locator(".lm-Menu-item", has_text=theme).first.click()
    expect(page.locator("body")).to_have_attribute("data-jp-theme-name", theme, timeout=STEP_MS)
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", THEMES[theme])


def measured(page: Page) -> list[dict]:
    return page.evaluate(CONTRAST, STUDIO)


def test_every_text_of_the_studio_reads_at_4_5_to_1(jupyter: tuple[str, str], page: Page) -> None:
    """Each tab in turn, a field's problem shown (error text), in both themes: nothing under 4.5:1."""
    front_end, url = jupyter
    open_notebook(page, url, front_end, "studio.ipynb")
    run_all(page)
    studio = page.locator(".ims-studio").first
    song = studio.locator(".ims-panel[data-tab='song']")
    expect(song.locator("textarea.ims-input").first).to_be_visible(timeout=KERNEL_READY_MS)
    song.get_by_label("What to do").select_option("custom")
    title = song.get_by_label("Title")
    title.fill("A title that goes on and on " * 3)
    title.press("Tab")
    expect(song.locator(".ims-problem:visible").first).to_contain_text("at most 80 characters")
    tabs = [name.strip() for name in studio.locator(".ims-tab").all_inner_texts()]
    assert {"Song", "Library"} <= set(tabs), tabs
    low: dict[str, list[dict]] = {}
    placeholders: set[str] = set()
    for theme in THEMES:
        choose_theme(page, theme)
        for tab in tabs:
            studio.get_by_role("tab", name=tab).click()
            expect(studio.get_by_role("tab", name=tab)).to_have_attribute("aria-selected", "true")
            panel = studio.locator(".ims-panel:visible")
            expect(panel).to_have_count(1)
            if tab == "Library":  # a child view the kernel draws: wait for its search field
                expect(panel.locator(".ims-library-search")).to_be_visible(timeout=STEP_MS)
            studio.scroll_into_view_if_needed()
            texts = measured(page)
            assert any(not t["text"].startswith("placeholder:") for t in texts), (theme, tab)
            placeholders |= {t["text"] for t in texts if t["text"].startswith("placeholder:")}
            shown = [t["ratio"] for t in texts if not t["disabled"]]
            print(f"{front_end}, {theme}, {tab}: lowest {min(shown):.2f}:1")  # the figure, with -s
            low[f"{theme} / {tab}"] = [{**t, "ratio": round(t["ratio"], 2)} for t in low_contrast(page, STUDIO)]
            shot(page, f"{front_end}-studio-contrast-{theme.split()[-1].lower()}-{tab.lower()}")
        studio.get_by_role("tab", name="Song").click()
    assert len(placeholders) >= 3, placeholders  # textareas, single-line inputs and the library's search
    assert {name: found for name, found in low.items() if found} == {}, front_end


def test_the_cards_of_the_watcher_and_the_library_read_at_4_5_to_1(jupyter: tuple[str, str], page: Page) -> None:
    """Finished songs' cards (title, chips, state, note, the word beside each action) in both themes."""
    front_end, url = jupyter
    open_notebook(page, url, front_end, "cards.ipynb")
    run_all(page)
    views = ".ipymusicgen-library, .ipymusicgen-watcher"
    for view in (".ipymusicgen-library", ".ipymusicgen-watcher"):
        done = page.locator(f"{view} .ipymusicgen-song [data-action='export']")
        expect(done).to_have_count(2, timeout=KERNEL_READY_MS)
    low: dict[str, list[dict]] = {}
    for theme in THEMES:
        choose_theme(page, theme)
        page.locator(".ipymusicgen-watcher").first.scroll_into_view_if_needed()
        shown = [t["ratio"] for t in page.evaluate(CONTRAST, views) if not t["disabled"]]
        assert len(shown) > 10, shown
        print(f"{front_end}, {theme}, cards: lowest {min(shown):.2f}:1")  # the figure, with -s
        low[theme] = [{**t, "ratio": round(t["ratio"], 2)} for t in low_contrast(page, views)]
        shot(page, f"{front_end}-cards-contrast-{theme.split()[-1].lower()}")
    assert {name: found for name, found in low.items() if found} == {}, front_end
