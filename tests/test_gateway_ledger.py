"""The ledger's running totals of what is charged: kept in the transactions that change them, on both engines,
equal at every step to the sum recomputed from the calls, and filled from the rows of a ledger made before them."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.storage import ledger as ledger_module
from ipymusicgen.storage.ledger import VIBE, GatewayLedger
from ipymusicgen.storage.ledger_engines import open_ledger
from ipymusicgen.storage.ledger_sqlite import SqliteLedger

USERS = ("ann", "ben", "cy")


def recomputed(ledger: GatewayLedger) -> dict[str, int]:
    """What each user and the team have charged, summed from every call (the rule: estimated while reserved or
    unknown, measured where settled, nothing once released)."""
    sums = dict.fromkeys(("", *USERS), 0)
    for call in ledger.calls():
        if call["state"] == "refused":
            continue
        charge = call["measured"] if call["measured"] is not None else call["estimated"]
        sums[call["user"]] += charge
        sums[""] += charge
    return sums


def random_mix(ledger: GatewayLedger, seed: int, steps: int = 120) -> None:
    """Reserve, finish done/refused/unknown, measure (a lone call settles), and repeat keys, in a random order,
    checking the totals against the recomputed sums at each step."""
    rng = random.Random(seed)
    counts = 10_000
    pending: list[int] = []

    def finish(call_id: int) -> None:
        ledger.finish(call_id, rng.choice(["done", "done", "refused", "unknown"]), 200, b"{}")

    for step in range(steps):
        move = rng.random()
        if move < 0.45:
            key = rng.choice([None, f"k{rng.randrange(20)}"])
            made = ledger.reserve(rng.choice(USERS), key, "/v1/music/generate", "MFV3.0", rng.randint(1, 12))
            if made.kind == "new":
                pending.append(made.call_id)
        elif move < 0.75 and pending:
            finish(pending.pop(rng.randrange(len(pending))))
        elif move < 0.9:  # everything in flight ends, then a lone call is measured (settled when it was done)
            while pending:
                finish(pending.pop())
            ledger.meter(counts)
            made = ledger.reserve(rng.choice(USERS), None, "/v1/music/generate", "MFV3.0", rng.randint(1, 12))
            finish(made.call_id)
            estimate = ledger.calls()[-1]["estimated"]
            counts -= rng.choice([estimate + rng.randint(0, 3), rng.randint(0, estimate)])  # above or below it
            ledger.meter(counts, made.call_id)
        else:
            ledger.meter(counts)
        assert ledger.totals() == recomputed(ledger), f"step {step}"


@pytest.fixture
def no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown call blocks measuring for `IN_FLIGHT_WINDOW`, and credits kept at an estimate are owed for
    `OWED_FOR`: here, for no time, so the mix settles calls too."""
    monkeypatch.setattr(ledger_module, "IN_FLIGHT_WINDOW", -1.0)
    monkeypatch.setattr(ledger_module, "OWED_FOR", -1.0)


def test_the_running_totals_equal_the_recomputed_sums_after_a_random_mix(database: str, no_window: None) -> None:
    with open_ledger(database) as ledger:
        for name in USERS:
            ledger.add_user(name, f"hash-{name}", 1_000_000)
        ledger.set_team_budget(10_000_000)
        ledger.meter(10_000)
        random_mix(ledger, seed=31)
        assert ledger.totals()[""] > 0 and any(c["measured"] is not None for c in ledger.calls())
        assert {c["state"] for c in ledger.calls()} >= {"done", "refused", "unknown"}


def test_the_budget_check_reads_the_totals_not_the_calls(database: str) -> None:
    """A reservation is refused at the budget's edge exactly as before: reserved, settled and released alike."""
    with open_ledger(database) as ledger:
        ledger.add_user("ann", "hash-ann", 10)
        ledger.meter(100)
        first = ledger.reserve("ann", "a", "/v1/music/generate", "MFV3.0", 3).call_id
        assert ledger.reserve("ann", "b", "/v1/music/generate", "MFV3.0", 8).kind == "over"
        ledger.finish(first, "done", 200, b"{}")
        assert ledger.meter(93, first) == 7  # settled up to 7: 3 left
        assert ledger.reserve("ann", "b", "/v1/music/generate", "MFV3.0", 4).kind == "over"
        assert ledger.reserve("ann", "b", "/v1/music/generate", "MFV3.0", 3).kind == "new"
        assert ledger.remaining("ann") == 0
        third = ledger.reserve("ann", "c", "/v1/music/generate", "MFV3.0", 0).call_id
        ledger.finish(third, "refused", 400, b"{}")
        assert ledger.remaining("ann") == 0 and ledger.totals() == {"": 10, "ann": 10}


def test_a_ledger_from_before_the_totals_opens_with_them_filled_from_its_calls(database: str, no_window: None) -> None:
    with open_ledger(database) as ledger:
        for name in USERS:
            ledger.add_user(name, f"hash-{name}", 1_000_000)
        ledger.set_team_budget(10_000_000)
        ledger.meter(10_000)
        random_mix(ledger, seed=7, steps=60)
        before = recomputed(ledger)
        team_left = ledger.remaining("ann")
    _run(  # as before them (and before the ledger had versions)
        database,
        "ALTER TABLE users DROP COLUMN spent",
        "ALTER TABLE team DROP COLUMN spent",
        "DROP TABLE ledger_schema",
    )
    with open_ledger(database) as ledger:
        assert ledger.totals() == before == recomputed(ledger)
        assert ledger.remaining("ann") == team_left
        random_mix(ledger, seed=8, steps=30)  # and kept from then on
    with open_ledger(database) as ledger:  # opened again: filled once, not added twice
        assert ledger.totals() == recomputed(ledger)


def test_a_singer_belongs_to_the_maker_of_its_vibe_call_and_a_ledger_from_before_learns_them_from_its_answers(
    database: str,
) -> None:
    answers = {  # the shapes a vibe answer may take (observed-behaviour.md): data.singer_id, data.id, a bare string
        "s-one": b'{"status": 200, "message": "Success", "data": {"singer_id": "s-one"}}',
        "s-two": b'{"status": 200, "message": "Success", "data": {"id": "s-two"}}',
        "s-three": b'{"status": 200, "message": "Success", "data": "s-three"}',
    }
    with open_ledger(database) as ledger:
        ledger.add_user("ann", "hash-ann", None)
        ledger.add_user("ben", "hash-ben", None)
        for key, body in enumerate(answers.values()):
            made = ledger.reserve("ann", str(key), VIBE, "vibe", 1)
            ledger.finish(made.call_id, "done", 200, body)
        refused = ledger.reserve("ben", "r", VIBE, "vibe", 1)
        ledger.finish(refused.call_id, "refused", 200, b'{"status": 400, "message": "x", "data": {"singer_id": "s-b"}}')
        assert all(ledger.owns_singer("ann", s) for s in answers)
        assert not any(ledger.owns_singer("ben", s) for s in (*answers, "s-b"))
    _run(database, "DROP TABLE singers", "DROP TABLE ledger_schema")  # as a ledger from before singers (and versions)
    with open_ledger(database) as ledger:
        assert all(ledger.owns_singer("ann", s) for s in answers)
        assert not any(ledger.owns_singer("ben", s) for s in (*answers, "s-b"))


def _run(database: str, *statements: str) -> None:
    if database.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            for text in statements:
                conn.execute(text)
        return
    with sqlite3.connect(database) as conn:
        for text in statements:
            conn.execute(text)


def test_a_paid_calls_statements_read_no_whole_table_on_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement a paid call runs (reserve, finish, the meter's reading, a song or singer look-up) finds its
    rows by an index: none reads the calls or tasks tables whole, so its cost does not grow with the ledger."""
    seen: list[str] = []
    connect = SqliteLedger._connect

    def traced(self: SqliteLedger) -> object:
        conn = connect(self)
        conn._conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(SqliteLedger, "_connect", traced)
    path = tmp_path / "ledger.sqlite3"
    with open_ledger(str(path)) as ledger:
        ledger.add_user("ann", "hash-ann", 1000)
        ledger.set_team_budget(10_000)
        ledger.meter(500)
        seen.clear()
        made = ledger.reserve("ann", "k1", "/v1/music/generate", "MFV3.0", 3)
        ledger.finish(made.call_id, "done", 200, b"{}", ["t1", "t2"])
        ledger.meter(497, made.call_id)
        refused = ledger.reserve("ann", "k2", VIBE, "vibe", 1)
        ledger.finish(refused.call_id, "refused", 400, b"{}")
        ledger.add_songs("ann", ["s1"])
        ledger.owns_song("ann", "s1")
        ledger.owns_singer("ann", "x")
        ledger.owned("ann", ["t1"])
        ledger.tasks_of("ann")
        ledger.remaining("ann")
    statements = [s for s in seen if s.split()[0] in ("SELECT", "UPDATE", "INSERT", "DELETE")]
    assert len(statements) > 15
    with sqlite3.connect(path) as db:
        db.create_function("ledger_now", 0, time.time)  # the ledger's clock, as its connections have it
        for text in statements:
            plan = " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + text))
            assert "SCAN calls" not in plan and "SCAN tasks" not in plan, (text, plan)


def test_the_totals_hold_under_concurrent_reservations_finishes_and_readings(database: str, no_window: None) -> None:
    """Eight threads, each with a ledger of its own (its own connections, as gateway processes have), reserve,
    finish and measure at once against one team budget: no deadlock, the budget never exceeded, and the totals
    equal the recomputed sums at the end."""
    with open_ledger(database) as ledger:
        for name in USERS:
            ledger.add_user(name, f"hash-{name}", 120)
        ledger.set_team_budget(200)
        ledger.meter(10_000)
    failures: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with open_ledger(database) as mine:
                for n in range(25):
                    made = mine.reserve(
                        rng.choice(USERS), f"{seed}-{n}", "/v1/music/generate", "MFV3.0", rng.randint(1, 6)
                    )
                    if made.kind == "new":
                        mine.finish(made.call_id, rng.choice(["done", "done", "refused", "unknown"]), 200, b"{}")
                    if rng.random() < 0.3:
                        mine.meter(10_000 - rng.randint(0, 1), made.call_id)  # measured 0 or 1: never above an estimate
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    with open_ledger(database) as ledger:
        sums = recomputed(ledger)
        assert ledger.totals() == sums
        assert sums[""] <= 200 and all(sums[name] <= 120 for name in USERS)
        assert any(c["state"] == "refused" for c in ledger.calls())


def test_a_ledger_from_before_versions_is_brought_up_to_date_and_a_newer_one_is_refused_untouched(
    database: str,
) -> None:
    from ipymusicgen.storage.ledger_migrations import LATEST, LedgerVersionError

    with open_ledger(database) as ledger:
        ledger.add_user("ann", "hash-ann", 9)
        made = ledger.reserve("ann", "a", "/v1/music/generate", "MFV2.0", 2).call_id
        ledger.finish(made, "done", 200, b"{}", ["t1"])
    _run(  # as a ledger made before its schema had numbered steps (issue 39's windows, owners and notes)
        database,
        "DROP INDEX calls_created",
        "DROP INDEX calls_ended",
        *(f"ALTER TABLE calls DROP COLUMN {c}" for c in ("ended_at", "owner", "request", "note")),
        *(f"ALTER TABLE meter DROP COLUMN {c}" for c in ("read_at", "owed", "owed_at")),
        "DROP TABLE ledger_schema",
    )
    with open_ledger(database) as ledger:
        assert ledger.tasks_of("ann") == ["t1"] and ledger.remaining("ann") == 7, "nothing lost"
        ledger.meter(100)
        second = ledger.reserve("ann", "b", "/v1/music/generate", "MFV2.0", 2).call_id
        ledger.finish(second, "done", 200, b"{}")
        assert ledger.meter(97, second) == 3, "the windows work on the upgraded ledger"
        with ledger._cursor(write=False) as cur:
            assert cur.one("SELECT version FROM ledger_schema WHERE id = 1")[0] == LATEST
    _run(database, f"UPDATE ledger_schema SET version = {LATEST + 1} WHERE id = 1")
    with pytest.raises(LedgerVersionError, match="newer version"):
        open_ledger(database)
    _run(database, f"UPDATE ledger_schema SET version = {LATEST} WHERE id = 1")
    with open_ledger(database) as ledger:
        assert ledger.remaining("ann") == 4, "left as it was"
