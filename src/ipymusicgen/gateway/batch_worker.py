"""The gateway's batch worker: on each replica's event loop, it sends the rows of the batches in the ledger and
follows their songs, so a batch runs whether or not its notebook is still there.

Each round: a heartbeat, the rows of a replica that stopped beating taken over (`BatchStore.dead_claims`), up to
`sends` rows claimed and sent at once through the gateway's own paid path (`Gateway.paid`: the user's budget
reserved per row, the row's idempotency key sent upstream at most once, the upstream's answer recorded or kept
through a ledger outage), and the songs of the rows it sent polled through the gateway's own reads (the caller's
ownership rules). A row ends as the ledger says its call ended: charged (its songs followed), refused (nothing
charged: queued again under a new key when it may pass later, else failed), or in doubt (unknown, never resent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from typing import Any

from ..config import env_float
from ..engines.musicful import created_ids  # the one rule for the ids a create's answer named
from ..models.schema import TaskRecord, V2Song, build_generate_request, build_v2_request
from ..models.tasks import TaskState
from .batch_store import (
    COMPLETE,
    FAILED,
    QUEUED,
    SENT,
    UNKNOWN,
    BatchStore,
    Claimed,
    DeadClaim,
    Following,
)

log = logging.getLogger(__name__)
SENDS = 8
"""Creates one replica sends at once for all batches (each batch also keeps to its own concurrency)."""
ROUND_S = 0.2
"""Seconds between rounds while there is work; a new batch or a row's end wakes the worker at once."""
IDLE_S = 1.0
"""Seconds between rounds with nothing to do (another replica's new batch is found within this)."""
FOLLOW_S = 2.0
"""Seconds between two polls of the songs of the rows this replica sent (`MUSICGEN_GATEWAY_FOLLOW_S` sets it, from
0.05: tests and a gateway in front of a fast engine)."""
ENV_FOLLOW = "MUSICGEN_GATEWAY_FOLLOW_S"
BEAT_S = 5.0
"""Seconds between heartbeats (a replica silent for `batch_store.LEASE` is taken for dead)."""
MAX_ATTEMPTS = 8
"""Creates of one row refused with nothing charged (429, no connection) before it ends as failed, not sent."""
CHUNK = 50
NO_CREDITS = "Insufficient credits"
MAYBE_CHARGED = "its create may have been charged (no answer was recorded); it is never sent again"


def _envelope(body: bytes) -> tuple[int | None, str, Any]:
    """(status, message, data) of a service envelope; (None, "", None) for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        return None, "", None
    if not isinstance(data, dict):
        return None, "", data
    status = data.get("status")
    return (status if isinstance(status, int) else None), str(data.get("message") or ""), data.get("data")


def _records(body: bytes, v2: bool) -> list[TaskRecord | V2Song]:
    _, _, data = _envelope(body)
    try:
        whole = json.loads(body)
    except ValueError:
        return []
    items = data if isinstance(data, list) else whole if isinstance(whole, list) else [data]
    found: list[TaskRecord | V2Song] = []
    for item in items:
        if isinstance(item, dict):
            with contextlib.suppress(Exception):
                found.append(V2Song.model_validate(item) if v2 else TaskRecord.model_validate(item))
    return found


def _song_id(record: TaskRecord | V2Song, v2: bool) -> str:
    """The id a row holds for this record: a v1 task's id, a v2 song's id."""
    if v2:
        return str(getattr(record, "song_id", None) or getattr(record, "id", "") or "")
    return str(getattr(record, "id", "") or "")


class BatchWorker:
    """One replica's worker (`start` on its serving loop; `create_app` starts it with the first request)."""

    def __init__(self, gateway: Any, *, sends: int = SENDS) -> None:
        self.gateway = gateway
        self.store = BatchStore(gateway.ledger)
        self.me = json.dumps({**json.loads(gateway.ledger.owner), "worker": secrets.token_hex(6)})
        """This replica's name on the rows it claims: its process (for a pid check on this machine) and a token
        of its own (two gateways in one process are two replicas)."""
        self.sends = sends
        self.follow_s = max(0.05, env_float(ENV_FOLLOW) or FOLLOW_S)
        self._sending: set[asyncio.Task[None]] = set()
        self._rows: set[tuple[int, int]] = set()
        """(batch, row) this replica is sending now: a claim of its own outside it was lost (see `dead_claims`)."""
        self._seen: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._last_follow = 0.0
        self._last_beat = -BEAT_S
        self._last_settled = -BEAT_S

    def start(self) -> None:
        """Run on the running loop (once; again if it ended)."""
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        failing = False
        while True:
            try:
                busy = await self.round()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a ledger outage: the next round tries again (said once per outage)
                (log.debug if failing else log.warning)("the batch worker's round failed: %s", type(exc).__name__)
                failing, busy = True, False
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), ROUND_S if busy else IDLE_S)
            self._wake.clear()

    async def round(self) -> bool:
        """One round; whether there is work going on."""
        blocking = self.gateway.blocking
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_settled >= BEAT_S:
            self._last_settled = loop.time()
            for batch_id, index, state, body in await blocking(self.store.settled_unknowns):
                ids = created_ids(body) if state == "done" else None
                if state == "done" and not ids:
                    continue  # charged, but its songs are not named: it stays unknown
                await blocking(self.store.unknown_settled, batch_id, index, self.me, ids)
        if not self._sending and not await blocking(self.store.has_work):
            return False  # no batch anywhere: reads, no write (an idle gateway leaves the ledger's lock alone)
        if loop.time() - self._last_beat >= BEAT_S:
            await blocking(self.store.beat, self.me)
            self._last_beat = loop.time()
            for claim in await blocking(self.store.dead_claims, self.me, frozenset(self._rows)):
                await self._take_over(claim)
        free = self.sends - len(self._sending)
        claimed = await blocking(self.store.claim, self.me, free) if free > 0 else []
        for row in claimed:
            self._rows.add((row.batch_id, row.index))
            task = loop.create_task(self._send(row))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        following = False
        if loop.time() - self._last_follow >= self.follow_s:
            self._last_follow = loop.time()
            following = await self._follow()
            await blocking(self.store.close_finished)
        return bool(claimed or self._sending or following)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self.wake()

    # -- sending ---------------------------------------------------------------------------------------

    async def _send(self, row: Claimed) -> None:
        try:
            await self._send_row(row)
        except Exception as exc:  # the ledger failed while recording: the next heartbeat round settles the row
            log.warning("batch row %s of batch %s: %s", row.index + 1, row.batch_id, type(exc).__name__)
        finally:
            self._rows.discard((row.batch_id, row.index))

    async def _send_row(self, row: Claimed) -> None:
        blocking, store = self.gateway.blocking, self.store
        try:
            build = build_v2_request if row.v2 else build_generate_request
            model = build(row.request, allow_unknown_models=True)
        except Exception as exc:
            await blocking(store.ended, row.batch_id, row.index, FAILED, f"not sent: {exc}", False)
            return
        path = "/v2/submit" if row.v2 else "/v1/music/generate"
        answer = await self.gateway.paid(row.user, path, row.idem_key, model.to_payload(), None, model)
        ids = created_ids(answer.body) if answer.status_code == 200 else []
        if ids:
            await blocking(store.sent, row.batch_id, row.index, ids)
            return
        call = await blocking(self._call, row.user, row.idem_key)
        _status, message, _ = _envelope(bytes(answer.body))
        if call is None:  # nothing was reserved, so nothing was sent
            if message.startswith(NO_CREDITS):
                await blocking(store.out_of_credits, row.batch_id, row.index, message)
            elif answer.status_code == 503:  # the ledger could not reserve: the next round tries again
                await blocking(store.again, row.batch_id, row.index, 5.0, "not sent yet: the ledger was down")
            else:
                error = f"not sent: {message or _detail(answer.body) or answer.status_code}"
                await blocking(store.ended, row.batch_id, row.index, FAILED, error, False)
            return
        state, status_code, body = call
        if state == "done":
            found = created_ids(body)
            if found:
                await blocking(store.sent, row.batch_id, row.index, found)
            else:
                await blocking(store.ended, row.batch_id, row.index, UNKNOWN, "charged; its answer named no songs",
                               True)  # fmt: skip
        elif state == "refused":
            said = _envelope(body or b"")
            retry = status_code in (429, 502) or said[0] == 429
            attempt = int(row.idem_key.rsplit("-", 1)[-1]) + 1
            if retry and attempt < MAX_ATTEMPTS:
                await blocking(store.again, row.batch_id, row.index, min(60.0, 2.0**attempt), None)
            else:
                why = said[1] or _detail(body) or f"HTTP {status_code}"
                await blocking(store.ended, row.batch_id, row.index, FAILED, f"refused: {why}", False)
        else:
            await blocking(store.ended, row.batch_id, row.index, UNKNOWN, MAYBE_CHARGED, True)

    def _call(self, user: str, idem_key: str) -> tuple[str, int | None, bytes | None] | None:
        return self.store.call(user, idem_key)

    async def _take_over(self, claim: DeadClaim) -> None:
        """A dead replica's row: never reserved -> queued; charged -> followed here; refused -> queued (its key's
        answer is recorded, so the next send moves on); still pending or unknown -> unknown, never resent."""
        store = self.store
        if claim.call_state == SENT:
            await self.gateway.blocking(store.take_over, claim, self.me, SENT, None, None)
        elif claim.call_state is None or claim.call_state == "refused":
            await self.gateway.blocking(store.take_over, claim, self.me, QUEUED, None, None)
        elif claim.call_state == "done" and created_ids(claim.call_body):
            await self.gateway.blocking(store.take_over, claim, self.me, SENT, created_ids(claim.call_body), None)
        else:
            why = "its create may have been charged by a gateway replica that stopped before the answer; never resent"
            await self.gateway.blocking(store.take_over, claim, self.me, UNKNOWN, None, why)

    # -- following -------------------------------------------------------------------------------------

    async def _follow(self) -> bool:
        rows = await self.gateway.blocking(self.store.following, self.me)
        if not rows:
            return False
        states: dict[str, tuple[TaskState, str | None, bool]] = {}
        by_user: dict[tuple[str, bool], list[str]] = {}
        for row in rows:
            by_user.setdefault((row.user, row.v2), []).extend(row.ids)
        for (user, v2), ids in by_user.items():
            for record in await self._read(user, v2, ids):
                queued = (record.model_extra or {}).get("state") == "queued"  # in the gateway's fair queue
                states[_song_id(record, v2)] = (record.state, record.fail_reason, queued)
        now = await self.gateway.blocking(self.store.clock)
        for row in rows:
            await self._judge(row, states, now)
        return True

    async def _read(self, user: str, v2: bool, ids: list[str]) -> list[TaskRecord | V2Song]:
        found: list[TaskRecord | V2Song] = []
        try:
            if v2:
                for song_id in ids:
                    found += _records((await self.gateway.query_v2(user, song_id)).body, True)
            else:
                for at in range(0, len(ids), CHUNK):
                    found += _records((await self.gateway.tasks(user, ",".join(ids[at : at + CHUNK]))).body, False)
        except Exception as exc:  # a failed read: the next follow asks again (the stall clock runs on)
            log.warning("could not read a batch's songs: %s", type(exc).__name__)
        return found

    async def _judge(self, row: Following, states: dict[str, tuple[TaskState, str | None, bool]], now: float) -> None:
        """A row whose songs all finished ends; one whose songs changed state (or left the fair queue) starts its
        stall clock again; one with no change for its stall timeout fails (a song waiting in line never does)."""
        blocking, store = self.gateway.blocking, self.store
        seen = [states.get(i) for i in row.ids]
        moved = False
        for task_id, state in zip(row.ids, seen, strict=True):
            word = None if state is None else "queued" if state[2] else state[0].value
            if word is not None and self._seen.get(task_id) != word:
                self._seen[task_id] = word
                moved = True
        waiting = any(s is not None and s[2] for s in seen)
        if row.ids and all(s is not None and s[0].finished for s in seen):
            complete = any(s is not None and s[0] is TaskState.COMPLETE for s in seen)
            error = None if complete else "; ".join(str(s[1] or "failed") for s in seen if s is not None)
            await blocking(store.ended, row.batch_id, row.index, COMPLETE if complete else FAILED, error, True)
            for task_id in row.ids:
                self._seen.pop(task_id, None)
        elif moved:
            await blocking(store.moved, row.batch_id, row.index)
        elif not waiting and now - row.last_change > row.stall_timeout:
            error = f"timed out: no song changed state for {row.stall_timeout:g} s"
            await blocking(store.ended, row.batch_id, row.index, FAILED, error, True)


def _detail(body: bytes | None) -> str:
    try:
        data = json.loads(body or b"")
    except ValueError:
        return ""
    return str(data.get("detail") or "")[:200] if isinstance(data, dict) else ""


__all__ = ["SENT", "BatchWorker", "created_ids"]
