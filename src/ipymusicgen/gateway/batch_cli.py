"""`gateway batches`: the batches notebooks handed to the gateway, per user (rows done, in flight, queued, failed,
unknown, skipped; credits their sent rows hold), and `gateway batches stop NAME --user U` for an admin.

A batch's name is its user's text: shown as one cell (escape codes, tabs and line breaks show, never act).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

COLUMNS = ("user", "batch", "state", "rows", "done", "in flight", "queued", "failed", "unknown", "skipped", "credits")


def add_batches_parser(
    sub: Any,
    with_database: Callable[[argparse.ArgumentParser], argparse.ArgumentParser],
    *,
    name_arg: Callable[[str], str],
    ledger: Callable[[argparse.Namespace], Any],
    cell: Callable[[object], str],
) -> None:
    """Add `batches` (list) and `batches stop` to the gateway's subcommands; `cli.py` lends its user-name check,
    its ledger opener and its cell (so this module imports nothing of it)."""
    batches = with_database(sub.add_parser("batches", help="batches handed to the gateway; stop one"))
    batches.add_argument("--user", type=name_arg, default=None, help="only this user's batches")
    batches.set_defaults(run=_list, ledger=ledger, cell=cell)
    actions = batches.add_subparsers(dest="batches_command", required=False)
    stop = actions.add_parser("stop", help="stop a user's batch: its rows not yet sent are skipped")
    stop.add_argument(  # before or after `stop`: not given here, the one given to `batches` stands
        "--database", default=argparse.SUPPRESS, help="a SQLite file (default: beside the journal) or postgresql://..."
    )
    stop.add_argument("name", help="the batch's name, as its user gave it")
    stop.add_argument("--user", type=name_arg, required=True, help="whose batch")
    stop.set_defaults(run=_stop, ledger=ledger, cell=cell)


def _list(args: argparse.Namespace) -> int:
    from .batch_store import BatchStore

    cell = args.cell
    with args.ledger(args) as ledger:
        summaries = BatchStore(ledger).summaries(args.user)
    print("\t".join(COLUMNS))
    for s in summaries:
        c = s.counts
        state = s.state if not s.note else f"{s.state} ({s.note})"
        print(
            "\t".join(
                [cell(s.user), cell(s.name), cell(state), str(s.rows), str(c["complete"]),
                 str(c["sending"] + c["sent"]), str(c["queued"]), str(c["failed"]), str(c["unknown"]),
                 str(c["skipped"]), str(s.credits)]
            )
        )  # fmt: skip
    return 0


def _stop(args: argparse.Namespace) -> int:
    from .batch_store import BatchStore

    cell = args.cell
    with args.ledger(args) as ledger:
        stopped = BatchStore(ledger).stop(args.name, args.user, True)
    if not stopped:
        print(f"error: {args.user} has no batch named {cell(args.name)}", file=sys.stderr)
        return 2
    print(f"stopped {args.user}'s batch {cell(args.name)}: rows not yet sent are skipped; rows sent are followed")
    return 0
