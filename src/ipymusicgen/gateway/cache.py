"""What the gateway may remember between requests, so a poll does not cost a ledger transaction each time.

Tokens: a live user's token, by its hash, for at most `TOKEN_TTL` seconds, so a revoked token is refused
within that long (by every gateway on the database: each one asks the ledger again once its entry is old).
Task owners: a task, once recorded as a user's, is theirs for ever (the ledger never gives it to another), so
only positive answers are kept; an id not known here as the caller's is asked of the ledger every time, another
user's as well as a missing one, so both take one path (the same calls, in the same order).
Song look-ups: a read through a user's own tasks upstream (for a song id neither here nor in the ledger), kept for
`SCAN_TTL` seconds and shared by every look-up meanwhile, so made-up ids do not multiply upstream reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TOKEN_TTL = 1.0
"""Seconds a token found live is believed without asking the ledger: the most a revocation takes to land."""
MAX_ENTRIES = 100_000
"""Each memory is emptied when it reaches this many entries (a bound on memory, not on correctness)."""
SCAN_TTL = 10.0
"""Seconds a read through a user's tasks answers their song look-ups. A song made since is not missed: its id is
learned (and recorded in the ledger) when the task answer carrying it passes through a gateway."""


class TokenCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._users: dict[str, tuple[str, float]] = {}

    def get(self, hashed: str) -> str | None:
        hit = self._users.get(hashed)
        return hit[0] if hit is not None and hit[1] > self.clock() else None

    def put(self, hashed: str, user: str) -> None:
        if len(self._users) >= MAX_ENTRIES:
            self._users = {}
        self._users[hashed] = (user, self.clock() + TOKEN_TTL)


class OwnerCache:
    def __init__(self) -> None:
        self._owners: dict[str, str] = {}

    def not_mine(self, user: str, ids: list[str]) -> list[str]:
        """The ids not known here as `user`'s: unknown ones and other users' alike (both are asked of the ledger,
        so another user's id takes the path of a missing one)."""
        return [i for i in ids if self._owners.get(i) != user]

    def learn(self, user: str, ids: list[str]) -> None:
        if len(self._owners) + len(ids) > MAX_ENTRIES:
            self._owners = {}
        for task_id in ids:
            self._owners[task_id] = user

    def mine(self, user: str, ids: list[str]) -> list[str]:
        return [i for i in ids if self._owners.get(i) == user]


class RecentScans:
    def __init__(self, ttl: float = SCAN_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._scans: dict[str, tuple[float, asyncio.Future[set[str]]]] = {}

    async def get(self, user: str, scan: Callable[[], Awaitable[set[str]]]) -> set[str]:
        """The song ids of `user`'s last read, or of a new one when the last is older than `ttl` (or failed). The
        read runs once however many wait on it, and a caller hanging up does not stop it for the others."""
        now = self.clock()
        hit = self._scans.get(user)
        if hit is None or hit[0] <= now:
            if len(self._scans) >= MAX_ENTRIES:
                self._scans = {u: h for u, h in self._scans.items() if h[0] > now}
            future = asyncio.ensure_future(scan())
            hit = self._scans[user] = (now + self.ttl, future)
            future.add_done_callback(lambda done: self._forget_failed(user, done))
        return await asyncio.shield(hit[1])

    def _forget_failed(self, user: str, done: asyncio.Future[set[str]]) -> None:
        if done.cancelled() or done.exception() is not None:
            hit = self._scans.get(user)
            if hit is not None and hit[1] is done:
                del self._scans[user]
