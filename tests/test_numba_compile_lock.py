"""Issue 41's compile lock, held: a process compiling librosa's functions (`compile_locked`) holds the cache's file
lock for the whole warm-up, so no other process (a second kernel's worker, the agent server's) can compile into the
same cache at that moment; and the worker compiles through it. The four-process race in tests/test_lab_worker.py
passes only when numba's race fails to strike; this says the lock is there to stop it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ipymusicgen.lab import analysis_worker
from ipymusicgen.lab.numba_cache import compile_locked, lock_path

TRY_LOCK = """
import sys
from filelock import FileLock, Timeout
try:
    FileLock(sys.argv[1], timeout=0).acquire()
except Timeout:
    sys.exit(3)
"""


def another_process_takes(lock: Path) -> bool:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(lock)], timeout=60).returncode == 0


def test_the_warm_up_runs_with_the_caches_lock_held_against_other_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "numba-cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    during: list[bool] = []
    compile_locked(lambda: during.append(another_process_takes(lock_path(cache))))
    assert during == [False]  # held while compiling
    assert another_process_takes(lock_path(cache))  # and let go after


def test_the_worker_compiles_only_through_the_lock() -> None:
    source = Path(analysis_worker.__file__).read_text(encoding="utf-8")
    calls = {ast.unparse(node) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)}
    assert "compile_locked(warm_up)" in calls and "warm_up()" not in calls
