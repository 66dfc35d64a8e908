"""The analysis worker: a crash in librosa (a corrupted numba cache) costs one measurement, never the caller.

Four processes racing a cold cache all measure and leave a sound cache (they compile under one lock); a worker
that dies is detected, its cache cleared and the song measured again; a second death is one line, and the
caller (this process) lives on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from signals import click_track, progression, write_wav

from ipymusicgen.lab.analysis_worker import (
    ENV_FAULT,
    AnalysisCrashedError,
    AnalysisFailedError,
    AnalysisWorker,
    lock_path,
)
from ipymusicgen.lab.decoding import AudioFileError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # a fresh cache compiles librosa (30 s to minutes)

_RACER = r"""
import json, sys
from pathlib import Path
from ipymusicgen.lab.analysis_worker import AnalysisWorker
worker = AnalysisWorker(Path(sys.argv[1]))
found = worker.analyze(sys.argv[2])
print(json.dumps({"bpm": found.bpm, "key": found.key, "crashes": worker.crashes}))
worker.close()
"""


@pytest.fixture(scope="module")
def song(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("worker-song")
    chords = progression([("D", "minor"), ("A", "major")], 1.5, 2)[: 6 * 44_100]
    signal = click_track(96, 6)[: 6 * 44_100] * 0.5 + chords
    return write_wav(folder / "song.wav", signal)


def test_four_processes_racing_a_cold_cache_all_measure_and_leave_it_sound(tmp_path: Path, song: Path) -> None:
    cache = tmp_path / "numba-cache"
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(cache), str(song)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    answers = [json.loads(racer.communicate(timeout=900)[0].strip().splitlines()[-1]) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0, 0, 0]
    assert all(a["bpm"] == pytest.approx(96, rel=0.02) for a in answers), answers
    assert all(a["crashes"] == 0 for a in answers), answers  # none had to clear a corrupted cache
    assert any(cache.rglob("*.nbi")) and lock_path(cache).exists()  # compiled into the project's own cache
    after = AnalysisWorker(cache)  # a fifth, later process: the cache the race left loads and measures
    try:
        assert after.analyze(song).bpm == pytest.approx(96, rel=0.02) and after.crashes == 0
    finally:
        after.close()


def test_a_crashed_worker_clears_its_cache_and_measures_the_song_again(tmp_path: Path, song: Path) -> None:
    cache = tmp_path / "numba-cache"
    (cache / "librosa").mkdir(parents=True)
    planted = cache / "librosa" / "corrupt.nbc"
    planted.write_bytes(b"\x00garbage")  # what a crash is blamed on: it must be gone after the retry
    marker = tmp_path / "crash-once"
    marker.touch()
    worker = AnalysisWorker(cache, env={ENV_FAULT: f"segv-once:{marker}"})
    try:
        found = worker.analyze(song)
        assert found.bpm == pytest.approx(96, rel=0.02)
        assert worker.crashes == 1 and not marker.exists() and not planted.exists()
        first = worker.stats()["pid"]
        assert worker.analyze(song).bpm == found.bpm and worker.stats()["pid"] == first  # one worker, kept
    finally:
        worker.close()


def test_a_worker_that_dies_twice_says_so_in_one_line_and_the_caller_lives_on(tmp_path: Path, song: Path) -> None:
    cache = tmp_path / "numba-cache"
    worker = AnalysisWorker(cache, env={ENV_FAULT: "segv"})
    try:
        with pytest.raises(AnalysisCrashedError) as crashed:
            worker.analyze(song)
        message = str(crashed.value)
        assert "\n" not in message and "song.wav" in message and "SIGSEGV" in message and str(cache) in message
        assert isinstance(crashed.value, OSError)  # analyze() clears the song's old measures for it
        assert worker.crashes == 2 and os.getpid() > 0  # still here
    finally:
        worker.close()


def test_errors_in_the_worker_keep_their_kind_and_the_worker_serves_on(tmp_path: Path, song: Path) -> None:
    worker = AnalysisWorker(tmp_path / "numba-cache")
    page = tmp_path / "page.mp3"
    page.write_text("<html>expired</html>")
    try:
        with pytest.raises(AudioFileError, match=r"page\.mp3.*HTML page"):
            worker.analyze(page)
        pid = worker.stats()["pid"]
        worker.close()  # closed: the next song starts a fresh worker, as after an idle exit
        assert worker.analyze(song).bpm == pytest.approx(96, rel=0.02)
        assert worker.stats()["pid"] != pid and worker.crashes == 0
    finally:
        worker.close()


def test_a_worker_killed_from_outside_is_replaced_without_clearing_the_cache(tmp_path: Path, song: Path) -> None:
    """SIGKILL is not a crash in librosa: the song is measured by a fresh worker and the compiled cache stays."""
    import signal

    cache = tmp_path / "numba-cache"
    worker = AnalysisWorker(cache)
    try:
        assert worker.analyze(song).bpm == pytest.approx(96, rel=0.02)
        kept = cache / "kept.marker"
        kept.touch()
        os.kill(worker.stats()["pid"], signal.SIGKILL)
        assert worker.analyze(song).bpm == pytest.approx(96, rel=0.02)
        assert kept.exists()  # not cleared
    finally:
        worker.close()


def test_a_worker_with_no_answer_is_killed_and_said_so_in_one_line(tmp_path: Path, song: Path) -> None:
    """A hung worker (not dead) must not hold the caller for ever: it is killed after `answer_seconds`, a fresh one
    tries once more, and the second silence is one line."""
    worker = AnalysisWorker(tmp_path / "numba-cache", env={ENV_FAULT: "hang"}, answer_seconds=5.0)
    try:
        with pytest.raises(
            AnalysisCrashedError, match=r"lost its worker twice \(no answer in 5 s, then no answer in 5 s"
        ) as crashed:
            worker.analyze(song)
        assert "\n" not in str(crashed.value) and worker.crashes == 2
        assert worker.stats()["pid"] > 0  # the next request is served by a fresh worker (its start is not timed)
    finally:
        worker.close()


def test_a_worker_compiling_is_given_the_compile_lock_wait_before_it_is_taken_for_hung(
    tmp_path: Path, song: Path
) -> None:
    """A first song waits for another process's compile, then compiles itself: minutes on a busy machine. The worker
    says it is compiling, and the deadline grows by the lock's wait; its (planted) late answer is taken."""
    worker = AnalysisWorker(tmp_path / "numba-cache", env={ENV_FAULT: "slow-compile:8"}, answer_seconds=5.0)
    try:
        with pytest.raises(AnalysisFailedError, match="planted: compiled late"):
            worker.analyze(song)
        assert worker.crashes == 0
    finally:
        worker.close()


def test_a_request_interrupted_mid_song_never_takes_the_late_answer_for_the_next(tmp_path: Path, song: Path) -> None:
    """A cell stopped while its song is measured: the worker is killed, so its answer, coming late, can never be
    read as the answer to the next request (another song's measures shown for this one)."""
    import signal
    import threading

    from helpers import wait_until

    marker = tmp_path / "hang-once"
    marker.touch()
    worker = AnalysisWorker(tmp_path / "numba-cache", env={ENV_FAULT: f"hang-once:{marker}"})
    main = threading.get_ident()

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    def stop_the_cell() -> None:
        wait_until(lambda: not marker.exists(), "the worker took the song and is late with it")
        signal.pthread_kill(main, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        pid = worker.stats()["pid"]
        stopper = threading.Thread(target=stop_the_cell)
        stopper.start()
        with pytest.raises(KeyboardInterrupt):
            worker.analyze(song)
        stopper.join()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped
        assert worker.stats()["pid"] != pid  # a fresh worker's answer, not the late error of the old one
    finally:
        signal.signal(signal.SIGINT, previous)
        worker.close()


def test_an_interrupt_between_sending_a_song_and_reading_its_answer_also_kills_the_worker(
    tmp_path: Path, song: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell stopped just after the request went out, before the read began (here: as the answer's countdown is
    armed, once the worker has taken the song): the worker holding that request is killed all the same. CI at 501c4e0
    found the read-only guard let such a worker live, its late answer waiting for the next request."""
    from helpers import wait_until

    from ipymusicgen.lab import analysis_worker

    marker = tmp_path / "hang-once"
    marker.touch()
    worker = AnalysisWorker(tmp_path / "numba-cache", env={ENV_FAULT: f"hang-once:{marker}"}, answer_seconds=600.0)
    arm = analysis_worker._Watchdog.arm

    def interrupted_arm(self: object, seconds: float) -> None:
        if seconds == 600.0 and marker.exists():
            wait_until(lambda: not marker.exists(), "the worker took the song and is late with it")
            raise KeyboardInterrupt
        arm(self, seconds)  # type: ignore[arg-type]

    try:
        pid = worker.stats()["pid"]
        monkeypatch.setattr(analysis_worker._Watchdog, "arm", interrupted_arm)
        with pytest.raises(KeyboardInterrupt):
            worker.analyze(song)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped
        assert worker.stats()["pid"] != pid
    finally:
        worker.close()
