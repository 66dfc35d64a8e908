"""Figure 14: audio analysis (tempo, key, LUFS, true peak, silence) of a 3-minute song, in a fresh process.

The song is the sandbox's own synthesized MP3 (drums, chords, a voice). The child warms librosa up on a
second of audio first (its first call imports and compiles for seconds, once per process), then
measures the song: wall time against the song's length (× real time, target ≥ 20), and the peak RSS
above the process's baseline while it decodes and measures (capped; full band streamed, a 16 kHz mono copy).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ._common import Row, fresh_python

FIGURE = 14
AUDIO_SECONDS = 180
SPEED_TARGET = 20.0
MEMORY_REPORT_MB = 150.0

_CHILD = r"""
import json, resource, sys, time, wave
from pathlib import Path
from ipymusicgen.lab.analysis import analyze_file

warm = Path(sys.argv[2])
with wave.open(str(warm), "wb") as out:  # a second of clicks: librosa's imports and compiles happen here
    out.setnchannels(1); out.setsampwidth(2); out.setframerate(16000)
    out.writeframes(b"".join((b"\xff\x7f" if i % 4000 < 40 else b"\x00\x00") for i in range(16000)))
analyze_file(warm)

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
started = time.perf_counter()
found = analyze_file(sys.argv[1])
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "baseline_mb": before, "peak_mb": status("VmHWM"), **found.as_dict()}))
"""


def run(*, quick: bool = False) -> list[Row]:
    from ipymusicgen.sandbox.audio import render_song

    length = 30 if quick else AUDIO_SECONDS
    folder = Path(tempfile.mkdtemp(prefix="ipymusicgen-bench-analysis-"))
    try:
        song = folder / "song.mp3"
        song.write_bytes(render_song("benchmark analysis", seconds=length, vocal=True)[0])
        code = _CHILD.replace("sys.argv[1]", repr(str(song))).replace("sys.argv[2]", repr(str(folder / "warm.wav")))
        child = fresh_python(code, env={"MUSICGEN_ANALYZE": "off"}, timeout=600)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    factor = length / max(float(child["seconds"]), 1e-9)
    above = float(child["peak_mb"]) - float(child["baseline_mb"])
    measured = {k: child[k] for k in ("bpm", "key", "lufs", "true_peak_db", "silence_start_s", "silence_end_s")}
    return [
        Row(FIGURE, f"analysis of a {length} s song (tempo, key, LUFS, true peak, silence)",
            round(float(child["seconds"]), 3), "s", baseline=length, baseline_unit="s of audio",
            ratio=round(factor, 1), target=f">= {SPEED_TARGET:.0f}x real time", passed=factor >= SPEED_TARGET,
            details={"measured": measured}),
        Row(FIGURE, "analysis peak RSS above the process's baseline", round(above, 1), "MB",
            details={"baseline_mb": child["baseline_mb"], "peak_mb": child["peak_mb"]}),
    ]  # fmt: skip
