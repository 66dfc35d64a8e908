"""`gateway reconcile` (also run as `gateway serve` starts): settle the calls whose outcome the ledger does not know.

A gateway killed mid-send (kill -9), an answer lost to a timeout, or a ledger down when the answer came leave calls
pending or unknown: their reservations held, and any tasks they made owned by no one (their user cannot poll them).
Reconciling asks about each:
- the ids the gateway answered but could not record (its spill files, on this machine) are written first;
- then the upstream's task list (every task of the key): a task no user owns whose style and title are those a
  dangling call sent, and no other open call's, is that call's. The call is settled as done (at its estimate),
  its tasks and their songs recorded as its user's, and a repeat of its Idempotency-Key answers their ids;
- a dangling generate call older than any send (`DEAD_AFTER`) that explains no task, when every unowned task in the
  list is explained by some call, made nothing: its reservation is released, and a repeat says nothing was charged;
- everything else stays unknown (reservation kept), and is listed.
A live gateway's pending call is never touched: it is only counted among the calls a task could belong to.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..storage.ledger import DONE, REFUSED, GatewayLedger, OpenCall
from .backlog import Backlog

log = logging.getLogger(__name__)
DEAD_AFTER = 180.0
"""Seconds after which a call is no longer being sent by anyone: above the upstream's 60 s answer timeout and its
connect, with room for a slow gateway."""
GENERATE = "/v1/music/generate"
RELEASED = (
    "This call's gateway stopped before its answer, and the upstream holds no task from it: nothing was charged. "
    "Send it again with a new Idempotency-Key."
)


@dataclass
class Report:
    """What reconciling did: calls settled (with the task ids found for each), released, and still unknown."""

    written: int = 0
    settled: dict[int, list[str]] = field(default_factory=dict)
    released: list[int] = field(default_factory=list)
    unknown: list[OpenCall] = field(default_factory=list)
    asked: bool = False
    """Whether the upstream's task list could be read (False: every dangling call stays unknown)."""

    def lines(self) -> list[str]:
        head = f"reconciled: {len(self.settled)} settled, {len(self.released)} released, {len(self.unknown)} unknown"
        if self.written:
            head += f" ({self.written} kept answer(s) written to the ledger)"
        if not self.asked and self.unknown:
            head += " (the upstream's task list could not be read)"
        rows = [head]
        rows += [f"settled call {c}: tasks {', '.join(ids)}" for c, ids in self.settled.items()]
        rows += [f"released call {c}: the upstream holds no task from it" for c in self.released]
        rows += [
            f"unknown call {c.id}\t{c.user}\t{c.endpoint}\t{c.estimated} credits held\t{c.age:.0f} s old"
            for c in self.unknown
        ]
        return rows


def reconcile(
    ledger: GatewayLedger, upstream: Any, backlog: Backlog | None = None, dead_after: float = DEAD_AFTER
) -> Report:
    """Settle what can be told of every dangling call (see the module's doc); what was done."""
    report = Report(written=backlog.take_spills() if backlog is not None else 0)
    calls = ledger.open_calls(dead_after)
    dangling = [c for c in calls if c.dead]
    if not dangling:
        return report
    records = _all_tasks(upstream)
    if records is None:
        report.unknown = dangling
        return report
    report.asked = True
    owned = ledger.owned_any([r["id"] for r in records])
    orphans = [r for r in records if r["id"] not in owned]
    fits = {r["id"]: [c.id for c in calls if _fits(r, _sent(c))] for r in orphans}
    unexplained = any(not ids for ids in fits.values())
    for call in dangling:
        mine = [r for r in orphans if fits[r["id"]] == [call.id]]
        shared = any(call.id in ids and len(ids) > 1 for ids in fits.values())
        if mine and not shared:
            ids = [r["id"] for r in mine]
            body = json.dumps({"status": 200, "message": "Success", "data": {"ids": ids}}).encode()
            if ledger.finish(call.id, DONE, 200, body, ids, note="reconciled: its tasks found upstream"):
                songs = [str(r["song_id"]) for r in mine if r.get("song_id")]
                if songs:
                    ledger.add_songs(call.user, songs)
                report.settled[call.id] = ids
        elif (
            not mine
            and not shared
            and not unexplained
            and call.endpoint == GENERATE
            and call.age > dead_after
            and _sent(call)[0]
        ):
            body = json.dumps({"status": 502, "message": RELEASED, "data": None}).encode()
            if ledger.finish(call.id, REFUSED, 502, body, note="reconciled: no task upstream"):
                report.released.append(call.id)
        else:
            report.unknown.append(call)
    return report


def _all_tasks(upstream: Any) -> list[dict[str, Any]] | None:
    """Every task record of the key (the task list without ids), or None when it cannot be read."""
    try:
        answer = upstream.read("/v1/music/tasks")
        data = json.loads(answer.body) if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    records = data.get("data") if isinstance(data, dict) else data
    if not isinstance(records, list):
        return None
    return [r for r in records if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]]


def _sent(call: OpenCall) -> tuple[str | None, str | None]:
    """The style and title a generate call sent (None where it sent none, or is not a generate call)."""
    if call.endpoint != GENERATE or not call.request:
        return None, None
    try:
        body = json.loads(call.request)
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    style, title = body.get("style"), body.get("title")
    return (style if isinstance(style, str) and style else None), (title if isinstance(title, str) else None)


def _fits(record: dict[str, Any], sent: tuple[str | None, str | None]) -> bool:
    style, title = sent
    return style is not None and record.get("style") == style and (title is None or record.get("title") == title)
