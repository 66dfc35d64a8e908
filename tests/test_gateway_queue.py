"""The fair queue over the upstream key's seats (`gateway serve --max-in-flight N`), with two replicas on one ledger
(SQLite, then a real PostgreSQL), eight users, an upstream that counts what is in flight, and the queue's clock moved
by the test."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from gateway_helpers import add_user, cli, post
from helpers import wait_until
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures: each engine, the server)
from queue_fakes import MovedClock, Replica, SeatCountingUpstream, data_of

from ipymusicgen.gateway.queue_seats import GROW_EVERY
from ipymusicgen.storage import ledger_queue
from ipymusicgen.storage.ledger_engines import open_ledger

pytestmark = pytest.mark.slow  # two gateways and an upstream in threads, on SQLite and on a PostgreSQL server
GENERATE = "/v1/music/generate"
WATCH = 6.0
"""More than the queue's WATCH_EVERY: moving the clock by this lets each replica read its seats' songs again."""


def body(style: str) -> dict[str, str]:
    return {"action": "auto", "style": style, "mv": "MFV3.0"}


@pytest.fixture
def upstream() -> Iterator[SeatCountingUpstream]:
    with SeatCountingUpstream() as server:
        yield server


def _remaining(database: str, user: str) -> int | None:
    ledger = open_ledger(database)
    try:
        return ledger.remaining(user)
    finally:
        ledger.close()


def _waiting(database: str) -> int:
    """Calls still waiting for a seat or being sent (their answers not yet recorded)."""
    ledger = open_ledger(database)
    try:
        return sum(1 for c in ledger.calls() if c["state"] in ("queued", "pending"))
    finally:
        ledger.close()


def _until(clock: MovedClock, condition: Callable[[], bool], what: str) -> None:
    """Wait on state, moving the queue's clock on now and then: a replica busy when the clock moved sleeps a whole
    tick from the new time, so one move alone may pass it by."""
    polls = itertools.count(1)
    wait_until(lambda: condition() or (next(polls) % 25 == 0 and clock.advance(WATCH) and False), what)


def _sending(database: str) -> int:
    """Calls claimed and being sent: the upstream may have made their tasks, the gateway has not recorded them."""
    ledger = open_ledger(database)
    try:
        return sum(1 for c in ledger.calls() if c["state"] == "pending")
    finally:
        ledger.close()


def _drain(clock: MovedClock, upstream: SeatCountingUpstream, database: str, total: int) -> None:
    """Finish what runs upstream and let the replicas see it, until `total` creates were sent and none waits.

    Each round waits until the new send is recorded, not only made upstream: finishing everything while a send was
    made but not yet recorded would finish a call the test means to leave running (the 429 test's race)."""
    for _ in range(total * 3):
        if len(upstream.styles()) >= total and not _waiting(database):
            return
        sent = len(upstream.styles())
        upstream.finish_all()
        clock.advance(WATCH)
        _until(
            clock,
            lambda s=sent: (len(upstream.styles()) > s and not _sending(database)) or not _waiting(database),
            "a freed seat to be used and its send recorded",
        )
    raise AssertionError(f"sent {len(upstream.styles())} of {total}")


def test_seats_go_round_robin_across_eight_users_and_the_cap_holds_across_two_replicas(
    database: str, upstream: SeatCountingUpstream
) -> None:
    tokens = {f"user{n}": add_user(database, f"user{n}") for n in range(8)}
    clock = MovedClock()
    with Replica(database, upstream.url, 2, clock) as a, Replica(database, upstream.url, 2, clock) as b:
        replicas = (a, b)
        hog = [post(a.url, GENERATE, tokens["user0"], body(f"user0-{i}")) for i in range(12)]
        assert [r.status_code for r in hog] == [200] * 12
        assert [data_of(r).get("state") for r in hog[:2]] == [None, None], "two seats: the first two go at once"
        waiting = [data_of(r) for r in hog[2:]]
        assert all(d["state"] == "queued" and len(d["ids"]) == 2 for d in waiting)
        assert [d["position"] for d in waiting] == list(range(1, 11))
        colleagues = [(f"user{n}", i) for i in range(2) for n in range(1, 8)]
        for k, (user, i) in enumerate(colleagues):
            answer = post(replicas[k % 2].url, GENERATE, tokens[user], body(f"{user}-{i}"))
            assert data_of(answer)["state"] == "queued"
        # user1's first row is next in line (user0 was served last), user0's third row is now behind 7 colleagues
        asked = {"ids": ",".join(waiting[0]["ids"])}
        first = data_of(httpx.get(f"{b.url}/v1/music/tasks", params=asked, headers={"x-api-key": tokens["user0"]}))
        assert upstream.styles() == ["user0-0", "user0-1"] and upstream.peak == 2
        _drain(clock, upstream, database, 26)
    assert upstream.peak == 2 and upstream.refused_429 == 0, "never more than two in flight, over both replicas"
    sent = upstream.styles()
    assert sorted(sent) == sorted(f"user0-{i}" for i in range(12)) + sorted(f"{u}-{i}" for u, i in colleagues)
    assert len(set(sent)) == 26, "each row sent once"
    queued = [s.split("-")[0] for s in sent[2:]]
    # in turn order: the seven colleagues, then the hog's third row (it was served twice already), then the
    # colleagues' second rows; two sends in flight at once may reach the upstream in either order (one place)
    assert set(queued[:9]) == set(tokens) and "user0" not in queued[:6], f"sent in this order: {sent}"
    last_colleague = max(i for i, u in enumerate(queued) if u != "user0")
    assert last_colleague < 17 and Counter(queued[:17])["user0"] <= 3, queued
    assert [r["state"] for r in first] == ["queued", "queued"] and first[0]["position"] == 8


def test_a_queued_id_polls_as_queued_with_its_place_then_as_the_upstreams_task_under_the_same_id(
    database: str, upstream: SeatCountingUpstream
) -> None:
    ann, bob = add_user(database, "ann"), add_user(database, "bob")
    clock = MovedClock()
    with Replica(database, upstream.url, 1, clock) as a, Replica(database, upstream.url, 1, clock) as b:
        direct = data_of(post(a.url, GENERATE, ann, body("first")))
        assert direct["ids"] == ["up-1-a", "up-1-b"]
        mine = data_of(post(b.url, GENERATE, ann, body("second")))["ids"]
        polled = data_of(
            httpx.get(f"{a.url}/v1/music/tasks", params={"ids": ",".join(mine)}, headers={"x-api-key": ann})
        )
        assert [(r["id"], r["state"], r["status"], r["position"]) for r in polled] == [
            (mine[0], "queued", 1, 1),
            (mine[1], "queued", 1, 1),
        ]
        other = httpx.get(f"{a.url}/v1/music/tasks", params={"ids": mine[0]}, headers={"x-api-key": bob})
        missing = httpx.get(f"{a.url}/v1/music/tasks", params={"ids": "gq-" + "0" * 24}, headers={"x-api-key": bob})
        assert other.status_code == missing.status_code and data_of(other) == data_of(missing) == []
        _drain(clock, upstream, database, 2)
        upstream.finish_all()
        polled = data_of(
            httpx.get(f"{b.url}/v1/music/tasks", params={"ids": ",".join(mine)}, headers={"x-api-key": ann})
        )
        every = data_of(httpx.get(f"{a.url}/v1/music/tasks", headers={"x-api-key": ann}))
    assert [(r["id"], r["status"], r["style"]) for r in polled] == [(mine[0], 0, "second"), (mine[1], 0, "second")]
    assert "up-2" not in str(polled), "the caller sees only the ids they hold"
    assert [r["id"] for r in every] == ["up-1-a", "up-1-b", *mine], "all of ann's tasks, the queued ones by her ids"


def test_a_429_puts_the_call_back_in_line_shrinks_the_seats_and_they_grow_back_on_the_clock(
    database: str, upstream: SeatCountingUpstream
) -> None:
    token = add_user(database, "cam")
    clock = MovedClock()
    upstream.limit = 2  # the upstream allows two; the gateway was told three
    upstream.retry_after = "300"
    with Replica(database, upstream.url, 3, clock) as a, Replica(database, upstream.url, 3, clock) as b:
        answers = [data_of(post(a.url, GENERATE, token, body(f"c{i}"))) for i in range(3)]
        assert answers[2]["state"] == "queued", "the 429'd call waits in line, its ids in hand"
        assert upstream.refused_429 == 1 and upstream.styles() == ["c0", "c1"]
        ledger = open_ledger(database)
        assert ledger_queue.limit(ledger)[0] == 2
        assert [c["state"] for c in ledger.calls()] == ["done", "done", "queued"], "not made, not charged: back in line"
        upstream.limit = 3  # the upstream would take three now; the gateway keeps to two while shrunk
        _drain(clock, upstream, database, 3)
        for i in range(3, 6):
            post(b.url, GENERATE, token, body(f"c{i}"))
        _until(clock, lambda: upstream.running() == 2 and _waiting(database) >= 1, "two in flight, one held back")
        assert upstream.peak == 2, "shrunk: two at once, though the cap (and now the upstream) would take three"
        clock.advance(300 + GROW_EVERY + 1)  # the Retry-After (300 s) passed, and one grow step: three seats again
        upstream.finish_all()
        post(a.url, GENERATE, token, body("c6"))
        clock.advance(WATCH)
        _until(clock, lambda: upstream.running() == 3, "three in flight again")
        ledger.close()
    assert upstream.refused_429 == 1
    assert sorted(upstream.styles()) == [f"c{i}" for i in range(7)]


def test_an_idempotency_key_answers_a_queued_call_with_its_ids_and_sends_it_once(
    database: str, upstream: SeatCountingUpstream
) -> None:
    token = add_user(database, "dee", budget=30)
    clock = MovedClock()
    with Replica(database, upstream.url, 1, clock) as a, Replica(database, upstream.url, 1, clock) as b:
        post(a.url, GENERATE, token, body("seat"))
        first = post(a.url, GENERATE, token, body("twice"), **{"Idempotency-Key": "same"})
        again = post(b.url, GENERATE, token, body("twice"), **{"Idempotency-Key": "same"})
        assert data_of(first)["state"] == "queued" and data_of(again)["ids"] == data_of(first)["ids"]
        other = post(b.url, GENERATE, token, body("another"), **{"Idempotency-Key": "same"})
        assert other.status_code == 409
        assert open_ledger(database).remaining("dee") == 24, "two calls reserved, the repeat nothing"
        _drain(clock, upstream, database, 2)
        late = post(a.url, GENERATE, token, body("twice"), **{"Idempotency-Key": "same"})
    assert data_of(late)["ids"] == data_of(first)["ids"], "the caller keeps the ids they were given"
    assert data_of(late)["state"] == "sent" and "position" not in data_of(late)
    assert upstream.styles() == ["seat", "twice"]


def test_a_queued_call_holds_its_price_and_gives_it_back_when_cancelled_or_refused(
    database: str, upstream: SeatCountingUpstream
) -> None:
    token = add_user(database, "eve", budget=9)  # three calls of 3 credits
    clock = MovedClock()
    with Replica(database, upstream.url, 1, clock) as a, Replica(database, upstream.url, 1, clock) as b:
        post(a.url, GENERATE, token, body("sent"))
        dropped = data_of(post(a.url, GENERATE, token, body("dropped")))["ids"]
        post(b.url, GENERATE, token, body("refuse me"))
        over = post(b.url, GENERATE, token, body("one too many"))
        assert "no credits left" in over.json()["message"], "queued calls hold their price"
        assert cli("queue", "--database", database)[1].splitlines()[1:] == ["eve\t2\t1"], "two waiting, one seat"
        code, out = cli("queue", "cancel", dropped[1], "--database", database)
        assert code == 0, out
        assert open_ledger(database).remaining("eve") == 3
        assert cli("queue", "cancel", dropped[1], "--database", database)[0] == 2, "only a row still waiting"
        repeat = post(b.url, GENERATE, token, body("dropped again"), **{"Idempotency-Key": "gone"})
        assert data_of(repeat)["state"] == "queued"
        assert cli("queue", "cancel", data_of(repeat)["ids"][0], "--database", database)[0] == 0
        again = post(a.url, GENERATE, token, body("dropped again"), **{"Idempotency-Key": "gone"})
        assert "Cancelled while queued" in again.json()["message"], "its repeat says it was cancelled, never sent"
        polled = data_of(httpx.get(f"{a.url}/v1/music/tasks", params={"ids": dropped[0]}, headers={"x-api-key": token}))
        assert polled[0]["state"] == "failed" and "Cancelled" in polled[0]["fail_reason"]
        upstream.finish_all()
        clock.advance(WATCH)
        _until(clock, lambda: _remaining(database, "eve") == 6, "the refused call's price given back")
    assert upstream.styles() == ["sent"]
    states = sorted(c["state"] for c in open_ledger(database).calls())
    assert states == ["done", "refused", "refused", "refused"]


def test_a_v2_submit_waits_in_the_same_line_and_its_songs_poll_under_the_queue_ids(
    database: str, upstream: SeatCountingUpstream
) -> None:
    fay = add_user(database, "fay")
    clock = MovedClock()
    v2 = {"is_auto": 1, "prompt": "tide", "model_version": "v4.5"}
    with Replica(database, upstream.url, 1, clock) as a, Replica(database, upstream.url, 1, clock) as b:
        post(a.url, GENERATE, fay, body("first"))
        songs = data_of(post(b.url, "/v2/submit", fay, v2))
        assert [(s["status"], s["position"]) for s in songs] == [("QUEUED", 1), ("QUEUED", 1)]
        ours = songs[0]["song_id"]
        waiting = data_of(httpx.get(f"{a.url}/v2/query", params={"song_id": ours}, headers={"x-api-key": fay}))
        assert [(s["song_id"], s["status"]) for s in waiting] == [(ours, "QUEUED")]
        _drain(clock, upstream, database, 2)
        upstream.finish_all()
        made = data_of(httpx.get(f"{b.url}/v2/query", params={"song_id": ours}, headers={"x-api-key": fay}))
    assert [(s["song_id"], s["status"], s["tags"]) for s in made] == [(ours, "FINISHED", "tide")]
    assert upstream.styles() == ["first", "tide"]
