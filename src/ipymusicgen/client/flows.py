"""The sans-IO vocabulary shared by the client core, its response side and its waiting side.

A flow is a generator that yields `Send(request)`, `Sleep(seconds)` or `Blocking(call)` and receives the response
(or the transport exception, or the call's result); the sync and async faces drive the same flows. `Journal` is
what a flow tells the journal, so no paid task id is ever lost.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import httpx

from ..models.schema import TaskRecord, V2Song

if TYPE_CHECKING:
    from ..storage.journal import Attempt, JournalEntry

T = TypeVar("T")
Record = TaskRecord | V2Song
UpdateCallback = Callable[[list[Record]], None]


class Send(NamedTuple):
    request: httpx.Request
    deadline: float | None = None
    """`time.monotonic()` by which the whole exchange must be over (a `wait(timeout=...)` passes its own)."""


class Sleep(NamedTuple):
    seconds: float


class Blocking(NamedTuple):
    """Work that blocks on its own I/O (not a `Send` of the flow's): the sync face calls it, the async face in a
    thread, so an async client's event loop keeps running meanwhile."""

    call: Callable[[], Any]


Flow = Generator["Send | Sleep | Blocking", Any, T]


class Journal(Protocol):
    """What the client tells a journal (see `journal.py`), so no paid task id is ever lost."""

    def begin(self, endpoint: str, host: str, payload: Mapping[str, Any]) -> str: ...
    def submitted(self, attempt_id: str, ids: list[str], *, v2: bool = False) -> None: ...
    def unknown(self, attempt_id: str, note: str) -> None: ...
    def rejected(self, attempt_id: str, note: str) -> None: ...
    def observe(self, records: Iterable[Record]) -> None: ...
    def downloaded(self, task_id: str, path: str) -> None: ...


class TaskJournal(Journal, Protocol):
    """A journal that can also list what it holds, which `resume()` needs (`journal.Journal` is one)."""

    def unfinished(self, host: str | None = None) -> list[JournalEntry]: ...
    def known(self, ids: Iterable[str]) -> list[Record]: ...
    def attempts(self, outcome: str | None = None, *, hosts: Iterable[str] | None = None) -> list[Attempt]: ...
