"""A store garbage-collected without `close()` gives its use of the file's shared connection back (deferred: its
finalizer only queues the release, done by the next `acquire` or `open_connections`), exactly once: a store closed
and then collected never releases a second time under the feet of the file's other users."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.storage.extras import ExtrasStore
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.library import LibraryStore
from ipymusicgen.storage.shared_connection import open_connections


def users_of(path: Path) -> int | None:
    found = [shared.users for shared in open_connections() if shared.path == path.resolve()]
    return found[0] if found else None


def test_each_kind_of_store_collected_unclosed_gives_its_use_back_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    kept = Journal(path)
    try:
        for make in (LibraryStore, ExtrasStore, BatchStore, Journal):
            dropped = make(path)
            assert users_of(path) == 2
            del dropped
            gc.collect()
            assert users_of(path) == 1, make.__name__
        closed = LibraryStore(path)
        closed.close()
        closed.close()  # twice, then collected: given back once only
        del closed
        gc.collect()
        assert users_of(path) == 1 and kept.history() == []  # the kept journal's connection is still open
    finally:
        kept.close()
    assert users_of(path) is None


def test_stores_collected_on_many_threads_while_others_open_the_file(tmp_path: Path) -> None:
    """Collections on several threads (each may run inside another's `acquire`) while stores open and close:
    no deadlock, no error, and the file is let go once the last store is gone."""
    path = tmp_path / "busy.sqlite3"
    errors: list[BaseException] = []

    def churn(n: int) -> None:
        try:
            for i in range(30):
                store = LibraryStore(path) if (i + n) % 2 else ExtrasStore(path)
                if i % 3 == 0:
                    store.close()
                del store
                if i % 5 == 0:
                    gc.collect()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads) and errors == []
    gc.collect()
    assert users_of(path) is None
