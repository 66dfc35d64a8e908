"""The team gateway's ledger: users, budgets, paid calls and task owners, on SQLite or PostgreSQL.

One interface (`Ledger`) and one set of statements; an engine only says how to connect, how to take the
one write lock a reservation needs (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: `SELECT ... FOR UPDATE` on the
team row) and how to create its tables. Every paid call reserves its estimate from the user's and the team's
budget in the same transaction that claims its idempotency key, so two gateways on one database can neither
overspend a budget nor send one key twice. What is charged is kept as running totals (`users.spent`, `team.spent`),
moved by every transaction that changes a call's charge, so a budget check costs the same whatever the ledger's
size. `ledger_engines.open_ledger(url)` picks the engine from the URL.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ..models.schema import SINGER_ID_NAMES

PENDING, DONE, REFUSED, UNKNOWN = "pending", "done", "refused", "unknown"
"""A call's states: sent (or being sent), answered, definitely refused (released), outcome unknown."""
CHARGED = (PENDING, DONE, UNKNOWN)
"""States whose credits count against a budget: a reservation is kept until the call is known refused."""
GROUPS = {"user": "user_name", "day": "day", "model": "model"}
VIBE = "/v1/music/generate-vibe"
"""The paid call whose answer names a singer voice (`singer_id`) that only its maker may sing with."""
IN_FLIGHT_WINDOW = 600.0
"""Seconds a pending or unknown call may still move the upstream's credits (a killed gateway's call stays pending
for ever; after this long its charge, if any, has landed, and measuring resumes)."""


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
    """What `reserve` decided: `new` (call_id to send), `over` (whose budget), `repeat` (the first call), or
    `conflict` (the key was used for another request: nothing reserved)."""

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


_CHARGE_SUM = "COALESCE(SUM(COALESCE(measured, estimated)), 0)"
_CHARGED_IN = "state IN ('pending', 'done', 'unknown')"


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


class Ledger:
    """Statements shared by both engines; subclasses give `_connect`, `_lock_for_reserve`, `_create_tables`."""

    placeholder = "?"

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        """Connections not in use: each transaction takes one (or opens one) and gives it back, so the
        gateway's threads do not queue behind one connection."""
        with self._cursor() as cur:
            self._create_tables(cur)

    # -- engine hooks ---------------------------------------------------------------------------------

    def _connect(self) -> Any:
        raise NotImplementedError

    def _begin(self, cur: Any, write: bool) -> None:
        raise NotImplementedError

    def _lock_for_reserve(self, cur: Any, user: str) -> None:
        raise NotImplementedError

    def _create_tables(self, cur: Any) -> None:
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

    def __enter__(self) -> Ledger:
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
                f"WHERE c.user_name = u.name AND {_CHARGED_IN}) FROM users u ORDER BY u.name"
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

    def totals(self) -> dict[str, int]:
        """The running totals of what is charged: the team's under "", each user's under their name."""
        with self._cursor(write=False) as cur:
            team = cur.one("SELECT spent FROM team WHERE id = 1")
            rows = cur.all("SELECT name, spent FROM users")
        return {"": int(team[0]), **{r[0]: int(r[1]) for r in rows}}

    def _move(self, cur: _Cursor, user: str, credits: int) -> None:
        """Move the user's and the team's running totals by `credits`, in the caller's transaction (which holds the
        team row: `_lock_for_reserve`)."""
        if credits:
            cur.run("UPDATE team SET spent = spent + ? WHERE id = 1", (credits,))
            cur.run("UPDATE users SET spent = spent + ? WHERE name = ?", (credits, user))

    # -- paid calls -----------------------------------------------------------------------------------

    def reserve(
        self,
        user: str,
        idem_key: str | None,
        endpoint: str,
        model: str | None,
        estimated: int,
        fingerprint: str | None = None,
    ) -> Reservation:
        """Claim the idempotency key and reserve `estimated` credits, in one transaction; or say why not.

        `fingerprint` names the request (endpoint and body); a key already claimed by a request with another
        fingerprint is a `conflict`, never the first call's answer."""
        with self._cursor() as cur:
            self._lock_for_reserve(cur, user)
            if idem_key:
                row = cur.one(
                    "SELECT state, status_code, body, fingerprint FROM calls WHERE user_name = ? AND idem_key = ?",
                    (user, idem_key),
                )
                if row:
                    if row[3] is not None and fingerprint is not None and row[3] != fingerprint:
                        return Reservation("conflict")
                    body = bytes(row[2]) if row[2] is not None else None
                    return Reservation("repeat", state=row[0], status_code=row[1], body=body)
            left, whose = self._left(cur, user)
            if left is not None and left < estimated:
                return Reservation("over", over=whose)
            now = time.time()
            row = cur.one(
                "INSERT INTO calls (user_name, idem_key, endpoint, model, estimated, state, created_at, day, "
                "fingerprint) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?) RETURNING id",
                (
                    user,
                    idem_key,
                    endpoint,
                    model,
                    estimated,
                    now,
                    time.strftime("%Y-%m-%d", time.gmtime(now)),
                    fingerprint,
                ),
            )
            self._move(cur, user, _charge(PENDING, estimated, None))
            return Reservation("new", call_id=int(row[0]))

    def finish(
        self, call_id: int, state: str, status_code: int | None, body: bytes | None, task_ids: list[str] = ()
    ) -> None:
        """Record how a call ended: `done` (kept; `meter` settles it), `refused` (released), `unknown` (kept);
        the tasks it created, or the singer a vibe call made, belong to its user (in the same transaction)."""
        with self._cursor() as cur:
            self._lock_for_reserve(cur, "")  # the team row first, as every writer of a charge: no deadlock
            user, old_state, estimated, measured, endpoint = cur.one(
                "SELECT user_name, state, estimated, measured, endpoint FROM calls WHERE id = ?", (call_id,)
            )
            cur.run(
                "UPDATE calls SET state = ?, status_code = ?, body = ? WHERE id = ?",
                (state, status_code, body, call_id),
            )
            self._move(cur, user, _charge(state, estimated, measured) - _charge(old_state, estimated, measured))
            if task_ids:
                self._own(cur, user, task_ids)
            singer = singer_in(body) if state == DONE and endpoint == VIBE else None
            if singer and not cur.one("SELECT 1 FROM singers WHERE singer_id = ?", (singer,)):
                cur.run("INSERT INTO singers (singer_id, user_name) VALUES (?, ?)", (singer, user))

    def meter(self, counts: int, call_id: int | None = None) -> int | None:
        """Record the upstream's credits left, read just now; return the measured cost of the call it settles.

        Unambiguous: the last reading was taken with nothing in flight, the only call not refused since then
        is `call_id` (or, with no `call_id`, any one call: a key-info read right after a paid call, before the
        measurer's, measures it rather than hiding it), and nothing is in flight now (pending or unknown within
        `IN_FLIGHT_WINDOW`). Then the difference is that call's cost, and it settles to it. A reading taken while
        a call is in flight is no baseline for the next one, and does not replace the last baseline: a call sent
        while an earlier one's reading is taken is still measured by its own.
        """
        with self._cursor() as cur:
            self._lock_for_reserve(cur, "")
            last = cur.one("SELECT counts, last_call FROM meter WHERE id = 1")
            top = int(cur.one("SELECT COALESCE(MAX(id), 0) FROM calls")[0])
            recent = time.time() - IN_FLIGHT_WINDOW
            in_flight = int(
                cur.one(
                    "SELECT COUNT(*) FROM calls WHERE state IN ('pending', 'unknown') AND created_at > ?", (recent,)
                )[0]
            )
            measured = None
            if last and last[0] is not None and not in_flight:
                since = [r[0] for r in cur.all("SELECT id FROM calls WHERE id > ? AND state <> 'refused'", (last[1],))]
                if len(since) == 1 and call_id in (None, since[0]) and last[0] >= counts:
                    measured = int(last[0]) - counts
                    self._settle(cur, since[0], measured)
            if not in_flight:  # a reading with a call in flight is no baseline, and leaves the last good one standing
                cur.run("UPDATE meter SET counts = ?, last_call = ? WHERE id = 1", (counts, top))
        return measured

    def _settle(self, cur: _Cursor, call_id: int, measured: int) -> None:
        """A done call's measured cost, and the totals moved from what it counted before to it."""
        row = cur.one("SELECT user_name, state, estimated, measured FROM calls WHERE id = ?", (call_id,))
        if row is None or row[1] != DONE:
            return
        cur.run("UPDATE calls SET measured = ? WHERE id = ?", (measured, call_id))
        self._move(cur, row[0], _charge(DONE, row[2], measured) - _charge(DONE, row[2], row[3]))

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

    # -- spend ----------------------------------------------------------------------------------------

    def spend(self, by: str = "user", user: str | None = None) -> list[SpendRow]:
        """Per group: calls, estimated credits, measured credits (None when none measured), unknown calls."""
        column = GROUPS[by]
        where = "WHERE user_name = ?" if user else ""
        with self._cursor(write=False) as cur:
            rows = cur.all(
                f"SELECT COALESCE({column}, '-'), COUNT(*), "
                f"COALESCE(SUM(CASE WHEN {_CHARGED_IN} THEN estimated ELSE 0 END), 0), "
                "SUM(measured), "
                "SUM(CASE WHEN state IN ('pending', 'unknown') THEN 1 ELSE 0 END) "
                f"FROM calls {where} GROUP BY 1 ORDER BY 1",
                (user,) if user else (),
            )
        return [SpendRow(str(r[0]), int(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4])) for r in rows]

    def calls(self) -> list[dict[str, Any]]:
        """Every call row (for tests and audits)."""
        with self._cursor(write=False) as cur:
            rows = cur.all("SELECT id, user_name, idem_key, endpoint, model, estimated, measured, state FROM calls")
        names = ("id", "user", "idem_key", "endpoint", "model", "estimated", "measured", "state")
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

    def one(self, text: str, params: tuple[Any, ...] = ()) -> Any:
        self._cur.execute(self._sql(text), params)
        return self._cur.fetchone()

    def all(self, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
        self._cur.execute(self._sql(text), params)
        return list(self._cur.fetchall())
