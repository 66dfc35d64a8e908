"""The consent card rendered by the official MCP Apps host bridge (issue 40): `AppBridge` and `PostMessageTransport`
of `@modelcontextprotocol/ext-apps` (from the npm registry, bundled by `scripts/setup` into tests/apps_host/dist), in
real Chromium, on a host page of the test's own whose tool calls go to a real agent server over one SDK client
connection. Confirm calls the app-only tool once, Cancel sends nothing, the price is the first thing read, both
themes pass 4.5:1 contrast, and a take plays from the audio data the card is given."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_utils import ARTIFACTS
from playwright.sync_api import Browser, Frame, Page
from test_mcp_consent_card_browser import COLOURS, connected, contrast

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp.consent_card import card_html
from ipymusicgen.sandbox import Sandbox

pytestmark = pytest.mark.slow  # a real Chromium

__all__ = ["connected"]  # the fixture: one SDK client connection to a real agent server
KEY = "k-appbridge-5d0e"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
GENERATE = "/v1/music/generate"
BUNDLE = Path(__file__).parent / "apps_host" / "dist" / "app-bridge.js"
MARKUP = '<img src=x onerror="parent.pwned=1"><b>about 1 credit</b>'
HOST = "<!doctype html><html><body></body></html>"
MOUNT = """async ([theme, result, html]) => {
  const { AppBridge, PostMessageTransport } = window.AppsHost;
  window.calls = [];
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.style.width = "640px"; frame.style.height = "480px";
  frame.srcdoc = html;
  document.body.append(frame);
  const bridge = new AppBridge(null, { name: "test host", version: "1" }, { serverTools: {} },
                               { hostContext: { theme } });
  bridge.oncalltool = async (params) => {
    window.calls.push(params);
    return JSON.parse(await window.mcpCall(params.name, JSON.stringify(params.arguments || {})));
  };
  bridge.oninitialized = () => { bridge.sendToolResult(result); };
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  window.bridge = bridge;
}"""


@pytest.fixture(scope="module", autouse=True)
def bundle() -> Path:
    if not BUNDLE.is_file():
        pytest.fail(f"{BUNDLE} is missing: scripts/setup installs and bundles @modelcontextprotocol/ext-apps (npm)")
    return BUNDLE


def open_card(browser: Browser, call: Callable[..., dict[str, Any]], theme: str, style: str) -> tuple[Page, Frame]:
    page = browser.new_page()
    page.expose_function("mcpCall", lambda name, arguments: json.dumps(call(name, json.loads(arguments))))
    page.set_content(HOST)
    page.add_script_tag(path=str(BUNDLE))
    quoted = call("generate_song", {"style": style})
    page.evaluate(MOUNT, [theme, quoted, card_html()])
    frame = page.frames[1]
    frame.wait_for_selector("#actions:not([hidden])")
    return page, frame


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_in_the_official_bridge_the_card_reads_price_first_and_cancel_sends_nothing(
    browser: Browser, connected: Callable[..., dict[str, Any]], service: Sandbox, theme: str
) -> None:
    page, frame = open_card(browser, connected, theme, MARKUP)
    try:
        assert frame.locator("main").inner_text().startswith("Pay about 3 credits?")
        assert frame.locator("img").count() == 0 and "<img src=x" in frame.locator("#words").inner_text()
        assert page.evaluate("() => window.pwned") is None
        assert frame.evaluate("() => document.documentElement.dataset.theme") == theme
        for name, (fg, bg) in frame.evaluate(COLOURS).items():
            assert contrast(fg, bg) >= 4.5, (theme, name, fg, bg)
        (ARTIFACTS / "browser").mkdir(parents=True, exist_ok=True)
        page.locator("iframe").screenshot(path=ARTIFACTS / "browser" / f"consent-card-appbridge-{theme}.png")
        frame.locator("#cancel").click()
        assert "nothing was sent" in frame.locator("#state").inner_text()
        assert page.evaluate("() => window.calls") == [] and service.request_counts().get(GENERATE, 0) == 0
    finally:
        page.close()


def test_in_the_official_bridge_confirm_pays_once_and_a_take_plays(
    browser: Browser,
    connected: Callable[..., dict[str, Any]],
    service: Sandbox,
    paid_clients: Callable[..., MusicClient],
) -> None:
    page, frame = open_card(browser, connected, "light", "brass band")
    try:
        frame.locator("#confirm").press("Enter")
        frame.wait_for_selector("#songs li")
        calls = page.evaluate("() => window.calls")
        assert [c["name"] for c in calls if c["name"] == "confirm_quote"] == ["confirm_quote"]
        assert service.request_counts()[GENERATE] == 1 and "started" in frame.locator("#state").inner_text()
        service.clock.stages(10)  # type: ignore[attr-defined]
        ids = next(c for c in page.evaluate("() => window.calls") if c["name"] == "get_songs")["arguments"]["task_ids"]
        paid_clients().wait(ids, timeout=30, archived=True)
        frame.wait_for_function(
            "() => [...document.querySelectorAll('audio')].some((a) => a.readyState >= 1 && a.duration > 0)",
            timeout=60_000,
        )
        assert service.request_counts()[GENERATE] == 1
    finally:
        page.close()
