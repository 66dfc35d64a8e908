"""Debian's Chromium and local Jupyter (or marimo) servers: one place for the browser tests and figure 12.

Chromium is /usr/bin/chromium through Playwright (no browser download), with flags that keep it quiet
and off the network. Servers run in their own session on a free 127.0.0.1 port, with their config,
runtime and settings folders under a scratch home (nothing of the user's leaks in or out), and are
stopped with SIGTERM so they shut their kernels down.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--autoplay-policy=no-user-gesture-required",
]
SERVER_START = 90.0
LAB_SETTINGS = {
    # no requests to the internet for news or updates, and no toast over the page
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # every cell stays attached and rendered, so outputs far from the viewport can be found and read
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, launched through Playwright and closed on the way out."""
    from playwright.sync_api import sync_playwright  # only where a browser is wanted

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jupyter_home(home: Path) -> dict[str, str]:
    """Environment variables that keep a Jupyter server's config, runtime, settings and IPython under `home`."""
    write_lab_settings(home / "settings")
    return {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
    }


def write_lab_settings(folder: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def server_command(front_end: str, port: int, root: Path) -> list[str]:
    """`jupyter lab` or `jupyter notebook` on 127.0.0.1:`port`, no token, no browser, no update checks."""
    command = [
        str(Path(sys.executable).with_name("jupyter")),
        front_end,
        "--no-browser",
        "--allow-root",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
    ]
    if front_end == "lab":
        command += [
            "--LabApp.extension_manager=readonly",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
    return command


@contextmanager
def serving(command: list[str], env: dict[str, str], cwd: Path, log: Path, probe: str, name: str) -> Iterator[None]:
    """Run a server (its output in `log`) until `probe` answers 200; stop it on the way out."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_server(probe, process, log, name)
        yield
    finally:
        stop(process)


def wait_for_server(probe: str, process: subprocess.Popen[bytes], log: Path, name: str) -> None:
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(probe, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{name} did not answer within {SERVER_START:.0f} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets the server shut its kernels down; its process group is killed only if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def run_all(page: Page) -> None:
    """Run menu → Run All Cells (JupyterLab and Notebook 7 share these menus)."""
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
