"""Task state: the one place that decides what a task record means, and a set of watched tasks."""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .schema import TaskRecord, V2Song


class TaskState(str, enum.Enum):
    """Where a song is in its life; `PREVIEW` means a first streamable audio exists."""

    PROCESSING = "processing"
    PREVIEW = "preview"
    COMPLETE = "complete"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (TaskState.COMPLETE, TaskState.FAILED)

    @property
    def word(self) -> str:
        """The state in a listener's words (views, agents): writing, preview, ready or failed."""
        return STATE_WORDS[self.value]


STATE_WORDS = MappingProxyType({"processing": "writing", "preview": "preview", "complete": "ready", "failed": "failed"})
"""Each state's word; before its first status a song is "queued" (`SONG_STATES` in order)."""
SONG_STATES = ("queued", "writing", "preview", "ready", "failed")
"""The states a song goes through, in order, as every view and tool words them."""


V1_PREVIEW_STATUS = 2
V1_COMPLETE_STATUS = 0
V1_FAILED_STATUS = 3


def v1_state(status: int | None, fail_code: int | None, fail_reason: str | None) -> TaskState:
    """Derive a v1 state as clients observe it (observed-behaviour.md): failure signals win."""
    if fail_code or fail_reason or status == V1_FAILED_STATUS or (status is not None and status < 0):
        return TaskState.FAILED
    if status == V1_COMPLETE_STATUS:
        return TaskState.COMPLETE
    if status == V1_PREVIEW_STATUS:
        return TaskState.PREVIEW
    return TaskState.PROCESSING


_V2_COMPLETE = frozenset({"finished", "complete", "completed", "success", "succeeded"})
_V2_FAILED = frozenset({"error", "failed", "failure", "fail"})
_V2_PREVIEW = frozenset({"stream", "streaming"})


def v2_state(status: str | None, audio: str | None) -> TaskState:
    """Derive a v2 state from its text status; both RUNNING/FINISHED and stream/complete families."""
    text = (status or "").strip().lower()
    if text in _V2_FAILED:
        return TaskState.FAILED
    if text in _V2_COMPLETE:
        return TaskState.COMPLETE
    if text in _V2_PREVIEW or (audio and text not in {"", "pending", "queued"}):
        return TaskState.PREVIEW
    return TaskState.PROCESSING


KEPT_FIELDS = ("title", "style", "tags", "lyric", "audio_url", "audio", "cover_url", "image", "song_id")
"""Fields an earlier answer may have filled and a later one sends empty (the v2 query blanks title and
lyric, observed-behaviour.md): an empty value in a later answer never erases them."""


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def merge_record(earlier: TaskRecord | V2Song | None, later: TaskRecord | V2Song) -> TaskRecord | V2Song:
    """`later`, with what `earlier` said kept wherever `later` carries an empty field.

    Works for either record kind (a `model_copy`), so a watcher, `wait()` and a batch all show the
    title and lyrics of the submit answer after the v2 query has dropped them.
    """
    if earlier is None or type(earlier) is not type(later):
        return later
    kept = {
        name: getattr(earlier, name)
        for name in KEPT_FIELDS
        if name in type(later).model_fields and _blank(getattr(later, name)) and not _blank(getattr(earlier, name))
    }
    return later.model_copy(update=kept) if kept else later


class Song(Protocol):
    """What a watcher needs of a task, v1 or v2."""

    id: str

    @property
    def state(self) -> TaskState: ...


class TaskSet:
    """The latest known record of each watched task; thread-safe, keyed by id.

    `update()` returns only the records that changed, so a watcher redraws only what moved.
    """

    def __init__(self, ids: Iterable[str] = (), *, v2_ids: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, TaskRecord | V2Song | None] = {}
        self._v2: set[str] = set()
        self.add(ids)
        self.add(v2_ids, v2=True)

    def add(self, ids: Iterable[str], *, v2: bool = False) -> list[str]:
        added = []
        with self._lock:
            for task_id in ids:
                if task_id not in self._records:
                    self._records[task_id] = None
                    added.append(task_id)
                if v2:
                    self._v2.add(task_id)
        return added

    def add_records(self, records: Iterable[TaskRecord | V2Song]) -> list[TaskRecord | V2Song]:
        """Watch tasks starting from records already in hand (a submit answer), v2 ones as v2.

        The records seed the set, so what they say (a v2 song's title and lyrics) outlives later
        answers that leave it empty. Returns the records as stored.
        """
        records = list(records)
        for record in records:
            self.add([record.id], v2=getattr(record, "version", 1) == 2)
        return self.update(records)

    def update(self, records: Iterable[TaskRecord | V2Song]) -> list[TaskRecord | V2Song]:
        """Store the latest records, merged over the earlier ones (see `merge_record`); the changed ones."""
        changed = []
        with self._lock:
            for record in records:
                if record.id not in self._records:
                    continue
                merged = merge_record(self._records[record.id], record)
                if self._records[record.id] != merged:
                    self._records[record.id] = merged
                    changed.append(merged)
        return changed

    def get(self, task_id: str) -> TaskRecord | V2Song | None:
        with self._lock:
            return self._records.get(task_id)

    def is_v2(self, task_id: str) -> bool:
        """Whether the task was added as a v2 song (queried on the v2 host)."""
        with self._lock:
            return task_id in self._v2

    @property
    def ids(self) -> list[str]:
        with self._lock:
            return list(self._records)

    def unfinished(self) -> tuple[list[str], list[str]]:
        """(v1 ids, v2 ids) of tasks not yet complete or failed."""
        with self._lock:
            pending = [i for i, r in self._records.items() if r is None or not r.state.finished]
            return [i for i in pending if i not in self._v2], [i for i in pending if i in self._v2]

    @property
    def all_finished(self) -> bool:
        v1, v2 = self.unfinished()
        return not v1 and not v2

    def records(self) -> list[TaskRecord | V2Song]:
        with self._lock:
            return [r for r in self._records.values() if r is not None]
