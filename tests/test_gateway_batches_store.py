"""The gateway's batch store on each ledger engine, without a server: claims never hand one row to two replicas, a
dead replica's rows (and a replica's own claim it lost) are found with the call their key reserved, a batch keeps
to its budget and concurrency, and a rerun of a finished batch reads done at once."""

from __future__ import annotations

import json
import os
import socket

from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.gateway.batch_store import QUEUED, SENDING, BatchStore, NewRow
from ipymusicgen.storage.ledger_engines import open_ledger


def rows(n: int, estimate: int = 2) -> list[NewRow]:
    return [NewRow(f"hash-{i}", json.dumps({"style": f"s{i}", "mv": "MFV2.0"}), False, estimate) for i in range(n)]


def owner(pid: int) -> str:
    """A replica's name as a worker gives it: its process (host, pid, start) and a token of its own."""
    return json.dumps({"host": socket.gethostname(), "pid": pid, "started": None, "worker": f"w{pid}"})


def test_two_replicas_claiming_at_once_never_get_the_same_row(database: str) -> None:
    ledger = open_ledger(database)
    ledger.add_user("kim", "hash-kim", None)
    first, second = BatchStore(ledger), BatchStore(open_ledger(database))
    for name in ("one", "two", "three"):
        assert first.submit("kim", name, rows(5), 5, None, 60.0).kind == "new"
    a, b = owner(1), owner(2)
    got = []
    for _ in range(10):
        got += [(c.batch_id, c.index) for c in first.claim(a, 2)]
        got += [(c.batch_id, c.index) for c in second.claim(b, 3)]
    assert len(got) == len(set(got)) == 15
    assert first.claim(a, 5) == [] and second.claim(b, 5) == []


def test_a_dead_replicas_rows_and_a_replicas_own_lost_claim_are_found(database: str) -> None:
    ledger = open_ledger(database)
    ledger.add_user("lee", "hash-lee", None)
    store = BatchStore(ledger)
    store.submit("lee", "album", rows(4), 4, None, 60.0)
    gone, alive, me = owner(2**22 + 12345), owner(os.getpid()), owner(7)
    store.beat(alive)
    [lost] = store.claim(gone, 1)
    [kept] = store.claim(alive, 1)
    [mine, busy] = store.claim(me, 2)
    found = {(c.batch_id, c.index): c for c in store.dead_claims(me, frozenset({(busy.batch_id, busy.index)}))}
    assert set(found) == {(lost.batch_id, lost.index), (mine.batch_id, mine.index)}, "a beating replica's stays"
    assert found[(lost.batch_id, lost.index)].call_state is None, "never reserved: nothing was sent"
    assert store.take_over(found[(lost.batch_id, lost.index)], me, QUEUED, None, None)
    assert not store.take_over(found[(lost.batch_id, lost.index)], me, QUEUED, None, None), "taken once"
    states = {r["index"]: r["state"] for r in store.status("lee", "album")["rows"]}
    assert states[lost.index] == QUEUED and states[kept.index] == SENDING


def test_a_batch_keeps_to_the_budgets_and_its_concurrency_and_a_finished_rerun_reads_done(database: str) -> None:
    ledger = open_ledger(database)
    ledger.add_user("max", "hash-max", 100)
    store = BatchStore(ledger)
    assert store.submit("max", "big", rows(60, 2), 2, None, 60.0).kind == "over", "120 credits > 100 left"
    assert store.submit("max", "capped", rows(5, 2), 2, 5, 60.0).kind == "over", "10 > the batch's own 5"
    assert store.submit("max", "capped", rows(2, 2), 1, 5, 60.0).kind == "new"
    [first] = store.claim(owner(3), 10)
    assert store.claim(owner(3), 10) == [], "concurrency 1: the next row waits for the first's songs"
    store.ended(first.batch_id, first.index, "complete", None, True)
    [second] = store.claim(owner(3), 10)
    store.ended(second.batch_id, second.index, "complete", None, True)
    again = store.submit("max", "capped", rows(2, 2), 1, 5, 60.0)
    assert again.kind == "attached" and store.status("max", "capped")["state"] == "done"
    assert store.status("someone else", "capped") is None


def test_a_dollar_only_users_batch_is_priced_at_the_rate_or_refused_whole_without_one(database: str) -> None:
    """A user whose service calls are paid from a dollar budget: without a credit rate every row would be refused,
    so the batch is, whole, with nothing recorded (before: accepted, then each row refused); with a rate, the dollars
    left bound the batch in credits at that rate, rounded down."""
    from ipymusicgen.storage import ledger_dollars

    ledger = open_ledger(database)
    ledger.add_user("dee", "hash-dee", None)
    ledger_dollars.set_user_budget(ledger, "dee", 1_000_000)  # $1.00, no credits budget
    store = BatchStore(ledger)
    assert store.submit("dee", "songs", rows(3, 2), 3, None, 60.0).kind == "no_rate"
    assert store.status("dee", "songs") is None, "nothing recorded"
    ledger.credit_usd = 100_000  # $0.10 a credit: $1.00 pays 10 credits
    over = store.submit("dee", "songs", rows(6, 2), 3, None, 60.0)
    assert (over.kind, over.estimate, over.left) == ("over", 12, 10) and "dee's dollar budget" in (over.whose or "")
    assert store.status("dee", "songs") is None
    assert store.submit("dee", "songs", rows(5, 2), 3, None, 60.0).kind == "new"  # 10 credits: exactly what is left
    ledger.credit_usd = 300_000  # $0.30: $1.00 pays 3 credits, not 3.33
    refused = store.submit("dee", "more", rows(2, 2), 3, None, 60.0)
    assert (refused.kind, refused.left) == ("over", 3)
