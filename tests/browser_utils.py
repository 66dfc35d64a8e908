"""What the browser tests share: pages in Debian's Chromium, a Jupyter server of the sandbox, a notebook opened in it.

Chromium and the servers themselves come from benchmarks/_browser.py (figure 12 drives the same browser
and the same JupyterLab). Screenshots and server logs go to artifacts/browser/.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from jupyter_utils import ARTIFACTS, sandbox_env
from playwright.sync_api import Browser, Locator, Page, expect

from benchmarks._browser import free_port, jupyter_home, server_command, serving
from ipymusicgen.widgets._static import css, esm

KERNEL_READY_MS = 120_000
FIRST_AUDIO_MS = 120_000
STEP_MS = 60_000
SCREENSHOTS = ARTIFACTS / "browser"
FINAL_AUDIO = "audio[src^='http://127.0.0.1'][src$='.mp3']:not([src$='-preview.mp3'])"
AUDIO_LOADED = "audio => audio.readyState >= 1 && Math.abs(audio.duration - 4) < 0.5"
"""The player has read the file's header and found the sandbox's song length (MUSICGEN_SANDBOX_SONG_SECONDS)."""
BLANK = "<!doctype html><html><body></body></html>"
HARNESS = """
async ([source, styles, data, width]) => {
  window.sent = [];
  window.current = data ?? undefined;
  const listeners = {"change:data": new Set(), "msg:custom": new Set()};
  const model = {
    get(name) { return name === "data" ? window.current : undefined; },
    on(event, callback) { listeners[event]?.add(callback); },
    off(event, callback) { for (const set of Object.values(listeners)) set.delete(callback); },
    send(message) { window.sent.push(message); },
  };
  window.change = (next) => { window.current = next; for (const callback of listeners["change:data"]) callback(); };
  window.deliver = (message) => { for (const callback of listeners["msg:custom"]) callback(message); };
  const style = document.createElement("style");
  style.textContent = styles;
  document.head.appendChild(style);
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const module = await import(url);
  const el = document.createElement("div");
  if (width) el.style.width = width;
  document.body.appendChild(el);
  window.cleanup = module.default.render({ model, el });
}
"""
"""A stand-in for anywidget's `model`: `window.change(data)` sets the `data` trait, `window.deliver(message)`
hands the view a custom message, and what the view sends collects in `window.sent`."""
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def one_cell_notebook(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)], metadata={"kernelspec": KERNEL})


@contextmanager
def jupyter_server(front_end: str, home: Path, root: Path, log_name: str, **extra_env: str) -> Iterator[str]:
    """JupyterLab or Notebook 7 serving `root` with a sandbox kernel (no key, fast clock); its URL.

    Its log is copied to artifacts/browser/`log_name` when it stops, whatever happened.
    """
    env = sandbox_env(**jupyter_home(home), **extra_env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = home / "server.log"
    try:
        with serving(server_command(front_end, port, root), env, root, log, f"{url}/api/status", "Jupyter"):
            yield url
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, SCREENSHOTS / log_name)


@contextmanager
def notebook_page(browser: Browser, last_shot: str) -> Iterator[Page]:
    """A fresh page for a Jupyter front end; where it was at the end is kept as `last_shot` (for a failed wait)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(STEP_MS)  # clicks and scrolls on a busy shared machine
    try:
        current = context.new_page()
        yield current
        shot(current, last_shot)
    finally:
        context.close()


@contextmanager
def blank_page(browser: Browser, **context_options: Any) -> Iterator[Page]:
    """An empty page for a front-end module on its own; no exception may escape in it, whatever the test did."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_content(BLANK)
    yield page
    context.close()
    assert errors == []


def mount(page: Page, module: str, data: Any = None, width: str | None = None) -> None:
    """Render the package's front-end `module` (its ESM and CSS) into a blank page, on the stand-in model."""
    page.evaluate(HARNESS, [esm(module), css(module), data, width])


def shot(page: Page, name: str, element: Locator | None = None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if element is not None:
        element.screenshot(path=str(path))
    else:
        page.screenshot(path=str(path))
    return path


def open_notebook(page: Page, url: str, front_end: str, name: str) -> None:
    path = f"/lab/tree/{name}" if front_end == "lab" else f"/notebooks/{name}"
    page.goto(f"{url}{path}", timeout=KERNEL_READY_MS)
    # JupyterLab may restore the previous test's notebook as a hidden tab before this one: wait for the shown one
    expect(page.locator(".jp-Notebook:visible").first).to_be_visible(timeout=KERNEL_READY_MS)
    kernel_ready(page, url, name)
    side = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if front_end == "lab" and side.count():
        side.click()  # fold the file browser away (the workspace remembers it for the next page)


def kernel_ready(page: Page, url: str, name: str) -> None:
    """The notebook's kernel is connected and idle (Notebook 7 may start and drop a first one: wait it out)."""
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first).to_be_attached(
        timeout=KERNEL_READY_MS
    )
    deadline = time.monotonic() + KERNEL_READY_MS / 1000
    seen: list[dict] = []
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/sessions", timeout=5) as response:
                seen = [s for s in json.load(response) if s["path"].endswith(name)]
            with urllib.request.urlopen(f"{url}/api/kernels", timeout=5) as response:
                kernels = {k["id"]: k for k in json.load(response)}
        except OSError:  # the server may answer 500 while another kernel is going away: ask again
            page.wait_for_timeout(200)
            continue
        if len(seen) == 1:
            kernel = kernels.get(seen[0]["kernel"]["id"], {})
            if kernel.get("connections", 0) >= 1 and kernel.get("execution_state") == "idle":
                return
        page.wait_for_timeout(200)
    raise AssertionError(f"no connected idle kernel for {name}: {seen}")


@contextmanager
def marimo_server(app: str, home: Path, log_name: str, **extra_env: str) -> Iterator[str]:
    """`marimo run app.py --headless` of the app's source on a free port; its URL. Log kept in artifacts/browser."""
    (home / "app.py").write_text(app)
    port = free_port()
    log = home / "marimo.log"
    marimo = str(Path(sys.executable).with_name("marimo"))
    command = [marimo, "run", "app.py", "--headless", "--no-token", "--host", "127.0.0.1", "--port", str(port)]
    env = sandbox_env(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), MARIMO_SKIP_UPDATE_CHECK="1", **extra_env)
    url = f"http://127.0.0.1:{port}"
    try:
        with serving(command, env, home, log, url, "marimo"):
            yield url
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        if log.exists():
            (SCREENSHOTS / log_name).write_bytes(log.read_bytes())


CONTRAST = """
(selector) => {
  const parse = (text) => {
    const srgb = text.match(/color\\(srgb ([^)]+)\\)/);  // what color-mix() computes to
    if (srgb) {
      const parts = srgb[1].split(/[ \\/]+/).filter(Boolean).map(Number);
      return [parts[0] * 255, parts[1] * 255, parts[2] * 255, parts.length > 3 ? parts[3] : 1];
    }
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return [0, 0, 0, 0];
    const parts = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const over = (top, bottom) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const background = (node) => {
    const layers = [];
    for (let el = node; el; el = el.parentElement) {
      const color = parse(getComputedStyle(el).backgroundColor);
      if (color[3] > 0) layers.push(color);
      if (color[3] >= 1) break;
    }
    let result = [255, 255, 255, 1];
    for (const layer of layers.reverse()) result = over(layer, result);
    return result;
  };
  const luminance = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const found = [];
  for (const root of document.querySelectorAll(selector)) {
    for (const el of root.querySelectorAll("*")) {
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      const box = el.getBoundingClientRect();
      const style = getComputedStyle(el);
      if (!own || !box.width || style.visibility === "hidden" || el.closest("[hidden]")) continue;
      const back = background(el);
      const fore = over(parse(style.color), back);
      const opacity = Number(style.opacity);
      const shown = opacity < 1 ? over([...fore.slice(0, 3), opacity], back) : fore;
      const [hi, lo] = [luminance(shown), luminance(back)].sort((a, b) => b - a);
      const text = el.textContent.trim().slice(0, 40);
      const disabled = Boolean(el.closest(":disabled"));
      found.push({ text, ratio: (hi + 0.05) / (lo + 0.05), disabled, color: style.color });
    }
    // a placeholder is text too (WCAG asks 4.5:1 of it): its own colour and opacity, on its field's background
    for (const el of root.querySelectorAll("input[placeholder], textarea[placeholder]")) {
      const box = el.getBoundingClientRect();
      if (!el.placeholder.trim() || el.value || !box.width || el.closest("[hidden]")) continue;
      const style = getComputedStyle(el, "::placeholder");
      const back = background(el);
      const fore = over(parse(style.color), back);
      const opacity = Number(style.opacity);
      const shown = opacity < 1 ? over([...fore.slice(0, 3), opacity], back) : fore;
      const [hi, lo] = [luminance(shown), luminance(back)].sort((a, b) => b - a);
      const text = "placeholder: " + el.placeholder.trim().slice(0, 30);
      found.push({ text, ratio: (hi + 0.05) / (lo + 0.05), disabled: el.disabled, color: style.color });
    }
  }
  return found;
}
"""
"""Every visible element under `selector` that has text of its own, and every shown placeholder: its text, and the
contrast ratio of its colour against the background it is drawn on (alpha blended up the tree, WCAG 2 relative
luminance)."""


def low_contrast(page: Page, selector: str, floor: float = 4.5) -> list[dict[str, Any]]:
    """The text under `selector` below the contrast `floor` (disabled controls are exempt, as WCAG says)."""
    return [t for t in page.evaluate(CONTRAST, selector) if t["ratio"] < floor and not t["disabled"]]


DARK = """() => {
  const vars = {"--jp-layout-color0": "#111111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
    "--jp-layout-color3": "#616161", "--jp-layout-color4": "#757575", "--jp-border-color1": "#616161",
    "--jp-border-color2": "#424242", "--jp-ui-font-color0": "#ffffff", "--jp-ui-font-color1": "rgba(255,255,255,0.87)",
    "--jp-ui-font-color2": "rgba(255,255,255,0.54)", "--jp-ui-font-color3": "rgba(255,255,255,0.38)",
    "--jp-brand-color1": "#2196f3", "--jp-error-color1": "#f44336", "--jp-warn-color1": "#ff9800",
    "--jp-success-color1": "#4caf50", "--jp-input-background": "#424242",
    "--jp-ui-inverse-font-color1": "rgba(0,0,0,0.8)"};
  for (const [name, value] of Object.entries(vars)) document.body.style.setProperty(name, value);
  document.body.style.background = "#111111";
}"""
"""JupyterLab Dark's own values (theme-dark-extension/index.css) set on the page (`page.evaluate(DARK)`): views
follow them. The real themes are measured in tests/test_studio_contrast_browser.py; these were lighter than the
theme's (#292929 for --jp-layout-color2, where the theme has #424242) and hid the studio's 4.23:1 hints."""


NARROW = {"width": 800, "height": 900}
"""A narrow screen (a laptop with a side panel open, a tablet): every view is tried at this viewport."""
OVERFLOW = """
(selector) => {
  const found = [];
  for (const root of document.querySelectorAll(selector)) {
    const edge = root.getBoundingClientRect().right + 1;
    if (root.getBoundingClientRect().width === 0) continue;  // not shown (another tab)
    for (const element of root.querySelectorAll("*")) {
      const box = element.getBoundingClientRect();
      if (box.width === 0 || box.height === 0 || box.right <= edge) continue;
      let scroller = element.parentElement;  // inside a box that scrolls sideways on purpose (a wide grid): fine
      while (scroller && scroller !== root && !/(auto|scroll)/.test(getComputedStyle(scroller).overflowX)) {
        scroller = scroller.parentElement;
      }
      if (scroller && scroller !== root) continue;
      const name = element.className && element.className.baseVal === undefined ? element.className : "";
      found.push({tag: element.tagName, cls: String(name).slice(0, 60), text: (element.textContent || "").slice(0, 40),
                  over: Math.round(box.right - edge)});
    }
  }
  return found.slice(0, 10);
}
"""
"""Elements under `selector` that stick out past its right edge (cut off or making the page scroll sideways)."""


def overflowing(page: Page, selector: str) -> list[dict[str, Any]]:
    """What sticks out of the view on the right at the page's current width (empty when it all fits)."""
    return page.evaluate(OVERFLOW, selector)
