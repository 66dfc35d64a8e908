"""The command line's engine parts: dollar budgets (`gateway user budget-usd NAME 5`, `gateway team budget-usd 50`),
the engines `gateway serve` holds keys for (`--upstream-elevenlabs`, `--upstream-gemini`; the keys only from its
environment, never a flag: a flag shows in `ps`), and the engines' rows of `gateway spend --by provider`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from ..engines import elevenlabs as el
from ..engines import lyria
from ..models.dollar_prices import DollarPriceError, dollar_budget
from ..models.providers import ELEVENLABS, LYRIA

ENGINE_KEYS = MappingProxyType({ELEVENLABS: el.ENV_KEY, LYRIA: lyria.ENV_KEY})
"""The environment variables holding the team's key for each engine (each ecosystem's own name)."""
ENGINE_FLAGS = MappingProxyType({ELEVENLABS: "upstream_elevenlabs", LYRIA: "upstream_gemini"})
DEFAULT_URLS = MappingProxyType({ELEVENLABS: el.DEFAULT_BASE_URL, LYRIA: lyria.DEFAULT_BASE_URL})


def dollars_arg(text: str) -> int | None:
    """A dollar budget to set, in micros: `5`, `$5`, `0.50`, or `none` to take it away (then no engine call is paid)."""
    from ..storage.ledger_dollars import to_micros

    if text.strip().lower() == "none":
        return None
    try:
        return to_micros(dollar_budget(text, "the dollar budget").amount)
    except DollarPriceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_dollar_commands(
    users: Any, teams: Any, with_database: Callable[[Any], Any], ledger: Callable[..., Any]
) -> None:
    """`user budget-usd NAME DOLLARS|none` and `team budget-usd DOLLARS|none`."""
    user = with_database(users.add_parser("budget-usd", help="set a user's dollar budget (ElevenLabs, Lyria calls)"))
    user.add_argument("name")
    user.add_argument("dollars", type=dollars_arg, help="US dollars ('5', '$5'), or 'none': no engine call is paid")
    user.set_defaults(run=lambda args: _set_user(args, ledger))
    team = with_database(teams.add_parser("budget-usd", help="cap the team's total dollar spend on engine calls"))
    team.add_argument("dollars", type=dollars_arg, help="US dollars, or 'none': no team cap on dollars (the default)")
    team.set_defaults(run=lambda args: _set_team(args, ledger))


def _set_user(args: argparse.Namespace, ledger: Callable[..., Any]) -> int:
    from ..storage import ledger_dollars as dollars
    from ..storage.ledger import LedgerError

    with ledger(args) as opened:
        try:
            dollars.set_user_budget(opened, args.name, args.dollars)
        except LedgerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        _, spent = dollars.standing(opened).get(args.name, (None, 0))
    print(f"{args.name}: dollar budget {dollars.shown(args.dollars)}, charged {dollars.shown(spent)}")
    return 0


def _set_team(args: argparse.Namespace, ledger: Callable[..., Any]) -> int:
    from ..storage import ledger_dollars as dollars

    with ledger(args) as opened:
        dollars.set_team_budget(opened, args.dollars)
    cap = "none (no cap)" if args.dollars is None else dollars.shown(args.dollars)
    print(f"team dollar budget {cap}")
    return 0


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--credit-dollars",
        default=None,
        metavar="RATE",
        help="US dollars one service credit costs (default: MUSICGEN_CREDIT_DOLLARS), so a dollar budget pays service "
        "calls at it; unset, a user paying in dollars cannot make service calls",
    )
    serve.add_argument(
        "--upstream-elevenlabs",
        default=None,
        metavar="URL",
        help=f"ElevenLabs' base URL (default {el.DEFAULT_BASE_URL}); served when {el.ENV_KEY} holds the team's key",
    )
    serve.add_argument(
        "--upstream-gemini",
        default=None,
        metavar="URL",
        help=f"the Gemini API's base URL, for Lyria (default {lyria.DEFAULT_BASE_URL}); served when {lyria.ENV_KEY} "
        "holds the team's key",
    )


def engines_from(args: argparse.Namespace, environ: Any = None) -> dict[str, tuple[str, str]]:
    """provider -> (URL, key) for each engine whose key is in the environment; a URL given for an engine with no key
    there is an error (one line), as is a URL that would send a key over plain http to another machine."""
    sandbox = getattr(args, "engine_sandbox", None)
    if sandbox is not None:  # `serve --sandbox`: the sandbox's engines on its demo key, whatever the environment
        return {provider: sandbox for provider in ENGINE_KEYS}
    env = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for provider, variable in ENGINE_KEYS.items():
        url = getattr(args, ENGINE_FLAGS[provider], None)
        key = env.get(variable, "").strip()
        if url and not key:
            raise ValueError(f"--{ENGINE_FLAGS[provider].replace('_', '-')} needs the team's key in {variable}")
        if key:
            found[provider] = (url or DEFAULT_URLS[provider], key)
    return found


def print_engine_spend(opened: Any, cell: Callable[[object], str]) -> None:
    """The engines' rows of `gateway spend --by provider`: calls, dollars estimated, unknown (in USD, never added to
    the service's credits)."""
    from ..storage import ledger_dollars as dollars

    for row in dollars.spend(opened):
        print(f"{cell(row.provider)}\tusd\t{row.calls}\t{dollars.shown(row.estimated_usd)}\t-\t{row.unknown}")


def usd_cell(row: Any, shown_at_all: bool) -> str:
    """`gateway spend`'s dollar column for service calls paid from dollar budgets (credits stay in theirs)."""
    from ..storage.ledger_dollars import shown

    return f"\t{shown(row.usd)}" if shown_at_all else ""


def dollar_cells(opened: Any) -> dict[str, str]:
    """`user list`'s dollar cells, for users with a dollar budget or dollar spend (others' lines are unchanged)."""
    from ..storage import ledger_dollars as dollars

    return {
        name: f"\tdollars {dollars.shown(budget)} charged {dollars.shown(spent)}"
        for name, (budget, spent) in dollars.standing(opened).items()
        if name and (budget is not None or spent)
    }
