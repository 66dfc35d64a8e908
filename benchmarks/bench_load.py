"""Figure 3: extension load time in fresh processes, against importing the libraries it builds on.

Each sample is a new interpreter that times its own work (interpreter start-up, the same for both
sides, is left out, which makes the ratio stricter). The headline is the CPU time of the main thread
(`thread_time`: IPython's history thread is left out), which a busy shared machine distorts far less
than wall time; wall-clock medians are in the details. Bytecode is cached for both sides (see
`_common.child_env`), written by one untimed warm-up process.

- import: `import ipymusicgen` vs `import ipywidgets, httpx, pydantic`.
- %load_ext: an IPython `InteractiveShell` is created, then `%load_ext ipymusicgen` runs in it, vs the
  same shell creation followed by `import ipywidgets, httpx, pydantic`. Both sides build the shell, as
  every kernel does; the ratio of the step alone (load_ext vs the three imports) is in the details.
"""

from __future__ import annotations

from collections.abc import Callable

from ._common import Row, fresh_python, interleaved, median, ratio, spread, warm_bytecode

TARGET = 1.2

_TIMED = """
import json, time
w0, c0 = time.perf_counter(), time.thread_time()
{setup}
w1, c1 = time.perf_counter(), time.thread_time()
{step}
w2, c2 = time.perf_counter(), time.thread_time()
print(json.dumps({{"cpu": c2 - c0, "step_cpu": c2 - c1, "wall": w2 - w0, "step_wall": w2 - w1}}))
"""
_SHELL = "from IPython.core.interactiveshell import InteractiveShell\nshell = InteractiveShell.instance()"
_BASELINE = "import ipywidgets, httpx, pydantic"
SCRIPTS = {
    "import ipymusicgen": ("pass", "import ipymusicgen"),
    "import baseline": ("pass", _BASELINE),
    "load_ext ipymusicgen": (_SHELL, "shell.run_line_magic('load_ext', 'ipymusicgen')"),
    "load_ext baseline": (_SHELL, _BASELINE),
}
Samples = dict[str, list[dict[str, float]]]


def _sampler(name: str, results: Samples) -> Callable[[], float]:
    setup, step = SCRIPTS[name]
    code = _TIMED.format(setup=setup, step=step)

    def sample() -> float:
        result = fresh_python(code)
        results[name].append(result)
        return result["cpu"]

    return sample


def _ms(results: Samples, name: str, key: str) -> float:
    return median([r[key] for r in results[name]]) * 1000


def _row(results: Samples, ours: str, theirs: str, label: str) -> Row:
    value = ratio(_ms(results, ours, "cpu"), _ms(results, theirs, "cpu"))
    return Row(
        3,
        label,
        round(_ms(results, ours, "cpu"), 1),
        "ms CPU",
        baseline=round(_ms(results, theirs, "cpu"), 1),
        ratio=round(value, 3),
        target=f"<= {TARGET}",
        passed=value <= TARGET,
        details={
            "wall_ms": {ours: round(_ms(results, ours, "wall"), 1), theirs: round(_ms(results, theirs, "wall"), 1)},
            "wall_ratio": round(ratio(_ms(results, ours, "wall"), _ms(results, theirs, "wall")), 3),
            "step_cpu_ms": {
                ours: round(_ms(results, ours, "step_cpu"), 1),
                theirs: round(_ms(results, theirs, "step_cpu"), 1),
            },
            "step_cpu_ratio": round(ratio(_ms(results, ours, "step_cpu"), _ms(results, theirs, "step_cpu")), 3),
            "cpu_ms": {name: spread([r["cpu"] * 1000 for r in results[name]]) for name in (ours, theirs)},
        },
    )


def run(rounds: int = 5) -> list[Row]:
    """Interleaved fresh-process samples of all four scripts; medians in milliseconds."""
    results: Samples = {name: [] for name in SCRIPTS}
    warm_bytecode()
    interleaved({name: _sampler(name, results) for name in SCRIPTS}, rounds)
    return [
        _row(
            results, "import ipymusicgen", "import baseline", "import ipymusicgen vs import ipywidgets+httpx+pydantic"
        ),
        _row(results, "load_ext ipymusicgen", "load_ext baseline", "shell + %load_ext vs shell + the same imports"),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
