"""Figure 14: audio analysis (tempo, key, LUFS, true peak, silence) of a 3-minute song, side by side: measured
in the calling process (as before issue 41) and in the analysis worker (`lab.analysis_worker`, as now).

The song is the sandbox's own synthesized MP3 (drums, chords, a voice). Each way runs in a fresh process that
warms librosa up on a second of audio first (its first call imports and compiles for seconds, once per
process; the worker stays up between songs, so this happens once per kernel), then measures the song: wall
time against the song's length (× real time, target ≥ 50), and the peak RSS above the measuring process's
baseline while it decodes and measures (target ≤ 200 MB; for the worker, the worker process's own).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ._common import Row, fresh_python

FIGURE = 14
AUDIO_SECONDS = 180
SPEED_TARGET = 50.0
MEMORY_TARGET_MB = 200.0

_WARM = r"""
import json, resource, sys, time, wave
from pathlib import Path
warm = Path(WARM)
with wave.open(str(warm), "wb") as out:  # a second of clicks: librosa's imports and compiles happen here
    out.setnchannels(1); out.setsampwidth(2); out.setframerate(16000)
    out.writeframes(b"".join((b"\xff\x7f" if i % 4000 < 40 else b"\x00\x00") for i in range(16000)))
"""

_IN_PROCESS = (
    _WARM
    + r"""
from ipymusicgen.lab.analysis import analyze_file
from ipymusicgen.lab.numba_cache import compile_locked
compile_locked(lambda: analyze_file(warm))  # librosa's first use under the lock beside numba's cache

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

try:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
except OSError:
    pass
before = status("VmRSS")
started, cpu = time.perf_counter(), time.process_time()
found = analyze_file(SONG)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"seconds": seconds, "cpu_s": cpu, "baseline_mb": before, "peak_mb": status("VmHWM"),
                  **found.as_dict()}))
"""
)

_WORKER = (
    _WARM
    + r"""
from ipymusicgen.lab.analysis_worker import AnalysisWorker
worker = AnalysisWorker()  # the user's own cache, as a kernel uses it
worker.analyze(warm)
first = worker.stats(reset_peak=True)
started = time.perf_counter()
found = worker.analyze(SONG)
seconds = time.perf_counter() - started
last = worker.stats()
worker.close()
print(json.dumps({"seconds": seconds, "cpu_s": last["cpu_s"] - first["cpu_s"], "baseline_mb": first["rss_mb"],
                  "peak_mb": last["peak_mb"], **found.as_dict()}))
"""
)


def run(*, quick: bool = False) -> list[Row]:
    from ipymusicgen.sandbox.audio import render_song

    length = 30 if quick else AUDIO_SECONDS
    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-analysis-"))
    rows = []
    try:
        song = folder / "song.mp3"
        song.write_bytes(render_song("benchmark analysis", seconds=length, vocal=True)[0])
        for way, code in (("in the calling process (before)", _IN_PROCESS), ("in the analysis worker", _WORKER)):
            code = code.replace("SONG", repr(str(song))).replace("WARM", repr(str(folder / "warm.wav")))
            child = fresh_python(code, env={"MUSICGEN_ANALYZE": "off"}, timeout=900)
            rows.extend(_rows(child, length, way))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _rows(child: dict, length: int, way: str) -> list[Row]:
    factor = length / max(float(child["seconds"]), 1e-9)
    above = float(child["peak_mb"]) - float(child["baseline_mb"])
    measured = {k: child[k] for k in ("bpm", "key", "lufs", "true_peak_db", "silence_start_s", "silence_end_s")}
    cpu = float(child["cpu_s"])  # on a loaded machine the CPU time says more than the wall time
    measured |= {"cpu_s": round(cpu, 3), "x_real_time_by_cpu": round(length / max(cpu, 1e-9), 1)}
    return [
        Row(FIGURE, f"analysis of a {length} s song {way}", round(float(child["seconds"]), 3), "s",
            baseline=length, baseline_unit="s of audio", ratio=round(factor, 1),
            target=f">= {SPEED_TARGET:.0f}x real time", passed=factor >= SPEED_TARGET, details={"measured": measured}),
        Row(FIGURE, f"analysis peak RSS above the baseline, {way}", round(above, 1), "MB",
            baseline=MEMORY_TARGET_MB, baseline_unit="MB allowed", ratio=round(above / MEMORY_TARGET_MB, 2),
            target=f"<= {MEMORY_TARGET_MB:.0f} MB", passed=above <= MEMORY_TARGET_MB,
            details={"baseline_mb": child["baseline_mb"], "peak_mb": child["peak_mb"]}),
    ]  # fmt: skip
