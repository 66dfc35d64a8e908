"""URL-mode consent over HTTP: a host that can elicit only by URL (no MCP Apps, no form) is sent to a one-time page
the agent server serves itself, on its own host and port: the same quote as the consent card, shown the same way.

The link is not pre-authenticated (the MCP spec's URL mode: the server MUST NOT send one, and MUST check that who
opens it is the user): the host, and any model that sees the link, holds the path but not the user's browser. The
page and its Confirm answer only a browser the user signed in once with the sign-in link the server printed in its
own terminal at start (`sign_in_url`; a random key never sent over MCP), which gets an HttpOnly SameSite=Lax cookie.
The page's path is unguessable (32 random bytes) and single-use; it expires with its quote. Confirm is a POST
carrying the page's own random token (compared in constant time) from a same-origin form (a cross-origin Origin is
refused), so another site cannot press it. Every text is escaped; the page loads nothing (`default-src 'none'`) and
may not be framed. The tool call that asked waits for the user's press (or the quote's expiry) and answers as after
an elicited yes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import hmac
import html
import re
import secrets
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types.version import is_version_at_least
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from .consent import KEEP_S, Quote, QuoteRefused, connection_mark, quote_view
from .consent_card import card_html

if TYPE_CHECKING:
    from .consent_card import Answer, ConsentCard
    from .desk import Plan

PREFIX = "/consent/"
SIGN_IN = "sign-in"
"""`/consent/sign-in?key=...`: the link printed at start that lets the user's browser confirm."""
COOKIE = "ipymusicgen_consent"
BROWSERS_KEPT = 64
FORM_MAX_BYTES = 4096
HEADERS = MappingProxyType(
    {
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Referrer-Policy": "same-origin",  # the secret path never leaves; no-referrer would make the Origin "null"
        "X-Content-Type-Options": "nosniff",
    }
)


@dataclass
class Decision:
    """What became of a page's quote, shared by the pages a changed price opens after it."""

    done: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None
    """The paid tool's answer (the user confirmed)."""
    refusal: str | None = None
    """Why nothing was sent: cancelled, expired, over budget."""
    state: str = "waiting"
    expires: float = 0.0
    """When the latest quote it waits on expires (a changed price's new quote lasts longer)."""

    def end(self, state: str, *, answer: dict[str, Any] | None = None, refusal: str | None = None) -> None:
        if not self.done.is_set():
            self.state, self.answer, self.refusal = state, answer, refusal
            self.done.set()


@dataclass
class Page:
    path: str
    token: str
    quote: Quote
    decision: Decision
    used: bool = False


def _host(ctx: Context) -> str:
    """The Host the MCP request came to (checked by the transport's Host rules): the page is on the same."""
    try:
        request = ctx.request_context.request
    except ValueError:
        request = None
    headers = getattr(request, "headers", None)
    return str(headers.get("host", "127.0.0.1")) if headers is not None else "127.0.0.1"


def _wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def _origin(host: str, port: int) -> str:
    shown = "127.0.0.1" if _wildcard(host) else (f"[{host}]" if ":" in host and not host.startswith("[") else host)
    return f"http://{shown}:{port}"


def _style() -> str:
    found = re.search(r"<style>(.*?)</style>", card_html(), re.S)
    return found.group(1) if found else ""


def price_heading(price: dict[str, Any]) -> str:
    """The card's heading in the server's words: dollars first, then the provider's own unit."""
    own = f"{price['amount']} {price['unit']}" if price.get("unit") and price.get("unit") != "USD" else ""
    if price.get("dollars"):
        return f"Pay about ${price['dollars']}{f' ({own})' if own else ''}?"
    return f"Pay about {own}?"


class ConsentPages:
    """The one-time consent pages of one agent server, served beside its streamable HTTP endpoint."""

    def __init__(self, card: ConsentCard) -> None:
        self.card = card
        self.mounted = False
        """True once an HTTP app serves these pages (`http.http_app`): on stdio there is no page to send anyone to."""
        self.allowed: Callable[[str], bool] = lambda host: False
        self._pages: dict[str, Page] = {}
        self.origin: str | None = None
        """Where the pages' links point (`at`); None: the Host the MCP request came to (a wildcard bind)."""
        self._key = secrets.token_urlsafe(32)
        """The sign-in key: printed once in the server's terminal, never sent over MCP."""
        self._browsers: dict[bytes, None] = {}
        """Digests of the cookies of the browsers signed in (oldest first)."""

    def sign_in_url(self, host: str, port: int) -> str:
        """The link the user opens once in their browser (printed at start, to the server's terminal only)."""
        return f"{_origin(host, port)}{PREFIX}{SIGN_IN}?key={self._key}"

    def at(self, host: str, port: int) -> str:
        """Serve the pages at this address: their links use its origin whatever Host the MCP request came with (the
        sign-in cookie is one origin's: `localhost` is not `127.0.0.1`). The sign-in link, to print at start."""
        self.origin = None if _wildcard(host) else _origin(host, port)
        return self.sign_in_url(host, port)

    def _signed_in(self, request: Request) -> bool:
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hashlib.sha256(cookie.encode()).digest() in self._browsers

    def _sign_in(self, request: Request) -> Response:
        given = request.query_params.get("key", "")
        if request.method != "GET" or not hmac.compare_digest(given.encode(), self._key.encode()):
            return self._message("Refused", "Not this server's sign-in link: this browser is not signed in.", 403)
        cookie = secrets.token_urlsafe(32)
        self._browsers[hashlib.sha256(cookie.encode()).digest()] = None
        while len(self._browsers) > BROWSERS_KEPT:
            del self._browsers[next(iter(self._browsers))]
        response = self._message(
            "Signed in", "This browser may now confirm this agent server's paid calls: reload the consent page.", 200
        )
        response.set_cookie(COOKIE, cookie, path=PREFIX, httponly=True, samesite="lax")
        return response

    def mount(self, allowed_hosts: Iterable[str]) -> None:
        patterns = list(allowed_hosts)
        self.allowed = lambda host: any(fnmatch.fnmatchcase(host, p) for p in patterns)
        self.mounted = True

    def shows(self, ctx: Context, plan: Plan) -> bool:
        """A paid call from a host that elicits by URL only (no form), over this server's HTTP, mid-call."""
        desk = self.card.server.desk
        if plan.free or desk.free or not self.mounted:
            return False
        version = ctx.protocol_version
        if version and is_version_at_least(version, "2026-07-28"):  # no mid-call request on a stateless revision
            return False
        capabilities = ctx.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        return bool(elicitation is not None and elicitation.url is not None and elicitation.form is None)

    def _open(self, quote: Quote, decision: Decision) -> Page:
        page = Page(secrets.token_urlsafe(32), secrets.token_urlsafe(32), quote, decision)
        now = self.card.quotes.clock()
        for path in [p for p, old in self._pages.items() if now - old.quote.expires > KEEP_S]:
            del self._pages[path]  # as long as the quote book remembers its quote (to say which it was)
        self._pages[page.path] = page
        return page

    async def ask(
        self,
        ctx: Context,
        tool: str,
        plan: Plan,
        replan: Callable[[], Plan],
        execute: Callable[[Plan], dict[str, Any]],
        answer: Answer,
    ) -> dict[str, Any]:
        """Quote, send the user to the page (URL-mode elicitation), wait for the press or the quote's end."""
        server = self.card.server
        refusal = server.desk.refusal(plan, None)
        if refusal is not None:
            raise ToolError(refusal)
        server.desk.record(plan)
        quote = self.card.quotes.issue(connection_mark(ctx), tool, plan, replan, execute, answer=answer)
        self.card.journal(quote)
        decision = Decision(expires=quote.expires)
        page = self._open(quote, decision)
        url = f"{self.origin or f'http://{_host(ctx)}'}{PREFIX}{page.path}"
        message = f"{server.desk.client.redact(server.desk.question(plan))} Confirm or cancel on the consent page."
        session = ctx.request_context.session
        elicitation = secrets.token_hex(8)
        elicited = await session.elicit_url(message, url, elicitation, related_request_id=ctx.request_id)
        if elicited.action != "accept":
            page.used = quote.used = True
            return server._clean(answer(plan, "declined", "the user did not open the consent page: nothing was sent"))
        while not decision.done.is_set():  # the press, or the (latest) quote's end
            left = decision.expires - self.card.quotes.clock()
            if left <= 0:
                page.used = quote.used = True
                decision.end("expired", refusal="quote_id: expired before the user confirmed: nothing was sent")
                break
            with anyio.move_on_after(left):
                await decision.done.wait()
        with contextlib.suppress(Exception):  # the host may retry what waited on it; a closed stream is no matter
            await session.send_elicit_complete(elicitation, related_request_id=ctx.request_id)
        if decision.answer is not None:
            return decision.answer
        if decision.state == "cancelled":
            return server._clean(answer(plan, "declined", "the user cancelled on the consent page: nothing was sent"))
        raise ToolError(decision.refusal or "nothing was sent")

    # -- the page ------------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._respond(request)
        for name, value in HEADERS.items():
            response.headers[name] = value
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        if not self.allowed(request.headers.get("host", "")):
            return PlainTextResponse("Invalid Host header", status_code=421)
        path = request.url.path[len(PREFIX) :]
        if path == SIGN_IN:
            return self._sign_in(request)
        if not self._signed_in(request):  # whoever holds the link but not the user's browser: nothing of the page
            return self._message(
                "Open in your own browser",
                "This browser is not signed in to this agent server: open the sign-in link the server printed in its "
                "terminal when it started, then reload this page. Nothing was sent.",
                403,
            )
        page = self._pages.get(path)
        if page is None:
            return self._message("No such consent page", "This link is not a consent page of this server.", 404)
        if page.used:
            return self._message("Already used", "This consent page was used: nothing more is sent from it.", 410)
        quotes = self.card.quotes
        if quotes.clock() >= page.quote.expires:
            page.used = page.quote.used = True
            page.decision.end("expired", refusal="quote_id: expired before the user confirmed: nothing was sent")
            return self._message("Expired", "This quote expired: nothing was sent. Ask the agent again.", 410)
        if request.method == "GET":
            return HTMLResponse(self._card(page))
        if request.method != "POST":
            return PlainTextResponse("Method not allowed", status_code=405, headers={"Allow": "GET, POST"})
        return await self._press(request, page)

    async def _press(self, request: Request, page: Page) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"http://{request.headers.get('host', '')}":
            return self._message("Refused", "A press from another site: nothing was sent.", 403)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_MAX_BYTES:
                return self._message("Refused", "Too large: nothing was sent.", 413)
        try:
            form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
        except ValueError:  # more fields than a press has
            return self._message("Refused", "Confirm or Cancel: nothing was sent.", 400)
        token = (form.get("token") or [""])[0]
        if not hmac.compare_digest(token.encode(), page.token.encode()):
            return self._message("Refused", "This press did not come from this page: nothing was sent.", 403)
        choice = (form.get("decision") or [""])[0]
        if choice not in ("confirm", "cancel"):
            return self._message("Refused", "Confirm or Cancel: nothing was sent.", 400)
        if page.used:  # pressed again while this request's body came (a double click): the first press decides
            return self._message("Already used", "This consent page was used: nothing more is sent from it.", 410)
        page.used = True  # single use from here on, whatever follows (no await since the check above)
        try:
            quote = self.card.quotes.take(page.quote.id, page.quote.connection)
        except QuoteRefused as exc:
            page.decision.end("refused", refusal=str(exc))
            return self._message("Refused", str(exc), 410)
        if choice == "cancel":
            page.decision.end("cancelled")
            return self._message("Cancelled", "Cancelled: nothing was sent.", 200)
        try:
            settled = await self.card.settle(quote)
        except ToolError as exc:
            page.decision.end("failed", refusal=str(exc))
            return self._message("Not sent", str(exc), 502)
        if isinstance(settled, Quote):  # the price changed: a new page for the new quote, nothing paid
            page.decision.expires = settled.expires
            again = self._open(settled, page.decision)
            return RedirectResponse(f"{PREFIX}{again.path}", status_code=303)
        if isinstance(settled, str):
            page.decision.end("refused", refusal=settled)
            return self._message("Not sent", settled, 409)
        page.decision.end("paid", answer=settled)
        ids = ", ".join(settled.get("task_ids") or []) or "none"
        return self._message("Confirmed", f"{settled.get('note') or settled.get('state')}. Songs: {ids}.", 200)

    def _card(self, page: Page) -> str:
        view = quote_view(self.card.server.desk, page.quote)
        view = self.card.server._clean(view)
        e = html.escape
        left = []
        if view.get("credits_left") is not None:
            left.append(f"the key has {view['credits_left']} credits left")
        if view.get("budget_left") is not None:
            left.append(f"this server's budget has {view.get('budget_left_text') or view['budget_left']} left")
        facts = "".join(
            f"<dt>{e(label)}</dt><dd>{e(str(value))}</dd>"
            for label, value in (("What", view["what"]), ("Provider", view["provider"]), ("Model", view["model"]),
                                 ("Expires", view["expires_at"]))
            if value
        )  # fmt: skip
        words = "".join(f"<blockquote><strong>{e(w['field'])}: </strong>{e(w['text'])}</blockquote>" for w in
                        view["words"])  # fmt: skip
        token = e(page.token)
        return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="color-scheme" content="light dark">
<meta name="referrer" content="same-origin"><title>Confirm a paid call</title><style>{_style()}</style></head>
<body><main>
<h1 id="price">{e(price_heading(view["price"]))}</h1>
<p id="balance" class="muted">{e("; ".join(left))}</p>
<dl id="facts">{facts}</dl>
<section id="words" aria-label="What the agent wrote"><p>As the agent wrote it (quoted):</p>{words}</section>
<form id="actions" method="post">
<input type="hidden" name="token" value="{token}">
<button id="confirm" class="primary" type="submit" name="decision" value="confirm" autofocus>Confirm</button>
<button id="cancel" class="secondary" type="submit" name="decision" value="cancel">Cancel</button>
</form>
</main></body></html>"""

    @staticmethod
    def _message(title: str, text: str, status: int) -> HTMLResponse:
        e = html.escape
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<style>{_style()}</style></head><body><main><h1>{e(title)}</h1><p id="state" role="status">{e(text)}'
            "</p></main></body></html>"
        )
        return HTMLResponse(body, status_code=status)
