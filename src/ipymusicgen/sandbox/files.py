"""Audio and cover files of sandbox songs: rendered on first download, then kept in a bounded cache.

Rendering only when a file is asked for keeps `generate` instant and idle sandboxes cheap; the
cache keeps a notebook that replays a song from re-rendering it, without growing without bound.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

from .state import Phase, SandboxState, Segment, Task

if TYPE_CHECKING:
    import numpy as np

CACHE_ITEMS = 48
_NAME = re.compile(r"^(?P<id>[A-Za-z0-9_.-]+?)(?P<preview>-preview)?\.(?P<ext>mp3|wav|svg)$")


class FileBody(NamedTuple):
    content: bytes
    media_type: str


def audio_url(base: str, task: Task, *, preview: bool = False) -> str:
    return f"{base}/files/{task.id}{'-preview' if preview else ''}.mp3"


def cover_url(base: str, task: Task) -> str:
    return f"{base}/files/{task.id}.svg"


def wav_url(base: str, task: Task) -> str:
    return f"{base}/files/{task.id}.wav"


def render_segments(segments: tuple[Segment, ...]) -> np.ndarray:
    """Samples of a song: each segment synthesized (and cut) then joined with short crossfades."""
    from . import audio

    parts = []
    for segment in segments:
        samples = audio.synthesize(segment.seed_text, seconds=segment.seconds, vocal=segment.vocal)
        if segment.keep is not None:
            samples = samples[: round(segment.length * audio.SAMPLE_RATE)]
        parts.append(samples)
    return audio.concatenate(parts) if len(parts) > 1 else parts[0]


class FileStore:
    """Looks up, renders and caches `/files/{name}`; None means 404 (unknown or not ready yet)."""

    def __init__(self, state: SandboxState, max_items: int = CACHE_ITEMS) -> None:
        self.state = state
        self.max_items = max_items
        self._cache: OrderedDict[str, FileBody] = OrderedDict()
        self._lock = threading.Lock()
        state.on_reset.append(self.clear)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def ready(self, name: str) -> tuple[Task, str, bool] | None:
        """(task, extension, is preview) if the file may be served now."""
        match = _NAME.match(name)
        task = self.state.get(match["id"]) if match else None
        if match is None or task is None or not task.segments:
            return None
        phase = self.state.phase(task)
        preview = bool(match["preview"])
        if preview and match["ext"] == "mp3" and phase in (Phase.PREVIEW, Phase.COMPLETE):
            return task, "mp3", True
        if not preview and phase is Phase.COMPLETE:
            return task, match["ext"], False
        return None

    def get(self, name: str) -> FileBody | None:
        """The file's bytes; CPU-heavy on a cache miss, so call it from a worker thread."""
        found = self.ready(name)
        if found is None:
            return None
        with self._lock:
            if name in self._cache:
                self._cache.move_to_end(name)
                return self._cache[name]
        body = self._render(*found)
        with self._lock:
            self._cache[name] = body
            while len(self._cache) > self.max_items:
                self._cache.popitem(last=False)
        return body

    def _render(self, task: Task, ext: str, preview: bool) -> FileBody:
        if ext == "svg":
            from .cover import render_cover

            return FileBody(render_cover(task.title or "Untitled", task.style or ""), "image/svg+xml")
        from . import audio

        samples = render_segments(task.preview if preview else task.segments)
        if ext == "wav":
            return FileBody(audio.encode_wav(samples, audio.SAMPLE_RATE), "audio/wav")
        content, media_type = audio.encode(samples, audio.SAMPLE_RATE)
        return FileBody(content, media_type)
