"""What every benchmark shares: result rows, interleaved rounds with medians, and fresh Python processes.

The machines are shared and noisy, so each figure is a ratio of two sides measured in the same run,
alternating the sides round by round (A B, B A, ...) and taking the median of each side.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    """One line of the table: a measured value against its floor or baseline, and the target."""

    figure: int
    name: str
    measured: float | None
    """None only when the figure could not run."""
    unit: str
    baseline: float | None = None
    baseline_unit: str | None = None
    """Unit of the baseline when it is not the measured unit."""
    ratio: float | None = None
    target: str = "report"
    passed: bool | None = None
    """None when the figure has no target and is only reported."""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio(measured: float, baseline: float) -> float:
    """measured / baseline, guarded against a zero baseline."""
    return measured / baseline if baseline > 0 else float("inf")


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> dict[str, float]:
    """Min, median and max, so a reader can see how noisy a side was."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def interleaved(sides: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each side once per round, reversing the order every other round; one sample per side per round.

    Alternating the order spreads slow spells of a shared machine over both sides.
    """
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            samples[name].append(sides[name]())
    return samples


_PYCACHE: str | None = None
_WARMED = False


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for fresh Python processes: bytecode cached (as an installed package would have it).

    The sessions set PYTHONDONTWRITEBYTECODE, which would make our modules compile from source on every
    import while site-packages load from .pyc: an unfair load-time comparison. A private cache prefix
    gives both sides cached bytecode without writing into the tree. MUSICGEN_* settings are dropped so
    nothing the caller has set leaks in (and no key, ever).
    """
    global _PYCACHE
    if _PYCACHE is None:
        _PYCACHE = tempfile.mkdtemp(prefix="ipymusicgen-bench-pyc-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    env["PYTHONFAULTHANDLER"] = "1"  # a child that dies of a signal prints where (CI once saw -11 and nothing else)
    env.update(extra or {})
    return env


_WARM = """
import IPython.core.interactiveshell, ipywidgets, httpx, pydantic, psutil
import ipymusicgen, ipymusicgen.notebook.magics, ipymusicgen.widgets
print("{}")
"""


def warm_bytecode() -> None:
    """Fill the private bytecode cache once per run (untimed), so no measured child compiles anything."""
    global _WARMED
    if not _WARMED:
        fresh_python(_WARM)
        _WARMED = True


def fresh_python(code: str, *, env: Mapping[str, str] | None = None, timeout: float = 120) -> dict[str, Any]:
    """Run `code` in a new interpreter; it must print one JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=child_env(env),
        cwd=tempfile.gettempdir(),
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
