"""A queued create that names a song the caller does not own is sent with a stand-in id (one that does not exist, so
the answer is a missing song's); its later answers, polled under the queue ids, name the id the caller asked for."""

from __future__ import annotations

import httpx
import pytest
from gateway_helpers import add_user, post
from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures: each engine, the server)
from queue_fakes import MovedClock, Replica, SeatCountingUpstream, data_of
from test_gateway_queue import GENERATE, _drain, body

pytestmark = pytest.mark.slow  # two gateways and an upstream in threads


def test_a_queued_rows_answers_name_the_song_asked_for_never_the_stand_in(database: str) -> None:
    ann, bob = add_user(database, "ann"), add_user(database, "bob")
    clock = MovedClock()
    with (
        SeatCountingUpstream() as upstream,
        Replica(database, upstream.url, 1, clock) as a,
        Replica(database, upstream.url, 1, clock) as b,
    ):
        theirs = data_of(post(a.url, GENERATE, ann, body("ann's")))["ids"][0]  # takes the one seat
        asks = {
            "extend-theirs": {**body("x"), "action": "extend", "continue_song_id": theirs, "continue_at": 10},
            "extend-none": {**body("y"), "action": "extend", "continue_song_id": "no-such-9", "continue_at": 10},
            "concat-theirs": {"action": "concat", "continue_song_id": theirs},
        }
        queued = {}
        for n, (name, ask) in enumerate(asks.items()):
            sent = post((a, b)[n % 2].url, GENERATE, bob, ask)
            assert sent.status_code == 200, sent.text
            answer = data_of(sent)
            assert answer["state"] == "queued", answer
            queued[name] = answer["ids"]
        _drain(clock, upstream, database, 3)  # ann's, two extends; the concat is refused (made nothing)
        upstream.finish_all()
        polled = {
            name: httpx.get(f"{b.url}/v1/music/tasks", params={"ids": ",".join(ids)}, headers={"x-api-key": bob})
            for name, ids in queued.items()
        }
        every = httpx.get(f"{a.url}/v1/music/tasks", headers={"x-api-key": bob})
    for name, answer in polled.items():
        asked = asks[name]["continue_song_id"]
        records = data_of(answer)
        assert [r["id"] for r in records] == queued[name]
        assert all(asked in r["fail_reason"] for r in records), (name, records)
        assert "missing-" not in answer.text, (name, answer.text)
    assert "missing-" not in every.text and every.text.count(theirs) == 4  # two extends' and the concat's records
