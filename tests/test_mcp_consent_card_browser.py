"""The consent card in real Chromium, inside a host page of the test's own (the official `@modelcontextprotocol/
ext-apps` AppBridge is tested in test_mcp_consent_card_appbridge.py): the page speaks the Apps postMessage messages
to the card's sandboxed iframe and forwards its tool calls to the real agent server over one SDK client
connection. Confirm pays once, Cancel sends nothing, the price is the first thing read, the agent's markup stays
text, both themes pass 4.5:1 contrast, and a take plays from the audio data the card is given."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.from_thread
import pytest
from jupyter_utils import ARTIFACTS
from mcp.client import Client, advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from playwright.sync_api import Browser, Frame, Page

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.mcp.consent_card import card_html
from ipymusicgen.sandbox import Sandbox

pytestmark = pytest.mark.slow  # a real Chromium

KEY = "k-consent-browser-41c2"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
GENERATE = "/v1/music/generate"
MARKUP = '<img src=x onerror="parent.pwned=1"><b>about 1 credit</b>'
HOST = """<!doctype html><html><body><script>
window.calls = [];
window.addEventListener("message", async (event) => {
  const m = event.data || {};
  const card = document.querySelector("iframe").contentWindow;
  const reply = (body) => card.postMessage({jsonrpc: "2.0", ...body}, "*");
  if (m.method === "ui/initialize") {
    reply({id: m.id, result: {protocolVersion: "2026-01-26", hostInfo: {name: "test host", version: "1"},
      hostCapabilities: {}, hostContext: {theme: window.theme}}});
  } else if (m.method === "ui/notifications/initialized") {
    reply({method: "ui/notifications/tool-result", params: window.toolResult});
  } else if (m.method === "tools/call") {
    window.calls.push(m.params);
    reply({id: m.id, result: JSON.parse(await window.mcpCall(m.params.name, JSON.stringify(m.params.arguments)))});
  }
});
</script></body></html>"""


@pytest.fixture
def connected(paid_clients: Callable[..., MusicClient]) -> Iterator[Callable[[str, dict[str, Any]], dict[str, Any]]]:
    """One SDK client connection (handshake era: the quote is bound to it) to a real agent server, as a plain
    blocking call returning the result as the host hands it to the card."""
    server = build_server(AgentDesk(paid_clients()))
    apps = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(server, mode="legacy", extensions=[apps])) as client,
    ):

        def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = portal.call(client.call_tool, name, arguments)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        yield call


def open_card(browser: Browser, call: Callable[..., dict[str, Any]], theme: str, style: str) -> tuple[Page, Frame]:
    page = browser.new_page()
    page.expose_function("mcpCall", lambda name, arguments: json.dumps(call(name, json.loads(arguments))))
    page.set_content(HOST)
    quoted = call("generate_song", {"style": style})
    page.evaluate(
        """([theme, result, html]) => {
            window.theme = theme; window.toolResult = result;
            const frame = document.createElement("iframe");
            frame.setAttribute("sandbox", "allow-scripts");
            frame.style.width = "640px"; frame.style.height = "480px";
            frame.srcdoc = html;
            document.body.append(frame);
        }""",
        [theme, quoted, card_html()],
    )
    frame = page.frames[1]
    frame.wait_for_selector("#actions:not([hidden])")
    return page, frame


def contrast(a: list[float], b: list[float]) -> float:
    def luminance(rgb: list[float]) -> float:
        channels = [c / 255 for c in rgb[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


COLOURS = """() => {
  const rgb = (text) => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const style = (sel) => getComputedStyle(document.querySelector(sel));
  const body = style("body");
  return {
    text: [rgb(body.color), rgb(body.backgroundColor)],
    muted: [rgb(style("#balance").color), rgb(body.backgroundColor)],
    confirm: [rgb(style("#confirm").color), rgb(style("#confirm").backgroundColor)],
    cancel: [rgb(style("#cancel").color), rgb(style("#cancel").backgroundColor)],
  };
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_card_reads_price_first_keeps_markup_as_text_and_passes_contrast(
    browser: Browser, connected: Callable[..., dict[str, Any]], service: Sandbox, theme: str
) -> None:
    page, frame = open_card(browser, connected, theme, MARKUP)
    try:
        assert frame.locator("main").inner_text().startswith("Pay about 3 credits?")
        assert frame.locator("img").count() == 0 and frame.locator("blockquote b").count() == 0
        assert "<img src=x" in frame.locator("#words").inner_text()
        assert page.evaluate("() => window.pwned") is None
        assert frame.evaluate("() => document.documentElement.dataset.theme") == theme
        for name, (fg, bg) in frame.evaluate(COLOURS).items():
            assert contrast(fg, bg) >= 4.5, (theme, name, fg, bg)
        assert frame.evaluate("() => document.activeElement.id") == "confirm"  # keyboard: Enter confirms
        (ARTIFACTS / "browser").mkdir(parents=True, exist_ok=True)
        page.locator("iframe").screenshot(path=ARTIFACTS / "browser" / f"consent-card-{theme}.png")
        frame.locator("#cancel").click()
        assert "nothing was sent" in frame.locator("#state").inner_text()
        assert page.evaluate("() => window.calls") == [] and service.request_counts().get(GENERATE, 0) == 0
    finally:
        page.close()


def test_confirm_from_the_keyboard_pays_once_and_the_card_follows_the_songs(
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
        assert service.request_counts()[GENERATE] == 1
        assert "started" in frame.locator("#state").inner_text()
        assert frame.locator("#songs li").count() == 2
        service.clock.stages(10)  # type: ignore[attr-defined]  # the songs finish; the card's next read has them
        ids = next(c for c in page.evaluate("() => window.calls") if c["name"] == "get_songs")["arguments"]["task_ids"]
        paid_clients().wait(ids, timeout=30, archived=True)  # another kernel on the journal keeps them in the archive
        frame.wait_for_function(
            "() => [...document.querySelectorAll('audio')].some((a) => a.readyState >= 1 && a.duration > 0)",
            timeout=60_000,
        )
        assert frame.locator("#songs li a[download]").count() >= 1
    finally:
        page.close()
