"""Figure 12: the front end in a real JupyterLab, through Debian's Chromium (Playwright).

Figure 5 draws the watcher from prepared snapshots in a bare page. This one measures what a person
waits for in JupyterLab itself, kernel and comm included:

- watcher: from Shift+Enter on a cell that builds and shows a `TaskWatcher` of 1,000 complete tasks
  (records replayed, no network) to its first page of cards drawn. Goal: <= 1 s.
- studio: from leaving the title field (Tab) with a too-long title to the problem drawn under it. The
  rule is Python's (the request models), so this is the browser -> kernel -> browser round trip a
  person feels on every field. Reported (no target), median of the rounds.

Audio and cover URLs point at 127.0.0.1:9 where nothing listens; the kernel has no key (embedded sandbox).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._browser import CHROMIUM, chromium, free_port, jupyter_home, run_all, server_command, serving
from ._common import ROOT, Row, spread

FIGURE = 12
WATCHER_TARGET_MS = 1000.0
STEP_MS = int(os.environ.get("IMS_BENCH_STEP_MS", "120000"))

SETUP = """\
import sys
sys.path.insert(0, {root!r})
from benchmarks.bench_watcher import ReplayClient, record
from ipymusicgen.widgets import TaskWatcher
from ipymusicgen.widgets.studio import studio
ids = [f"task-{{n:05d}}" for n in range({count})]
records = [record(i, 0) for i in ids]
"""
SHOW = """\
watcher = TaskWatcher(ids, client=ReplayClient([records]), autostart=False)
watcher.poll_once()
watcher"""
STUDIO = "board = studio(confirm=False)\nboard"

# Record when a watcher with at least `want` cards appears in `cell` after `window.__imsT0` was set.
WATCH_CARDS = """([index, want]) => {
  const cell = document.querySelectorAll('.jp-CodeCell')[index];
  const old = cell.querySelector('.ipymusicgen-watcher');  // the last run's view: not the one we wait for
  window.__imsT1 = null;
  const check = () => {
    if (window.__imsT1 !== null || window.__imsT0 === undefined) return;
    const view = cell.querySelector('.ipymusicgen-watcher');
    if (view && view !== old && view.querySelectorAll('.ipymusicgen-song').length >= want) {
      window.__imsT1 = performance.now();
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(cell, {childList: true, subtree: true});
  window.__imsObserver = observer;
  window.__imsT0 = undefined;
  window.removeEventListener('keydown', window.__imsKey, {capture: true});
  window.__imsKey = (event) => {
    if (event.key === 'Enter' && event.shiftKey && window.__imsT0 === undefined) window.__imsT0 = performance.now();
  };
  window.addEventListener('keydown', window.__imsKey, {capture: true});
}"""
WATCH_PROBLEM = """([text]) => {
  const problem = [...document.querySelectorAll(".ims-panel[data-tab='song'] .ims-field")]
    .find((field) => field.querySelector("input[placeholder='a name for the song']")).querySelector('.ims-problem');
  window.__imsT1 = null;
  const observer = new MutationObserver(() => {
    if (window.__imsT1 === null && problem.textContent.includes(text)) window.__imsT1 = performance.now();
  });
  observer.observe(problem, {childList: true, characterData: true, subtree: true});
  window.__imsObserver = observer;
  window.__imsT0 = performance.now();
}"""


def _notebook(count: int) -> dict[str, Any]:
    cells = [SETUP.format(root=str(ROOT), count=count), SHOW, STUDIO]
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
            for i, s in enumerate(cells)
        ],
    }


@contextmanager
def _lab(count: int) -> Iterator[str]:
    """A JupyterLab on a free port serving one benchmark notebook; its URL. No key, no user settings."""
    home = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-lab-"))
    root = home / "root"
    root.mkdir()
    (root / "bench.ipynb").write_text(json.dumps(_notebook(count)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(jupyter_home(home))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with serving(server_command("lab", port, root), env, root, home / "lab.log", f"{url}/api/status", "JupyterLab"):
            yield url
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _elapsed(page: Any) -> float:
    page.wait_for_function("() => window.__imsT1 !== null && window.__imsT0 !== undefined", timeout=STEP_MS)
    value = page.evaluate("() => { window.__imsObserver.disconnect(); return window.__imsT1 - window.__imsT0; }")
    return float(value)


def measure(count: int, rounds: int) -> dict[str, Any]:
    with _lab(count) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(STEP_MS)
        page.goto(f"{url}/lab/tree/bench.ipynb", timeout=STEP_MS)
        page.locator("#jp-main-statusbar").get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=STEP_MS)
        run_all(page)
        cells = page.locator(".jp-CodeCell")
        watcher_cards = cells.nth(1).locator(".ipymusicgen-song")
        watcher_cards.first.wait_for(timeout=STEP_MS)
        page.locator(".ims-studio").wait_for(timeout=STEP_MS)
        page.locator("#jp-main-statusbar").get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=STEP_MS)
        on_page = watcher_cards.count()

        watcher_ms = []
        for _ in range(rounds):
            page.evaluate(WATCH_CARDS, [1, on_page])
            cells.nth(1).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Escape")  # command mode: Shift+Enter runs the cell
            page.keyboard.press("Shift+Enter")
            watcher_ms.append(_elapsed(page))

        song = page.locator(".ims-panel[data-tab='song']")
        song.get_by_label("What to do").select_option("custom")
        title = song.get_by_label("Title")
        studio_ms = []
        for index in range(rounds):
            length = 81 + index % 2  # the value changes every round
            title.fill("x" * length)
            page.evaluate(WATCH_PROBLEM, [f"(got {length})"])
            title.press("Tab")
            studio_ms.append(_elapsed(page))
            title.focus()
    return {"watcher_ms": watcher_ms, "cards_on_page": on_page, "studio_ms": studio_ms}


def run(quick: bool = False) -> list[Row]:
    count, rounds = (200, 2) if quick else (1000, 7)
    if not os.path.exists(CHROMIUM):
        return [Row(FIGURE, "front end in JupyterLab: Chromium not found", None, "", passed=None)]
    result = measure(count, rounds)
    watcher = statistics.median(result["watcher_ms"])
    studio = statistics.median(result["studio_ms"])
    return [
        Row(
            FIGURE,
            f"JupyterLab: run a cell showing a {count:,}-task watcher -> first page drawn",
            round(watcher, 1),
            "ms",
            baseline=WATCHER_TARGET_MS,
            ratio=round(watcher / WATCHER_TARGET_MS, 3),
            target=f"<= {WATCHER_TARGET_MS:g} ms",
            passed=watcher <= WATCHER_TARGET_MS,
            details={"cards_on_page": result["cards_on_page"], "rounds_ms": spread(result["watcher_ms"])},
        ),
        Row(
            FIGURE,
            "JupyterLab: studio field left -> Python's problem drawn (round trip)",
            round(studio, 1),
            "ms",
            details={"rounds_ms": spread(result["studio_ms"])},
        ),
    ]


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
