"""URL-mode consent (issue 40): over streamable HTTP, a host that declares URL elicitation but neither MCP Apps nor
form elicitation is sent to a one-time consent page the agent server serves on its own host and port: the quote of
the card, price first, every text escaped; Confirm is a same-origin POST carrying the page's token; the page is
single-use and expires with its quote. Through the official SDK's client (its capabilities narrowed to URL mode)
against the real HTTP app in uvicorn, the user played by an HTTP client or by a real Chromium."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.from_thread
import httpx
import pytest
import uvicorn
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from playwright.sync_api import Browser
from test_mcp_tools import Asker
from test_mcp_transports import HTTP_TOKEN, free_port

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, AgentServer
from ipymusicgen.mcp.consent import QuoteBook
from ipymusicgen.mcp.http import http_app
from ipymusicgen.sandbox import Sandbox

KEY = "k-consent-page-93fe"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
GENERATE = "/v1/music/generate"
FORGED = '<script>alert(1)</script>"): about 1 credit; Confirm? ("yes\u202e\x1b[2J'


def in_thread(body: Callable[[], Any]) -> Any:
    """Run an async body on an event loop of its own thread: a worker whose Chromium (Playwright's sync API) is live
    has a running loop on the main thread, where anyio.run would refuse."""
    with anyio.from_thread.start_blocking_portal() as portal:
        return portal.call(body)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class UrlOnlySession(ClientSession):
    """The official client declaring URL elicitation only (its default declares form and URL together)."""

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        found = super()._build_capabilities(version)
        url_only = types.ElicitationCapability(url=types.UrlElicitationCapability())
        return found.model_copy(update={"elicitation": url_only})


class User:
    """The person behind the host: accepts to open the page (or not) and tells the test the URL."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.urls: list[str] = []
        self.messages: list[str] = []
        self.sent = anyio.Event()

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        self.urls.append(params.url)
        self.messages.append(params.message)
        self.sent.set()
        return types.ElicitResult(action=self.action)


class Served:
    """The agent server's HTTP app (MCP endpoint and consent pages) in uvicorn on a thread of this process."""

    def __init__(self, desk: AgentDesk, quotes: QuoteBook | None = None) -> None:
        self.agent = AgentServer(desk, quotes)
        self.port = free_port()
        app = http_app(self.agent.mcp, host="127.0.0.1", token=HTTP_TOKEN, pages=self.agent.pages)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", ws="none")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @contextmanager
    def signed_in(self) -> Iterator[httpx.Client]:
        """The user's browser, signed in with the link the server printed at start (its cookie kept)."""
        with httpx.Client(follow_redirects=False, timeout=30) as browser:
            assert browser.get(self.agent.pages.sign_in_url("127.0.0.1", self.port)).status_code == 200
            yield browser

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:  # state, not time: uvicorn says when it listens
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            self.thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def served(paid_clients: Callable[..., MusicClient]) -> Iterator[Callable[..., Served]]:
    made: list[Served] = []

    def factory(quotes: QuoteBook | None = None, budget: int | None = None) -> Served:
        made.append(server := Served(AgentDesk(paid_clients(), budget=budget), quotes).__enter__())
        return server

    yield factory
    for server in made:
        server.__exit__()


@asynccontextmanager
async def connected(
    served: Served, user: Any, session: type[ClientSession] = UrlOnlySession, base: str | None = None
) -> Any:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {HTTP_TOKEN}"}) as http,
        streamable_http_client(f"{base or served.url}/mcp", http_client=http) as (read, write),
        session(read, write, elicitation_callback=user) as client,
    ):
        await client.initialize()
        yield client


def token_of(page: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def call_and_act(
    served: Served, arguments: dict[str, Any], act: Callable[[httpx.Client, str], Any], user: User | None = None
) -> tuple[types.CallToolResult, Any, User]:
    """generate_song from a URL-only host; when the user is sent to the page, `act(browser-ish client, url)` runs
    (in a thread: a person's browser); the tool's result, what `act` returned, and the user."""
    user = user or User()
    acted: list[Any] = []

    async def body() -> types.CallToolResult:
        async with connected(served, user) as client, anyio.create_task_group() as group:
            result: list[types.CallToolResult] = []

            async def call() -> None:
                result.append(await client.call_tool("generate_song", arguments))

            group.start_soon(call)
            await user.sent.wait()
            if user.action == "accept":
                with served.signed_in() as browser:
                    acted.append(await anyio.to_thread.run_sync(lambda: act(browser, user.urls[0])))
        return result[0]

    return in_thread(body), (acted[0] if acted else None), user


def press(browser: httpx.Client, url: str, decision: str = "confirm", **changes: Any) -> httpx.Response:
    page = browser.get(url)
    assert page.status_code == 200, page.text
    form = {"token": token_of(page.text), "decision": decision, **changes.pop("form", {})}
    return browser.post(url, data=form, headers=changes.pop("headers", {}))


def test_a_url_only_host_is_sent_to_a_one_time_page_and_confirm_pays_once(
    served: Callable[..., Served], service: Sandbox
) -> None:
    server = served()
    seen: dict[str, Any] = {}

    def act(browser: httpx.Client, url: str) -> None:
        page = browser.get(url)
        seen["page"], seen["headers"] = page.text, page.headers
        assert service.request_counts().get(GENERATE, 0) == 0  # nothing sent before the press
        token = token_of(page.text)
        seen["paid"] = browser.post(url, data={"token": token, "decision": "confirm"})
        seen["replayed"] = browser.post(url, data={"token": token, "decision": "confirm"})
        seen["again"] = browser.get(url)

    result, _, user = call_and_act(server, {"style": FORGED}, act)
    assert not result.is_error, result.content
    answer = result.structured_content or {}
    assert answer["state"] == "sent" and len(answer["task_ids"]) == 2 and service.request_counts()[GENERATE] == 1
    (url,) = user.urls
    assert url.startswith(f"{server.url}/consent/") and len(url.rsplit("/", 1)[1]) >= 43
    assert user.messages[0].startswith("Pay about 3 credits (the key has 100 credits left)?")
    page = seen["page"]
    assert page.index('id="price"') < page.index('id="words"') < page.index('id="confirm"')
    assert re.search(r'<h1 id="price">Pay about 3 credits\?</h1>', page)
    assert "<script" not in page and "&lt;script&gt;" in page and "\u202e" not in page and "\x1b" not in page
    assert "default-src 'none'" in seen["headers"]["content-security-policy"]
    assert seen["headers"]["x-frame-options"] == "DENY" and seen["headers"]["cache-control"] == "no-store"
    assert seen["paid"].status_code == 200 and all(i in seen["paid"].text for i in answer["task_ids"])
    assert seen["replayed"].status_code == 410 and seen["again"].status_code == 410
    assert service.request_counts()[GENERATE] == 1


def test_cancel_on_the_page_sends_nothing(served: Callable[..., Served], service: Sandbox) -> None:
    result, response, _ = call_and_act(served(), {"style": "x"}, lambda b, url: press(b, url, "cancel"))
    assert response.status_code == 200 and "nothing was sent" in response.text
    assert (result.structured_content or {})["state"] == "declined" and service.request_counts().get(GENERATE, 0) == 0


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({"form": {"token": "forged-token"}}, 403),
        ({"form": {"token": ""}}, 403),
        ({"headers": {"Origin": "http://evil.example"}}, 403),
        ({"headers": {"Origin": "null"}}, 403),
        ({"form": {"decision": "pay twice"}}, 400),
        ({"form": {"a": "1", "b": "2", "c": "3"}}, 400),  # more fields than a press has
        ({"form": {"token": "\x00\u202e" * 200}}, 403),
    ],
)
def test_a_forged_press_sends_nothing_and_the_real_one_still_works(
    served: Callable[..., Served], service: Sandbox, changes: dict[str, Any], status: int
) -> None:
    def act(browser: httpx.Client, url: str) -> tuple[int, int, int]:
        forged = press(browser, url, **changes)
        between = service.request_counts().get(GENERATE, 0)
        return forged.status_code, between, press(browser, url).status_code

    result, (forged, between, real), _ = call_and_act(served(), {"style": "x"}, act)
    assert forged == status and between == 0 and real == 200
    assert (result.structured_content or {})["state"] == "sent" and service.request_counts()[GENERATE] == 1


def test_an_expired_page_sends_nothing(served: Callable[..., Served], service: Sandbox) -> None:
    clock = FakeClock()

    def act(browser: httpx.Client, url: str) -> tuple[int, int]:
        page = browser.get(url)
        clock.now += 300
        late = browser.post(url, data={"token": token_of(page.text), "decision": "confirm"})
        return late.status_code, browser.get(url).status_code

    result, (late, after), _ = call_and_act(served(QuoteBook(clock=clock)), {"style": "x"}, act)
    assert late == 410 and after == 410 and result.is_error and "expired" in result.content[0].text
    assert service.request_counts().get(GENERATE, 0) == 0


def test_a_user_who_will_not_open_the_page_is_a_decline(served: Callable[..., Served], service: Sandbox) -> None:
    server = served()
    result, _, user = call_and_act(server, {"style": "x"}, lambda b, url: None, User("decline"))
    assert (result.structured_content or {})["state"] == "declined" and service.request_counts().get(GENERATE, 0) == 0
    with httpx.Client() as stranger, server.signed_in() as browser:
        assert stranger.get(user.urls[0]).status_code == 403 and browser.get(user.urls[0]).status_code == 410


def test_made_up_paths_and_hosts_find_no_page(served: Callable[..., Served], service: Sandbox) -> None:
    server = served()

    def act(browser: httpx.Client, url: str) -> list[int]:
        statuses = [
            browser.get(url + "x").status_code,
            browser.get(f"{server.url}/consent/").status_code,
            browser.get(f"{server.url}/consent/../mcp").status_code,
            browser.get(url, headers={"Host": "evil.example"}).status_code,
            browser.get(f"{server.url}/mcp").status_code,  # the MCP endpoint still wants its token
        ]
        press(browser, url, "cancel")
        return statuses

    _, statuses, _ = call_and_act(server, {"style": "x"}, act)
    assert statuses == [404, 404, 401, 421, 401]


def test_a_host_with_form_elicitation_is_asked_in_the_form_not_sent_to_a_page(
    served: Callable[..., Served], service: Sandbox
) -> None:
    asker = Asker(action="decline")

    async def body() -> types.CallToolResult:
        async with connected(served(), asker, ClientSession) as client:  # the SDK's default: form and URL
            return await client.call_tool("generate_song", {"style": "x"})

    result = in_thread(body)
    assert (result.structured_content or {})["state"] == "declined" and asker.questions[0].startswith("Pay about 3")


def test_a_page_whose_budget_moved_sends_nothing(served: Callable[..., Served], service: Sandbox) -> None:
    server = served(budget=4)

    def act(browser: httpx.Client, url: str) -> httpx.Response:
        page = browser.get(url)
        server.agent.desk.ledger.reserve(3)  # another call of this server spends meanwhile
        return browser.post(url, data={"token": token_of(page.text), "decision": "confirm"})

    result, response, _ = call_and_act(server, {"style": "x"}, act)
    assert response.status_code == 409 and "budget" in response.text
    assert result.is_error and "budget" in result.content[0].text and service.request_counts().get(GENERATE, 0) == 0


@pytest.mark.slow
def test_a_real_browser_confirms_on_the_page(served: Callable[..., Served], service: Sandbox, browser: Browser) -> None:
    """Chromium opens the link the host was given, reads the price first, presses Confirm with the keyboard; the
    host's client runs on a thread of its own (a portal), the browser on the test's."""
    from jupyter_utils import ARTIFACTS

    server, user = served(), User()
    with anyio.from_thread.start_blocking_portal() as portal:

        async def call() -> types.CallToolResult:
            async with connected(server, user) as client:
                return await client.call_tool("generate_song", {"style": "<b>brass</b>"})

        future = portal.start_task_soon(call)
        portal.call(user.sent.wait)
        page = browser.new_page()
        try:
            page.goto(server.agent.pages.sign_in_url("127.0.0.1", server.port))  # once, from the server's terminal
            page.goto(user.urls[0])
            first = page.locator("main").inner_text()
            (ARTIFACTS / "browser").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=ARTIFACTS / "browser" / "consent-page.png")
            page.locator("#confirm").press("Enter")
            page.wait_for_selector("#state")
            state = page.locator("#state").inner_text()
        finally:
            page.close()
        result = future.result(timeout=60)
    assert first.startswith("Pay about 3 credits?") and "<b>brass</b>" in first
    assert "started" in state and (result.structured_content or {})["state"] == "sent"
    assert service.request_counts()[GENERATE] == 1


def test_the_fallback_chain_host_by_host_over_http(served: Callable[..., Served], service: Sandbox) -> None:
    """The strongest consent each host can show: Apps → the card's quote; form → the question; URL only → the page;
    nothing → max_credits (the weakest). One server, four hosts."""
    from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

    server = served()

    class AppsHost(ClientSession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("elicitation_callback", None)
            super().__init__(*args, extensions={EXTENSION_ID: {"mimeTypes": [APP_MIME_TYPE]}}, **kwargs)

    class Silent(ClientSession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("elicitation_callback", None)
            super().__init__(*args, **kwargs)

    user, asker = User("decline"), Asker(action="decline")

    async def body() -> list[types.CallToolResult]:
        results = []
        for session, who in ((AppsHost, None), (ClientSession, asker), (UrlOnlySession, user), (Silent, None)):
            async with connected(server, who, session) as client:
                results.append(await client.call_tool("generate_song", {"style": "chain"}))
        return results

    card, form, page, weakest = in_thread(body)
    assert (card.structured_content or {})["state"] == "quoted" and "quote" in (card.structured_content or {})
    assert (form.structured_content or {})["state"] == "declined" and len(asker.questions) == 1
    assert (page.structured_content or {})["state"] == "declined" and user.urls[0].startswith(f"{server.url}/consent/")
    assert weakest.is_error and "max_credits" in weakest.content[0].text
    assert service.request_counts().get(GENERATE, 0) == 0


def test_whoever_holds_the_link_but_not_the_users_browser_cannot_confirm(
    served: Callable[..., Served], service: Sandbox
) -> None:
    """The hostile agent: the link the host was sent reaches the model (a transcript, a pasted link, a fetch tool).
    It fetches the page with no cookie, reads what it can, and posts Confirm with every token it found. The MCP
    spec's URL mode: the server MUST NOT send a pre-authenticated URL and MUST check that who opens it is the user
    (here: the browser the user signed in with the link only the server's terminal printed)."""
    server = served()

    def act(browser: httpx.Client, url: str) -> dict[str, Any]:
        with httpx.Client(follow_redirects=False, timeout=30) as agent:  # no cookie: the model's own fetch
            page = agent.get(url)
            tokens = re.findall(r'value="([A-Za-z0-9_-]{20,})"', page.text) or [""]
            posts = [agent.post(url, data={"token": t, "decision": "confirm"}) for t in tokens]
            same_site = {"Origin": server.url}
            posts.append(agent.post(url, data={"token": tokens[0], "decision": "confirm"}, headers=same_site))
            keys = ("", HTTP_TOKEN, url.rsplit("/")[-1])
            guesses = [agent.get(f"{server.url}/consent/sign-in?key={k}") for k in keys]
            sent = service.request_counts().get(GENERATE, 0)
        return {"page": page, "posts": posts, "guesses": guesses, "sent": sent, "real": press(browser, url)}

    result, seen, _ = call_and_act(server, {"style": "x"}, act)
    assert seen["page"].status_code == 403 and 'name="token"' not in seen["page"].text
    assert "sign-in" in seen["page"].text and seen["sent"] == 0
    assert all(p.status_code == 403 for p in seen["posts"]), [p.status_code for p in seen["posts"]]
    assert all(g.status_code == 403 and "set-cookie" not in g.headers for g in seen["guesses"])
    assert seen["real"].status_code == 200 and (result.structured_content or {})["state"] == "sent"
    assert service.request_counts()[GENERATE] == 1


def test_the_page_link_is_on_the_origin_the_user_signed_in_on_whatever_name_the_host_used(
    served: Callable[..., Served], service: Sandbox
) -> None:
    """A host that reaches the server as `localhost` while the sign-in link printed at start says 127.0.0.1: the
    cookie is the sign-in origin's, so the page's link must be on that origin too (else the user, signed in, is
    told to sign in), whatever Host the MCP request carried."""
    server = served()
    sign_in = server.agent.pages.at("127.0.0.1", server.port)  # what the server prints at start
    user = User("decline")

    async def body() -> types.CallToolResult:
        async with connected(server, user, base=f"http://localhost:{server.port}") as client:
            return await client.call_tool("generate_song", {"style": "x"})

    result = in_thread(body)
    assert sign_in.startswith(f"{server.url}/consent/sign-in?key=")
    assert (result.structured_content or {})["state"] == "declined"
    assert user.urls[0].startswith(f"{server.url}/consent/"), user.urls


@pytest.mark.slow  # the service answers the create 2 s late (a sandbox fault): the window a double press lands in
def test_a_double_press_while_the_first_is_paying_does_not_tell_the_agent_nothing_was_sent(
    served: Callable[..., Served], service: Sandbox
) -> None:
    """A double click on Confirm: the browser sends a second POST while the first is paying. The second is refused
    (the page is used), and must not end the call as 'already used: nothing was sent' while the first pays."""
    import socket
    import urllib.parse as up

    server = served()

    def act(browser: httpx.Client, url: str) -> tuple[int, bytes]:
        token = token_of(browser.get(url).text)
        body = up.urlencode({"token": token, "decision": "confirm"}).encode()
        path, cookie = up.urlsplit(url).path, browser.cookies.get("ipymusicgen_consent")
        second = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nOrigin: {server.url}\r\n"
            f"Cookie: ipymusicgen_consent={cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        second.sendall(head.encode())  # the second press's head: its body follows while the first pays
        assert browser.get(f"{server.url}/consent/no-such-page").status_code == 404  # the loop read that head
        service.set_faults(f"slow:seconds=2:path={GENERATE}")
        try:
            with anyio.from_thread.start_blocking_portal() as portal:
                pressed = lambda: browser.post(url, data={"token": token, "decision": "confirm"})  # noqa: E731
                first = portal.start_task_soon(anyio.to_thread.run_sync, pressed)
                while service.request_counts().get(GENERATE, 0) == 0:  # state: the first press is paying
                    portal.call(anyio.sleep, 0.01)
                second.sendall(body)
                answer = b""
                while chunk := second.recv(65536):
                    answer += chunk
                return first.result(timeout=60).status_code, answer
        finally:
            second.close()
            service.clear_faults()

    result, (first, second), _ = call_and_act(server, {"style": "x"}, act)
    assert first == 200 and b" 410 " in second.split(b"\r\n", 1)[0], second[:200]
    assert not result.is_error, result.content[0].text
    assert (result.structured_content or {})["state"] == "sent" and service.request_counts()[GENERATE] == 1


def test_pages_long_past_their_quote_are_forgotten(served: Callable[..., Served], service: Sandbox) -> None:
    """An agent that keeps asking on a URL-only host opens a page per call: a page is kept (to say 'already used' or
    'expired') while its quote is remembered, then forgotten, so a long-running server does not hold every page."""
    from ipymusicgen.mcp.consent import KEEP_S

    clock = FakeClock()
    server = served(QuoteBook(clock=clock))
    _, _, first = call_and_act(server, {"style": "old"}, lambda b, url: None, User("decline"))
    with server.signed_in() as browser:
        kept = browser.get(first.urls[0]).status_code
        clock.now += 300 + KEEP_S + 1
        call_and_act(server, {"style": "new"}, lambda b, url: None, User("decline"))
        forgotten = browser.get(first.urls[0]).status_code
    assert (kept, forgotten) == (410, 404) and service.request_counts().get(GENERATE, 0) == 0
