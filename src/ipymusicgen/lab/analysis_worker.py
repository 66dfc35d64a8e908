"""Songs measured in a worker process, so a crash in a native library costs one measurement, never the kernel.

librosa's compiled functions (numba, `cache=True`) are cached on disk. Two processes compiling them for the
first time at once can corrupt that cache (a known numba race), and from then on every analysis dies with
SIGSEGV inside librosa. So:

- the worker runs with a numba cache of the project's own, per user and per numba/librosa/Python version
  (`NUMBA_CACHE_DIR`), and compiles (imports librosa and warms up) under a file lock beside that cache;
- a worker that dies (a signal, a non-zero exit) is detected and the song measured once more by a fresh
  worker, after clearing the cache (under the same lock) when the death was a crash in native code (SIGSEGV,
  SIGBUS...); if that one dies too, `AnalysisCrashedError` says so in one line;
- one worker serves every song in turn (it stays up between songs, so librosa is imported and compiled once;
  benchmark figure 14) and leaves by itself after `IDLE_SECONDS` without work, or when its parent goes.

Requests and answers are JSON lines on the worker's stdin and stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..archive.waveform import DecodeCapError
from .analysis import Analysis, AnalysisUnavailableError, analyze_file, available, warm_up
from .decoding import AudioFileError
from .lossy import lossy_source
from .numba_cache import LOCK_SECONDS, compile_locked, default_cache_dir, lock_path

IDLE_SECONDS = 300.0
"""A worker with nothing to do for this long exits (its memory back); the next song starts a fresh one."""
ANSWER_SECONDS = 900.0
"""A worker with no answer for this long is taken for hung: killed, and the song tried once more by a fresh one (a
3-minute song takes seconds). A worker that says it is compiling gets `LOCK_SECONDS` more: it may wait that long
for another process's compile, then compile itself (minutes on a busy machine)."""
ENV_FAULT = "MUSICGEN_ANALYSIS_FAULT"
"""Test seam: "segv" crashes the worker at every song; "segv-once:<file>" once, if that file exists (removed);
"hang" never answers a song; "hang-once:<file>" answers its song with an error a minute late, once; "slow-compile:<s>"
says it is compiling, then sleeps that long before it does."""
START_SECONDS = 120.0
"""How long a new worker may take to start (Python and the analysis modules imported) before it is killed; its
answers are timed from then on, so a slow start on a busy machine is never taken for a hung song."""
READY: Mapping[str, bool] = MappingProxyType({"ready": True})
"""The line a worker writes once it has started, before it reads a request."""
COMPILING: Mapping[str, bool] = MappingProxyType({"compiling": True})
"""The line a worker writes before its first compile (its answer follows): the caller allows for the compile."""
CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT", "SIGFPE"})
"""Deaths that clear the cache before the retry; a worker killed from outside (SIGTERM, SIGKILL) or exiting with
an error is retried as it is (recompiling the cache costs a minute or more)."""
_ERRORS: Mapping[str, type[Exception]] = MappingProxyType(
    {
        "AudioFileError": AudioFileError,
        "DecodeCapError": DecodeCapError,
        "AnalysisUnavailableError": AnalysisUnavailableError,
        "FileNotFoundError": FileNotFoundError,
        "PermissionError": PermissionError,
    }
)


class AnalysisCrashedError(ChildProcessError):
    """The worker died measuring a song twice, the second time with a fresh cache (an OSError: the song's old
    measures are cleared as for any file that cannot be measured)."""


class AnalysisFailedError(RuntimeError):
    """The worker answered with an error of a kind the caller has no class for (its type and message kept)."""


def clear_cache(cache_dir: Path) -> None:
    """Remove a cache a crashed worker used (under the compile lock: never from under a compiling worker)."""
    from filelock import FileLock

    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path(cache_dir)), timeout=LOCK_SECONDS):
        shutil.rmtree(cache_dir, ignore_errors=True)


class AnalysisWorker:
    """A worker process measuring songs one at a time (started on first use, restarted after a crash)."""

    def __init__(
        self, cache_dir: Path | None = None, *, env: Mapping[str, str] | None = None,
        answer_seconds: float = ANSWER_SECONDS,
    ) -> None:  # fmt: skip
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.env = dict(env or {})
        self.answer_seconds = answer_seconds
        self.crashes = 0
        """Workers lost while measuring: deaths, and hung workers killed (a crash in native code also clears the
        cache)."""
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def analyze(self, path: str | Path, *, max_seconds: float | None = None) -> Analysis:
        """The song's measures, as `analysis.analyze_file` gives them, measured in the worker."""
        if not available():
            raise AnalysisUnavailableError(
                "audio analysis needs the extra: pip install 'ipymusicgen[analysis]' (librosa and pyloudnorm)"
            )
        answer = self.request({"op": "analyze", "path": str(path), "max_seconds": max_seconds}, name=Path(path).name)
        return Analysis(**answer["analysis"])

    def lossy(self, path: str | Path) -> tuple[str, float | None] | None:
        """A lossless file's lossy-source verdict (`lossy.lossy_source`: its format and cutoff), in the worker."""
        answer = self.request({"op": "lossy", "path": str(path)}, name=Path(path).name)
        found = answer.get("lossy")
        return (str(found[0]), None if found[1] is None else float(found[1])) if found else None

    def stats(self, *, reset_peak: bool = False) -> dict[str, Any]:
        """The worker's pid, memory now and at its peak (MB), CPU seconds used; `reset_peak` starts a new peak."""
        return self.request({"op": "stats", "reset_peak": reset_peak}, name="stats")

    def request(self, message: dict[str, Any], *, name: str) -> dict[str, Any]:
        with self._lock:
            died = self._exchange(message)
            if isinstance(died, dict):
                return _answer(died)
            self.crashes += 1
            if died in CRASH_SIGNALS:  # a fault in native code: the compiled cache is the suspect
                clear_cache(self.cache_dir)
            again = self._exchange(message)
            if isinstance(again, dict):
                return _answer(again)
            self.crashes += 1
            raise AnalysisCrashedError(
                f"analysis of {name} lost its worker twice ({died}, then {again}; numba cache {self.cache_dir}"
                f"{' cleared between' if died in CRASH_SIGNALS else ''}); the kernel is fine, the song stays unmeasured"
            )

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any] | str:
        """The worker's answer, or how it died. A worker that left on its own (idle) is started again; one with no
        answer in `answer_seconds` is killed."""
        for _ in range(2):
            process = self._running()
            watchdog = _Watchdog(process)
            with self._killed_if_interrupted(process, watchdog):
                assert process.stdin is not None
                with contextlib.suppress(OSError):  # BrokenPipeError: it is gone; the read below finds out how
                    process.stdin.write(json.dumps(message) + "\n")
                    process.stdin.flush()
                watchdog.arm(self.answer_seconds)
                reply = _read(process)
                if reply == COMPILING:
                    watchdog.arm(self.answer_seconds + LOCK_SECONDS)
                    reply = _read(process)
            if watchdog.stop():  # killed for its silence: whatever it said as it went is not kept
                self._kill(process)
                return f"no answer in {self.answer_seconds:g} s"
            if reply is not None:
                return reply
            code = process.wait()
            self._process = None
            if code != 0:
                return _death(code)
        return "exit 0 twice"

    @contextlib.contextmanager
    def _killed_if_interrupted(self, process: subprocess.Popen[str], watchdog: _Watchdog) -> Iterator[None]:
        """Interrupted anywhere while a worker holds a request (a cell stopped: between sending and reading as well
        as in the read), the worker is killed before the interrupt goes on: its late answer must never be taken for
        the next request's."""
        try:
            yield
        except BaseException:
            watchdog.stop()
            self._kill(process)
            raise

    def _kill(self, process: subprocess.Popen[str]) -> None:
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()
        self._process = None

    def _running(self) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self.cache_dir.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "NUMBA_CACHE_DIR": str(self.cache_dir), "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        process = self._process
        started = _Watchdog(process)
        with self._killed_if_interrupted(process, started):
            started.arm(START_SECONDS)
            _read(process)  # READY; nothing if it died starting (the request then finds it dead)
        started.stop()
        return process

    def close(self) -> None:
        """End the worker (it also ends by itself when idle, or when this process goes)."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class _Watchdog:
    """Kills a worker whose answer is late. The reader's `stop()` and the timer's firing are decided under one lock:
    a worker that answered in time is never killed afterwards (during the next request), and one that was killed is
    said so even if its answer came as it died."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._stopped = False
        self.fired = False

    def arm(self, seconds: float) -> None:
        """(Re)start the countdown from now."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if not self._stopped and not self.fired:
                self._timer = threading.Timer(seconds, self._fire)
                self._timer.daemon = True
                self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self.fired = True
        with contextlib.suppress(OSError):
            self._process.kill()

    def stop(self) -> bool:
        """No more killing; whether it had fired."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            return self.fired


def _read(process: subprocess.Popen[str]) -> dict[str, Any] | None:
    """The worker's next line, parsed; None if it closed its side."""
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
    except OSError:
        line = ""
    return json.loads(line) if line else None


def _death(code: int) -> str:
    if code < 0:
        import signal

        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"exit code {code}"


def _answer(reply: dict[str, Any]) -> dict[str, Any]:
    error = reply.get("error")
    if error:
        kind = _ERRORS.get(error.get("type", ""))
        message = str(error.get("message", ""))
        if kind is None:
            raise AnalysisFailedError(f"{error.get('type')}: {message}")
        raise kind(message)
    return reply


_shared: dict[Path, AnalysisWorker] = {}
_shared_lock = threading.Lock()


def shared_worker(cache_dir: Path | None = None) -> AnalysisWorker:
    """The process's worker for a cache (the analyst's background songs and `analyze()` take turns in it)."""
    key = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    with _shared_lock:
        if key not in _shared:
            _shared[key] = AnalysisWorker(key)
            from ..lifecycle import at_exit

            at_exit(_shared[key].close)
        return _shared[key]


def measure(path: str | Path, *, max_seconds: float | None = None) -> Analysis:
    """Measure a song in the shared worker: `AnalysisCrashedError` if the worker dies on it twice."""
    return shared_worker().analyze(path, max_seconds=max_seconds)


def measure_lossy(path: str | Path) -> tuple[str, float | None] | None:
    """A lossless file's lossy-source verdict (format, cutoff), in the shared worker."""
    return shared_worker().lossy(path)


# The worker's side.


def _serve() -> None:
    """Answer requests on stdin until it closes or `IDLE_SECONDS` pass with none."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a library printing to stdout must not garble the answers
    protocol.write(json.dumps(dict(READY)) + "\n")
    compiled = False
    busy = threading.Lock()
    last = [time.monotonic()]

    def leave_when_idle() -> None:
        while True:
            time.sleep(min(10.0, IDLE_SECONDS / 4))
            with busy:
                if time.monotonic() - last[0] > IDLE_SECONDS:
                    os._exit(0)

    threading.Thread(target=leave_when_idle, daemon=True).start()
    for line in sys.stdin:
        with busy:
            message = json.loads(line)
            try:
                if message.get("op") == "stats":
                    reply = _stats(bool(message.get("reset_peak")))
                elif message.get("op") == "lossy":  # decoding and an FFT: nothing compiled
                    reply = {"lossy": lossy_source(message["path"])}
                else:
                    _planted_fault()
                    if not compiled:
                        protocol.write(json.dumps(dict(COMPILING)) + "\n")
                        _planted_slow_compile()
                        _compile()
                        compiled = True
                    found = analyze_file(message["path"], max_seconds=message.get("max_seconds"))
                    reply = {"analysis": found.as_dict()}
            except Exception as exc:
                reply = {"error": {"type": type(exc).__name__, "message": str(exc)}}
            protocol.write(json.dumps(reply) + "\n")
            last[0] = time.monotonic()


def _compile() -> None:
    """Import librosa and run every measure once under the compile lock: one process at a time writes the cache."""
    compile_locked(warm_up)


def _planted_fault() -> None:
    fault = os.environ.get(ENV_FAULT, "")
    if fault == "segv" or (fault.startswith("segv-once:") and _consume(Path(fault.split(":", 1)[1]))):
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "hang":
        threading.Event().wait()
    if fault.startswith("hang-once:") and _consume(Path(fault.split(":", 1)[1])):
        time.sleep(60.0)  # long past the caller's interrupt: only a worker left alive would answer at all
        raise RuntimeError("planted: a late answer")


def _planted_slow_compile() -> None:
    fault = os.environ.get(ENV_FAULT, "")
    if fault.startswith("slow-compile:"):
        time.sleep(float(fault.split(":", 1)[1]))
        raise RuntimeError("planted: compiled late")


def _consume(marker: Path) -> bool:
    try:
        marker.unlink()
    except OSError:
        return False
    return True


def _stats(reset_peak: bool) -> dict[str, Any]:
    def status(field: str) -> float | None:
        with contextlib.suppress(OSError), open("/proc/self/status") as lines:
            for line in lines:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return None

    if reset_peak:
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    return {"pid": os.getpid(), "rss_mb": status("VmRSS"), "peak_mb": status("VmHWM"), "cpu_s": time.process_time()}


if __name__ == "__main__":
    _serve()
