"""What the gateway may remember between requests, so a poll does not cost a ledger transaction each time.

Tokens: a live user's token, by its hash, for at most `TOKEN_TTL` seconds, so a revoked token is refused
within that long (by every gateway on the database: each one asks the ledger again once its entry is old).
Task owners: a task, once recorded as a user's, is theirs for ever (the ledger never gives it to another), so
only positive answers are kept; an id not known here is asked of the ledger every time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

TOKEN_TTL = 1.0
"""Seconds a token found live is believed without asking the ledger: the most a revocation takes to land."""
MAX_ENTRIES = 100_000
"""Each memory is emptied when it reaches this many entries (a bound on memory, not on correctness)."""


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

    def unknown(self, ids: list[str]) -> list[str]:
        return [i for i in ids if i not in self._owners]

    def learn(self, user: str, ids: list[str]) -> None:
        if len(self._owners) + len(ids) > MAX_ENTRIES:
            self._owners = {}
        for task_id in ids:
            self._owners[task_id] = user

    def mine(self, user: str, ids: list[str]) -> list[str]:
        return [i for i in ids if self._owners.get(i) == user]
