"""The consent card as MCP Apps (the official SDK's `mcp.server.apps`): the `ui://ipymusicgen/consent` resource,
the paid tools' quote answer, and the app-only `confirm_quote` that pays a quote once.

The card's HTML (`consent_card.html`) is one self-contained document; it shows the price and the balance first,
then what the agent wrote (as text only), and calls `confirm_quote` when the user presses Confirm."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.apps import Apps, client_supports_apps
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..storage.agent_quotes import note_confirmed, note_quote, quote_record
from ..storage.errors import StorageError
from .consent import CARD_URI, WAITING, Quote, QuoteBook, QuoteRefused, connection_mark, price_line, quote_view
from .desk import Plan
from .outputs import ConfirmOutput

if TYPE_CHECKING:
    from .tools import AgentServer

Answer = Callable[[Plan, str, str], dict[str, Any]]
"""A paid tool's answer when nothing is sent (state and note): its output's shape, as a declined call's."""
CONFIRM = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


def _change(was: Plan, now: Plan) -> str:
    """`3 to 7 credits`, or with dollars `$0.15 (3 credits) to $0.35 (7 credits)`."""
    before, after = price_line(was), price_line(now)
    if before.endswith(" credits") and after.endswith(" credits"):
        return f"{was.estimate} to {after}"
    return f"{before} to {after}"


def card_html() -> str:
    return resources.files(__package__).joinpath("consent_card.html").read_text(encoding="utf-8")


class ConsentCard:
    """The Apps extension of one agent server and its quotes."""

    def __init__(self, server: AgentServer, quotes: QuoteBook) -> None:
        self.server = server
        self.quotes = quotes
        self.apps = Apps()
        self.apps.tool(
            resource_uri=CARD_URI,
            visibility=["app"],
            name="confirm_quote",
            description="The consent card's Confirm (app-only): pays a quote once, at the server's price of now.",
            annotations=CONFIRM,
        )(self.confirm_quote)
        self.apps.add_html_resource(
            CARD_URI, card_html(), title="Confirm a paid call", description="Price, balance, and Confirm / Cancel"
        )

    def shows(self, ctx: Context, plan: Plan) -> bool:
        """Whether this call is quoted for the card: a paid call (not a replay, not free) on a host with Apps."""
        return not plan.free and not self.server.desk.free and client_supports_apps(ctx)

    def quote(
        self,
        ctx: Context,
        tool: str,
        plan: Plan,
        replan: Callable[[], Plan],
        execute: Callable[[Plan], dict[str, Any]],
        answer: Answer,
    ) -> CallToolResult:
        """Nothing is sent: the tool's answer says `quoted`, its `quote` is for the card, the text for the model."""
        self.server.desk.record(plan)
        quote = self.quotes.issue(connection_mark(ctx), tool, plan, replan, execute, answer=answer)
        self.journal(quote)
        return self._quoted(quote, WAITING)

    def journal(self, quote: Quote) -> None:
        """The quote in the journal with its attempt's name and its price as shown (a locked file: kept to write)."""
        price = quote_view(self.server.desk, quote)["price"]
        with contextlib.suppress(StorageError):
            note_quote(self.server.desk.store, quote.id, quote.tool, quote.plan.name, price, quote.expires)

    def _past(self, quote_id: str) -> str | None:
        """What the journal says of a quote this server does not hold (made before a restart), or None."""
        store = self.server.desk.store
        record = quote_record(store, quote_id)
        if record is None:
            return None
        if record.state != "confirmed":
            return (
                "quote_id: made before this server restarted and never confirmed: nothing was sent; ask again for a "
                "new quote"
            )
        row = store.rows(record.attempt).get(0) if record.attempt else None
        if row is not None and not row.ids and row.state == "pending":  # stopped between the press and the send
            return (
                f"quote_id: confirmed before this server restarted ({record.tool}), but the server stopped before "
                "sending it: its call was never sent and nothing was charged; ask again for a new quote"
            )
        songs = f"its songs are {', '.join(row.ids)} (wait_for_songs)" if row and row.ids else "see unfinished()"
        return f"quote_id: confirmed before this server restarted ({record.tool}): {songs}; nothing was sent again"

    def _quoted(self, quote: Quote, note: str) -> CallToolResult:
        plan = quote.plan
        structured = self.server._clean({**quote.extra["answer"](plan, "quoted", note)})
        structured["quote"] = self.server._clean(quote_view(self.server.desk, quote))
        text = f"A quote of about {price_line(plan)} is shown to the user in the consent card; {note}"
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    async def confirm_quote(
        self, ctx: Context, quote_id: Annotated[str, Field(max_length=100, description="the quote the card shows")]
    ) -> Annotated[CallToolResult, ConfirmOutput]:
        """Pay a quote the user confirmed in the card: once, on the connection that asked, before it expires, at the
        price the server finds now (a changed price answers a new quote and pays nothing)."""
        if not client_supports_apps(ctx):  # only a card calls this; a host without Apps would show it to the model
            raise ToolError("quote_id: confirm_quote is the consent card's, on a host with MCP Apps: nothing was sent")
        try:
            quote = self.quotes.take(quote_id, connection_mark(ctx))
        except QuoteRefused as exc:
            past = await self.server._blocking(lambda: self._past(quote_id)) if exc.unheld else None
            raise ToolError(self.server._clean(past or str(exc))) from None
        settled = await self.settle(quote)
        if isinstance(settled, Quote):
            return self._requoted(quote, settled)
        if isinstance(settled, str):
            raise ToolError(settled)
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(settled, ensure_ascii=False))], structured_content=settled
        )

    async def settle(self, quote: Quote) -> Quote | str | dict[str, Any]:
        """Pay a taken quote at the server's price of now: the tool's answer; a new quote when the price changed
        (nothing paid); or why it may not be paid (budget, credits). The card's Confirm and the consent page's."""
        blocking: Callable[[Callable[[], Any]], Awaitable[Any]] = self.server._blocking
        plan = await blocking(quote.replan)
        if not plan.free and (plan.estimate, plan.dollars) != (quote.plan.estimate, quote.plan.dollars):
            again = self.quotes.issue(quote.connection, quote.tool, plan, quote.replan, quote.execute, **quote.extra)
            self.journal(again)
            return again
        refusal = None if plan.free else self.server.desk.refusal(plan, None)
        if refusal is not None:
            return refusal
        paying = replace(plan, quote=quote.id)

        def pay() -> dict[str, Any]:
            with contextlib.suppress(StorageError):  # the user's press, journalled before the call goes out
                note_confirmed(self.server.desk.store, quote.id)
            return quote.execute(paying)

        answer = self.server._clean(await blocking(pay))
        answer["quote_id"] = quote.id
        return dict(answer)

    def _requoted(self, was: Quote, again: Quote) -> CallToolResult:
        note = (
            f"the price changed from about {_change(was.plan, again.plan)}: nothing was sent; confirm the new quote "
            "to pay it"
        )
        result = self._quoted(again, note)
        assert result.structured_content is not None
        result.structured_content["state"] = "requoted"
        return result
