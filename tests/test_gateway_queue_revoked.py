"""A user whose token the admin revokes while their creates wait in the fair queue: none of those rows is sent on the
team's key afterwards; each is cancelled once (its price given back once) and the colleagues' rows go on."""

from __future__ import annotations

import itertools

from pg_server import ledger_database, postgres_server  # noqa: F401  (the fixtures: each engine, the server)

from ipymusicgen.storage import ledger_queue as lq
from ipymusicgen.storage.ledger_engines import open_ledger

GENERATE = "/v1/music/generate"


def test_a_revoked_users_waiting_rows_are_never_sent_and_their_price_comes_back_once(database: str) -> None:
    ledger = open_ledger(database)
    try:
        ledger.add_user("leak", "hash-leak", 30)
        ledger.add_user("col", "hash-col", 30)
        lq.ensure_seats(ledger, 1)
        numbers = itertools.count()

        def place(user: str) -> lq.Placed:
            return lq.enqueue(
                ledger, user, None, GENERATE, "MFV3.0", 3, None, b"{}", 1, 0.0, lambda: f"gq-{next(numbers)}"
            )

        seated = place("col")
        waiting = [place("leak") for _ in range(4)] + [place("col")]
        assert seated.slot == 1 and all(p.shown for p in waiting)
        assert ledger.remaining("leak") == 18
        ledger.revoke("leak")
        lq.release(ledger, seated.reservation.call_id)
        assert lq.cancel_revoked(ledger) == 4
        assert lq.cancel_revoked(ledger) == 0, "each row cancelled once"
        assert ledger.remaining("leak") == 30, "their price given back, once"
        claimed = lq.claim(ledger, 1, 1.0)
        assert claimed is not None and claimed.user == "col"
        lq.release(ledger, claimed.call_id)
        assert lq.claim(ledger, 1, 2.0) is None, "nothing of the revoked user's is ever claimed"
        looked = lq.look_up(ledger, "leak", None)
        assert {v.row_state for v in looked.values()} == {"cancelled"}
    finally:
        ledger.close()
