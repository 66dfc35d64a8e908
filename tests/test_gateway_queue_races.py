"""Seats under races: eight users send at once through two replicas on one ledger (SQLite, then PostgreSQL), with
three seats; the upstream never has more than three creates in flight, each create is sent once, and every user's
budget holds exactly the prices of their calls still waiting or in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from gateway_helpers import add_user, post
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures: each engine, the server)
from queue_fakes import MovedClock, Replica, SeatCountingUpstream, data_of
from test_gateway_queue import GENERATE, _drain, _remaining, body

pytestmark = pytest.mark.slow  # two gateways and an upstream in threads, on SQLite and on a PostgreSQL server


@pytest.fixture
def upstream() -> Iterator[SeatCountingUpstream]:
    with SeatCountingUpstream() as server:
        yield server


def test_eight_users_at_once_on_two_replicas_never_exceed_the_seats(
    database: str, upstream: SeatCountingUpstream
) -> None:
    tokens = {f"racer{n}": add_user(database, f"racer{n}", budget=12) for n in range(8)}  # four calls of 3 each
    clock = MovedClock()
    answers: list[tuple[str, object]] = []
    lock = threading.Lock()
    with Replica(database, upstream.url, 3, clock) as a, Replica(database, upstream.url, 3, clock) as b:
        gate = threading.Barrier(16)

        def race(user: str, k: int) -> None:
            gate.wait()
            for i in range(2):
                answer = post((a, b)[(k + i) % 2].url, GENERATE, tokens[user], body(f"{user}-{k}-{i}"))
                with lock:
                    answers.append((user, answer))

        threads = [threading.Thread(target=race, args=(u, k)) for u in tokens for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert len(answers) == 32 and all(r.status_code == 200 for _, r in answers)
        assert upstream.peak <= 3
        assert all(_remaining(database, u) == 0 for u in tokens), "four calls each, all reserved"
        over = post(a.url, GENERATE, tokens["racer0"], body("one more"))
        assert "no credits left" in over.json()["message"]
        _drain(clock, upstream, database, 32)
    assert upstream.peak <= 3 and upstream.refused_429 == 0, "never more than the three seats, over both replicas"
    sent = upstream.styles()
    assert len(sent) == 32 and len(set(sent)) == 32, "each create sent once"
    assert all(data_of(r).get("state") in (None, "queued") for _, r in answers)
