"""The gateway's HTTP face: the service's own paths, bodies and envelopes, v1 and v2 on one host.

Each request: Host checked (DNS rebinding), the user found from `x-api-key` (a token, hashed), the body
validated with the project's models, then a read is forwarded under the one retry policy, or a paid call
reserves its price and claims its idempotency key in one ledger transaction, is sent upstream once, and
settles, releases or stays unknown. The request path runs on the server's event loop with the upstream's
async face; only the ledger (a blocking driver) is called in a worker thread, and only when needed: a poll
of one's own tasks with a remembered token and owners touches no thread and no database (but once for a song id
not seen before, recorded as the caller's). A user sees only their own tasks: another user's id is sent upstream
as an id that does not exist, so the answer is exactly that of a missing id.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..client.responses import is_doubtful
from ..engines.musicful import created_ids as _created_ids  # the one rule, for every reader
from ..errors import FieldProblem, RequestValidationError
from ..models.costs import estimate_credits, model_of
from ..models.schema import build_generate_request, build_lyrics_request, build_v2_request
from ..storage.ledger import DONE, REFUSED, UNKNOWN, GatewayLedger
from ..storage.ledger_sqlite import SqliteLedger
from .admission import HostCheck, Limits, read_body, refusal
from .backlog import Backlog, Unwritten, default_spill_folder
from .cache import OwnerCache, RecentScans, TokenCache
from .credit_rate import no_rate_answer
from .files import FOREIGN_FILE, FileOwners
from .info import INFO_PATH, gateway_info
from .measurer import Measurer
from .queue_answers import queued_answer
from .queue_pump import QUEUED_PATHS, FairQueue, serving
from .reconcile import Report as Reconciled
from .reconcile import reconcile
from .tokens import same_hash, token_hash
from .upstream import Answer, MaybeSent, NotEncodable, NotSent, Upstream, encode_body

INVALID_KEY = "Invalid or missing API key"
GATEWAY_MARK = "ipymusicgen"
"""In the caller's key info: a notebook's batch is handed to this gateway whole (`batch/on_gateway.py`)."""
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_IDEMPOTENCY_KEY = 200
TASKS_PER_QUERY = 50
"""Task ids asked upstream in one query when a caller asks for all of theirs (a URL stays short)."""
MAY_HAVE_BEEN_CHARGED = (
    "A call with this Idempotency-Key was already sent and its outcome is not known yet: it may have been "
    "charged. It was not sent again; check the task list before trying a new call."
)
NOT_SENT = "The upstream service could not be reached; nothing was sent or charged."
TOO_DEEP = "the JSON body is nested too deeply"
LEDGER_DOWN = (
    "The gateway's ledger cannot be reached just now: this request was not sent, and nothing was charged for it. "
    "Try again in a moment."
)
KEY_REUSED = (
    "This Idempotency-Key was already used for another request (another endpoint or body). Nothing was sent "
    "or reserved; send a new request with a new key."
)
log = logging.getLogger(__name__)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
LEDGER_THREADS = 32
INLINE_READS = frozenset({"user_by_token_hash", "owned", "tasks_of", "owns_song", "owns_singer", "remaining"})
"""The ledger's reads that run on the event loop with SQLite (see `Gateway._inline`); everything else in threads."""
"""Worker threads for the ledger's blocking calls (each holds at most one of its connections at a time)."""


def envelope(data: Any, status: int = 200, message: str = "Success") -> dict[str, Any]:
    return {"status": status, "message": message, "data": data}


def _no_credits(user: str, whose: str, standing: tuple[int | None, int] | None, needed: int) -> JSONResponse:
    """The service's own "no credits left" answer (an error inside an HTTP 200), naming whose budget ran out, its
    budget and spent, and who can raise it: the gateway's admin (a user cannot top up the team's key)."""
    team = whose == "team budget"
    said = f"Insufficient credits: no credits left in {'the team budget' if team else whose}"
    if standing is not None:
        budget, spent = standing
        said += f" (budget {'none' if budget is None else budget}, spent {spent}; this call needs about {needed})"
    command = "gateway team budget N" if team else f"gateway user budget {user} N"
    if "dollar budget" in whose:  # a service call paid in dollars (ledger_units.pays_in_dollars)
        command = "gateway team budget-usd N" if whose.startswith("the team") else f"gateway user budget-usd {user} N"
    return JSONResponse(envelope(None, 400, f"{said}. Only the gateway's admin can raise it ({command})."))


def _validation_answer(exc: RequestValidationError) -> JSONResponse:
    detail = [{"loc": ["body", *p.field.split(".")], "msg": p.message, "type": "value_error"} for p in exc.problems]
    return JSONResponse({"detail": detail}, status_code=422)


def _fingerprint(path: str, payload: Any, request: Any) -> str:
    """What makes two paid requests the same one: the endpoint and the validated body (or, for the song
    extras, the song asked for), whatever the order of their keys."""
    what = [path, payload, request if isinstance(request, dict) else None]
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _host_of(header: str) -> str:
    host = header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _missing_id() -> str:
    return "missing-" + secrets.token_hex(8)


def _stand_in(user: str, song_id: str) -> str:
    """The id sent upstream in a body that names a song (or a singer) the caller does not own: one that does not
    exist, the same for the same caller and id on every replica (so a repeat of the paid call matches its first)."""
    return "missing-" + hashlib.sha256(f"{user}\0{song_id}".encode()).hexdigest()[:16]


class Gateway:
    """The gateway's rules over a ledger and an upstream; `create_app` wraps it in Starlette."""

    def __init__(
        self,
        ledger: GatewayLedger,
        upstream: Upstream,
        *,
        host: str = "127.0.0.1",
        allow_hosts: Iterable[str] = (),
        max_in_flight: int | None = None,
        clock: Any = None,
    ):
        self.ledger = ledger
        self.upstream = upstream
        self.allowed_hosts = LOOPBACK_HOSTS | {host.lower()} | {h.lower() for h in allow_hosts}
        self.tokens = TokenCache()
        self.owners = OwnerCache()
        self.singers = OwnerCache()
        self.scans = RecentScans()
        self.files = FileOwners(upstream, self._own_task_bodies)
        self.measurer = Measurer(self.measure)
        self.backlog = Backlog(ledger, default_spill_folder(ledger))
        self.queue = FairQueue(self, max_in_flight, clock) if max_in_flight is not None else None
        """`--max-in-flight`: the fair queue over the upstream key's seats (queue_pump.py); None: no cap."""
        """Paid answers the ledger could not take when they came: kept (memory, spill file) until it can."""
        self.engines: Any = None
        """`engine_upstream.EngineUpstreams`: the synchronous engines served at their own paths (None: none)."""
        self._threads = ThreadPoolExecutor(LEDGER_THREADS, thread_name_prefix="gateway-ledger")
        self._inline = isinstance(ledger, SqliteLedger)
        """SQLite's reads run on the event loop itself: each is a local transaction of about 0.1 ms that never
        waits (WAL: readers beside a writer), cheaper than the two thread switches a hand-off costs, which on a
        loaded machine wait for the scheduler. Its writes go to the threads: a write may wait out another
        process's write lock (`BEGIN IMMEDIATE`, up to the busy timeout), and on the event loop that wait would
        hold every request, polls that need no ledger too. PostgreSQL's calls go over the network, and may wait
        out a restart: all in threads."""

    def close(self) -> None:
        """Stop the measurer and the ledger's threads, then let go of the upstream clients and the ledger."""
        self.measurer.close()
        if self.queue is not None:
            self.queue.close()
        self.backlog.close()
        if self.engines is not None:
            self.engines.close()
        self._threads.shutdown(wait=True)
        self.upstream.close()
        self.ledger.close()

    async def blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)`, a ledger call: in place for SQLite, else in one of the ledger's worker threads (asyncio's
        own executor hand-off: measured 25-50 us against anyio's 40-100 us here), its result on the event loop."""
        if self._inline and getattr(call, "__name__", "") in INLINE_READS:
            return call(*args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(call, *args))

    def host_allowed(self, header: str | None) -> bool:
        return header is not None and _host_of(header) in self.allowed_hosts

    async def user_of(self, token: str | None) -> str | None:
        if self.queue is not None:
            self.queue.start()  # the queue's pump runs on the serving loop, from its first request
        if not token:
            return None
        wanted = token_hash(token)
        user = self.tokens.get(wanted)
        if user is not None:
            return user
        found = await self.blocking(self.ledger.user_by_token_hash, wanted)
        if found is None or not same_hash(found[1], wanted):
            return None
        self.tokens.put(wanted, found[0])
        return found[0]

    async def owned(self, user: str, ids: list[str]) -> list[str]:
        """The ids among `ids` that are the caller's, in their order; the ledger is asked about every id not yet
        seen as the caller's, so another user's id (seen here or not) takes the very path of a missing one."""
        unknown = self.owners.not_mine(user, ids)
        if unknown:
            self.owners.learn(user, await self.blocking(self.ledger.owned, user, unknown))
        return self.owners.mine(user, ids)

    async def owns_song(self, user: str, song_id: str) -> bool:
        """Whether the song an extra asks for is the caller's: one of their ids, or the `song_id` of one of their
        tasks (a v1 task's song has an id of its own, which the client sends): known from their task answers that
        passed through a gateway (the ledger's songs), else found in their own tasks' records upstream, read at most
        once per `SCAN_TTL` for all of a caller's look-ups (so made-up ids do not multiply upstream reads)."""
        if await self.owned(user, [song_id]):
            return True
        if await self.blocking(self.ledger.owns_song, user, song_id):
            self.owners.learn(user, [song_id])
            return True
        return song_id in await self.scans.get(user, lambda: self._songs_upstream(user))

    async def _songs_upstream(self, user: str) -> set[str]:
        """Every song id in the caller's own tasks' records upstream (remembered as theirs)."""
        mine = await self.blocking(self.ledger.tasks_of, user)
        found: set[str] = set()
        for at in range(0, len(mine), TASKS_PER_QUERY):
            found |= _song_ids(
                await self.upstream.aread("/v1/music/tasks", {"ids": ",".join(mine[at : at + TASKS_PER_QUERY])})
            )
        await self.learn_songs(user, found)
        return found

    async def learn_songs(self, user: str, song_ids: Iterable[str]) -> None:
        """Song ids seen in the caller's own task answers are theirs: recorded once (in the ledger, for every
        gateway) and remembered here. A ledger that cannot be written now does not fail the answer carrying them:
        they are remembered here, and another gateway finds them in the caller's tasks upstream."""
        new = [s for s in song_ids if not self.owners.mine(user, [s])]
        if new:  # written in a ledger thread, not waited for: the answer carrying them needs no ledger
            self.owners.learn(user, new)
            self._threads.submit(self._record_songs, user, new)

    def _record_songs(self, user: str, song_ids: list[str]) -> None:
        try:
            self.ledger.add_songs(user, song_ids)
        except Exception:
            log.warning("could not record %d song id(s) in the ledger", len(song_ids))

    async def _own_task_bodies(self, user: str) -> list[bytes]:
        """The caller's own task answers upstream, in chunks (for the file URLs their songs name)."""
        mine = await self.blocking(self.ledger.tasks_of, user)
        chunks = [",".join(mine[at : at + TASKS_PER_QUERY]) for at in range(0, len(mine), TASKS_PER_QUERY)]
        return [(await self.upstream.aread("/v1/music/tasks", {"ids": ids})).body for ids in chunks]

    async def owns_singer(self, user: str, singer_id: str) -> bool:
        """Whether a singer voice named in a body is the caller's: made by one of their vibe calls (recorded from its
        answer as it passed through a gateway), and remembered."""
        if self.singers.mine(user, [singer_id]):
            return True
        if await self.blocking(self.ledger.owns_singer, user, singer_id):
            self.singers.learn(user, [singer_id])
            return True
        return False

    # -- reads ----------------------------------------------------------------------------------------

    async def tasks(self, user: str, ids_text: str | None) -> Response:
        """The tasks asked for that are the caller's; no `ids` at all: every task of the caller's (as the
        service answers every task of the key), asked in chunks so no query grows too long."""
        if self.queue is not None:  # the caller's queue ids: waiting, or under the upstream's ids once sent
            asked = [i for i in ids_text.split(",") if i] if ids_text is not None else None
            queued = await self.queue.tasks(user, asked)
            if queued is not None:
                return queued
        if ids_text is None:
            return await self._all_tasks(user, await self.blocking(self.ledger.tasks_of, user))
        ids = [i for i in ids_text.split(",") if i]
        mine = await self.owned(user, ids)
        if mine:
            answer = await self.upstream.aread("/v1/music/tasks", {"ids": ",".join(mine)})
            await self.learn_songs(user, _song_ids(answer))
            return _relay(answer)
        stand_in = _missing_id()
        return _relay(await self.upstream.aread("/v1/music/tasks", {"ids": stand_in}), (stand_in, ",".join(ids)))

    async def _all_tasks(self, user: str, mine: list[str]) -> Response:
        if not mine:  # answered as the service answers a key with no tasks: ask for an id that does not exist
            return _relay(await self.upstream.aread("/v1/music/tasks", {"ids": _missing_id()}))
        answers = [
            await self.upstream.aread("/v1/music/tasks", {"ids": ",".join(mine[at : at + TASKS_PER_QUERY])})
            for at in range(0, len(mine), TASKS_PER_QUERY)
        ]
        for answer in answers:
            await self.learn_songs(user, _song_ids(answer))
        if len(answers) == 1:
            return _relay(answers[0])
        return _merged(answers)

    async def query_v2(self, user: str, song_id: str | None) -> Response:
        queued = await self.queue.query_v2(user, song_id) if self.queue is not None and song_id else None
        if queued is not None:
            return queued
        if song_id is None:
            return JSONResponse(
                {"detail": [{"loc": ["query", "song_id"], "msg": "Field required", "type": "missing"}]}, 422
            )
        if await self.owned(user, [song_id]):
            return _relay(await self.upstream.aread("/v2/query", {"song_id": song_id}))
        stand_in = _missing_id()
        return _relay(await self.upstream.aread("/v2/query", {"song_id": stand_in}), (stand_in, song_id))

    async def key_info(self, user: str) -> Response:
        """The caller's remaining credits, never the upstream account's key, e-mail, member id or key name."""
        left = await self.blocking(self.ledger.remaining, user)
        started = await self.blocking(self.ledger.clock)
        counts = _counts_in(await self.upstream.aread_or_none("/v1/get_api_key_info"))
        if counts is not None:  # a reading feeds the meter, as `upstream_counts` does
            await self.blocking(self.ledger.meter, counts, None, started)
        known = [n for n in (left, counts) if n is not None]
        record = {
            "x_api_key": None,
            "key_status": 1,
            "key_music_counts": min(known) if known else None,
            "email": None,
            "member_id": None,
            "key_name": user,
            "gateway": GATEWAY_MARK,
        }
        return JSONResponse(envelope(record))

    def upstream_counts(self) -> int | None:
        """Credits left on the upstream key (None when it cannot be read); each reading also feeds the meter."""
        started = self.ledger.clock()
        counts = self._read_counts()
        if counts is not None:
            self.ledger.meter(counts, None, started)
        return counts

    def recover(self) -> Reconciled:
        """`gateway reconcile` as a gateway starts: what an earlier one left (spilled answers, dangling calls)."""
        return reconcile(self.ledger, self.upstream, self.backlog)

    def measure(self, call_id: int) -> None:
        """After a paid call is answered: read the upstream's credits and settle the call to what it cost, when
        nothing else could have moved them (the measurer runs it off the caller's path, once things are quiet)."""
        try:
            started = self.ledger.clock()  # the reading's window opens before it is asked, on the ledger's clock
            counts = self._read_counts()
            if counts is not None:
                self.ledger.meter(counts, call_id, started)
        except Exception:  # a missed measurement leaves the estimate standing; the caller has its answer
            log.warning("could not measure the cost of call %s", call_id)

    def _read_counts(self) -> int | None:
        try:
            return _counts_in(self.upstream.read("/v1/get_api_key_info"))
        except httpx.HTTPError:
            return None

    # -- paid calls -----------------------------------------------------------------------------------

    async def paid(
        self,
        user: str,
        path: str,
        idem_key: str | None,
        payload: Any,
        params: dict[str, str] | None,
        request: Any,
        swap: tuple[str, str] | None = None,
    ) -> Response:
        """Reserve, send once, record: each step says what is true of the money when it cannot go on. A body that
        cannot be encoded is refused before anything is held; a ledger that cannot reserve means nothing was sent;
        a call that never reached the upstream is released (and its repeat says so); an answer the ledger cannot
        take now is kept until it can, and the caller gets their ids."""
        estimated = estimate_credits(request)
        try:
            sent = encode_body(payload)
        except NotEncodable as exc:
            return _validation_answer(RequestValidationError([_problem(exc.field, str(exc).split(": ", 1)[1])]))
        fingerprint = _fingerprint(path, payload, request) if idem_key else None
        try:
            placed = None
            if self.queue is not None and path in QUEUED_PATHS:  # a seat at once, or a place in line
                placed = await self.queue.place(
                    user, idem_key, path, model_of(request), estimated, fingerprint, sent, swap
                )
            reservation = (
                placed.reservation
                if placed is not None
                else await self.blocking(
                    self.ledger.reserve, user, idem_key, path, model_of(request), estimated, fingerprint, sent
                )
            )
        except Exception:
            log.warning("the ledger could not reserve a paid call: nothing was sent")
            return JSONResponse(envelope(None, 503, LEDGER_DOWN), status_code=503)
        if reservation.kind == "conflict":
            return JSONResponse(envelope(None, 409, KEY_REUSED), status_code=409)
        if reservation.kind == "no_rate":  # a dollar budget pays, and no credit rate is set: nothing reserved
            return no_rate_answer(user)
        if reservation.kind == "over":
            whose = reservation.over or "team budget"
            standing = (await self.blocking(self.ledger.standing, user)).get(whose)
            return _no_credits(user, whose, standing, estimated)
        if placed is not None and placed.shown:  # waiting, or a repeat of a call answered with its queue ids
            return queued_answer(path, placed.ids, placed.position, placed.waiting)
        if reservation.kind == "repeat":
            kept = self.backlog.kept(reservation.call_id) if reservation.call_id is not None else None
            if kept is not None and kept.status_code is not None:  # answered; the ledger has not taken it yet
                return Response(kept.body or b"", kept.status_code, media_type="application/json")
            if reservation.state in (DONE, REFUSED) and reservation.status_code is not None:
                return Response(reservation.body or b"", reservation.status_code, media_type="application/json")
            return JSONResponse(envelope(None, 503, MAY_HAVE_BEEN_CHARGED), status_code=503)
        call_id = reservation.call_id
        assert call_id is not None
        # Shielded: a caller hanging up does not stop the send half-way, nor the recording of its outcome.
        if placed is not None:
            return await asyncio.shield(self.queue.send(user, call_id, path, sent, swap, placed.ids))  # type: ignore[union-attr]
        return await asyncio.shield(self._send_paid(user, call_id, path, params, sent, swap))

    async def _send_paid(
        self,
        user: str,
        call_id: int,
        path: str,
        params: dict[str, str] | None,
        sent: bytes | None,
        swap: Any,
        answered: Callable[[Answer], Awaitable[Response | None]] | None = None,
    ) -> Response:
        """Send once and record the outcome; `answered` may take an answer over first (the queue's 429)."""
        try:
            answer = await self.upstream.apaid(path, params, sent)
        except NotSent:
            body = json.dumps(envelope(None, 502, NOT_SENT)).encode()
            await self._finish(user, Unwritten(call_id, REFUSED, 502, body))
            return Response(body, 502, media_type="application/json")
        except Exception as exc:  # MaybeSent, or anything else once the send began: the outcome is not known
            if not isinstance(exc, MaybeSent):
                log.warning("a paid send failed: %s", type(exc).__name__)
            await self._finish(user, Unwritten(call_id, UNKNOWN, None, None))
            return JSONResponse(envelope(None, 503, MAY_HAVE_BEEN_CHARGED), status_code=503)
        taken = await answered(answer) if answered is not None else None
        if taken is not None:
            return taken
        try:
            state = _outcome(answer)
            created = _created_ids(answer.body) if state == DONE else []
        except Exception:  # an answer that cannot be read (nested too deeply, say): sent, so maybe charged
            log.warning("a paid answer could not be read: its outcome is unknown")
            await self._finish(user, Unwritten(call_id, UNKNOWN, None, None))
            return JSONResponse(envelope(None, 503, MAY_HAVE_BEEN_CHARGED), status_code=503)
        recorded = await self._finish(user, Unwritten(call_id, state, answer.status_code, answer.body, created))
        if state == DONE and recorded:
            try:
                self.measurer.after(call_id)
            except Exception:  # a measurement missed leaves the estimate standing
                log.warning("could not start measuring call %s", call_id)
        return _relay(answer, swap)

    async def _finish(self, user: str, end: Unwritten) -> bool:
        """Record how a call ended; a ledger that cannot take it now gets it later (`Backlog`), and meanwhile
        this gateway knows its tasks are the caller's. Whether the ledger took it at once."""
        if end.task_ids:
            self.owners.learn(user, end.task_ids)
        try:
            await self.blocking(self.ledger.finish, end.call_id, end.state, end.status_code, end.body, end.task_ids)
        except Exception:
            log.warning("the ledger could not record call %s now: its answer is kept until it can", end.call_id)
            try:
                await asyncio.get_running_loop().run_in_executor(self._threads, self.backlog.keep, end)
            except Exception:
                log.error("could not keep call %s's end: the ledger will not know it", end.call_id)
            return False
        return True


def _counts_in(answer: Answer | None) -> int | None:
    """The upstream key's credits left, from its key-info answer (None: no answer, an error, or no count)."""
    try:
        data = json.loads(answer.body) if answer is not None and answer.status_code == 200 else None
    except ValueError:
        return None
    record = data.get("data", data) if isinstance(data, dict) else None
    counts = record.get("key_music_counts") if isinstance(record, dict) else None
    return counts if isinstance(counts, int) and not isinstance(counts, bool) else None


def _envelope_status(body: bytes) -> int | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, int) else None


def _outcome(answer: Answer) -> str:
    """done (charged), refused (definitely not: release), or unknown (maybe charged: keep the reservation)."""
    if is_doubtful(answer.status_code):
        return UNKNOWN
    if answer.status_code != 200:
        return REFUSED
    status = _envelope_status(answer.body)
    if status is None or status == 200:
        return DONE if status == 200 else UNKNOWN
    return UNKNOWN if is_doubtful(status) else REFUSED


def _song_ids(answer: Answer) -> set[str]:
    """The `song_id`s of the task records in a task answer (bare or enveloped); none for an error."""
    try:
        data = json.loads(answer.body) if answer.status_code == 200 else None
    except ValueError:
        return set()
    records = data.get("data") if isinstance(data, dict) else data
    if not isinstance(records, list):
        return set()
    return {str(r["song_id"]) for r in records if isinstance(r, dict) and r.get("song_id")}


def _merged(answers: list[Answer]) -> Response:
    """Several task answers as one: their records in order, in the shape the service used (bare or wrapped)."""
    records: list[Any] = []
    wrapped: dict[str, Any] | None = None
    for answer in answers:
        try:
            data = json.loads(answer.body) if answer.status_code == 200 else None
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            wrapped = data
            data = data["data"]
        if not isinstance(data, list):
            return _relay(answer)  # an error: the caller sees it as the service gave it
        records.extend(data)
    return JSONResponse({**wrapped, "data": records} if wrapped is not None else records)


def _relay(answer: Answer, swap: tuple[str, str] | None = None) -> Response:
    """The upstream's answer as it came; with `swap`, the stand-in id sent for another user's (or an unknown) id
    reads as the id asked for, so the answer is exactly the one a missing id gets."""
    body = answer.body
    if swap is not None:
        body = body.replace(swap[0].encode(), json.dumps(swap[1])[1:-1].encode())
    return Response(body, answer.status_code, headers=answer.headers)


# -- Starlette wiring ---------------------------------------------------------------------------------


def _refusal(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def create_app(gateway: Gateway, limits: Limits | None = None) -> Starlette:
    """Each request on the event loop, in the order the service answers: the Host check (before routing, and no
    route ever redirects), authentication, then the body (bounded by `limits`); the ledger in a worker thread only
    where it is asked."""
    limits = limits or Limits()

    def paid_route(path: str, build: Callable[[Any, Request, str], Awaitable[Any]]) -> Route:
        async def work(user: str, request: Request, raw: bytes) -> Response:
            idem_key = request.headers.get(IDEMPOTENCY_HEADER) or None
            if idem_key is not None and len(idem_key) > MAX_IDEMPOTENCY_KEY:
                return _refusal(400, f"Idempotency-Key: at most {MAX_IDEMPOTENCY_KEY} characters")
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                detail = [{"loc": ["body"], "msg": "JSON decode error", "type": "json_invalid"}]
                return JSONResponse({"detail": detail}, status_code=422)
            except RecursionError:  # nothing is reserved or sent yet: a 4xx that says so, never "may have been charged"
                return _validation_answer(RequestValidationError([_problem("body", TOO_DEEP)]))
            try:
                model, payload, params, swap = await build(body, request, user)
            except RequestValidationError as exc:
                return _validation_answer(exc)
            except RecursionError:
                return _validation_answer(RequestValidationError([_problem("body", TOO_DEEP)]))
            except Exception:  # the ledger's look-up of a song or singer failed: still nothing sent or reserved
                log.warning("a paid request could not be checked: nothing was sent")
                return JSONResponse(envelope(None, 503, LEDGER_DOWN), status_code=503)
            return await gateway.paid(user, path, idem_key, payload, params, model, swap)

        async def endpoint(request: Request) -> Response:
            user = await gateway.user_of(request.headers.get("x-api-key"))
            if user is None:  # before the body: a caller without a live token gets none of it read
                return refusal(401, INVALID_KEY)
            raw = await read_body(request, limits.max_body_bytes)
            return raw if isinstance(raw, Response) else await work(user, request, raw)

        return Route(path, endpoint, methods=["POST"])

    async def v1_body(body: Any, request: Request, user: str) -> Any:
        if not isinstance(body, dict):
            raise RequestValidationError([_problem("body", "a JSON object is needed")])
        model = build_generate_request(body, allow_unknown_models=True)
        return await continued(model, user)

    async def v2_body(body: Any, request: Request, user: str) -> Any:
        if not isinstance(body, dict):
            raise RequestValidationError([_problem("body", "a JSON object is needed")])
        model = build_v2_request(body, allow_unknown_models=True)
        return await continued(model, user)

    async def continued(model: Any, user: str) -> Any:
        """A body that continues a song (extend, concat, upload_extend, a v2 continuation) may name only one of
        the caller's own, as the extras, and a body that sings in a voice (`singer_id`, artist_consistency) only
        one the caller made: another user's (or an unknown) id goes upstream as one that does not exist, so the
        answer is exactly that of a missing song or singer. (No request names both.)"""
        payload = model.to_payload()
        if not isinstance(payload, dict):
            return model, payload, None, None
        audio = payload.get("audio_url")  # upload, upload_extend: a file the upstream fetches with the team's key
        if audio and not await gateway.files.allows(user, str(audio)):
            raise RequestValidationError([_problem("audio_url", FOREIGN_FILE)])
        for field, owns in (("continue_song_id", gateway.owns_song), ("singer_id", gateway.owns_singer)):
            named = payload.get(field)
            if named and not await owns(user, str(named)):
                stand_in = _stand_in(user, str(named))
                return model, {**payload, field: stand_in}, None, (stand_in, str(named))
        return model, payload, None, None

    async def lyrics_body(body: Any, request: Request, user: str) -> Any:
        prompt = body.get("prompt") if isinstance(body, dict) else None
        model = build_lyrics_request(prompt)  # type: ignore[arg-type]
        return model, model.to_payload(), None, None

    async def song_extra(body: Any, request: Request, user: str) -> Any:
        """The song extras: the song must be the caller's (another user's is sent as one that does not exist).
        Priced by the cost table's entry for the extra's kind (`wav`, `mp4`, `vibe`), as the client prices it."""
        song_id = request.query_params.get("song_id")
        if not song_id:
            raise RequestValidationError([_problem("song_id", "Field required")])
        priced = {"song_id": song_id, "model": request.url.path.rsplit("-", 1)[-1]}
        if await gateway.owns_song(user, song_id):
            return priced, None, {"song_id": song_id}, None
        stand_in = _missing_id()
        return priced, None, {"song_id": stand_in}, (stand_in, song_id)

    def read_route(path: str, handler: Callable[[str, Request], Awaitable[Response]]) -> Route:
        async def endpoint(request: Request) -> Response:
            user = await gateway.user_of(request.headers.get("x-api-key"))
            return _refusal(401, INVALID_KEY) if user is None else await handler(user, request)

        return Route(path, endpoint, methods=["GET"])

    routes = [
        paid_route("/v1/music/generate", v1_body),
        paid_route("/v2/submit", v2_body),
        paid_route("/v1/lyrics", lyrics_body),
        *(paid_route(f"/v1/music/generate-{kind}", song_extra) for kind in ("vibe", "wav", "mp4")),
        read_route("/v1/music/tasks", lambda user, r: gateway.tasks(user, r.query_params.get("ids"))),
        read_route("/v2/query", lambda user, r: gateway.query_v2(user, r.query_params.get("song_id"))),
        read_route("/v1/get_api_key_info", lambda user, r: gateway.key_info(user)),
        read_route(INFO_PATH, lambda user, r: gateway_info(gateway, limits)),
    ]
    from .batch_routes import batch_parts  # batches handed over whole: their routes and this replica's worker

    batch_routes, starts_worker = batch_parts(gateway, limits, INVALID_KEY)
    routes += batch_routes
    from .engine_routes import engine_routes  # ElevenLabs and Gemini at their own paths, when their keys are held

    routes += engine_routes(gateway, limits)
    app = Starlette(
        routes=routes,
        middleware=[Middleware(HostCheck, allowed=gateway.host_allowed), starts_worker],
        exception_handlers={Exception: _failed},
        lifespan=serving(gateway.queue, starts_worker.kwargs["worker"]),
    )
    app.router.redirect_slashes = False  # `/v1/music/generate/` is not found, never sent to another address
    return app


UNFINISHED = "The gateway could not finish this request (its ledger or the upstream service failed): ask again."


async def _failed(request: Request, exc: Exception) -> Response:
    """A ledger or upstream failure that no step caught: a clear 503. A paid call never gets here once it may
    have been sent (`Gateway._send_paid` answers for every send and records it), so a POST that fails here (its
    token looked up while the ledger is down, say) was not sent and is said so."""
    log.warning("request failed: %s", type(exc).__name__)
    return JSONResponse(envelope(None, 503, LEDGER_DOWN if request.method == "POST" else UNFINISHED), status_code=503)


def _problem(field: str, message: str) -> FieldProblem:
    return FieldProblem(field, message)
