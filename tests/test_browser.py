"""The quickstart in a real JupyterLab, driven through Debian's Chromium: what a newcomer sees and clicks.

JupyterLab runs in a subprocess on 127.0.0.1 (no token, a free port, its own config/settings dirs so
nothing of the user's leaks in or out), its kernel without a key so the embedded sandbox with a fast
clock serves the songs. The test runs all cells from the Run menu, waits for the watcher's player to
hold the final sandbox MP3 and for the lyrics, opens a card's lyrics, then uses the studio form like a
person would. Screenshots go to artifacts/browser/ (with IPYMUSICGEN_UPDATE_SCREENSHOT=1 the song one
also replaces docs/quickstart.png, the README's picture).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_utils import ARTIFACTS, ROOT, notebook_path, sandbox_env
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SERVER_START = 90.0
KERNEL_READY_MS = 120_000
FIRST_AUDIO_MS = 120_000
STEP_MS = 60_000
SCREENSHOTS = ARTIFACTS / "browser"
README_SHOT = ROOT / "docs" / "quickstart.png"
UPDATE_DOCS = "IPYMUSICGEN_UPDATE_SCREENSHOT"
"""Set to 1 to copy the song screenshot over docs/quickstart.png (the README's picture)."""
LAB_SETTINGS = {
    # no requests to the internet for news or updates, and no toast over the page
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # every cell stays attached and rendered, so outputs far from the viewport can be found and read
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
SANDBOX_AUDIO = "audio[src^='http://127.0.0.1']"
AUDIO_LOADED = "audio => audio.readyState >= 1 && Math.abs(audio.duration - 4) < 0.5"
"""The player has read the file's header and found the sandbox's song length (MUSICGEN_SANDBOX_SONG_SECONDS)."""
FINAL_AUDIO = f"{SANDBOX_AUDIO}[src$='.mp3']:not([src$='-preview.mp3'])"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(folder: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def lab_command(port: int, root: Path) -> list[str]:
    return [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        "--LabApp.extension_manager=readonly",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]


def wait_for_server(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START:.0f} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets the server shut its kernels down; its process group is killed only if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab serving a folder with a copy of the quickstart; its URL."""
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)  # only this run's pictures in the artifacts
    home = tmp_path_factory.mktemp("lab")
    root = home / "root"
    root.mkdir()
    shutil.copy(notebook_path("quickstart"), root / "quickstart.ipynb")
    write_lab_settings(home / "settings")
    env = sandbox_env(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
    )
    port = free_port()
    log = home / "lab.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            lab_command(port, root), env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(url, process, log)
        yield url
    finally:
        stop(process)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, SCREENSHOTS / "lab.log")


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
    context.set_default_timeout(STEP_MS)  # clicks and scrolls on a busy shared machine
    try:
        current = context.new_page()
        yield current
        shot(current, "99-last")  # where the page was at the end (the picture to look at when a wait failed)
    finally:
        context.close()


def shot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def menu(page: Page, title: str, command: str) -> None:
    """Click a menu-bar entry, then one of its items (by the command it runs)."""
    page.locator(".lm-MenuBar-item", has_text=title).first.click()
    page.locator(f".lm-Menu-item[data-command='{command}']").click()


def kernel_idle(page: Page) -> Locator:
    return page.locator("#jp-main-statusbar").get_by_text("Python 3 (ipykernel) | Idle")


def to_top(locator: Locator) -> None:
    """Scroll so the element starts at the top of the notebook's viewport (for a useful screenshot)."""
    locator.evaluate("element => element.scrollIntoView({block: 'start'})")


def first_lyric_line(lyrics: str) -> str:
    """The first sung line (not a [Verse] tag) of some lyrics."""
    return next(line.strip() for line in lyrics.splitlines() if line.strip() and not line.strip().startswith("["))


def test_quickstart_plays_a_song_and_the_studio_submits(lab: str, page: Page) -> None:
    page.goto(f"{lab}/lab/tree/quickstart.ipynb", timeout=KERNEL_READY_MS)
    expect(kernel_idle(page)).to_be_visible(timeout=KERNEL_READY_MS)
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # fold the file browser away
    menu(page, "Run", "runmenu:run-all")

    # the watcher's player ends on the final file the sandbox serves (first a preview, then the final)
    final_audio = page.locator(FINAL_AUDIO)
    expect(final_audio).to_have_count(2, timeout=FIRST_AUDIO_MS)
    expect(page.locator(".jp-OutputArea-output", has_text="quickstart OK:")).to_have_count(1, timeout=STEP_MS)
    expect(kernel_idle(page)).to_be_visible(timeout=STEP_MS)

    # Chromium can load what the player points at: the sandbox's 4-second song
    page.wait_for_function(AUDIO_LOADED, arg=final_audio.first.element_handle(), timeout=STEP_MS)
    song_cell = page.locator(".jp-CodeCell", has_text="%%musicgen").first
    to_top(song_cell)
    song_shot = shot(page, "01-song")

    # the lyrics %lyrics wrote are on the page, and the song's card carries them too
    lyrics_output = page.locator(".ipymusicgen-lyrics pre")
    lyrics_output.scroll_into_view_if_needed()
    expect(lyrics_output).to_be_visible()
    line = first_lyric_line(lyrics_output.inner_text())
    card_lyrics = song_cell.locator(".jupyter-widget-Accordion", has_text="Lyrics").first
    card_lyrics.scroll_into_view_if_needed()
    card_lyrics.locator(".jupyter-widget-Collapse-header").click()
    expect(card_lyrics.get_by_text(line).first).to_be_visible(timeout=STEP_MS)
    to_top(song_cell.locator("audio").first)
    shot(page, "02-song-lyrics")

    # the studio: type a style, press Generate, and the studio's watcher gets new cards that play
    cards = page.get_by_role("button", name="Copy ids")  # every task card has this button
    style = page.get_by_placeholder("genre, mood, instruments")  # the studio's Generate form, last cell
    expect(style).to_have_count(1, timeout=STEP_MS)
    expect(cards).to_have_count(2)  # the two songs of %%musicgen; the studio's watcher starts empty
    style.scroll_into_view_if_needed()
    style.fill("sunny ska with a horn section")
    generate = page.locator(".widget-button.mod-primary", has_text="Generate")
    expect(generate).to_be_enabled(timeout=STEP_MS)
    shot(page, "03-studio-form")
    generate.click()
    expect(page.get_by_text("submitted 2 task(s)")).to_be_visible(timeout=STEP_MS)
    expect(cards).to_have_count(4, timeout=STEP_MS)
    expect(final_audio).to_have_count(4, timeout=FIRST_AUDIO_MS)
    cards.last.scroll_into_view_if_needed()
    shot(page, "04-studio-new-cards")

    if os.environ.get(UPDATE_DOCS):  # only on request, so a test run leaves the tracked files alone
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(song_shot, README_SHOT)
