"""`python -m ipymusicgen gateway ...`: serve, and the admin commands (users, budgets, spend)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from ..errors import MusicGenError
from .database_url import masked, shown_database

ENV_UPSTREAM_KEY = "MUSICGEN_UPSTREAM_KEY"
DEFAULT_PORT = 8790


def default_database() -> str:
    """The SQLite ledger beside the journal."""
    from ..storage.journal import default_journal_path

    return str(Path(default_journal_path()).with_name("gateway.sqlite3"))


MAX_CREDITS = 10**12
"""The largest budget taken: far above any account, and its sums stay inside both engines' 64-bit integers."""


def credits_arg(text: str) -> int:
    """A budget: a whole number of credits from 0 to MAX_CREDITS, in ASCII digits (the gateway's and the MCP
    server's command lines). NaN, a sign, a fraction, an exponent or a number too big to store is refused."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_CREDITS:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise argparse.ArgumentTypeError(f"use a whole number of credits from 0 to {MAX_CREDITS} (got {shown!r})")
    return int(text)


NO_CAP = "none"


def cap_arg(text: str) -> int | None:
    """A budget to set: credits (as `credits_arg`), or `none` to lift the cap (as if it had never been set)."""
    return None if text.strip().lower() == NO_CAP else credits_arg(text)


MAX_SEATS = 10_000


def seats_arg(text: str) -> int:
    """`--max-in-flight`: a whole number of seats, 1 to MAX_SEATS."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SEATS:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise argparse.ArgumentTypeError(f"use a whole number of seats from 1 to {MAX_SEATS} (got {shown!r})")
    return int(text)


def port_arg(text: str) -> int:
    """A TCP port, 1 to 65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"use a port from 1 to 65535 (got {text!r})")
    return int(text)


class OneLineParser(argparse.ArgumentParser):
    """A refused argument is one line on stderr (exit 2), not the usage block: an admin's typo reads at once."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def add_gateway_parser(commands: Any) -> None:
    """Add `gateway` and its subcommands to the package's command line."""
    from ..config import DEFAULT_BASE_URL, DEFAULT_V2_BASE_URL

    gateway = commands.add_parser("gateway", help="a team gateway: one upstream key, budgets, a shared ledger")
    sub = gateway.add_subparsers(dest="gateway_command", required=True, parser_class=OneLineParser)

    def with_database(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument(
            "--database", default=None, help="a SQLite file (default: beside the journal) or postgresql://..."
        )
        return parser

    serve = with_database(sub.add_parser("serve", help="serve the service's API to the team's tokens"))
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=port_arg, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--upstream", default=DEFAULT_BASE_URL, help="the service's v1 base URL")
    serve.add_argument("--upstream-v2", default=DEFAULT_V2_BASE_URL, help="the service's v2 base URL")
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="a Host name clients use (repeatable)"
    )
    serve.add_argument(
        "--max-in-flight",
        type=seats_arg,
        default=None,
        metavar="N",
        help="paid creates in flight upstream at once, for every replica on the ledger; more wait in a fair queue "
        "(default: no cap, no queue)",
    )
    serve.add_argument(
        "--sandbox",
        action="store_true",
        help="to try it with no account: start a local sandbox as the upstream and use its demo key "
        f"(no {ENV_UPSTREAM_KEY}, no --upstream)",
    )
    from .engine_cli import add_dollar_commands, add_serve_flags  # ElevenLabs and Lyria: keys, dollar budgets

    add_serve_flags(serve)
    serve.set_defaults(run=_serve)

    user = sub.add_parser("user", help="add, list, budget or revoke users")
    users = user.add_subparsers(dest="user_command", required=True)
    add = with_database(users.add_parser("add", help="add a user; prints their token once, on the last line"))
    add.add_argument("name", type=name_arg)
    add.add_argument("--budget", type=credits_arg, default=None, help="credits this user may spend (default: no cap)")
    add.set_defaults(run=_user_add)
    with_database(users.add_parser("list", help="users, budgets and what each has spent")).set_defaults(run=_user_list)
    budget = with_database(users.add_parser("budget", help="set a user's budget"))
    budget.add_argument("name")
    budget.add_argument("credits", type=cap_arg, help="credits, or 'none' to lift the cap")
    budget.set_defaults(run=_user_budget)
    revoke = with_database(users.add_parser("revoke", help="revoke a user's token"))
    revoke.add_argument("name")
    revoke.set_defaults(run=_user_revoke)

    team = sub.add_parser("team", help="the team's budget")
    teams = team.add_subparsers(dest="team_command", required=True)
    team_budget = with_database(teams.add_parser("budget", help="cap the team's total spend"))
    team_budget.add_argument("credits", type=cap_arg, help="credits, or 'none': no team cap (the default)")
    team_budget.set_defaults(run=_team_budget)
    add_dollar_commands(users, teams, with_database, _ledger)

    spend = with_database(sub.add_parser("spend", help="calls and credits per user, day, model or provider"))
    spend.add_argument("--by", choices=("user", "day", "model", "provider"), default="user")
    spend.set_defaults(run=_spend)

    queue = with_database(
        sub.add_parser("queue", help="the fair queue (serve --max-in-flight): who waits, who is sent")
    )
    queue.set_defaults(run=_queue)
    queues = queue.add_subparsers(dest="queue_command")
    cancel = with_database(queues.add_parser("cancel", help="cancel a create still waiting (its price is given back)"))
    cancel.add_argument("task_id", help="one of the ids the gateway answered it with")
    cancel.set_defaults(run=_queue_cancel)

    reconcile = with_database(
        sub.add_parser("reconcile", help="settle calls left unknown (kill -9, a ledger outage); list what stays so")
    )
    reconcile.add_argument("--upstream", default=DEFAULT_BASE_URL, help="the service's v1 base URL")
    reconcile.add_argument("--upstream-v2", default=DEFAULT_V2_BASE_URL, help="the service's v2 base URL")
    reconcile.set_defaults(run=_reconcile)

    from .batch_cli import add_batches_parser  # `gateway batches`: the batches notebooks handed over; stop one

    add_batches_parser(sub, with_database, name_arg=name_arg, ledger=_ledger, cell=cell)


class LedgerUnavailableError(MusicGenError):
    """The ledger database cannot be opened (a server down, a folder not writable)."""


EXTRA_HINT = "pip install 'ipymusicgen[gateway]'"


class GatewayExtraMissingError(MusicGenError):
    """The gateway's own libraries (its extra) are not installed; a notebook's install does not bring them."""


def _needs(module: str, why: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise GatewayExtraMissingError(f"{why} needs {module}, which is not installed: {EXTRA_HINT}")


def _needs_driver(database: str) -> None:
    from ..storage.ledger_engines import is_postgres

    if is_postgres(database):
        _needs("psycopg", "a PostgreSQL ledger")


def ledger_shown(database: str) -> str:
    """Which ledger a command opened, as it may be shown: a SQLite file by its full path, a server's URL masked."""
    from ..storage.ledger_engines import is_postgres

    if is_postgres(database):
        return shown_database(database)
    return str(Path(database.removeprefix("sqlite://")).expanduser().resolve())


def _ledger(args: argparse.Namespace) -> Any:
    from ..storage.ledger_engines import open_ledger

    database = args.database or default_database()
    _needs_driver(database)
    try:
        ledger = open_ledger(database)
    except Exception as exc:  # psycopg's and sqlite3's errors name the host or file, never a password
        reason = masked(str(exc), database).strip().splitlines()
        raise LedgerUnavailableError(
            f"could not open the ledger at {shown_database(database)}: {reason[0] if reason else type(exc).__name__}"
        ) from None
    # which one it opened (a file, or a server); a ledger that could not be opened is named by the one error line
    print(f"ledger: {ledger_shown(database)}", file=sys.stderr, flush=True)
    return ledger


NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def name_arg(name: str) -> str:
    """A user name: 1 to 64 ASCII letters, digits, '.', '_' or '-', not starting with '-' (it would read as an
    option in the next command that names the user)."""
    if not 1 <= len(name) <= 64 or not set(name) <= NAME_CHARACTERS or name.startswith("-"):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise argparse.ArgumentTypeError(
            f"a user name is 1 to 64 ASCII letters, digits, '.', '_' or '-', not starting with '-' (got {shown!r})"
        )
    return name


def _user_add(args: argparse.Namespace) -> int:
    from ..storage.ledger import LedgerError
    from .tokens import new_token, token_hash

    token = new_token()
    with _ledger(args) as ledger:
        try:
            ledger.add_user(args.name, token_hash(token), args.budget)
        except LedgerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    budget = "no cap" if args.budget is None else f"{args.budget} credits"
    print(f"added {args.name} (budget: {budget}); their token, shown only this once, is on the next line:")
    print(token)
    return 0


def _user_list(args: argparse.Namespace) -> int:
    from .engine_cli import dollar_cells

    with _ledger(args) as ledger:
        dollars = dollar_cells(ledger)  # "\tdollars $5.00 charged $0.79" for users with a dollar budget or spend
        for row in ledger.users():
            budget = "-" if row.budget is None else str(row.budget)
            state = " revoked" if row.revoked else ""
            print(f"{cell(row.name)}\tbudget {budget}\tspent {row.spent}{dollars.get(row.name, '')}{state}")
    return 0


def _admin(args: argparse.Namespace, action: Any, done: str) -> int:
    from ..storage.ledger import LedgerError

    with _ledger(args) as ledger:
        try:
            action(ledger)
        except LedgerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(done)
    return 0


def _shown_cap(credits: int | None) -> str:
    return f"{NO_CAP} (no cap)" if credits is None else str(credits)


def _user_budget(args: argparse.Namespace) -> int:
    done = f"{args.name}: budget {_shown_cap(args.credits)}"
    return _admin(args, lambda ledger: ledger.set_user_budget(args.name, args.credits), done)


def _user_revoke(args: argparse.Namespace) -> int:
    return _admin(args, lambda ledger: ledger.revoke(args.name), f"{args.name}: token revoked")


def _team_budget(args: argparse.Namespace) -> int:
    return _admin(args, lambda ledger: ledger.set_team_budget(args.credits), f"team budget {_shown_cap(args.credits)}")


def cell(text: object) -> str:
    """A user's text (a model name a caller sent, say) as one cell of a terminal table: printable text as it is,
    anything else JSON-escaped in quotes, so escape codes, tabs, line breaks and bidi controls show, never act."""
    plain = str(text)
    return plain if plain.isprintable() else json.dumps(plain)


def _spend(args: argparse.Namespace) -> int:
    if args.by == "provider":
        return _spend_by_provider(args)
    with _ledger(args) as ledger:
        rows = ledger.spend(args.by)
    from .engine_cli import usd_cell

    usd = any(row.usd for row in rows)  # service calls paid from dollar budgets: a column of their own
    print(f"{args.by}\tcalls\testimated\tmeasured\tunknown" + ("\tusd" if usd else ""))
    for row in rows:
        measured = "-" if row.measured is None else str(row.measured)
        print(f"{cell(row.group)}\t{row.calls}\t{row.estimated}\t{measured}\t{row.unknown}{usd_cell(row, usd)}")
    return 0


def _spend_by_provider(args: argparse.Namespace) -> int:
    """Each provider in its own unit (the ledger prices the service's calls in credits; never added to others)."""
    from ..storage.ledger import CHARGED
    from ..storage.provider_spend import ledger_spend

    with _ledger(args) as ledger:
        rows = ledger_spend([c for c in ledger.calls() if c["usd_rate"] is None], CHARGED)  # paid in credits
        print("provider\tunit\tcalls\testimated\tmeasured\tunknown")
        for row in rows:
            shown = ["-" if v is None else str(v) for v in (row.estimated, row.measured)]
            print(f"{cell(row.group)}\t{row.unit}\t{row.calls}\t{shown[0]}\t{shown[1]}\t{row.unknown}")
        from .engine_cli import print_engine_spend

        print_engine_spend(ledger, cell)  # the engines' calls, in dollars
    return 0


def _serve(args: argparse.Namespace) -> int:
    if args.sandbox:
        return _serve_on_sandbox(args)
    key = os.environ.get(ENV_UPSTREAM_KEY, "").strip()
    if not key:
        print(f"error: set {ENV_UPSTREAM_KEY} to the upstream key (never a flag: it would show in ps)", file=sys.stderr)
        return 2
    return _serve_with(args, key)


def _serve_with(args: argparse.Namespace, key: str) -> int:
    from ..models.costs import CostTableError, cost_table

    try:
        cost_table()  # every paid call is priced by it: a price it cannot hold is refused before serving
    except CostTableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _needs("aiohttp", "gateway serve")
    database = args.database or default_database()
    _needs_driver(database)
    from ..storage.ledger_engines import is_postgres
    from .engine_cli import engines_from
    from .server import serve

    try:
        engines = engines_from(args)
        from .credit_rate import rate_micros

        credit_usd = rate_micros(getattr(args, "credit_dollars", None))  # DollarPriceError is a ValueError
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print("serving in the foreground until Ctrl+C: run the admin commands and clients in another terminal", flush=True)
    serve(
        database=database if is_postgres(database) else ledger_shown(database),  # a file by its full path
        host=args.host,
        port=args.port,
        upstream=args.upstream,
        upstream_v2=args.upstream_v2,
        key=key,
        allow_hosts=args.allow_host,
        max_in_flight=args.max_in_flight,
        engines=engines,
        credit_usd=credit_usd,
    )
    return 0


def _serve_on_sandbox(args: argparse.Namespace) -> int:
    """`serve --sandbox`: the gateway in front of an embedded sandbox, upstream key its free demo key (for trying
    the team set-up with no account). The real upstream's key and addresses are never used."""
    from ..config import DEFAULT_BASE_URL, DEFAULT_V2_BASE_URL, env_float
    from ..sandbox import Sandbox
    from ..workspace.session import ENV_SONG_SECONDS, ENV_STAGE_SECONDS

    if (args.upstream, args.upstream_v2) != (DEFAULT_BASE_URL, DEFAULT_V2_BASE_URL):
        print("error: --sandbox is the upstream: leave out --upstream and --upstream-v2", file=sys.stderr)
        return 2
    stage = env_float(ENV_STAGE_SECONDS) or 3.0
    sandbox = Sandbox(stage_seconds=stage, song_seconds=env_float(ENV_SONG_SECONDS) or 30.0)
    sandbox.start()
    try:
        print(f"upstream: a local sandbox at {sandbox.base_url} (its demo key; nothing is paid)", flush=True)
        args.upstream, args.upstream_v2 = sandbox.base_url, sandbox.v2_base_url
        args.engine_sandbox = (sandbox.engines_base_url, sandbox.api_key)  # ElevenLabs and Lyria too, demo key
        return _serve_with(args, sandbox.api_key)
    finally:
        sandbox.stop()


def _queue(args: argparse.Namespace) -> int:
    from ..storage.ledger_queue import load

    with _ledger(args) as ledger:
        rows = load(ledger)
    print("user\twaiting\tseats")
    for user, waiting, seats in rows:
        print(f"{cell(user)}\t{waiting}\t{seats}")
    return 0


def _queue_cancel(args: argparse.Namespace) -> int:
    from ..storage.ledger_queue import cancel

    with _ledger(args) as ledger:
        if not cancel(ledger, args.task_id):
            print(f"error: no create waiting under {cell(args.task_id)} (sent already, or no such id)", file=sys.stderr)
            return 2
    print(f"cancelled {cell(args.task_id)}: never sent; its price is given back")
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    """`gateway reconcile`: what `gateway serve` also does as it starts (gateway/reconcile.py); 1 when calls stay
    unknown, so a script can tell."""
    key = os.environ.get(ENV_UPSTREAM_KEY, "").strip()
    if not key:
        print(f"error: set {ENV_UPSTREAM_KEY} to the upstream key (never a flag: it would show in ps)", file=sys.stderr)
        return 2
    from .app import Gateway
    from .server import check_upstream
    from .upstream import Upstream

    check_upstream(args.upstream, args.upstream_v2)
    with _ledger(args) as ledger:
        from .engine_routes import recover_engine_calls

        moved = recover_engine_calls(ledger)  # ElevenLabs and Lyria calls a stopped gateway left pending
        gateway = Gateway(ledger, Upstream(args.upstream, args.upstream_v2, key))
        try:
            report = gateway.recover()
        finally:
            gateway.close()
    print("\n".join(report.lines()))
    if moved:
        print(f"{moved} engine call(s) a stopped gateway left pending: now unknown (may have been charged; never sent "
              "again)")  # fmt: skip
    return 1 if report.unknown else 0
