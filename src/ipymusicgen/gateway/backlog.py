"""Paid answers the ledger could not take when they arrived (a database restarting), kept until it can.

The upstream has answered and charged: its task ids are the user's, whatever the ledger's state. So the answer goes
back to the user at once, and what the ledger must record (the call's end, its tasks' owner) is kept in memory and
in a spill file (private, written before the answer leaves, as the journal spills what it cannot write), and
written by one daemon thread as soon as the ledger answers again. A gateway killed meanwhile leaves the spill file:
the next `gateway serve` or `gateway reconcile` on the same machine takes it. Writing twice is harmless: the ledger
leaves a call already done or refused as it is. The synchronous engines' calls (`engine_routes`: ElevenLabs, Lyria)
go the same way (`engine`: their own table and id space, `ledger_dollars.finish`), their answer being the audio.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import stat
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
PRIVATE_FILE = 0o600
RETRY_FIRST, RETRY_MOST = 0.2, 5.0
"""Seconds between tries while the ledger is down: doubling from the first to at most the most."""


def spill_folder(database: str, beside: Path) -> Path:
    """Where a gateway on `database` spills what its ledger could not take: a folder of its own per database (a
    hash of the URL: no password in a file name), in `beside` (the SQLite ledger's folder, or the journal's)."""
    digest = hashlib.sha256(database.encode()).hexdigest()[:12]
    return beside / f"gateway-unsaved-{digest}"


def default_spill_folder(ledger: Any) -> Path:
    """Beside a SQLite ledger's file; for PostgreSQL, beside the journal (this machine's own folder)."""
    path = getattr(ledger, "path", None)
    if isinstance(path, Path):
        return spill_folder(str(path), path.parent)
    from ..storage.journal import default_journal_path

    return spill_folder(ledger.url, Path(default_journal_path()).parent)


@dataclass
class Unwritten:
    """One call's end, as `GatewayLedger.finish` takes it (an engine call's: as `ledger_dollars.finish` does)."""

    call_id: int
    state: str
    status_code: int | None
    body: bytes | None
    task_ids: list[str] = field(default_factory=list)
    path: Path | None = None
    engine: bool = False
    """An engine call (`engine_calls`, its own ids), not one of the service's `calls`."""
    media_type: str | None = None
    note: str | None = None

    def saved(self) -> dict[str, Any]:
        body = None if self.body is None else base64.b64encode(self.body).decode()
        return {"call_id": self.call_id, "state": self.state, "status_code": self.status_code, "body": body,
                "task_ids": self.task_ids, "engine": self.engine, "media_type": self.media_type,
                "note": self.note}  # fmt: skip

    @classmethod
    def from_saved(cls, saved: dict[str, Any], path: Path) -> Unwritten:
        body = saved.get("body")
        return cls(int(saved["call_id"]), str(saved["state"]), saved.get("status_code"),
                   None if body is None else base64.b64decode(body), [str(i) for i in saved.get("task_ids") or []],
                   path, saved.get("engine") is True, saved.get("media_type"), saved.get("note"))  # fmt: skip


class Backlog:
    def __init__(self, ledger: Any, folder: Path) -> None:
        self.ledger = ledger
        self.folder = folder
        self._lock = threading.Lock()
        self._items: list[Unwritten] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def keep(self, item: Unwritten) -> None:
        """Keep a call's end the ledger refused just now: spilled to a file first, then retried in the background."""
        item.path = self._spill(item)
        with self._lock:
            self._items.append(item)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="gateway-backlog", daemon=True)
                self._thread.start()
        self._wake.set()

    def kept(self, call_id: int, engine: bool = False) -> Unwritten | None:
        """This gateway's kept end of a call (an engine call's: `engine`), if the ledger has not taken it yet (a
        repeat answers from it)."""
        with self._lock:
            return next((i for i in self._items if i.call_id == call_id and i.engine == engine), None)

    def take_spills(self) -> int:
        """Write what an earlier process spilled (its files in this folder), removing each once written; the number
        written. Only regular files of this user are taken, as the journal's spills."""
        taken = 0
        if not self.folder.is_dir():
            return 0
        for path in sorted(self.folder.glob("*.json")):
            try:
                found = path.lstat()
                if not stat.S_ISREG(found.st_mode) or (hasattr(os, "getuid") and found.st_uid != os.getuid()):
                    continue
                item = Unwritten.from_saved(json.loads(path.read_text()), path)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            with self._lock:
                if any(mine.path == path for mine in self._items):
                    continue  # this process's own, retried by its thread
            if self._write(item):
                taken += 1
        return taken

    def flush(self) -> bool:
        """Try to write everything kept now; whether nothing is left."""
        with self._lock:
            items = list(self._items)
        for item in items:
            if self._write(item):
                with self._lock:
                    self._items.remove(item)
        return not len(self)

    def close(self) -> None:
        """Stop retrying (what is left stays in its spill files for the next start)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _write(self, item: Unwritten) -> bool:
        try:
            if item.engine:
                from ..storage import ledger_dollars

                ledger_dollars.finish(self.ledger, item.call_id, item.state, item.status_code, item.media_type,
                                      item.body, item.note)  # fmt: skip
            else:
                self.ledger.finish(item.call_id, item.state, item.status_code, item.body, item.task_ids)
        except Exception:
            return False
        if item.path is not None:
            with suppress(OSError):
                item.path.unlink(missing_ok=True)
        return True

    def _run(self) -> None:
        wait = RETRY_FIRST
        while not self._stop.is_set():
            if self.flush():
                wait = RETRY_FIRST
                self._wake.wait()
                self._wake.clear()
                continue
            if self._stop.wait(wait):
                return
            wait = min(wait * 2, RETRY_MOST)

    def _spill(self, item: Unwritten) -> Path | None:
        """The call's end in a private file of its own (None, logged, if the folder cannot take it: then only
        memory holds it until the ledger does)."""
        kind = "engine-call" if item.engine else "call"
        target = self.folder / f"{kind}-{item.call_id}-{uuid.uuid4().hex[:8]}.json"
        partial = target.with_suffix(".part")
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(json.dumps(item.saved()))
                file.flush()
                os.fsync(file.fileno())
            partial.replace(target)
        except OSError:
            with suppress(OSError):
                partial.unlink(missing_ok=True)
            log.warning("could not spill call %s's answer to %s: kept in memory only", item.call_id, self.folder)
            return None
        return target
