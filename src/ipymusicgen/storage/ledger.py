"""The team gateway's ledger: users, budgets, paid calls and task owners, on SQLite or PostgreSQL.

One interface (`GatewayLedger`) and one set of statements; an engine only says how to connect, how to take the
one write lock a reservation needs (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: `SELECT ... FOR UPDATE` on the
team row) and how to create its tables. Every paid call reserves its estimate from the user's and the team's
budget in the same transaction that claims its idempotency key, so two gateways on one database can neither
overspend a budget nor send one key twice. What is charged is kept as running totals (`users.spent`, `team.spent`),
moved by every transaction that changes a call's charge, so a budget check costs the same whatever the ledger's
size. Each call's window (reserved to answered) and each reading of the upstream's credits are stamped on the
ledger's one clock, so the meter attributes a figure only to a call no other overlapped, on any replica. The
schema goes through numbered steps (`ledger_migrations`). `ledger_engines.open_ledger(url)` picks the engine.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from ..models.schema import SINGER_ID_NAMES
from .ledger_migrations import migrate
from .ledger_units import checked_rate_micros, dollars_left, move_usd, pays_in_dollars
from .owner import Owner

PENDING, DONE, REFUSED, UNKNOWN = "pending", "done", "refused", "unknown"
"""A call's states: sent (or being sent), answered, definitely refused (released), outcome unknown."""
QUEUED = "queued"
"""A call reserved and waiting for a seat (`gateway serve --max-in-flight`): charged, never sent yet."""
CHARGED = (PENDING, DONE, UNKNOWN, QUEUED)
"""States whose credits count against a budget: a reservation is kept until the call is known refused."""
GROUPS = MappingProxyType({"user": "user_name", "day": "day", "model": "model"})
VIBE = "/v1/music/generate-vibe"
"""The paid call whose answer names a singer voice (`singer_id`) that only its maker may sing with."""
IN_FLIGHT_WINDOW = 600.0
OWED_FOR = 60.0
"""Seconds a charge kept at its estimate may still show falling on the upstream's counter (billing that lands a
few seconds late): meanwhile a fall that big is not taken for the next call's cost."""
"""Seconds a pending or unknown call may still move the upstream's credits (a killed gateway's call stays pending
for ever; after this long its charge, if any, has landed, and measuring resumes)."""


@dataclass(frozen=True)
class OpenCall:
    """A call whose outcome the ledger does not know (`GatewayLedger.open_calls`)."""

    id: int
    user: str
    endpoint: str
    state: str
    estimated: int
    age: float
    dead: bool
    request: bytes | None


def _alive(owner: str | None) -> bool:
    """Whether the process that sent a call still runs (True when it cannot be told: another machine, no record)."""
    try:
        fields = json.loads(owner) if owner else None
        return Owner(str(fields["host"]), int(fields["pid"]), fields.get("started")).is_alive() if fields else True
    except (ValueError, TypeError, KeyError):
        return True


class LedgerError(RuntimeError):
    """A ledger command that cannot be carried out (an unknown user, a name taken)."""


@dataclass(frozen=True)
class UserRow:
    name: str
    budget: int | None
    revoked: bool
    spent: int


@dataclass(frozen=True)
class Reservation:
    """What `reserve` decided: `new` (call_id to send), `over` (whose budget), `repeat` (the first call),
    `conflict` (the key was used for another request: nothing reserved) or `no_rate` (a dollar budget pays, and
    this gateway has no credit rate: nothing reserved)."""

    kind: str
    call_id: int | None = None
    over: str | None = None
    state: str | None = None
    status_code: int | None = None
    body: bytes | None = None


@dataclass(frozen=True)
class SpendRow:
    group: str
    calls: int
    estimated: int
    measured: int | None
    unknown: int
    usd: int = 0
    """Millionths of a dollar charged for service calls paid from dollar budgets (never in the credit columns)."""


_CHARGE_SUM = "COALESCE(SUM(COALESCE(measured, estimated)), 0)"
_CHARGED_IN = "state IN ('pending', 'done', 'unknown', 'queued')"


def _charge(state: str, estimated: int, measured: int | None) -> int:
    """One call's share of `_CHARGE_SUM` over `_CHARGED_IN`: what the running totals move by."""
    if state not in CHARGED:
        return 0
    return int(measured if measured is not None else estimated)


def fill_totals(cur: _Cursor) -> None:
    """Set the running totals from every call (a ledger made before they existed; run once, when they are added,
    in the transaction that adds them)."""
    cur.run(
        f"UPDATE users SET spent = (SELECT {_CHARGE_SUM} FROM calls c WHERE c.user_name = users.name AND {_CHARGED_IN})"
    )
    cur.run(f"UPDATE team SET spent = (SELECT {_CHARGE_SUM} FROM calls WHERE {_CHARGED_IN}) WHERE id = 1")


def singer_in(body: bytes | None) -> str | None:
    """The singer id a vibe answer made (`data.singer_id`, `data.id`, or a bare string), or None."""
    try:
        data = json.loads(body).get("data") if body else None
    except (ValueError, AttributeError):
        return None
    if isinstance(data, str):
        return data or None
    if isinstance(data, dict):
        for name in SINGER_ID_NAMES:
            if isinstance(data.get(name), str) and data[name]:
                return str(data[name])
    return None


def fill_singers(cur: _Cursor) -> None:
    """Record whose each singer id is, from the answers of the vibe calls already made (a ledger made before the
    singers table; run once, in the transaction that creates it)."""
    for user, body in cur.all("SELECT user_name, body FROM calls WHERE endpoint = ? AND state = 'done'", (VIBE,)):
        singer = singer_in(bytes(body) if body is not None else None)
        if singer and not cur.one("SELECT 1 FROM singers WHERE singer_id = ?", (singer,)):
            cur.run("INSERT INTO singers (singer_id, user_name) VALUES (?, ?)", (singer, user))


class GatewayLedger:
    """The team gateway's ledger: its users, budgets, calls and what they cost, on SQLite or PostgreSQL (not the
    notebook's journal, nor the agent server's `mcp.agent_budget.AgentBudget`). Statements shared by both engines;
    subclasses give `_connect`, `_lock_for_reserve`, `base_schema`, the
    column `types` and look-up of its migration steps, and `now_sql`, the ledger's one clock for call windows."""

    placeholder = "?"
    types: ClassVar[dict[str, str]] = {}
    now_sql = ""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        """Connections not in use: each transaction takes one (or opens one) and gives it back, so the
        gateway's threads do not queue behind one connection."""
        self._credit_usd: int | None = None
        self.owner = json.dumps(dataclasses.asdict(Owner.current()))
        """The process sending this ledger's calls (recorded on each: `gateway reconcile` tells a dead one's)."""
        with self._cursor() as cur:
            self._schema_lock(cur)
            migrate(self, cur)

    # -- engine hooks ---------------------------------------------------------------------------------

    def _connect(self) -> Any:
        raise NotImplementedError

    def _begin(self, cur: Any, write: bool) -> None:
        raise NotImplementedError

    def _lock_for_reserve(self, cur: Any, user: str) -> None:
        raise NotImplementedError

    def _schema_lock(self, cur: Any) -> None:
        raise NotImplementedError

    def base_schema(self, cur: Any) -> None:
        raise NotImplementedError

    def columns_of(self, cur: Any, table: str) -> set[str]:
        raise NotImplementedError

    def _is_stale(self, exc: BaseException) -> bool:
        return False

    # -- plumbing -------------------------------------------------------------------------------------

    def _sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    @contextmanager
    def _cursor(self, write: bool = True) -> Iterator[Any]:
        """One transaction on an idle connection (a dead one, after a server restart, is opened again once)."""
        for attempt in (0, 1):
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._connect()
            cur = conn.cursor()
            try:
                self._begin(cur, write)
            except Exception as exc:  # a connection the server closed (a restart): one fresh try
                _close_quietly(conn)
                if attempt or not self._is_stale(exc):
                    raise
                with self._lock:  # its idle siblings are as dead: open new ones
                    stale, self._idle = self._idle, []
                for old in stale:
                    _close_quietly(old)
                continue
            try:
                yield _Cursor(cur, self._sql)
                conn.commit()
            except BaseException:
                try:
                    conn.rollback()
                except Exception:
                    _close_quietly(conn)
                    raise
                self._give_back(conn)
                raise
            self._give_back(conn)
            return

    def _give_back(self, conn: Any) -> None:
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)

    def __enter__(self) -> GatewayLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- users ----------------------------------------------------------------------------------------

    def add_user(self, name: str, token_hash: str, budget: int | None) -> None:
        with self._cursor() as cur:
            if cur.one("SELECT 1 FROM users WHERE name = ?", (name,)):
                raise LedgerError(f"there is already a user named {name!r}")
            cur.run(
                "INSERT INTO users (name, token_hash, budget, revoked, created_at) VALUES (?, ?, ?, 0, ?)",
                (name, token_hash, budget, time.time()),
            )

    def users(self) -> list[UserRow]:
        with self._cursor(write=False) as cur:
            rows = cur.all(
                f"SELECT u.name, u.budget, u.revoked, (SELECT {_CHARGE_SUM} FROM calls c "
                f"WHERE c.user_name = u.name AND {_CHARGED_IN} AND c.usd_rate IS NULL) FROM users u ORDER BY u.name"
            )
        return [UserRow(r[0], r[1], bool(r[2]), int(r[3])) for r in rows]

    def set_user_budget(self, name: str, budget: int | None) -> None:
        with self._cursor() as cur:
            if not cur.one("SELECT 1 FROM users WHERE name = ?", (name,)):
                raise LedgerError(f"no user named {name!r}")
            cur.run("UPDATE users SET budget = ? WHERE name = ?", (budget, name))

    def revoke(self, name: str) -> None:
        with self._cursor() as cur:
            if not cur.one("SELECT 1 FROM users WHERE name = ?", (name,)):
                raise LedgerError(f"no user named {name!r}")
            cur.run("UPDATE users SET revoked = 1 WHERE name = ?", (name,))

    def set_team_budget(self, budget: int | None) -> None:
        with self._cursor() as cur:
            cur.run("UPDATE team SET budget = ? WHERE id = 1", (budget,))

    def team_budget(self) -> int | None:
        with self._cursor(write=False) as cur:
            row = cur.one("SELECT budget FROM team WHERE id = 1")
        return row[0] if row else None

    def user_by_token_hash(self, token_hash: str) -> tuple[str, str] | None:
        """(name, stored hash) of the live user holding this token, or None (missing or revoked)."""
        with self._cursor(write=False) as cur:
            row = cur.one("SELECT name, token_hash FROM users WHERE token_hash = ? AND revoked = 0", (token_hash,))
        return (row[0], row[1]) if row else None

    def remaining(self, user: str) -> int | None:
        """Credits the user may still spend (the smaller of their budget and the team's); None: no cap."""
        with self._cursor(write=False) as cur:
            return self._left(cur, user)[0]

    def _left(self, cur: _Cursor, user: str) -> tuple[int | None, str | None]:
        """From the running totals: two rows read, whatever the number of calls."""
        team = cur.one("SELECT budget, spent FROM team WHERE id = 1")
        mine = cur.one("SELECT budget, spent FROM users WHERE name = ?", (user,))
        left: list[tuple[int, str]] = []
        if team and team[0] is not None:
            left.append((team[0] - int(team[1]), "team budget"))
        if mine and mine[0] is not None:
            left.append((mine[0] - int(mine[1]), f"{user}'s budget"))
        if not left:
            return None, None
        amount, whose = min(left)
        return max(amount, 0), whose

    def standing(self, user: str) -> dict[str, tuple[int | None, int]]:
        """Each budget as `reserve` names it ("team budget", "<user>'s budget"): (budget, spent), from the running
        totals (two rows read): what a refusal tells the user, who cannot raise it themselves."""
        with self._cursor(write=False) as cur:
            team = cur.one("SELECT budget, spent FROM team WHERE id = 1")
            mine = cur.one("SELECT budget, spent FROM users WHERE name = ?", (user,))
        found = {"team budget": (team[0], int(team[1]))} if team else {}
        return found | ({f"{user}'s budget": (mine[0], int(mine[1]))} if mine else {})

    def totals(self) -> dict[str, int]:
        """The running totals of what is charged: the team's under "", each user's under their name."""
        with self._cursor(write=False) as cur:
            team = cur.one("SELECT spent FROM team WHERE id = 1")
            rows = cur.all("SELECT name, spent FROM users")
        return {"": int(team[0]), **{r[0]: int(r[1]) for r in rows}}

    def _move(self, cur: _Cursor, user: str, credits: int, usd_rate: int | None = None) -> None:
        """Move the user's and the team's running totals by `credits`, in the caller's transaction (which holds the
        team row: `_lock_for_reserve`); a call paid in dollars (`usd_rate`) moves the dollar totals instead."""
        if usd_rate is not None:
            move_usd(cur, user, credits * int(usd_rate))
        elif credits:
            cur.run("UPDATE team SET spent = spent + ? WHERE id = 1", (credits,))
            cur.run("UPDATE users SET spent = spent + ? WHERE name = ?", (credits, user))

    @property
    def credit_usd(self) -> int | None:
        """Millionths of a dollar per service credit (`--credit-dollars`); None: dollar budgets pay no service call."""
        return self._credit_usd

    @credit_usd.setter
    def credit_usd(self, rate: int | None) -> None:
        self._credit_usd = checked_rate_micros(rate)

    # -- paid calls -----------------------------------------------------------------------------------

    def _payer(self, cur: Any, user: str) -> tuple[int | None, int | None, str | None] | None:
        """How a service call of `user` is paid, in the reservation's transaction: (the dollar rate per credit, or
        None for credits; what is left in that unit; whose budget is smallest), or None when a dollar budget pays and
        the gateway has no credit rate. Reservations and batch submissions both ask it (`ledger_units`)."""
        if not pays_in_dollars(cur, user):
            left, whose = self._left(cur, user)
            return None, left, whose
        if self.credit_usd is None:
            return None
        left, whose = dollars_left(cur, user)
        return self.credit_usd, left, whose

    def reserve(
        self,
        user: str,
        idem_key: str | None,
        endpoint: str,
        model: str | None,
        estimated: int,
        fingerprint: str | None = None,
        request: bytes | None = None,
    ) -> Reservation:
        """Claim the idempotency key and reserve `estimated` credits, in one transaction; or say why not.

        `fingerprint` names the request (endpoint and body); a key already claimed by a request with another
        fingerprint is a `conflict`, never the first call's answer. `request` is the body to be sent upstream
        (kept for `gateway reconcile`); the call's window opens now, on the ledger's clock."""
        with self._cursor() as cur:
            self._lock_for_reserve(cur, user)
            return self.reserve_in(cur, user, idem_key, endpoint, model, estimated, fingerprint, request)

    def reserve_in(
        self,
        cur: _Cursor,
        user: str,
        idem_key: str | None,
        endpoint: str,
        model: str | None,
        estimated: int,
        fingerprint: str | None,
        request: bytes | None,
        state: str = PENDING,
    ) -> Reservation:
        """`reserve` in the caller's transaction (which holds the team row); the new call's state is `state`
        (`QUEUED`: reserved, waiting for a seat; `ledger_queue`). Paid in exactly one unit, decided here: dollars
        at `credit_usd` when `ledger_units.pays_in_dollars` (none set: `no_rate`), else credits."""

        if idem_key:
            row = cur.one(
                "SELECT state, status_code, body, fingerprint, id FROM calls WHERE user_name = ? AND idem_key = ?",
                (user, idem_key),
            )
            if row:
                if row[3] is not None and fingerprint is not None and row[3] != fingerprint:
                    return Reservation("conflict")
                body = bytes(row[2]) if row[2] is not None else None
                return Reservation("repeat", call_id=int(row[4]), state=row[0], status_code=row[1], body=body)
        payer = self._payer(cur, user)
        if payer is None:
            return Reservation("no_rate")
        rate, left, whose = payer
        if left is not None and left < estimated * (1 if rate is None else rate):
            return Reservation("over", over=whose)
        row = cur.one(
            "INSERT INTO calls (user_name, idem_key, endpoint, model, estimated, state, created_at, day, "
            f"fingerprint, owner, request, usd_rate) VALUES (?, ?, ?, ?, ?, ?, {self.now_sql}, ?, ?, ?, ?, ?) "
            "RETURNING id",
            (
                user,
                idem_key,
                endpoint,
                model,
                estimated,
                state,
                time.strftime("%Y-%m-%d", time.gmtime()),
                fingerprint,
                self.owner,
                request,
                rate,
            ),
        )
        self._move(cur, user, _charge(state, estimated, None), rate)
        return Reservation("new", call_id=int(row[0]))

    def finish(
        self,
        call_id: int,
        state: str,
        status_code: int | None,
        body: bytes | None,
        task_ids: list[str] = (),
        note: str | None = None,
    ) -> bool:
        """Record how a call ended: `done` (kept; `meter` settles it), `refused` (released), `unknown` (kept);
        the tasks it created, or the singer a vibe call made, belong to its user (in the same transaction). The
        call's window closes now. A call already done or refused is left as it is (False): an answer kept
        through a ledger outage, written after `gateway reconcile` settled the call, changes nothing."""
        with self._cursor() as cur:
            self._lock_for_reserve(cur, "")  # the team row first, as every writer of a charge: no deadlock
            user, old_state, estimated, measured, endpoint, rate = cur.one(
                "SELECT user_name, state, estimated, measured, endpoint, usd_rate FROM calls WHERE id = ?", (call_id,)
            )
            if old_state in (DONE, REFUSED):
                return False
            cur.run(
                f"UPDATE calls SET state = ?, status_code = ?, body = ?, note = ?, ended_at = {self.now_sql} "
                "WHERE id = ?",
                (state, status_code, body, note, call_id),
            )
            moved = _charge(state, estimated, measured) - _charge(old_state, estimated, measured)
            self._move(cur, user, moved, rate)
            if task_ids:
                self._own(cur, user, task_ids)
            singer = singer_in(body) if state == DONE and endpoint == VIBE else None
            if singer and not cur.one("SELECT 1 FROM singers WHERE singer_id = ?", (singer,)):
                cur.run("INSERT INTO singers (singer_id, user_name) VALUES (?, ?)", (singer, user))
            return True

    def clock(self) -> float:
        """The ledger's clock now (seconds): when a reading of the upstream's credits starts, for `meter`."""
        with self._cursor(write=False) as cur:
            return float(cur.one(f"SELECT {self.now_sql}")[0])

    def meter(self, counts: int, call_id: int | None = None, started: float | None = None) -> int | None:
        """Record the upstream's credits left, read over [`started`, now] on the ledger's clock (None: an instant,
        now); return the measured cost of the call it settles, if any.

        Windows, across every replica (they live in the ledger): a reading is a baseline only when no call that
        may move the credits (pending, unknown within `IN_FLIGHT_WINDOW`, or answered after `started`) overlaps
        it. The calls between the last baseline and this one are those created after the last baseline started;
        when that is exactly one call (and `call_id`, when given), answered, the fall is its measured cost. A
        measured figure may raise what the call is charged; one below its estimate (a charge the upstream shows
        late, or a cheaper price) never lowers it: the call keeps its estimate, with a note, and the difference
        is `owed` (it may still show falling, and is not then taken for the next call's cost) for `OWED_FOR`
        seconds. Several calls between two baselines keep their estimates ("not measured: overlapped").
        """
        with self._cursor() as cur:
            self._lock_for_reserve(cur, "")
            now = float(cur.one(f"SELECT {self.now_sql}")[0])
            started = now if started is None else min(started, now)
            if self._overlapped(cur, started, now):  # no baseline: the last good one stands
                return None
            last = cur.one("SELECT counts, read_at, owed, owed_at FROM meter WHERE id = 1")
            owed = int(last[2] or 0) if last and last[3] is not None and last[3] > now - OWED_FOR else 0
            owed_at = last[3] if owed else None
            measured = None
            if last and last[0] is not None and last[1] is not None:
                drop = int(last[0]) - counts
                since = cur.all(
                    "SELECT id, state, estimated, measured FROM calls WHERE created_at > ? "
                    "AND state NOT IN ('refused', 'queued')",
                    (last[1],),
                )
                if drop < 0:  # credits were added: nothing between these readings can be told apart
                    owed, owed_at = 0, None
                else:
                    if len(since) == 1 and since[0][1] == DONE and call_id in (None, since[0][0]):
                        measured = self._measured(cur, since[0], max(drop - owed, 0))
                    elif len(since) > 1:
                        note = f"not measured: {len(since)} calls overlapped between two readings"
                        for row in since:
                            cur.run("UPDATE calls SET note = ? WHERE id = ? AND measured IS NULL", (note, row[0]))
                    charged = sum(_charge(DONE, r[2], r[3]) for r in cur.all(self._charges_sql(since)))
                    left = max(owed + charged - drop, 0)
                    if left > owed:
                        owed_at = now
                    owed = left
            cur.run(
                "UPDATE meter SET counts = ?, read_at = ?, owed = ?, owed_at = ? WHERE id = 1",
                (counts, started, owed, owed_at),
            )
        return measured

    def _overlapped(self, cur: _Cursor, started: float, now: float) -> bool:
        """Whether a call may have moved the credits while a reading was taken over [started, now]."""
        recent = now - IN_FLIGHT_WINDOW
        flying = cur.one(
            "SELECT COUNT(*) FROM calls WHERE state IN ('pending', 'unknown') AND created_at > ?", (recent,)
        )
        ended = cur.one("SELECT COUNT(*) FROM calls WHERE ended_at > ? AND state = 'done'", (started,))
        return bool(int(flying[0]) or int(ended[0]))

    def _charges_sql(self, since: list[Any]) -> str:
        ids = ", ".join(str(int(r[0])) for r in since) or "NULL"
        return f"SELECT id, state, estimated, measured FROM calls WHERE id IN ({ids})"

    def _measured(self, cur: _Cursor, call: Any, measured: int) -> int | None:
        """Settle a lone answered call to its measured cost when that is at least its estimate; else keep the
        estimate and say why (a reading may be late: the upstream has not said the call cost less)."""
        call_id, _, estimated, _ = call
        if measured < int(estimated):
            note = f"measured {measured} below the estimate {estimated}: kept at the estimate"
            cur.run("UPDATE calls SET note = ? WHERE id = ?", (note, call_id))
            return None
        self._settle(cur, call_id, measured)
        return measured

    def _settle(self, cur: _Cursor, call_id: int, measured: int) -> None:
        """A done call's measured cost, and the totals moved from what it counted before to it."""
        row = cur.one("SELECT user_name, state, estimated, measured, usd_rate FROM calls WHERE id = ?", (call_id,))
        if row is None or row[1] != DONE:
            return
        cur.run("UPDATE calls SET measured = ?, note = NULL WHERE id = ?", (measured, call_id))
        self._move(cur, row[0], _charge(DONE, row[2], measured) - _charge(DONE, row[2], row[3]), row[4])

    # -- task owners ----------------------------------------------------------------------------------

    def add_tasks(self, user: str, ids: list[str]) -> None:
        with self._cursor() as cur:
            self._own(cur, user, ids)

    def _own(self, cur: _Cursor, user: str, ids: list[str]) -> None:
        for task_id in ids:
            if not cur.one("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)):
                cur.run("INSERT INTO tasks (task_id, user_name) VALUES (?, ?)", (task_id, user))

    def tasks_of(self, user: str) -> list[str]:
        """Every task id that belongs to `user` (what a task query without ids answers)."""
        with self._cursor(write=False) as cur:
            return [r[0] for r in cur.all("SELECT task_id FROM tasks WHERE user_name = ?", (user,))]

    def owned(self, user: str, ids: list[str]) -> list[str]:
        """The ids among `ids` that belong to `user`, in their order."""
        if not ids:
            return []
        with self._cursor(write=False) as cur:
            marks = ", ".join("?" for _ in ids)
            mine = {
                r[0]
                for r in cur.all(
                    f"SELECT task_id FROM tasks WHERE user_name = ? AND task_id IN ({marks})", (user, *ids)
                )
            }
        return [i for i in ids if i in mine]

    def add_songs(self, user: str, song_ids: list[str]) -> None:
        """Record song ids seen in `user`'s own task answers as theirs (a v1 task's song has an id of its own), so
        every gateway on the ledger knows them without reading the user's tasks upstream. First owner stays."""
        with self._cursor() as cur:
            for song_id in song_ids:
                cur.run(
                    "INSERT INTO songs (song_id, user_name) VALUES (?, ?) ON CONFLICT (song_id) DO NOTHING",
                    (song_id, user),
                )

    def owns_song(self, user: str, song_id: str) -> bool:
        """Whether `song_id` was recorded as `user`'s by `add_songs`."""
        with self._cursor(write=False) as cur:
            row = cur.one("SELECT 1 FROM songs WHERE song_id = ? AND user_name = ?", (song_id, user))
        return row is not None

    def owns_singer(self, user: str, singer_id: str) -> bool:
        """Whether `singer_id` was made by one of `user`'s vibe calls."""
        with self._cursor(write=False) as cur:
            row = cur.one("SELECT 1 FROM singers WHERE singer_id = ? AND user_name = ?", (singer_id, user))
        return row is not None

    # -- reconcile ------------------------------------------------------------------------------------

    def open_calls(self, dead_after: float) -> list[OpenCall]:
        """Every call whose outcome the ledger does not know (pending or unknown), each marked `dead` when no
        gateway is still sending it: unknown, or pending with its process gone (on this machine) or older than
        `dead_after` seconds. A live gateway's pending call is returned too: it may explain a task."""
        with self._cursor(write=False) as cur:
            now = float(cur.one(f"SELECT {self.now_sql}")[0])
            rows = cur.all(
                "SELECT id, user_name, endpoint, state, estimated, created_at, owner, request FROM calls "
                "WHERE state IN ('pending', 'unknown') ORDER BY id"
            )
        found = []
        for call_id, user, endpoint, state, estimated, created, owner, request in rows:
            age = now - float(created)
            dead = state == UNKNOWN or age > dead_after or not _alive(owner)
            body = bytes(request) if request is not None else None
            found.append(OpenCall(int(call_id), user, endpoint, state, int(estimated), age, dead, body))
        return found

    def owned_any(self, ids: list[str]) -> set[str]:
        """The ids among `ids` that belong to some user."""
        found: set[str] = set()
        with self._cursor(write=False) as cur:
            for at in range(0, len(ids), 500):
                chunk = ids[at : at + 500]
                marks = ", ".join("?" for _ in chunk)
                found |= {r[0] for r in cur.all(f"SELECT task_id FROM tasks WHERE task_id IN ({marks})", tuple(chunk))}
        return found

    # -- spend ----------------------------------------------------------------------------------------

    def spend(self, by: str = "user", user: str | None = None) -> list[SpendRow]:
        """Per group: calls, estimated credits, measured credits (None when none measured), unknown calls."""
        column = GROUPS[by]
        where = "WHERE user_name = ?" if user else ""
        with self._cursor(write=False) as cur:
            rows = cur.all(
                f"SELECT COALESCE({column}, '-'), COUNT(*), "
                f"COALESCE(SUM(CASE WHEN {_CHARGED_IN} AND usd_rate IS NULL THEN estimated ELSE 0 END), 0), "
                "SUM(CASE WHEN usd_rate IS NULL THEN measured END), "
                "SUM(CASE WHEN state IN ('pending', 'unknown') THEN 1 ELSE 0 END), "
                f"COALESCE(SUM(CASE WHEN {_CHARGED_IN} AND usd_rate IS NOT NULL "
                "THEN COALESCE(measured, estimated) * usd_rate ELSE 0 END), 0) "
                f"FROM calls {where} GROUP BY 1 ORDER BY 1",
                (user,) if user else (),
            )
        return [
            SpendRow(str(r[0]), int(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4]), int(r[5]))
            for r in rows
        ]

    def calls(self) -> list[dict[str, Any]]:
        """Every call row (for tests and audits)."""
        with self._cursor(write=False) as cur:
            rows = cur.all(
                "SELECT id, user_name, idem_key, endpoint, model, estimated, measured, state, note, usd_rate "
                "FROM calls ORDER BY id"
            )
        names = ("id", "user", "idem_key", "endpoint", "model", "estimated", "measured", "state", "note", "usd_rate")
        return [dict(zip(names, r, strict=True)) for r in rows]


def _close_quietly(conn: Any) -> None:
    with suppress(Exception):
        conn.close()


class _Cursor:
    """A cursor speaking `?` placeholders on either engine."""

    def __init__(self, cur: Any, sql: Any) -> None:
        self._cur = cur
        self._sql = sql

    def run(self, text: str, params: tuple[Any, ...] = ()) -> None:
        self._cur.execute(self._sql(text), params)

    def many(self, text: str, rows: list[tuple[Any, ...]]) -> None:
        """One statement for many rows (a batch's 10,000 rows: one round trip's worth, not one each)."""
        if rows:
            self._cur.executemany(self._sql(text), rows)

    def one(self, text: str, params: tuple[Any, ...] = ()) -> Any:
        self._cur.execute(self._sql(text), params)
        return self._cur.fetchone()

    def all(self, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
        self._cur.execute(self._sql(text), params)
        return list(self._cur.fetchall())
