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


class FileAnswer(NamedTuple):
    """What the file route sends: status, the bytes (all or one range) and the headers."""

    status: int
    content: bytes
    headers: dict[str, str]


_RANGE = re.compile(r"^\s*bytes\s*=\s*(?P<start>\d*)\s*-\s*(?P<end>\d*)\s*$", re.IGNORECASE)


def byte_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """The (first, last) byte of a single `Range: bytes=...` header, inclusive and clipped to the file.

    None: no range to honour (no header, several ranges or bad syntax: the whole file is sent, as
    RFC 9110 allows). False: a well-formed range that lies outside the file (416).
    """
    match = _RANGE.match(header or "")
    if match is None or (not match["start"] and not match["end"]):
        return None
    if not match["start"]:  # "bytes=-N": the last N bytes
        suffix = int(match["end"])
        return (max(0, size - suffix), size - 1) if suffix and size else False
    first = int(match["start"])
    last = int(match["end"]) if match["end"] else size - 1
    if first >= size:
        return False
    if last < first:
        return None
    return first, min(last, size - 1)


def answer(body: FileBody, range_header: str | None) -> FileAnswer:
    """The whole file (200) or the asked byte range (206), as CDNs answer, so browsers can seek the audio."""
    size = len(body.content)
    # as a public CDN: any page may read the file (a notebook's card decodes it to draw the waveform)
    headers = {"accept-ranges": "bytes", "cache-control": "no-store", "access-control-allow-origin": "*"}
    wanted = byte_range(range_header, size)
    if wanted is None:
        return FileAnswer(200, body.content, headers)
    if wanted is False:
        return FileAnswer(416, b"", {**headers, "content-range": f"bytes */{size}"})
    first, last = wanted  # type: ignore[misc]
    return FileAnswer(206, body.content[first : last + 1], {**headers, "content-range": f"bytes {first}-{last}/{size}"})


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
