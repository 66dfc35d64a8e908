"""The fair queue's work in one replica (`gateway serve --max-in-flight N`): place creates, send rows as seats free.

Every paid create (v1 generate, v2 submit) takes a seat of the upstream key or waits in the ledger's queue
(`storage/ledger_queue.py`): placed, its price reserved, in one transaction. A create seated at once is sent on the
caller's request as without a queue; one that waits is answered at once with the gateway's ids (`queue_answers`).
Each replica runs one pump on its event loop (started with `gateway serve`, before any request): at every wake-up
(a row queued, a seat freed, or every `TICK` seconds of its clock) it marks rows that a dead replica claimed
unknown, frees the seats whose songs are finished (read upstream at most every `WATCH_EVERY` seconds per seat; a
call left unknown is looked for in the upstream's task list, `queue_unknown`) or held longer than `HOLD_MAX`, and
claims rows while seats are free, sending each once, as the request path sends (`Gateway._send_paid`: the same
records, measurements and backlog). A 429 puts the row back in line (not made, not charged) and shrinks the seats
(`queue_seats`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from ..models.tasks import v1_state, v2_state
from ..storage import ledger_queue as lq
from ..storage.ledger import DONE, PENDING, REFUSED, UNKNOWN
from .queue_answers import V2_SUBMIT, asked, queued_answer, record, renamed, upstream_id, with_records
from .queue_seats import Clock, SystemClock, hold_for, seats_now, shrunk_to
from .queue_unknown import UnknownSeats
from .upstream import Answer

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger(__name__)
QUEUED_PATHS = frozenset({"/v1/music/generate", V2_SUBMIT})
"""The paid creates that start generations (each holds one of the key's seats while its songs are made)."""
ID_PREFIX = "gq-"
"""The gateway's own ids start so: a poll naming none of them touches no queue table."""
TICK = 2.0
WATCH_EVERY = 5.0
HOLD_MAX = 600.0
"""Seconds a call holds a seat at most (clients give up on a song after about ten minutes)."""
STOP_WAIT = 30.0
"""Seconds a stopping replica waits for the answers of the rows it is sending."""
DEAD_AFTER = 180.0
"""A claim older than this whose replica cannot be seen (another machine) is taken for a dead replica's."""


def new_id() -> str:
    return ID_PREFIX + secrets.token_hex(12)


def _is_429(answer: Answer) -> bool:
    if answer.status_code == 429:
        return True
    try:
        data = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") == 429


class FairQueue:
    """One replica's side of the queue over a `Gateway` (its ledger, upstream and send path)."""

    def __init__(self, gateway: Gateway, most: int, clock: Clock | None = None) -> None:
        self.gateway = gateway
        self.ledger = gateway.ledger
        self.most = most
        self.clock = clock or SystemClock()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._sending: set[asyncio.Task[Any]] = set()
        self._closed = False
        lq.ensure_seats(self.ledger, most)

    # -- the pump --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the pump on this event loop (once; again if it ever ended)."""
        if self._closed or (self._task is not None and not self._task.done()):
            return
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self.wake()

    async def stopped(self, bound: float = STOP_WAIT) -> None:
        """At the server's shutdown (SIGTERM): claim nothing more, and let the rows being sent get their answers
        recorded (within `bound` seconds); a send still going after that stays pending for another replica to mark
        unknown, as after a kill."""
        self.close()
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=bound)

    async def _run(self) -> None:
        while not self._closed:
            try:
                await self.tick()
            except Exception as exc:  # a ledger or upstream hiccup: the next wake-up tries again
                log.warning("the queue's pump failed this round: %s", type(exc).__name__)
            await self._nap()

    async def _nap(self) -> None:
        assert self._wake is not None
        woken = asyncio.ensure_future(self._wake.wait())
        slept = asyncio.ensure_future(self.clock.sleep(TICK))
        try:
            await asyncio.wait({woken, slept}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            slept.cancel()
            self._wake.clear()

    async def seats(self) -> int:
        return seats_now(self.most, await self.gateway.blocking(lq.limit, self.ledger), self.clock.time())

    async def tick(self) -> None:
        """One round: dead replicas' claims, finished seats, then claims while seats are free."""
        now = self.clock.time()
        if await self.gateway.blocking(lq.reap, self.ledger, now, DEAD_AFTER):
            log.warning("rows a stopped gateway claimed are unknown now (gateway reconcile settles them)")
        if await self.gateway.blocking(lq.cancel_revoked, self.ledger):
            log.warning("rows of a revoked user were cancelled while waiting (never sent; their price given back)")
        await self._watch(now)
        cap = await self.seats()
        while not self._closed:
            claimed = await self.gateway.blocking(lq.claim, self.ledger, cap, self.clock.time())
            if claimed is None:
                return
            task = asyncio.ensure_future(self._send_claimed(claimed))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_claimed(self, claimed: lq.Claimed) -> None:
        await self.send(claimed.user, claimed.call_id, claimed.endpoint, claimed.request, None, ())

    async def _watch(self, now: float) -> None:
        """Free the seats whose calls make nothing more: refused, finished songs, or held too long."""
        unknowns = UnknownSeats(self.gateway)  # the upstream's task list read at most once this round
        for seat in await self.gateway.blocking(lq.held, self.ledger):
            mine = seat.holder == self.ledger.owner or not _alive(seat.holder)
            if not mine:
                continue
            done = seat.state == REFUSED or now - seat.held_at > HOLD_MAX
            if seat.state == PENDING and not done:
                continue
            if not done and seat.state in (DONE, UNKNOWN):  # (a call still being sent is let be until HOLD_MAX)
                if seat.checked_at is not None and now - float(seat.checked_at) < WATCH_EVERY:
                    continue
                await self.gateway.blocking(lq.checked, self.ledger, seat.slot, now)
                if seat.state == UNKNOWN:  # asked upstream as reconcile asks (`queue_unknown`), not held 600 s
                    done = await unknowns.free(seat.call_id)
                else:
                    done = await self._finished(seat.endpoint, lq.created_ids(seat.body))
            if done:
                await self.gateway.blocking(lq.release, self.ledger, seat.call_id)

    async def _finished(self, endpoint: str, ids: list[str]) -> bool:
        """Whether every song a call made is finished (or failed), read upstream."""
        if not ids:
            return True
        if endpoint == V2_SUBMIT:
            for song_id in ids:
                answer = await self.gateway.upstream.aread_or_none("/v2/query", {"song_id": song_id})
                songs = _records(answer)
                if not songs or not all(v2_state(s.get("status"), s.get("audio")).finished for s in songs):
                    return False
            return True
        answer = await self.gateway.upstream.aread_or_none("/v1/music/tasks", {"ids": ",".join(ids)})
        records = {str(r.get("id")): r for r in _records(answer)}
        return all(
            i in records
            and v1_state(
                _int(records[i].get("status")), _int(records[i].get("fail_code")), records[i].get("fail_reason") or None
            ).finished
            for i in ids
        )

    # -- the request path ------------------------------------------------------------------------------

    async def place(
        self,
        user: str,
        idem_key: str | None,
        path: str,
        model: str | None,
        estimated: int,
        fingerprint: Any,
        sent: Any,
        swap: tuple[str, str] | None = None,
    ) -> lq.Placed:
        self.start()
        placed = await self.gateway.blocking(
            lq.enqueue,
            self.ledger,
            user,
            idem_key,
            path,
            model,
            estimated,
            fingerprint,
            sent,
            await self.seats(),
            self.clock.time(),
            new_id,
            2,
            swap,
        )
        if placed.shown:
            self.wake()
        return placed

    async def send(
        self, user: str, call_id: int, path: str, sent: bytes | None, swap: Any, ids: tuple[str, ...]
    ) -> Response:
        """Send a seated call once (`Gateway._send_paid`); a 429 puts it back in line and answers with its ids."""

        async def answered(answer: Answer) -> Response | None:
            if not _is_429(answer):
                return None
            now = self.clock.time()
            in_use = len(await self.gateway.blocking(lq.held, self.ledger))
            shrunk = await self.gateway.blocking(lq.limit, self.ledger)
            low = shrunk_to(self.most, shrunk, in_use, now)
            await self.gateway.blocking(
                lq.shrink, self.ledger, low, now, hold_for(answer.headers.get("retry-after"), now)
            )
            await self.gateway.blocking(lq.requeue, self.ledger, call_id)
            log.warning("the upstream answered 429: seats down to %d for a while; the call waits in line", low)
            looked = await self.gateway.blocking(lq.look_up, self.ledger, user, list(ids[:1]))
            position = looked[ids[0]].position if ids and ids[0] in looked else 1
            return queued_answer(path, ids, position)

        try:
            return await self.gateway._send_paid(user, call_id, path, None, sent, swap, answered)
        finally:
            await self.gateway.blocking(lq.after_send, self.ledger, call_id)
            self.wake()

    async def tasks(self, user: str, ids: list[str] | None) -> Response | None:
        """A v1 task query naming any of the caller's queue ids, or asking for all their tasks (`ids` None) while
        they have some (None: the usual path answers). Sent rows read under the ids the caller holds."""
        if ids is not None and not any(i.startswith(ID_PREFIX) for i in ids):
            return None
        self.start()
        mine = [i for i in ids if i.startswith(ID_PREFIX)] if ids is not None else None
        looked = await self.gateway.blocking(lq.look_up, self.ledger, user, mine)
        if not looked:
            return None
        if ids is None:
            return await self._every_task(user, looked)
        wanted, names, records = [], {}, []
        for task_id in ids:
            found = looked.get(task_id)
            theirs = upstream_id(found) if found is not None else None
            if found is None:
                wanted.append(task_id)
            elif theirs is not None:
                wanted.append(theirs)
                names.update({theirs: task_id, **asked(found)})
            else:
                records.append(record(found, v2=False))
        answer = await self.gateway.tasks(user, ",".join(wanted)) if wanted else None
        if answer is not None and names:
            answer = _rebodied(answer, renamed(bytes(answer.body), names))
        if not records and answer is not None:
            return answer
        return with_records(answer, records, ids, "id")

    async def _every_task(self, user: str, looked: dict[str, lq.Looked]) -> Response:
        """Every task of the caller's: the upstream's (those of sent rows under the queue ids), then the rows still
        waiting or refused."""
        v1 = {k: v for k, v in looked.items() if v.endpoint != V2_SUBMIT}
        names = {theirs: k for k, v in v1.items() if (theirs := upstream_id(v)) is not None}
        names.update({s: a for v in v1.values() if upstream_id(v) is not None for s, a in asked(v).items()})
        records = [record(v, v2=False) for k, v in v1.items() if upstream_id(v) is None]
        mine = await self.gateway.blocking(self.ledger.tasks_of, user)
        answer = await self.gateway._all_tasks(user, mine) if mine else None
        if answer is not None and names:
            answer = _rebodied(answer, renamed(bytes(answer.body), names))
        return with_records(answer, records, [], "id") if records or answer is None else answer

    async def query_v2(self, user: str, song_id: str) -> Response | None:
        """A v2 query of one of the caller's queue ids (None: not one)."""
        if not song_id.startswith(ID_PREFIX):
            return None
        self.start()
        found = (await self.gateway.blocking(lq.look_up, self.ledger, user, [song_id])).get(song_id)
        if found is None:
            return None
        theirs = upstream_id(found)
        if theirs is None:
            return with_records(None, [record(found, v2=True)], [song_id], "song_id")
        answer = await self.gateway.query_v2(user, theirs)
        return _rebodied(answer, renamed(bytes(answer.body), {theirs: song_id, **asked(found)}))


def serving(queue: FairQueue | None, worker: Any) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """The app's lifespan (`create_app`): the queue's pump and the batch `worker` start with the server, before any
    request (a replica never asked still sends what a killed one left waiting); at SIGTERM the rows the pump is
    sending are answered and recorded before it exits."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if queue is not None:
            queue.start()
        worker.start()
        yield
        if queue is not None:
            await queue.stopped()

    return lifespan


def _rebodied(answer: Response, body: bytes) -> Response:
    """`answer` with another body (its length counted again; its other headers kept)."""
    headers = {k: v for k, v in answer.headers.items() if k.lower() != "content-length"}
    return Response(body, answer.status_code, headers=headers)


def _alive(owner: str | None) -> bool:
    from ..storage.ledger import _alive as alive

    return owner is None or alive(owner)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _records(answer: Answer | None) -> list[dict[str, Any]]:
    if answer is None or answer.status_code != 200:
        return []
    try:
        data = json.loads(answer.body)
    except ValueError:
        return []
    records = data.get("data") if isinstance(data, dict) else data
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
