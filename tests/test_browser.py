"""The front end in real Jupyter front ends (JupyterLab 4 and Notebook 7), driven through Debian's Chromium.

Each server runs in a subprocess on 127.0.0.1 (no token, a free port, its own config/settings dirs so
nothing of the user's leaks in or out), its kernel without a key so the embedded sandbox with a fast
clock serves the songs. The quickstart runs from the Run menu; the test checks what a newcomer sees:
two takes side by side with waveforms and players, a click on the waveform that seeks, and the studio
(quiet before typing, a problem after a bad title, songs started in words). A second notebook points a
studio at a recording sandbox that has its own (non-demo) key: the confirm step shows before anything
is sent and the server counts no create until "Confirm and send". Screenshots go to artifacts/browser/
(with IPYMUSICGEN_UPDATE_SCREENSHOT=1 the best ones also replace docs/*.png, the README's pictures).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from browser_utils import (
    AUDIO_LOADED,
    FINAL_AUDIO,
    FIRST_AUDIO_MS,
    KERNEL_READY_MS,
    NARROW,
    STEP_MS,
    jupyter_server,
    notebook_page,
    one_cell_notebook,
    open_notebook,
    overflowing,
    shot,
)
from jupyter_utils import ROOT, notebook_path
from playwright.sync_api import Browser, Locator, Page, expect

from benchmarks._browser import run_all
from ipymusicgen.sandbox import Sandbox

pytestmark = pytest.mark.slow  # real Jupyter front ends in Chromium

DOCS = ROOT / "docs"
UPDATE_DOCS = "IPYMUSICGEN_UPDATE_SCREENSHOT"
"""Set to 1 to copy the best screenshots over docs/*.png (the README's pictures)."""
PAID_KEY = "mg-live-2b7e151628aed2a6"
"""A key that is not the sandbox's demo key: the studio treats it as a real one (confirm before paying)."""
PAID_CREDITS = 50
PAID_SANDBOX = {"keys": {PAID_KEY: PAID_CREDITS}, "stage_seconds": 0.3, "song_seconds": 4}
"""The recording server (`conftest.paid_sandbox`): a sandbox whose only key is not the demo key."""
FRONT_ENDS = ("lab", "notebook")


def paid_notebook() -> nbformat.NotebookNode:
    """A studio on a client of the recording sandbox, its key from the environment (never in the file)."""
    source = (
        "import os\n"
        "from ipymusicgen import MusicClient\n"
        "from ipymusicgen.widgets import studio\n"
        "client = MusicClient(os.environ['IPYMUSICGEN_TEST_KEY'], base_url=os.environ['IPYMUSICGEN_TEST_URL'],\n"
        "                     v2_base_url=os.environ['IPYMUSICGEN_TEST_V2_URL'], journal=False)\n"
        "board = studio(client)\n"
        "board"
    )
    return one_cell_notebook(source)


@pytest.fixture(scope="module", params=FRONT_ENDS)
def jupyter(
    request: pytest.FixtureRequest, paid_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A JupyterLab or Notebook 7 serving a folder with the quickstart and the paid studio; its URL."""
    front_end: str = request.param
    home = tmp_path_factory.mktemp(front_end)
    root = home / "root"
    root.mkdir()
    shutil.copy(notebook_path("quickstart"), root / "quickstart.ipynb")
    nbformat.write(paid_notebook(), root / "paid.ipynb")
    with jupyter_server(
        front_end,
        home,
        root,
        f"{front_end}-server.log",
        IPYMUSICGEN_TEST_KEY=PAID_KEY,
        IPYMUSICGEN_TEST_URL=paid_sandbox.base_url,
        IPYMUSICGEN_TEST_V2_URL=paid_sandbox.v2_base_url,
    ) as url:
        yield url


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    name = request.node.name.replace("[", "-").replace("]", "")
    with notebook_page(browser, f"99-last-{name}") as current:
        yield current


def publish(picture: Path, name: str) -> None:
    """Copy a screenshot into docs/ for the README, only on request (a test run leaves tracked files alone)."""
    if os.environ.get(UPDATE_DOCS):
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(picture, DOCS / name)


def front_end_of(url: str, request: pytest.FixtureRequest) -> str:
    return request.node.callspec.params["jupyter"]


def to_top(locator: Locator) -> None:
    """Scroll so the element starts at the top of the notebook's viewport (for a useful screenshot)."""
    locator.evaluate("element => element.scrollIntoView({block: 'start'})")


def test_quickstart_two_takes_seek_and_the_studio(jupyter: str, page: Page, request: pytest.FixtureRequest) -> None:
    front_end = front_end_of(jupyter, request)
    open_notebook(page, jupyter, front_end, "quickstart.ipynb")
    run_all(page)

    # %%musicgen's two takes: one call group, Take 1 and Take 2 side by side, each with a waveform and a player
    song_cell = page.locator(".jp-CodeCell", has_text="%%musicgen").first
    takes = song_cell.locator(".ims-call .ipymusicgen-song")
    expect(takes).to_have_count(2, timeout=FIRST_AUDIO_MS)
    expect(song_cell.locator(FINAL_AUDIO)).to_have_count(2, timeout=FIRST_AUDIO_MS)
    expect(page.locator(".jp-OutputArea-output", has_text="quickstart OK:")).to_have_count(1, timeout=STEP_MS)
    first, second = takes.nth(0), takes.nth(1)
    expect(first).to_have_attribute("data-take", "1")
    expect(second).to_have_attribute("data-take", "2")
    to_top(song_cell)
    one, two = first.bounding_box(), second.bounding_box()
    assert one and two and abs(one["y"] - two["y"]) < 4 and one["x"] + one["width"] <= two["x"] + 1, (one, two)
    for take in (first, second):
        expect(take.locator(".ipymusicgen-waveform canvas")).to_be_visible()
        expect(take.get_by_role("button", name="Play")).to_be_visible()

    # a click at 3/4 of the waveform seeks the take's <audio> there (the sandbox answers byte ranges)
    audio = first.locator("audio")
    page.wait_for_function(AUDIO_LOADED, arg=audio.element_handle(), timeout=STEP_MS)
    assert audio.evaluate("a => a.currentTime") == 0
    wave = first.locator(".ipymusicgen-waveform")
    box = wave.bounding_box()
    assert box is not None
    wave.click(position={"x": box["width"] * 0.75, "y": box["height"] / 2})
    page.wait_for_function("a => a.currentTime > 2.5 && a.currentTime < 3.5", arg=audio.element_handle())
    takes_shot = shot(page, f"{front_end}-01-two-takes")
    if front_end == "lab":
        publish(takes_shot, "quickstart.png")

    # the studio (%musicgen_ui, last cell): no problem shown before anyone types
    studio = page.locator(".ims-studio").last
    studio.scroll_into_view_if_needed()
    expect(studio.locator(".ims-tab", has_text="Song")).to_have_attribute("aria-selected", "true")
    expect(studio.locator(".ims-problem:visible")).to_have_count(0)
    expect(studio.locator(".ims-error:visible")).to_have_count(0)
    song = studio.locator(".ims-panel[data-tab='song']")
    song.get_by_label("What to do").select_option("custom")
    title = song.get_by_label("Title")
    title.fill("A title that goes on and on " * 3)
    expect(studio.locator(".ims-problem:visible")).to_have_count(0)  # typing: not yet
    title.press("Tab")  # leaving the field: now Python's verdict shows
    problem = song.locator(".ims-field:has(input[placeholder='a name for the song']) .ims-problem")
    expect(problem).to_contain_text("at most 80 characters")
    expect(title).to_have_attribute("aria-invalid", "true")
    to_top(studio)
    shot(page, f"{front_end}-02-studio-bad-title")

    # fix it, describe the song, press the button: songs started, said in words, and watched below
    title.fill("Sunny horns")
    song.get_by_label("Style").fill("sunny ska with a horn section")
    song.get_by_label("Style").press("Tab")
    expect(problem).to_be_hidden()
    song.get_by_role("button", name="Make songs").click()
    expect(song.locator(".ims-status")).to_have_text("2 songs started", timeout=STEP_MS)
    board = page.locator(".jp-CodeCell", has_text="%musicgen_ui").last
    expect(board.locator(FINAL_AUDIO)).to_have_count(2, timeout=FIRST_AUDIO_MS)
    to_top(studio)
    studio_shot = shot(page, f"{front_end}-03-studio-songs-started")
    if front_end == "lab":
        publish(studio_shot, "studio.png")

    # the Batch and Library tabs draw inside the studio (child views of its one model), one at a time
    studio.get_by_role("tab", name="Batch").click()
    batch = studio.locator(".ims-panel[data-tab='batch']")
    lines = batch.get_by_label("Songs, one per line")
    expect(lines).to_be_visible()
    expect(batch.locator(".ipymusicgen-batch")).to_be_hidden()  # no empty table or bar before a batch
    lines.fill('--style "sea shanty" ropes and tar\nlo-fi rain on the window')
    lines.press("Tab")
    expect(batch.locator(".ims-cost")).to_contain_text("2 rows: uses about")
    expect(batch.locator(".ims-submit-row .ims-primary:visible")).to_have_count(1)
    batch.get_by_role("button", name="Start batch").click()
    expect(batch.locator(".ims-status")).to_contain_text("started: 2 rows", timeout=STEP_MS)
    expect(batch.locator(".ipymusicgen-batch")).to_be_visible()
    expect(batch.locator(".ims-batch-finished")).to_contain_text("every row done", timeout=FIRST_AUDIO_MS)
    expect(batch.locator(".ims-batch-row td").first).to_have_text("1")  # rows counted from 1
    to_top(studio)
    shot(page, f"{front_end}-04-studio-batch-tab")
    studio.get_by_role("tab", name="Library").click()
    library = studio.locator(".ims-panel[data-tab='library']")
    expect(library.locator(".ipymusicgen-library")).to_be_visible()
    expect(library.locator(".ipymusicgen-song").first).to_be_visible(timeout=STEP_MS)
    expect(library.locator(".ims-pager")).to_be_hidden()  # one page of songs: no dead pager (the watcher's CSS too)
    expect(batch).to_be_hidden()
    to_top(studio)
    shot(page, f"{front_end}-04-studio-library-tab")

    # v2: description mode shows only what it sends; Lyrics: written, then used in the Song tab
    studio.get_by_role("tab", name="Prompt (v4.5 models)").click()
    expect(library).to_be_hidden()
    v2 = studio.locator(".ims-panel[data-tab='v2']")
    expect(v2.get_by_role("radio", name="Describe it")).to_have_attribute("aria-checked", "true")
    expect(v2.get_by_label("Lyrics")).to_be_hidden()
    v2.get_by_role("radio", name="Write it myself").click()
    expect(v2.get_by_label("Lyrics")).to_be_visible()
    to_top(studio)
    shot(page, f"{front_end}-04-studio-v2-tab")
    studio.get_by_role("tab", name="Lyrics").click()
    words = studio.locator(".ims-panel[data-tab='lyrics']")
    words.get_by_label("What about").fill("a lighthouse keeper who talks to the sea")
    words.get_by_role("button", name="Write lyrics").click()
    expect(words.locator(".ims-lyrics-text")).to_be_visible(timeout=STEP_MS)
    expect(words.locator(".ims-status")).to_contain_text("lines of lyrics written")
    to_top(studio)
    shot(page, f"{front_end}-04-studio-lyrics-tab")
    words.get_by_role("button", name="Use these lyrics in the Song tab").click()
    expect(studio.get_by_role("tab", name="Song")).to_have_attribute("aria-selected", "true")
    expect(song.get_by_label("What to do")).to_have_value("custom")
    expect(song.get_by_label("Lyrics")).not_to_have_value("")

    # a narrow screen: every tab, the watcher's cards and the first notebook's takes fit (nothing cut off)
    page.set_viewport_size(NARROW)
    for tab in ("Song", "Prompt (v4.5 models)", "Lyrics", "Batch", "Library", "Key"):
        studio.get_by_role("tab", name=tab, exact=True).click()
        expect(studio.get_by_role("tab", name=tab, exact=True)).to_have_attribute("aria-selected", "true")
        assert overflowing(page, ".ims-studio") == [], tab
    assert overflowing(page, ".ipymusicgen-watcher") == []
    for tab in ("Library", "Batch"):  # the tab changes once the kernel says so: wait for that, then the picture
        studio.get_by_role("tab", name=tab, exact=True).click()
        expect(studio.get_by_role("tab", name=tab, exact=True)).to_have_attribute("aria-selected", "true")
        to_top(studio)
        shot(page, f"{front_end}-08-narrow-{tab.lower()}")


def test_real_key_confirms_before_a_paid_request(
    jupyter: str, page: Page, paid_sandbox: Sandbox, request: pytest.FixtureRequest
) -> None:
    front_end = front_end_of(jupyter, request)
    paid_sandbox.reset()
    open_notebook(page, jupyter, front_end, "paid.ipynb")
    run_all(page)
    studio = page.locator(".ims-studio")
    expect(studio).to_be_visible(timeout=KERNEL_READY_MS)

    # the Key tab says in words what the key can do, with the API's term as a hint and the key masked
    studio.get_by_role("tab", name="Song").focus()  # the tab bar works from the keyboard: arrows move along it
    expect(studio.get_by_role("tab", name="Song")).to_be_focused()
    page.keyboard.press("ArrowLeft")
    expect(studio.get_by_role("tab", name="Key")).to_have_attribute("aria-selected", "true")
    expect(studio.get_by_role("tab", name="Key")).to_be_focused()
    expect(studio.locator(".ims-key-status")).to_have_text("key works", timeout=STEP_MS)
    expect(studio.locator(".ims-key-number")).to_have_text(str(PAID_CREDITS))
    expect(studio.locator(".ims-key")).to_contain_text("key_music_counts")
    expect(studio.locator(".ims-key")).to_contain_text(PAID_KEY[-4:])
    assert PAID_KEY not in page.content()
    shot(page, f"{front_end}-05-key-tab", studio)

    studio.get_by_role("tab", name="Song").click()
    song = studio.locator(".ims-panel[data-tab='song']")
    song.get_by_label("Style").fill("lo-fi piano, rainy night")
    song.get_by_label("Style").press("Tab")
    expect(song.locator(".ims-cost")).to_have_text(f"uses about 3 credits (estimate) · {PAID_CREDITS} left")
    song.get_by_role("button", name="Make songs").focus()  # keyboard only, as a screen-reader user would
    page.keyboard.press("Enter")
    confirm = song.locator(".ims-confirm")
    expect(confirm).to_be_visible()
    expect(confirm).to_contain_text("Send this request? It uses about 3 credits")
    expect(song.locator(".ims-primary:visible")).to_have_count(1)  # one primary button: "Confirm and send"
    assert paid_sandbox.request_counts().get("/v1/music/generate", 0) == 0  # nothing sent before the confirm
    confirm_shot = shot(page, f"{front_end}-06-confirm-step", studio)
    if front_end == "lab":
        publish(confirm_shot, "studio-confirm.png")
    confirm.get_by_role("button", name="Confirm and send").focus()
    page.keyboard.press("Enter")
    expect(song.locator(".ims-status")).to_have_text("2 songs started", timeout=STEP_MS)
    assert paid_sandbox.request_counts()["/v1/music/generate"] == 1
    expect(page.locator(".ipymusicgen-song")).to_have_count(2, timeout=STEP_MS)
    expect(page.locator(FINAL_AUDIO)).to_have_count(2, timeout=FIRST_AUDIO_MS)

    if front_end == "lab":  # the same page in JupyterLab's dark theme
        page.locator(".lm-MenuBar-item", has_text="Settings").first.click()
        page.locator(".lm-Menu-item", has_text="Theme").first.hover()
        page.get_by_role("menuitem", name="JupyterLab Dark", exact=True).click()
        expect(page.locator("body[data-jp-theme-light='false']")).to_be_attached(timeout=STEP_MS)
        expect(page.locator("#jupyterlab-splash")).to_have_count(0, timeout=STEP_MS)  # the theme has loaded
        background = studio.evaluate("el => getComputedStyle(el).backgroundColor")
        assert background not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"), background
        to_top(studio)
        dark = shot(page, "lab-07-dark-theme")
        publish(dark, "studio-dark.png")
        # leave the theme as it was for the next test that shares this server's settings
        page.locator(".lm-MenuBar-item", has_text="Settings").first.click()
        page.locator(".lm-Menu-item", has_text="Theme").first.hover()
        page.get_by_role("menuitem", name="JupyterLab Light", exact=True).click()
        expect(page.locator("body[data-jp-theme-light='true']")).to_be_attached(timeout=STEP_MS)
