"""A store garbage-collected without `close()` gives its use of the file's shared connection back (deferred: its
finalizer only queues the release, done by the next `acquire` or `open_connections`), exactly once: a store closed
and then collected never releases a second time under the feet of the file's other users."""

from __future__ import annotations

import gc
import sqlite3
import threading
from pathlib import Path

from helpers import WAIT, wait_until

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


class _SlowClose:
    """A connection whose close takes its time (as a last close does, checkpointing the WAL into the file)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.closing, self.go_on, self.done = db, threading.Event(), threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)

    def close(self) -> None:
        self.closing.set()
        assert self.go_on.wait(WAIT)
        self.db.close()
        self.done.set()


class _WatchedEvent(threading.Event):
    """An event that tells whether anyone waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


def test_a_file_is_opened_again_only_once_its_last_close_is_done(tmp_path: Path) -> None:
    """While the last user's close still writes the file, a new store of it waits, rather than open the file and
    read its header meanwhile: 7 runs in 150 of the many-threads test above took the half-checkpointed file for a
    damaged journal ("database disk image is malformed") once collections were quick."""
    path = tmp_path / "journal.sqlite3"
    first = LibraryStore(path)
    shared = first._shared
    assert shared is not None
    slow = _SlowClose(shared.db)
    shared.db = slow  # type: ignore[assignment]
    shared.closed = watched = _WatchedEvent()
    closer = threading.Thread(target=first.close)
    closer.start()
    assert slow.closing.wait(WAIT)
    opened: list[tuple[ExtrasStore, bool]] = []
    opener = threading.Thread(target=lambda: opened.append((ExtrasStore(path), slow.done.is_set())))
    opener.start()
    wait_until(lambda: bool(opened) or watched.waited.is_set(), "the new store opened, or waiting for the close")
    slow.go_on.set()
    closer.join(WAIT)
    opener.join(WAIT)
    ((second, after_close),) = opened
    assert after_close, "the file was opened again while its last close was still under way"
    assert users_of(path) == 1
    second.close()
    assert users_of(path) is None


def test_a_thread_holding_the_files_lock_opens_it_again_without_waiting_for_a_close_it_holds_up(
    tmp_path: Path,
) -> None:
    """A close needs the connection's lock: a thread that holds it and opens a store of the file meanwhile does not
    wait for that close (it would wait the whole busy timeout, 10 s, for nothing), it opens beside it."""
    path = tmp_path / "journal.sqlite3"
    first, second = LibraryStore(path), ExtrasStore(path)
    shared = first._shared
    assert shared is not None
    shared.closed = watched = _WatchedEvent()
    with first.lock:
        first.close()
        del second  # collected unclosed: the next acquire on any thread gives its use back, closing the file
        gc.collect()
        closer = threading.Thread(target=open_connections)  # the last use given back: its close waits for the lock
        closer.start()
        wait_until(lambda: shared.users == 0, "the last user's close under way")
        third = LibraryStore(path)
        assert not watched.waited.is_set(), "waited for a close that the lock held here holds up"
    closer.join(WAIT)
    assert watched.is_set() and users_of(path) == 1
    third.close()
    assert users_of(path) is None
