"""A queue seat held by a call whose outcome is unknown (issue 39): it held the key's seat for `HOLD_MAX` (600 s),
so one answer lost after the upstream took the call cost the team a seat for ten minutes. Now the pump asks the
upstream's task list, as `gateway reconcile` does: nothing of the call there frees the seat at once; its tasks there
hold it until they finish. On the queue's moved clock, SQLite and a real PostgreSQL, one seat, two users."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
from gateway_helpers import add_user, post
from helpers import wait_until
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures: each engine, the server)
from queue_fakes import MovedClock, Replica, SeatCountingUpstream
from starlette.requests import Request
from starlette.responses import JSONResponse

from ipymusicgen.storage import ledger_queue
from ipymusicgen.storage.ledger_engines import open_ledger

pytestmark = pytest.mark.slow  # a gateway and an upstream in threads, on SQLite and on a PostgreSQL server
GENERATE = "/v1/music/generate"
WATCH = 6.0
MOVED_AT_MOST = 90.0
"""Clock seconds a freed seat may take to be used: far below HOLD_MAX (600 s), the old bound."""


class LosingUpstream(SeatCountingUpstream):
    """Answers 500 to a create whose style is in `lost_before` (nothing made) or `lost_after` (its tasks made)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost_before: set[str] = set()
        self.lost_after: set[str] = set()

    async def _generate(self, request: Request) -> JSONResponse:
        style = (await request.json()).get("style")
        if style in self.lost_before:
            return JSONResponse({"status": 500, "message": "internal error", "data": None}, status_code=500)
        answer = await super()._generate(request)
        if style in self.lost_after:
            return JSONResponse({"status": 500, "message": "internal error", "data": None}, status_code=500)
        return answer


@pytest.fixture
def upstream() -> Iterator[LosingUpstream]:
    with LosingUpstream() as server:
        yield server


def body(style: str) -> dict[str, str]:
    return {"action": "auto", "style": style, "mv": "MFV3.0"}


def moved_until(clock: MovedClock, condition: Callable[[], bool], what: str) -> float:
    """Wait on state, moving the queue's clock a watch on now and then; the clock seconds it took (at most
    `MOVED_AT_MOST`: a seat freed only by the 600 s bound fails here)."""
    start, polls = clock.time(), itertools.count(1)

    def moved() -> bool:
        if condition():
            return True
        assert clock.time() - start <= MOVED_AT_MOST, f"not within {MOVED_AT_MOST:.0f} clock seconds: {what}"
        if next(polls) % 25 == 0:
            clock.advance(WATCH)
        return False

    wait_until(moved, what)
    return clock.time() - start


def states(database: str) -> list[str]:
    ledger = open_ledger(database)
    try:
        return [c["state"] for c in ledger.calls()]
    finally:
        ledger.close()


def seat_checked_at(database: str) -> float | None:
    ledger = open_ledger(database)
    try:
        held = ledger_queue.held(ledger)
        return float(held[0].checked_at) if held and held[0].checked_at is not None else None
    finally:
        ledger.close()


def test_an_unknown_call_that_made_nothing_upstream_frees_its_seat_at_the_next_watch(
    database: str, upstream: LosingUpstream
) -> None:
    ann, bob = add_user(database, "ann"), add_user(database, "bob")
    upstream.lost_before = {"lost on the way"}
    clock = MovedClock()
    with Replica(database, upstream.url, 1, clock) as a:
        lost = post(a.url, GENERATE, ann, body("lost on the way"))
        assert lost.status_code >= 500 and states(database) == ["unknown"], lost.text
        post(a.url, GENERATE, bob, body("bob's turn"))  # sent at once or queued: the pump may have looked already
        took = moved_until(clock, lambda: upstream.styles() == ["bob's turn"], "bob's call sent on the freed seat")
    assert took <= MOVED_AT_MOST
    assert states(database) == ["unknown", "done"], "the seat freed; the call stays unknown for reconcile"


def test_an_unknown_call_whose_tasks_run_upstream_holds_its_seat_until_they_finish(
    database: str, upstream: LosingUpstream
) -> None:
    cat, dan = add_user(database, "cat"), add_user(database, "dan")
    upstream.lost_after = {"made, answer lost"}
    clock = MovedClock()
    with Replica(database, upstream.url, 1, clock) as a:
        post(a.url, GENERATE, cat, body("made, answer lost"))
        assert states(database) == ["unknown"] and upstream.running() == 1
        post(a.url, GENERATE, dan, body("dan's turn"))
        for _ in range(3):  # three watches see its tasks running: the seat stays taken, nothing more is sent
            since = clock.time() + 1.0
            moved_until(clock, lambda t=since: (seat_checked_at(database) or 0) >= t, "the pump looked again")
        assert upstream.styles() == ["made, answer lost"] and upstream.peak == 1
        upstream.finish_all()
        moved_until(clock, lambda: upstream.styles() == ["made, answer lost", "dan's turn"], "sent once it finished")
    assert upstream.peak == 1, "never two at once on one seat"
