"""The waiting side of the client: one polling round, wait to the end, resume from the journal.

Sans-IO like the rest of the core: every flow here yields `Send`/`Sleep` through the endpoint flows of
`_Core` (`_tasks_flow`, `_query_v2_flow`), so the sync and async faces share them. What `wait()` is
given is routed here too: a `GenerateResult`, the songs `submit_v2()` returned, records, or ids.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from ..config import MAX_SECONDS
from ..errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    AuthenticationError,
    FieldProblem,
    MusicGenError,
    RequestValidationError,
    TaskFailedError,
    WaitTimeoutError,
)
from ..models.schema import GenerateResult, TaskRecord, V2Song
from ..models.tasks import TaskSet, TaskState
from .flows import Blocking, Flow, Record, Sleep, TaskJournal, UpdateCallback
from .retry import RETRYABLE_STATUS, backoff_delay

if TYPE_CHECKING:
    from ..config import Settings
    from ..storage.journal import Attempt
    from .flows import Journal

MAX_ID_LENGTH = 256
"""The longest task id accepted (the service's are 36-character UUIDs): a longer one cannot travel in a URL."""
Waitable = str | GenerateResult | Record | Iterable[Any]
"""What `wait()` takes: ids (a list, or one comma-joined string), a GenerateResult, records, or songs."""


def _describe_attempt(attempt: Attempt) -> str:
    describe = getattr(attempt, "describe", None)
    if callable(describe):
        return str(describe())
    payload = attempt.payload or {}
    what = payload.get("title") or payload.get("style") or payload.get("prompt") or payload.get("song_id") or ""
    when = datetime.fromtimestamp(attempt.created_at).strftime("%Y-%m-%d %H:%M")
    return f"{attempt.endpoint} {str(what)[:40]!r} at {when}" if what else f"{attempt.endpoint} at {when}"


@dataclass(frozen=True)
class Resumed:
    """What `resume()` found: unfinished task ids (v1, v2), doubtful paid requests, and the records once waited."""

    v1_ids: tuple[str, ...] = ()
    v2_ids: tuple[str, ...] = ()
    unknown: tuple[Attempt, ...] = ()
    """Paid requests whose outcome is unknown: check key info and the task list before resending."""
    records: tuple[Record, ...] = ()
    """The finished records (only with `wait=True`)."""
    recovered: tuple[Record, ...] = ()
    """Engine songs whose lost answer a team gateway gave back (or settled) under their Idempotency-Key."""

    @property
    def ids(self) -> list[str]:
        return [*self.v1_ids, *self.v2_ids]

    def __repr__(self) -> str:
        done = f", {len(self.records)} finished" if self.records else ""
        done += f", {len(self.recovered)} engine song(s) settled by a team gateway" if self.recovered else ""
        head = f"{len(self.v1_ids)} v1 + {len(self.v2_ids)} v2 unfinished, {len(self.unknown)} unknown{done}"
        if not self.unknown:
            return f"Resumed({head})"
        shown = "; ".join(_describe_attempt(a) for a in self.unknown[:5])
        more = f"; and {len(self.unknown) - 5} more" if len(self.unknown) > 5 else ""
        return f"Resumed({head}: outcome unknown, check before resending: {shown}{more})"


def is_transient(exc: BaseException) -> bool:
    """An error worth polling through: the network or the service had a bad moment (not a wrong key or id)."""
    if isinstance(exc, APIConnectionError | APIResponseValidationError):
        return True
    return (
        isinstance(exc, APIStatusError)
        and not isinstance(exc, AuthenticationError)
        and (exc.status_code in RETRYABLE_STATUS)
    )


def wait_timeout_error(tasks: TaskSet, timeout: float, last_error: BaseException | None = None) -> WaitTimeoutError:
    v1, v2 = tasks.unfinished()
    problem = f" The last poll failed: {last_error}" if last_error is not None else ""
    seconds = f"{timeout:.2f}".rstrip("0").rstrip(".")  # 0.5 s stays 0.5, not 0; 3600 stays 3600
    return WaitTimeoutError(
        f"{len(v1) + len(v2)} task(s) still unfinished after {seconds} s; they go on server-side: wait again "
        f"or resume later.{problem}",
        pending=v1 + v2,
    )


def _refuse(field: str, message: str) -> RequestValidationError:
    return RequestValidationError([FieldProblem(field, message)])


def check_id(value: Any, field: str = "ids") -> str:
    """One task id, checked: text, not blank, no comma (ids travel comma-joined in `?ids=a,b`)."""
    if not isinstance(value, str):
        raise _refuse(field, f"a task id must be text (got {type(value).__name__})")
    task_id = value.strip()
    if not task_id:
        raise _refuse(field, "a task id is empty")
    if len(task_id) > MAX_ID_LENGTH:
        raise _refuse(field, f"a task id is too long ({len(task_id)} characters; at most {MAX_ID_LENGTH})")
    if "," in task_id:
        raise _refuse(field, f"a task id cannot contain a comma (got {task_id[:60]!r})")
    if any(not ch.isprintable() for ch in task_id):
        raise _refuse(field, f"a task id cannot contain control characters (got {task_id[:60]!r})")
    return task_id


def split_ids(ids: Any, field: str = "ids") -> tuple[list[str], list[str]]:
    """(v1 ids, v2 ids) from ids, a comma-joined string, a GenerateResult, records or songs; refuse the rest."""
    if ids is None:
        raise _refuse(field, "give task ids (a list, or a GenerateResult / the songs a submit returned)")
    if isinstance(ids, str):
        parts = [p for p in ids.split(",") if p.strip()]
        if not parts:
            raise _refuse(field, "no task id given")
        return [check_id(p, field) for p in parts], []
    if isinstance(ids, GenerateResult):
        return [check_id(i, field) for i in ids.ids], []
    if isinstance(ids, V2Song):
        return [], [check_id(ids.id, field)]
    if isinstance(ids, TaskRecord):
        return [check_id(ids.id, field)], []
    if isinstance(ids, bytes | dict) or not isinstance(ids, Iterable):
        raise _refuse(field, f"expected task ids, got {type(ids).__name__}")
    v1: list[str] = []
    v2: list[str] = []
    for item in ids:
        if isinstance(item, V2Song):
            v2.append(check_id(item.id, field))
        elif isinstance(item, TaskRecord):
            v1.append(check_id(item.id, field))
        elif isinstance(item, GenerateResult):
            v1.extend(check_id(i, field) for i in item.ids)
        else:
            v1.append(check_id(item, field))
    return v1, v2


def v1_ids(ids: Any) -> list[str]:
    """Ids for the v1 task endpoint; v2 songs are refused (they are read with `query_v2`)."""
    v1, v2 = split_ids(ids)
    if v2:
        raise _refuse("ids", "v2 songs are read with query_v2() or wait(), not tasks()")
    return v1


def check_seconds(value: Any, field: str, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(field, f"must be a number of seconds (got {value!r})")
    seconds = float(value) if isinstance(value, float) or abs(value) <= MAX_SECONDS else math.inf  # no OverflowError
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "more than 0"
        raise _refuse(field, f"must be a finite number of seconds, {bound} (got {str(value)[:40]})")
    if seconds > MAX_SECONDS:
        raise _refuse(field, f"must be at most {MAX_SECONDS:.0e} seconds (got {seconds:.3g})")
    return seconds


def _empty(ids: Any) -> bool:
    return isinstance(ids, tuple | list) and not ids


class WaitFlows:
    """Polling, waiting and resuming, mixed into `_Core` (which supplies settings, journal and endpoint flows)."""

    settings: Settings
    journal: Journal | None
    _record_listeners: list[UpdateCallback]
    _resume_listeners: list[Callable[[], None]]

    if TYPE_CHECKING:  # provided by _Core

        def _tasks_flow(self, ids: Any, deadline: float | None = None) -> Flow[list[TaskRecord]]: ...
        def _query_v2_flow(self, song_id: str, deadline: float | None = None) -> Flow[V2Song]: ...
        def _open_journal(self) -> Journal: ...

    def _poll_flow(self, tasks: TaskSet, deadline: float | None = None) -> Flow[list[Record]]:
        """One round: one batched v1 query for every unfinished v1 task, one query per v2 song."""
        v1, v2 = tasks.unfinished()
        records: list[Record] = []
        if v1:
            records.extend((yield from self._tasks_flow(v1, deadline)))
        for song_id in v2:
            records.append((yield from self._query_v2_flow(song_id, deadline)))
        changed = tasks.update(records)
        if changed:
            for listener in list(self._record_listeners):
                listener(changed)
        return changed

    def _wait_flow(
        self,
        ids: Any,
        v2_ids: Any,
        timeout: float | None,
        interval: float | None,
        on_update: UpdateCallback | None,
        raise_on_failure: bool,
    ) -> Flow[list[Record]]:
        v1, v2 = ([], []) if _empty(ids) else split_ids(ids)
        if v2_ids is not None and not _empty(v2_ids):
            more_v1, more_v2 = split_ids(v2_ids, "v2_ids")
            v2 += more_v1 + more_v2  # anything given as v2_ids is a v2 id
        if not v1 and not v2:
            return []  # nothing to wait for (an empty list); None or odd ids were refused above
        timeout = self.settings.wait_timeout if timeout is None else check_seconds(timeout, "timeout", allow_zero=True)
        interval = self.settings.poll_interval_for(
            None if interval is None else check_seconds(interval, "interval", allow_zero=False)
        )
        tasks = TaskSet(v1, v2_ids=v2)
        given = ids if isinstance(ids, list | tuple) else ()
        seeds = [r for r in given if hasattr(r, "state")]  # submit answers seed: their titles outlive blanks
        tasks.update([*self._journalled(set(v2) - {r.id for r in seeds}), *seeds])
        deadline = time.monotonic() + timeout
        failures = 0
        while True:
            try:
                changed = yield from self._poll_flow(tasks, deadline)
            except MusicGenError as exc:
                if not is_transient(exc):
                    raise
                failures += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise wait_timeout_error(tasks, timeout, exc) from exc
                pause = max(interval, backoff_delay(failures - 1, getattr(exc, "response", None)))
                yield Sleep(min(pause, remaining))
                continue
            failures = 0
            if changed and on_update is not None:
                on_update(changed)
            if tasks.all_finished:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise wait_timeout_error(tasks, timeout)
            yield Sleep(min(interval, remaining))
        finished = [tasks.get(i) for i in tasks.ids]
        records = [r for r in finished if r is not None]
        failed = [r for r in records if r.state is TaskState.FAILED]
        if failed and raise_on_failure:
            raise TaskFailedError(failed[0])
        return records

    def _journalled(self, ids: set[str]) -> list[Record]:
        """What the journal knows of tasks given by bare id (a v2 title and lyrics the v2 query answers blank)."""
        known = getattr(self.journal, "known", None)  # a TaskJournal's; a bare Journal protocol may not have it
        if not ids or known is None:
            return []
        try:
            return list(known(ids))
        except Exception:  # a journal that cannot be read now only costs the seed, never the wait
            return []

    def _resume_journal(self) -> TaskJournal:
        """The journal to resume from: this client's, else the durable one of the settings (kept for polling)."""
        if self.journal is None:
            self.journal = self._open_journal()
        if not hasattr(self.journal, "unfinished") or not hasattr(self.journal, "attempts"):
            raise MusicGenError("resume() needs a journal that lists tasks, such as ipymusicgen.journal.Journal.")
        return cast(TaskJournal, self.journal)

    def unfinished(self) -> Resumed:
        """What the journal holds for this client's hosts: unfinished tasks and doubtful paid requests."""
        journal = self._resume_journal()
        base, v2_base = self.settings.base_url, self.settings.v2_base_url
        v1 = tuple(e.id for e in journal.unfinished(base) if e.version == 1)
        v2 = tuple(e.id for e in journal.unfinished(v2_base) if e.version == 2)
        engines = (self.settings.elevenlabs_base_url, self.settings.gemini_base_url)  # engine calls may be unknown too
        unknown = tuple(journal.attempts(outcome="unknown", hosts=(base, v2_base, *engines)))  # however spelled
        return Resumed(v1, v2, unknown)

    def _resume_flow(
        self, wait: bool, timeout: float | None, interval: float | None, on_update: UpdateCallback | None
    ) -> Flow[Resumed]:
        found = self.unfinished()
        if found.unknown:  # an engine song's lost answer, asked again of a team gateway only (engine_recovery)
            from .engine_recovery import recover

            calls, unknown = self.engine_calls, found.unknown
            got, left = yield Blocking(lambda: recover(calls, unknown))  # its own HTTP: off an async client's loop
            found = replace(found, unknown=tuple(left), recovered=tuple(got))  # a gateway's words in their notes
        for listener in list(self._resume_listeners):
            listener()  # after unfinished(): the journal is open, so the archive knows where to look
        if not wait or not found.ids:
            return found
        wanted = set(found.ids)  # seeded with what the journal knows, so v2 titles outlive the query's blanks
        seeds = [e.as_record() for e in self._resume_journal().unfinished() if e.id in wanted]
        records = yield from self._wait_flow(seeds, (), timeout, interval, on_update, False)
        return replace(found, records=tuple(records))


def archive_time_left(client: Any, timeout: float | None, started: float) -> float:
    """What a wait's timeout leaves for the archive once the songs are finished."""
    total = client.settings.wait_timeout if timeout is None else timeout
    return max(0.0, total - (time.monotonic() - started))


def archive_notes(client: Any, records: list[Any], timeout: float | None, started: float) -> list[str]:
    """After a `--wait` (magics, the CLI): wait, within what `timeout` leaves, for the complete songs' archive when
    the client archives, so `waveform(id)` / `analyze(id)` find them next; one line per song whose archive failed
    or is not there yet (never an error: the songs themselves are finished and handed back)."""
    found = client.wiring.wait_archived(client, records, archive_time_left(client, timeout, started))
    if found is None:  # this client archives nothing: nothing to wait for
        return []
    total = client.settings.wait_timeout if timeout is None else timeout
    notes = []
    for task_id, outcome in found.items():
        if outcome is None:
            notes.append(f"Song {task_id} not archived within the wait's timeout ({total:g} s); still being archived.")
        elif isinstance(outcome, str):
            notes.append(f"Song {task_id} was not archived: {outcome}")
    return notes


def archive_outcome(found: Mapping[str, Any] | None, timeout: float | None) -> None:
    """`wait(archived=True)`'s end: refused when the client archives nothing, a timeout for songs not yet tried."""
    if found is None:
        raise MusicGenError(
            "wait(archived=True): this client archives nothing (archive=False, MUSICGEN_ARCHIVE=off, or no journal)."
        )
    pending = [task_id for task_id, outcome in found.items() if outcome is None]
    if pending:
        raise WaitTimeoutError(
            f"{len(pending)} finished song(s) not archived within the wait's timeout ({timeout} s); "
            "they are still being archived: " + ", ".join(pending),
            pending,
        )
