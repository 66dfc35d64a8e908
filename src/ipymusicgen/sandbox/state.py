"""The sandbox's memory: keys and their credits, tasks and their clock, singers, request counts.

Both hosts and the `Sandbox` object (from other threads) share one `SandboxState`, so every read
and write goes through one lock. A task's status is not stored but derived from the clock, which
keeps the lifecycle exact and lets tests swap in a fake clock.
"""

from __future__ import annotations

import enum
import math
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from .faults import FaultPlan

DEFAULT_MAX_RUNNING = 5
"""Generation calls one key may have running at once, as the real service limits them (then 429)."""
SONGS_PER_CALL = 2
DEFAULT_CALL_COST = 2
CALL_COSTS: Mapping[str, int] = MappingProxyType(
    {
        "": DEFAULT_CALL_COST,  # a call that names no model: the service's default (an older model)
        "MFV3.0": 3,
        "MFV2.0": 2,
        "MFV1.5X": 2,
        "MFV1.5": 2,
        "MFV1.0": 2,
        "v4.5-plus": 3,
        "v4.5": 2,
        "v4.0": 2,
        "v3.5": 2,
        "v3.0": 2,
    }
)
"""Music counts per generation call and model: 2 for older models, 3 for the newest (observed-behaviour.md)."""


class Phase(enum.Enum):
    """Where a sandbox task is; the v1 status code and v2 status text are derived from it."""

    PROCESSING = 1
    PREVIEW = 2
    COMPLETE = 0
    FAILED = 3


@dataclass(frozen=True)
class Segment:
    """One rendered piece of a song; `keep` cuts it short (where an extension took over)."""

    seed_text: str
    seconds: float
    vocal: bool
    keep: float | None = None

    @property
    def length(self) -> float:
        return self.seconds if self.keep is None else min(self.keep, self.seconds)


def total_length(segments: tuple[Segment, ...]) -> float:
    return sum(s.length for s in segments)


def truncate(segments: tuple[Segment, ...], at: float) -> tuple[Segment, ...]:
    """The first `at` seconds of a song, as segments (an extension continues from there)."""
    kept: list[Segment] = []
    left = at
    for segment in segments:
        if left <= 0:
            break
        if segment.length <= left:
            kept.append(segment)
        else:
            kept.append(Segment(segment.seed_text, segment.seconds, segment.vocal, keep=left))
        left -= segment.length
    return tuple(kept)


@dataclass
class Task:
    """One song being made. `segments` is its audio; `prefix` is what came before it (for concat)."""

    id: str
    song_id: str
    owner: str
    created: float
    title: str
    style: str
    lyric: str
    segments: tuple[Segment, ...]
    prefix: tuple[Segment, ...] = ()
    version: int = 1
    fail_code: int = 0
    fail_reason: str = ""
    uploaded: bool = False

    @property
    def seconds(self) -> float:
        return total_length(self.segments)

    @property
    def preview(self) -> tuple[Segment, ...]:
        """The first half of the song: enough to hear it, clearly not the final file."""
        return truncate(self.segments, self.seconds / 2)

    @property
    def whole(self) -> tuple[Segment, ...]:
        """Every segment of the song from its very start: what concat merges."""
        return self.prefix + self.segments


@dataclass
class KeyAccount:
    """A key's entitlements and the metadata key info reports."""

    key: str
    music_counts: int
    name: str
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    updated_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    used_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


class SandboxState:
    """Everything the sandbox remembers, behind one lock."""

    def __init__(
        self,
        *,
        keys: Mapping[str, int],
        stage_seconds: float,
        song_seconds: float,
        seed: int = 0,
        faults: FaultPlan | None = None,
        envelope_tasks: bool = False,
        clock: Callable[[], float] = time.monotonic,
        max_running: int = DEFAULT_MAX_RUNNING,
        call_costs: Mapping[str, int] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self.max_running = max_running
        self._initial_max_running = max_running
        """Generation calls a key may have running at once; one more is answered 429 with Retry-After."""
        self.call_costs = dict(CALL_COSTS if call_costs is None else call_costs)
        """Music counts one generate/submit call takes, per model (`""` = a call that names none)."""
        self._initial_keys = dict(keys)
        self.stage_seconds = stage_seconds
        self.song_seconds = song_seconds
        self.seed = seed
        self.faults = faults or FaultPlan(seed=seed)
        self._initial_faults = list(self.faults.rules)
        self._initial_envelope_tasks = envelope_tasks
        self.clock = clock
        self.files_base = ""
        """`http://host:port` of the v1 app, which serves every audio and cover file."""
        self.on_reset: list[Callable[[], None]] = []
        self.reset()

    def reset(self) -> None:
        """Forget every task, singer and count; restore credits, faults and settings as at the start."""
        with self._lock:
            self.envelope_tasks = self._initial_envelope_tasks
            self.max_running = self._initial_max_running
            self._accounts = {
                key: KeyAccount(key, counts, name=f"sandbox key {i + 1}")
                for i, (key, counts) in enumerate(self._initial_keys.items())
            }
            self._tasks: dict[str, Task] = {}
            self._songs: dict[str, str] = {}
            self._singers: dict[str, str] = {}
            self._counts: Counter[str] = Counter()
            self._rng = random.Random(self.seed)
            self.faults.replace_rules(self._initial_faults)
        for callback in self.on_reset:
            callback()

    # -- ids -----------------------------------------------------------------------------------------

    def new_id(self) -> str:
        """A UUID-shaped id, reproducible for a given seed."""
        with self._lock:
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    # -- keys ----------------------------------------------------------------------------------------

    def knows_key(self, key: str | None) -> bool:
        with self._lock:
            return key is not None and key in self._accounts

    def account(self, key: str) -> KeyAccount:
        with self._lock:
            return self._accounts[key]

    def touch(self, key: str) -> None:
        with self._lock:
            self._accounts[key].used_at = datetime.now(timezone.utc)

    def credits(self, key: str) -> int:
        with self._lock:
            return self._accounts[key].music_counts

    def charge(self, key: str, amount: int) -> bool:
        """Take `amount` music counts if the key has them all; False (nothing taken) otherwise."""
        with self._lock:
            account = self._accounts[key]
            if account.music_counts < amount:
                return False
            account.music_counts -= amount
            account.updated_at = datetime.now(timezone.utc)
            return True

    def call_cost(self, model: str | None) -> int:
        """Music counts a generation call on `model` takes (the newest models cost more)."""
        with self._lock:
            return self.call_costs.get(model or "", self.call_costs.get("", DEFAULT_CALL_COST))

    # -- generations running at once (the per-key limit) -----------------------------------------------

    def running_calls(self, owner: str) -> tuple[int, float]:
        """(calls of this key still being made, seconds until the first of them ends)."""
        with self._lock:
            now = self.clock()
            ends = [t.created + self._length(t) for t in self._tasks.values() if t.owner == owner]
            left = [end - now for end in ends if end > now]
            return -(-len(left) // SONGS_PER_CALL), min(left, default=0.0)

    def _length(self, task: Task) -> float:
        """How long a task takes to finish (a failing one shows its failure after one stage)."""
        return self.stage_seconds * (1 if task.fail_code or task.fail_reason else 2)

    # -- tasks ---------------------------------------------------------------------------------------

    def add(self, task: Task) -> None:
        with self._lock:
            self._tasks[task.id] = task
            self._songs[task.song_id] = task.id

    def get(self, task_or_song_id: str) -> Task | None:
        """A task by its id or its song id (the sandbox accepts either wherever a song is named)."""
        with self._lock:
            task_id = self._songs.get(task_or_song_id, task_or_song_id)
            return self._tasks.get(task_id)

    def tasks_of(self, owner: str, ids: list[str] | None = None) -> list[Task]:
        """The owner's tasks, in the order asked for (unknown ids are left out), or all of them."""
        with self._lock:
            if ids is None:
                return [t for t in self._tasks.values() if t.owner == owner]
            found = (self.get(i) for i in ids)
            return [t for t in found if t is not None and t.owner == owner]

    def phase(self, task: Task) -> Phase:
        """processing → (after one stage) preview → (after two) complete; failures show after one stage."""
        age = self.clock() - task.created
        if age < self.stage_seconds:
            return Phase.PROCESSING
        if task.fail_code or task.fail_reason:
            return Phase.FAILED
        return Phase.PREVIEW if age < 2 * self.stage_seconds else Phase.COMPLETE

    # -- singers -------------------------------------------------------------------------------------

    def add_singer(self, song_id: str) -> str:
        singer_id = "singer-" + self.new_id()[:13]
        with self._lock:
            self._singers[singer_id] = song_id
        return singer_id

    def singer_song(self, singer_id: str) -> str | None:
        with self._lock:
            return self._singers.get(singer_id)

    # -- request counts ------------------------------------------------------------------------------

    def count(self, path: str) -> None:
        with self._lock:
            self._counts[path] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


SETTINGS_MAX_SECONDS = 86_400.0


def checked_settings(body: dict[str, Any]) -> dict[str, Any]:
    """The settings a body asks for, checked: ValueError names the first bad one."""
    changes: dict[str, Any] = {}
    for name in body:
        if name not in ("envelope_tasks", "stage_seconds", "song_seconds", "max_running"):
            raise ValueError(f"unknown setting {str(name)[:40]!r}")
    if "envelope_tasks" in body:
        if not isinstance(body["envelope_tasks"], bool):
            raise ValueError("envelope_tasks must be true or false")
        changes["envelope_tasks"] = body["envelope_tasks"]
    for name in ("stage_seconds", "song_seconds"):
        if name in body:
            value = body[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number of seconds")
            if not 0 < value <= SETTINGS_MAX_SECONDS:
                raise ValueError(f"{name} must be above 0 and at most {SETTINGS_MAX_SECONDS:g} seconds")
            changes[name] = float(value)
    if "max_running" in body:
        value = body["max_running"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
            raise ValueError("max_running must be a whole number from 1 to 10000")
        changes["max_running"] = value
    return changes
