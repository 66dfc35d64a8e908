"""The gateway ledger's batch tables (ledger migration step 4): a batch handed to the gateway whole, its rows and
the replicas sending them. Their SQL lives here, in storage/, beside the ledger whose transactions it uses;
`gateway/batch_store.py` gives the gateway's modules these names.

A batch is a user's, by its name (another user's batch of the same name is another batch, and is never shown to
them). Its rows keep the identity a notebook's batch gives them (index and request hash), their state, and the
idempotency key their create is sent under (`idem_base` and the attempt): every create goes through the gateway's
own paid path, so the user's budget is reserved per row and one key is sent upstream at most once.

A row's life: queued -> sending (claimed by one replica, in one transaction: `FOR UPDATE SKIP LOCKED` on
PostgreSQL, the write lock on SQLite) -> sent (its create answered with ids) -> complete or failed (its songs), or
unknown (its create may have been charged: never sent again), or skipped (stopped, its budget ran out). A replica
that stops beating (kill -9) leaves its claimed rows to another: a row whose create was never reserved goes back to
the queue, one whose reservation exists takes that call's outcome, and one still pending becomes unknown.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .ledger import GatewayLedger, _alive

QUEUED, SENDING, SENT, COMPLETE, FAILED, UNKNOWN, SKIPPED = (
    "queued",
    "sending",
    "sent",
    "complete",
    "failed",
    "unknown",
    "skipped",
)
ROW_STATES = (QUEUED, SENDING, SENT, COMPLETE, FAILED, UNKNOWN, SKIPPED)
RUNNING, DONE, STOPPED = "running", "done", "stopped"
"""A batch's states: rows still to send or follow; nothing left; stopped by its user or the gateway's admin."""
LEASE = 30.0
"""Seconds without a heartbeat after which a replica is taken for dead (another machine; on this one, its pid)."""
STOPPED_BY_ADMIN = "stopped by the gateway's admin"
NO_RATE = "no credit rate"
"""`_credits_left`'s word for a user paying service calls in dollars at a gateway that has no credit rate."""
CALL_OF_ROW = "LEFT JOIN calls c ON c.user_name = ? AND c.idem_key = r.idem_base || '-' || CAST(r.attempt AS TEXT)"
CHARGED = "CASE WHEN r.cost = 0 THEN 0 ELSE COALESCE(c.measured, r.cost) END"
"""What a row's credits are: its call's settled charge once measured (never below its estimate unless the upstream
said so: `GatewayLedger._measured`), else the estimate it reserved; 0 for a row that charged nothing."""


def idem_base(user: str, name: str, index: int, request_hash: str) -> str:
    """The row's idempotency key stem: the same for the same user, batch name, row and request on every replica."""
    digest = hashlib.sha256(f"{user}\0{name}\0{index}\0{request_hash}".encode()).hexdigest()[:40]
    return f"gwbatch-{digest}"


@dataclass(frozen=True)
class NewRow:
    request_hash: str
    request: str
    v2: bool
    estimate: int


@dataclass(frozen=True)
class Submitted:
    """What `submit` decided: `new`, `attached` (the batch existed: its rows kept), `conflict` (row `index` is not
    the request first recorded under that name), `over` (the rows to send would cost `estimate`, `left` left), or
    `no_rate` (the user pays service calls in dollars and the gateway has no credit rate)."""

    kind: str
    index: int | None = None
    estimate: int = 0
    left: int | None = None
    whose: str | None = None


@dataclass(frozen=True)
class Claimed:
    batch_id: int
    user: str
    name: str
    index: int
    request: dict[str, Any]
    v2: bool
    estimate: int
    idem_key: str


@dataclass(frozen=True)
class Following:
    batch_id: int
    user: str
    index: int
    v2: bool
    ids: list[str]
    last_change: float
    stall_timeout: float


@dataclass(frozen=True)
class DeadClaim:
    """A row a dead replica was sending, with the call its key reserved (None: never reserved, so never sent)."""

    batch_id: int
    index: int
    owner: str
    call_state: str | None
    call_body: bytes | None


@dataclass(frozen=True)
class BatchSummary:
    user: str
    name: str
    state: str
    rows: int
    counts: dict[str, int]
    credits: int
    note: str | None


class BatchStore:
    """The batch tables of one ledger (`GatewayLedger`'s own transactions: the same lock order, the team row first)."""

    def __init__(self, ledger: GatewayLedger) -> None:
        self.ledger = ledger
        self._postgres = ledger.placeholder == "%s"

    def _cursor(self, write: bool = True) -> Any:
        return self.ledger._cursor(write)  # the ledger's one transaction helper (a reconnect after a restart)

    def _now(self, cur: Any) -> float:
        return float(cur.one(f"SELECT {self.ledger.now_sql}")[0])

    def _skip_locked(self) -> str:
        return " FOR UPDATE OF b SKIP LOCKED" if self._postgres else ""

    # -- a user's side -----------------------------------------------------------------------------

    def submit(
        self,
        user: str,
        name: str,
        rows: list[NewRow],
        concurrency: int,
        budget: int | None,
        stall_timeout: float,
        retry: dict[int, int] | None = None,
    ) -> Submitted:
        """Record a batch, or attach to the user's batch of that name: rows never sent (queued, or skipped by a
        stop or a budget) are queued again, rows sent are kept as they are. Refused whole (nothing recorded) when a
        row differs from the one first recorded under its index, or the rows to send cost more than is left.

        `retry` (index -> attempt: the user's explicit `retry_unknown`) queues again, under a new key, each row still
        unknown at the attempt the user saw: a repeat of the same submission finds the attempt moved on and sends
        nothing more (each ask resends a row at most once)."""
        with self._cursor() as cur:
            self.ledger._lock_for_reserve(cur, user)  # the team row first, as every writer: budgets read steady
            now = self._now(cur)
            found = cur.one("SELECT id, state FROM batches WHERE user_name = ? AND name = ?", (user, name))
            stored: dict[int, tuple[str, str]] = {}
            retried: list[int] = []
            if found:
                for index, digest, state, attempt in cur.all(
                    "SELECT row_index, request_hash, state, attempt FROM batch_rows WHERE batch_id = ?", (found[0],)
                ):
                    stored[int(index)] = (digest, state)
                    if state == UNKNOWN and retry and retry.get(int(index)) == int(attempt):
                        retried.append(int(index))
                for index, row in enumerate(rows):
                    if index in stored and stored[index][0] != row.request_hash:
                        return Submitted("conflict", index=index)
            to_send = [
                row
                for index, row in enumerate(rows)
                if index not in stored or stored[index][1] in (QUEUED, SKIPPED) or index in retried
            ]
            estimate = sum(r.estimate for r in to_send)
            left, whose = self._credits_left(cur, user)
            if found and found[1] == STOPPED and self._stopped_by_admin(cur, found[0]):
                to_send, estimate, retried = [], 0, []  # an admin's stop stands: the batch is shown as it is
            if whose == NO_RATE and to_send:
                return Submitted("no_rate")
            if left is not None and estimate > left:
                return Submitted("over", estimate=estimate, left=left, whose=whose)
            if budget is not None and estimate > budget:
                return Submitted("over", estimate=estimate, left=budget, whose="this batch's budget")
            if not found:
                batch_id = int(
                    cur.one(
                        "INSERT INTO batches (user_name, name, state, concurrency, budget_left, stall_timeout, "
                        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                        (user, name, RUNNING, concurrency, budget, stall_timeout, now, now),
                    )[0]
                )
                kind = "new"
            else:
                batch_id = int(found[0])
                kind = "attached"
                if not to_send and found[1] == STOPPED:
                    return Submitted(kind)
                cur.run(
                    "UPDATE batch_rows SET state = ?, error = NULL, claimed_by = NULL WHERE batch_id = ? AND state = ?",
                    (QUEUED, batch_id, SKIPPED),
                )
                cur.many(  # the old key's call stays as it is (unknown: `gateway reconcile` may still settle it)
                    "UPDATE batch_rows SET state = ?, attempt = attempt + 1, ids = NULL, error = NULL, cost = 0, "
                    "claimed_by = NULL, last_change = ? WHERE batch_id = ? AND row_index = ? AND state = ?",
                    [(QUEUED, now, batch_id, index, UNKNOWN) for index in retried],
                )
                cur.run(
                    "UPDATE batches SET state = ?, concurrency = ?, budget_left = ?, stall_timeout = ?, note = NULL, "
                    "updated_at = ?, paused_until = NULL WHERE id = ?",
                    (RUNNING, concurrency, budget, stall_timeout, now, batch_id),
                )
            cur.many(
                "INSERT INTO batch_rows (batch_id, row_index, request_hash, request, v2, estimate, state, "
                "idem_base, last_change) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (batch_id, index, row.request_hash, row.request, int(row.v2), row.estimate, QUEUED,
                     idem_base(user, name, index, row.request_hash), now)
                    for index, row in enumerate(rows) if index not in stored
                ],
            )  # fmt: skip
            if not to_send and not cur.one(  # nothing to send or follow: shown done at once, not after a round
                "SELECT 1 FROM batch_rows WHERE batch_id = ? AND state IN ('queued', 'sending', 'sent')", (batch_id,)
            ):
                cur.run("UPDATE batches SET state = ? WHERE id = ? AND state = ?", (DONE, batch_id, RUNNING))
            return Submitted(kind, estimate=estimate, left=left)

    def _credits_left(self, cur: Any, user: str) -> tuple[int | None, str | None]:
        """Credits the user may still spend, and whose budget is smallest. A user whose service calls are paid in
        dollars (`pays_in_dollars`) has the dollars left in credits at the gateway's rate (rounded down: a row the
        dollars cannot pay is never admitted), or `NO_RATE` when the gateway has none: each row would be refused,
        so the batch is, whole, before anything is recorded (before, it was accepted and every row then refused)."""
        payer = self.ledger._payer(cur, user)
        if payer is None:
            return None, NO_RATE
        rate, left, whose = payer
        if rate is None:
            return left, whose
        return (None if left is None else left // rate), (f"{whose}, at the gateway's credit rate" if whose else None)

    def _stopped_by_admin(self, cur: Any, batch_id: int) -> bool:
        row = cur.one("SELECT note FROM batches WHERE id = ?", (batch_id,))
        return bool(row and row[0] == STOPPED_BY_ADMIN)

    def status(self, user: str, name: str) -> dict[str, Any] | None:
        """The user's batch of that name: its state and every row's (None: no such batch of theirs)."""
        with self._cursor(write=False) as cur:
            found = cur.one("SELECT id, state, note FROM batches WHERE user_name = ? AND name = ?", (user, name))
            if not found:
                return None
            rows = cur.all(
                f"SELECT r.row_index, r.state, r.ids, r.error, {CHARGED}, r.attempt FROM batch_rows r {CALL_OF_ROW} "
                "WHERE r.batch_id = ? ORDER BY r.row_index",
                (user, found[0]),
            )
        shown = [
            {"index": int(r[0]), "state": r[1], "ids": json.loads(r[2]) if r[2] else [], "error": r[3], "cost": r[4],
             "attempt": int(r[5])}
            for r in rows
        ]  # fmt: skip
        return {"name": name, "state": found[1], "note": found[2], "rows": shown}

    def stop(self, name: str, user: str, admin: bool) -> bool:
        """Stop a user's batch: rows not yet sent are skipped (rows sent are still followed). False: no such batch."""
        note = STOPPED_BY_ADMIN if admin else "stopped by its user"
        with self._cursor() as cur:
            now = self._now(cur)
            found = cur.one("SELECT id FROM batches WHERE user_name = ? AND name = ?", (user, name))
            if not found:
                return False
            cur.run(
                "UPDATE batch_rows SET state = ?, error = ? WHERE batch_id = ? AND state = ?",
                (SKIPPED, f"not started: {note}", found[0], QUEUED),
            )
            cur.run(
                "UPDATE batches SET state = ?, note = ?, updated_at = ? WHERE id = ?", (STOPPED, note, now, found[0])
            )
        return True

    def summaries(self, user: str | None = None) -> list[BatchSummary]:
        """Every batch (or one user's), with its rows per state and the credits its sent rows hold."""
        where, params = ("WHERE b.user_name = ?", (user,)) if user else ("", ())
        call = CALL_OF_ROW.replace("c.user_name = ?", "c.user_name = b.user_name")
        with self._cursor(write=False) as cur:
            found = cur.all(
                f"SELECT b.id, b.user_name, b.name, b.state, b.note, r.state, COUNT(*), COALESCE(SUM({CHARGED}), 0) "
                f"FROM batches b JOIN batch_rows r ON r.batch_id = b.id {call} {where} "
                "GROUP BY b.id, b.user_name, b.name, b.state, b.note, r.state ORDER BY b.id",
                params,
            )
        by_id: dict[int, BatchSummary] = {}
        for batch_id, owner, name, state, note, row_state, count, cost in found:
            summary = by_id.setdefault(
                int(batch_id), BatchSummary(owner, name, state, 0, dict.fromkeys(ROW_STATES, 0), 0, note)
            )
            summary.counts[row_state] = int(count)
            by_id[int(batch_id)] = BatchSummary(
                owner, name, state, summary.rows + int(count), summary.counts, summary.credits + int(cost), note
            )
        return list(by_id.values())

    # -- the worker's side -------------------------------------------------------------------------

    def beat(self, owner: str) -> None:
        with self._cursor() as cur:
            now = self._now(cur)
            if cur.one("SELECT 1 FROM batch_workers WHERE owner = ?", (owner,)):
                cur.run("UPDATE batch_workers SET seen_at = ? WHERE owner = ?", (now, owner))
            else:
                cur.run("INSERT INTO batch_workers (owner, seen_at) VALUES (?, ?)", (owner, now))

    def dead_claims(self, me: str, sending: frozenset[tuple[int, int]] = frozenset()) -> list[DeadClaim]:
        """Rows being sent or followed by a replica that is gone (its process, on this machine; its heartbeat,
        anywhere), and rows this replica claimed but is no longer sending (`sending`: the ones it is; a send whose
        end the ledger could not take), with the call each row's current key reserved, if any."""
        with self._cursor(write=False) as cur:
            now = self._now(cur)
            found = cur.all(
                "SELECT r.batch_id, r.row_index, r.claimed_by, r.state, b.user_name, r.idem_base, r.attempt, "
                "w.seen_at FROM batch_rows r JOIN batches b ON b.id = r.batch_id "
                "LEFT JOIN batch_workers w ON w.owner = r.claimed_by "
                "WHERE r.state IN ('sending', 'sent') AND r.claimed_by IS NOT NULL "
                "AND (r.claimed_by <> ? OR r.state = 'sending')",
                (me,),
            )
            dead = []
            for batch_id, index, owner, state, user, base, attempt, seen in found:
                if owner == me:
                    if (int(batch_id), int(index)) in sending:
                        continue
                elif seen is not None and now - float(seen) <= LEASE and _alive(owner):
                    continue
                call = None
                if state == SENDING:
                    call = cur.one(
                        "SELECT state, body FROM calls WHERE user_name = ? AND idem_key = ?",
                        (user, f"{base}-{attempt}"),
                    )
                dead.append(
                    DeadClaim(
                        int(batch_id),
                        int(index),
                        owner,
                        (call[0] if call else None) if state == SENDING else SENT,
                        bytes(call[1]) if call and call[1] is not None else None,
                    )
                )
        return dead

    def take_over(self, claim: DeadClaim, me: str, state: str, ids: list[str] | None, error: str | None) -> bool:
        """Give a dead replica's row its state (queued, sent, unknown, failed) and make it this replica's to follow;
        False when another replica took it first."""
        with self._cursor() as cur:
            now = self._now(cur)
            lock = " FOR UPDATE" if self._postgres else ""  # SQLite's write transaction already holds the file
            held = cur.one(
                f"SELECT state, claimed_by FROM batch_rows WHERE batch_id = ? AND row_index = ?{lock}",
                (claim.batch_id, claim.index),
            )
            if held is None or held[0] not in (SENDING, SENT) or held[1] != claim.owner:
                return False  # another replica took it first
            owner = me if state == SENT else None
            sets = "state = ?, claimed_by = ?, error = ?, last_change = ?"
            params: tuple[Any, ...] = (state, owner, error, now)
            if ids is not None:
                sets += ", ids = ?"
                params += (json.dumps(ids),)
            if state == QUEUED:
                sets += ", cost = 0"
            cur.run(
                f"UPDATE batch_rows SET {sets} WHERE batch_id = ? AND row_index = ?",
                (*params, claim.batch_id, claim.index),
            )
            if state == QUEUED:
                self._give_back(cur, claim.batch_id, claim.index)
            return True

    def claim(self, me: str, limit: int) -> list[Claimed]:
        """Up to `limit` queued rows for this replica to send, round-robin over the running batches (the one
        claimed from longest ago first; each user's share first), each batch within its concurrency (rows sent and
        not finished count) and what is left of its budget (a row over it is skipped); a revoked user's batches are
        stopped."""
        if limit <= 0:
            return []
        claimed: list[Claimed] = []
        with self._cursor() as cur:
            now = self._now(cur)
            batches = cur.all(
                "SELECT b.id, b.user_name, b.name, b.concurrency, b.budget_left, u.revoked FROM batches b "
                "LEFT JOIN users u ON u.name = b.user_name WHERE b.state = 'running' "
                "AND (b.paused_until IS NULL OR b.paused_until <= ?) "
                "AND EXISTS (SELECT 1 FROM batch_rows r WHERE r.batch_id = b.id AND r.state = 'queued') "
                "ORDER BY COALESCE(b.last_claim_at, 0), b.id" + self._skip_locked(),
                (now,),
            )
            # each user with queued rows gets a share of this claim first (one user's many batches never take every
            # send of a round from a colleague's one), then what is left goes to whoever can use it
            users = list(dict.fromkeys(str(b[1]) for b in batches))
            share = -(-limit // max(1, len(users)))
            taken: dict[str, int] = {}
            stopped: set[int] = set()
            for cap in (share, limit):
                for batch_id, user, name, concurrency, _, revoked in batches:
                    if len(claimed) >= limit:
                        break
                    if int(batch_id) in stopped:
                        continue
                    if revoked is None or int(revoked):
                        self._stop_locked(cur, int(batch_id), "stopped: its user's token was revoked", now)
                        stopped.add(int(batch_id))
                        continue
                    mine = self._claim_batch(cur, me, now, int(batch_id), str(user), str(name), int(concurrency),
                                             min(limit - len(claimed), cap - taken.get(str(user), 0)))  # fmt: skip
                    taken[str(user)] = taken.get(str(user), 0) + len(mine)
                    claimed += mine
        return claimed

    def _claim_batch(
        self, cur: Any, me: str, now: float, batch_id: int, user: str, name: str, concurrency: int, most: int
    ) -> list[Claimed]:
        """Up to `most` queued rows of one batch (locked by `claim`), within its concurrency and budget left."""
        busy = cur.one(
            "SELECT COUNT(*) FROM batch_rows WHERE batch_id = ? AND state IN ('sending', 'sent')", (batch_id,)
        )[0]
        free = min(concurrency - int(busy), most)
        if free <= 0:
            return []
        rows = cur.all(
            "SELECT row_index, request, v2, estimate, idem_base, attempt FROM batch_rows "
            "WHERE batch_id = ? AND state = 'queued' ORDER BY row_index LIMIT ?",
            (batch_id, free),
        )
        budget_left = cur.one("SELECT budget_left FROM batches WHERE id = ?", (batch_id,))[0]
        left = None if budget_left is None else int(budget_left)
        claimed = []
        for index, request, v2, estimate, base, attempt in rows:
            if left is not None and int(estimate) > left:
                cur.run(
                    "UPDATE batch_rows SET state = ?, error = ? WHERE batch_id = ? AND row_index = ?",
                    (SKIPPED, f"not started: the batch's budget ({left} credits left) is reached", batch_id, index),
                )
                continue
            if left is not None:
                left -= int(estimate)
            cur.run(
                "UPDATE batch_rows SET state = ?, claimed_by = ?, cost = ?, last_change = ? "
                "WHERE batch_id = ? AND row_index = ?",
                (SENDING, me, int(estimate), now, batch_id, index),
            )
            claimed.append(
                Claimed(batch_id, user, name, int(index), json.loads(request), bool(v2), int(estimate),
                        f"{base}-{attempt}")
            )  # fmt: skip
        cur.run("UPDATE batches SET last_claim_at = ?, budget_left = ? WHERE id = ?", (now, left, batch_id))
        return claimed

    def _stop_locked(self, cur: Any, batch_id: int, note: str, now: float) -> None:
        cur.run(
            "UPDATE batch_rows SET state = ?, error = ? WHERE batch_id = ? AND state = ?",
            (SKIPPED, f"not started: {note}", batch_id, QUEUED),
        )
        cur.run("UPDATE batches SET state = ?, note = ?, updated_at = ? WHERE id = ?", (STOPPED, note, now, batch_id))

    def _give_back(self, cur: Any, batch_id: int, index: int) -> None:
        """A row that was not sent returns its estimate to what is left of its batch's budget."""
        cur.run(
            "UPDATE batches SET budget_left = budget_left + (SELECT estimate FROM batch_rows WHERE batch_id = ? "
            "AND row_index = ?) WHERE id = ? AND budget_left IS NOT NULL",
            (batch_id, index, batch_id),
        )

    def sent(self, batch_id: int, index: int, ids: list[str]) -> None:
        with self._cursor() as cur:
            now = self._now(cur)
            cur.run(
                "UPDATE batch_rows SET state = ?, ids = ?, error = NULL, last_change = ? "
                "WHERE batch_id = ? AND row_index = ?",
                (SENT, json.dumps(ids), now, batch_id, index),
            )

    def ended(self, batch_id: int, index: int, state: str, error: str | None, charged: bool) -> None:
        """A row ends (complete, failed, unknown); one whose create charged nothing holds no credits."""
        with self._cursor() as cur:
            now = self._now(cur)
            cost = "" if charged else ", cost = 0"
            cur.run(
                f"UPDATE batch_rows SET state = ?, error = ?, last_change = ?{cost} "
                "WHERE batch_id = ? AND row_index = ?",
                (state, error, now, batch_id, index),
            )
            if not charged:
                self._give_back(cur, batch_id, index)

    def again(self, batch_id: int, index: int, pause: float, error: str | None = None) -> None:
        """A create refused with nothing charged that may succeed later (429, no connection): queued again under a
        new key (the old one's answer is recorded), its batch paused for `pause` seconds."""
        with self._cursor() as cur:
            now = self._now(cur)
            cur.run(
                "UPDATE batch_rows SET state = ?, attempt = attempt + 1, claimed_by = NULL, cost = 0, error = ? "
                "WHERE batch_id = ? AND row_index = ?",
                (QUEUED, error, batch_id, index),
            )
            self._give_back(cur, batch_id, index)
            cur.run("UPDATE batches SET paused_until = ? WHERE id = ?", (now + pause, batch_id))

    def out_of_credits(self, batch_id: int, index: int, why: str) -> None:
        """The user's (or the team's) budget ran out: this row and every row not yet sent are skipped; a re-run of
        the batch (once the budget is raised) queues them again."""
        with self._cursor() as cur:
            now = self._now(cur)
            cur.run(
                "UPDATE batch_rows SET state = ?, error = ?, cost = 0, claimed_by = NULL "
                "WHERE batch_id = ? AND (row_index = ? OR state = ?)",
                (SKIPPED, f"not started: {why}", batch_id, index, QUEUED),
            )
            cur.run("UPDATE batches SET note = ?, updated_at = ? WHERE id = ?", (why, now, batch_id))

    def following(self, me: str) -> list[Following]:
        with self._cursor(write=False) as cur:
            found = cur.all(
                "SELECT r.batch_id, b.user_name, r.row_index, r.v2, r.ids, r.last_change, b.stall_timeout "
                "FROM batch_rows r JOIN batches b ON b.id = r.batch_id WHERE r.state = 'sent' AND r.claimed_by = ?",
                (me,),
            )
        return [
            Following(int(b), u, int(i), bool(v2), json.loads(ids or "[]"), float(last or 0), float(stall))
            for b, u, i, v2, ids, last, stall in found
        ]

    def moved(self, batch_id: int, index: int) -> None:
        """A followed row's songs changed state: its stall clock starts again."""
        with self._cursor() as cur:
            now = self._now(cur)
            cur.run(
                "UPDATE batch_rows SET last_change = ? WHERE batch_id = ? AND row_index = ?", (now, batch_id, index)
            )

    def clock(self) -> float:
        with self._cursor(write=False) as cur:
            return self._now(cur)

    def close_finished(self) -> None:
        """Running batches with nothing queued, being sent or followed are done."""
        with self._cursor() as cur:
            now = self._now(cur)
            cur.run(
                "UPDATE batches SET state = ?, updated_at = ? WHERE state = ? AND NOT EXISTS (SELECT 1 FROM "
                "batch_rows r WHERE r.batch_id = batches.id AND r.state IN ('queued', 'sending', 'sent'))",
                (DONE, now, RUNNING),
            )

    def settled_unknowns(self) -> list[tuple[int, int, str, bytes | None]]:
        """Rows left unknown whose call has since been settled (`gateway reconcile`: its tasks found upstream, or
        none): (batch, row, the call's state, its answer)."""
        with self._cursor(write=False) as cur:
            found = cur.all(
                "SELECT r.batch_id, r.row_index, c.state, c.body FROM batch_rows r "
                "JOIN batches b ON b.id = r.batch_id JOIN calls c ON c.user_name = b.user_name "
                "AND c.idem_key = r.idem_base || '-' || CAST(r.attempt AS TEXT) "
                "WHERE r.state = 'unknown' AND c.state IN ('done', 'refused')"
            )
        return [(int(b), int(i), str(state), bytes(body) if body is not None else None) for b, i, state, body in found]

    def unknown_settled(self, batch_id: int, index: int, me: str, ids: list[str] | None) -> None:
        """An unknown row whose call was settled: followed by this replica (`ids`: its songs), or queued again under
        a new key (None: the call made nothing); its batch runs again until the row ends."""
        with self._cursor() as cur:
            now = self._now(cur)
            if ids:
                cur.run(
                    "UPDATE batch_rows SET state = ?, ids = ?, claimed_by = ?, error = NULL, last_change = ? "
                    "WHERE batch_id = ? AND row_index = ? AND state = ?",
                    (SENT, json.dumps(ids), me, now, batch_id, index, UNKNOWN),
                )
            else:  # nothing was made: sent again, unless its batch was stopped meanwhile
                stopped = cur.one("SELECT 1 FROM batches WHERE id = ? AND state = ?", (batch_id, STOPPED))
                again, why = (SKIPPED, "not started: the batch was stopped") if stopped else (QUEUED, None)
                cur.run(
                    "UPDATE batch_rows SET state = ?, attempt = attempt + 1, claimed_by = NULL, cost = 0, error = ? "
                    "WHERE batch_id = ? AND row_index = ? AND state = ?",
                    (again, why, batch_id, index, UNKNOWN),
                )
                self._give_back(cur, batch_id, index)
            cur.run(
                "UPDATE batches SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                (RUNNING, now, batch_id, DONE),
            )

    def call(self, user: str, idem_key: str) -> tuple[str, int | None, bytes | None] | None:
        """The ledger's record of the call a row's key reserved: (state, status code, answer), or None."""
        with self._cursor(write=False) as cur:
            row = cur.one(
                "SELECT state, status_code, body FROM calls WHERE user_name = ? AND idem_key = ?", (user, idem_key)
            )
        if row is None:
            return None
        return row[0], row[1], bytes(row[2]) if row[2] is not None else None

    def has_work(self) -> bool:
        """Whether any replica has something to do: a running batch, or a row being sent or followed."""
        with self._cursor(write=False) as cur:
            if cur.one("SELECT 1 FROM batches WHERE state = 'running' LIMIT 1") is not None:
                return True
            return cur.one("SELECT 1 FROM batch_rows WHERE state IN ('sending', 'sent') LIMIT 1") is not None
