"""A library song measured once: its measures are kept whole in the journal (`storage.song_measures`) with the
file they were taken from, and a second `analyze()` of the same unchanged file (or the background analyst's
song, asked for again) reads them back instead of measuring again.

A song is measured on its archived MP3; when its paid WAV is on disk, the lossy-source verdict is made on the
WAV (an MP3 is lossy by its own format, a WAV may be an MP3 decoded). A new WAV, a rewritten file or a newer
analysis (`analysis.MEASURES_VERSION`) measures again. A failure keeps its error and forgets the old measures.
Two analyses of one file at once (two kernels, the background analyst and `analyze()`) measure it once: the
second waits for the first under a file lock, then reads what it kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..storage.song_measures import Source
from .analysis import MEASURES_VERSION, Analysis

LOCK_SECONDS = 600.0
"""How long an analysis waits for another one of the same file before measuring it anyway."""
WAV_KEY = "_wav"
"""Where the kept measures say which WAV (path, size, modification time) their lossy verdict came from."""


def analyse_song(
    store: Any,
    task_id: str,
    path: str | Path,
    *,
    wav: str | Path | None = None,
    measure: Callable[[Path], Analysis] | None = None,
    lossy: Callable[[Path], tuple[str, float | None] | None] | None = None,
) -> Analysis:
    """The song's measures: kept ones when they belong to this file (and this WAV) unchanged, else measured now
    (`measure`, `lossy`: the shared worker's by default) and kept. A file that cannot be measured
    (`ValueError`, `OSError`) leaves its error in the library and no measures, and is raised."""
    with _measuring(path):
        return _analyse_song(store, task_id, path, wav=wav, measure=measure, lossy=lossy)


def _analyse_song(
    store: Any,
    task_id: str,
    path: str | Path,
    *,
    wav: str | Path | None,
    measure: Callable[[Path], Analysis] | None,
    lossy: Callable[[Path], tuple[str, float | None] | None] | None,
) -> Analysis:
    from .analysis_worker import measure as measure_in_worker
    from .analysis_worker import measure_lossy

    source = Source.of(path)
    wav_source = Source.of(wav) if wav else None
    wav_identity = dataclasses.astuple(wav_source) if wav_source else None
    kept = store.kept_measures(task_id, source, MEASURES_VERSION)
    if kept is not None and _same_wav(kept.get(WAV_KEY), wav_identity):
        found = Analysis.from_dict({**kept, "asked": None})  # never kept: a row holding one was forged
        if found is not None:  # else a damaged row: measured again (and kept anew)
            return found
    try:
        measures = (measure or measure_in_worker)(Path(path))
    except (ValueError, OSError) as exc:  # not audio, past the cap, unreadable: the old numbers must not stand
        store.analysis_failed(task_id, f"{type(exc).__name__}: {exc}")
        store.forget_measures(task_id)
        raise
    if wav_source is not None:
        try:
            verdict = (lossy or measure_lossy)(Path(wav_source.path))
        except (ValueError, OSError):  # a WAV that is not audio: no verdict, the song's measures stand
            verdict = None
        if verdict is not None:
            measures = dataclasses.replace(measures, lossy_checked=verdict[0], lossy_cutoff_hz=verdict[1])
    values = measures.as_dict()
    values.pop("asked", None)
    store.analysed(task_id, values)
    store.keep_measures(task_id, {**values, WAV_KEY: wav_identity}, source, MEASURES_VERSION)
    return measures


@contextmanager
def _measuring(path: str | Path) -> Iterator[None]:
    """One analysis of a file at a time on this machine (threads, kernels, the agent server): the others wait,
    then read the kept measures instead of measuring the same file again. Past `LOCK_SECONDS` they measure."""
    try:
        import platformdirs
        from filelock import FileLock, Timeout
    except ImportError:  # no analysis extra: nothing to race
        yield
        return
    name = hashlib.blake2b(str(Path(path).resolve()).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    # the user's cache folder (beside the numba cache), not the temp folder: a process leaves no folder of its own
    folder = Path(platformdirs.user_cache_dir("ipymusicgen", appauthor=False)) / "measuring"
    lock = FileLock(str(folder / f"{name}.lock"), timeout=LOCK_SECONDS)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock.acquire()
    except (Timeout, OSError):  # waited long enough, or no lock can be made here: measure unlocked
        yield
        return
    try:
        yield
    finally:
        lock.release()


def _same_wav(kept: Any, now: tuple[Any, ...] | None) -> bool:
    return (kept is None and now is None) or (isinstance(kept, list) and now is not None and tuple(kept) == now)
