"""`python -m ipymusicgen mcp`: the music server an agent can be trusted with (MCP, the official SDK).

It takes a `Workspace` (by default the session's current one): the same client the notebook uses (journal,
archive, library), so what an agent pays for is recorded, archived and searchable like any other song. Layout: `desk`
(the rules: price, consent checks, pay once, read), `songs` (a song as plain data), `server` (the
MCP tools over the desk).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..models.dollar_prices import DollarBudget, DollarPriceError
from .budget_units import described, server_budget
from .desk import AgentDesk, AgentError
from .shutdown import Ending
from .stdio import run_stdio
from .tools import AgentServer, build_server

if TYPE_CHECKING:
    from ..workspace.workspace import Workspace

__all__ = ["AgentDesk", "AgentError", "AgentServer", "build_server", "serve"]


def serve(
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8000,
    budget: int | str | DollarBudget | None = None,
    budget_usd: Any = None,
    allow_hosts: Sequence[str] = (),
    workspace: Workspace | None = None,
) -> None:
    """Run the server until its transport closes: stdio by default, or streamable HTTP on `host:port`
    (bearer token required; see `mcp.http`). `workspace`: the journal file and client the agent's songs go
    to (default: the session's current one, as a notebook's). `budget`: whole credits, or US dollars across
    providers (`'$5'`, `'5usd'`, or `budget_usd=5`): the notebook's spellings, refused in one line otherwise."""
    from ..workspace import session

    try:  # a bad budget stops here, before anything starts
        budget = server_budget(budget, budget_usd)
    except DollarPriceError as exc:
        raise AgentError(str(exc)) from None
    token = made = None
    if http:
        from .http import TOKEN_ENV, bind_warning, http_token

        token, made = http_token()  # a bad MUSICGEN_MCP_TOKEN stops here, before anything starts
    session.mark_notice_shown()  # stdout is the protocol's: the one notice goes to stderr below
    workspace = workspace if workspace is not None else session.current_workspace()
    client = workspace.client
    desk = AgentDesk(client, budget=budget, database=workspace.db)  # its songs are the workspace's
    where = "the embedded sandbox (free)" if client.settings.is_embedded_sandbox else "the real service (paid)"
    cap = described(budget)
    listen = f" on http://{host}:{port}/mcp" if http else " on stdio"
    print(f"ipymusicgen agent server{listen}: {where}, {cap}", file=sys.stderr, flush=True)
    if http:
        warning = bind_warning(host, allow_hosts)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        if made:
            print(
                f"token: {token} (send it as the header 'Authorization: Bearer <token>'; set {TOKEN_ENV} to choose it)",
                file=sys.stderr,
                flush=True,
            )
    agent = AgentServer(desk)
    server = agent.mcp
    if http:  # the consent page answers only a browser signed in with this link (never sent over MCP)
        print(
            f"consent page sign-in (open once in your own browser): {agent.pages.at(host, port)}",
            file=sys.stderr,
            flush=True,
        )
    ending = Ending(client.journal)  # ids waiting in memory outlive the host's close (see `shutdown`)
    try:
        if http:
            from .http import run_http

            assert token is not None
            run_http(server, host=host, port=port, token=token, allowed_hosts=allow_hosts, pages=agent.pages)
        else:  # the SDK's transport minus its thread hop per line (`stdio`), until stdin closes or a signal
            anyio.run(ending.serve, functools.partial(run_stdio, server, on_eof=ending.stdin_closed))
    finally:
        ending.finish()
        desk.close()
