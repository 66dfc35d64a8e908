"""Figure 7: resident memory (RSS, psutil) of a fresh IPython process after `%load_ext` and while watching.

- after %load_ext: an `InteractiveShell` with `%load_ext ipymusicgen`, against the same shell after
  `import ipywidgets, httpx, pydantic` (the libraries the extension builds on).
- watching: the same process then creates a `TaskWatcher` over N tasks of a sandbox running in the
  benchmark process and polls once; the tasks are already complete, so every card is filled in
  (player, cover, lyrics): the most a card holds. Side by side in the same run: the one-model
  watcher (target: at most 10 MB over the process before it, and at most 3 widget models) and the
  stock-widget watcher it replaced (`benchmarks/_legacy_watcher.py`, default paging).
The load figure has no target; it is reported.
"""

from __future__ import annotations

import json

from ipymusicgen.sandbox import DEMO_KEY, Sandbox

from ._common import ROOT, Row, fresh_python, median, ratio, warm_bytecode
from .bench_watcher import STAGE_SECONDS, ManualClock, make_tasks

_CHILD = """
import gc, json, os, sys
import psutil
from IPython.core.interactiveshell import InteractiveShell

def rss():
    gc.collect()
    return psutil.Process().memory_info().rss

shell = InteractiveShell.instance()
out = {"shell": rss()}
if sys.argv[1] == "baseline":
    import ipywidgets, httpx, pydantic
    out["loaded"] = rss()
else:
    shell.run_line_magic("load_ext", "ipymusicgen")
    out["loaded"] = rss()
    ids = [i for i in os.environ.get("BENCH_IDS", "").split(",") if i]
    if ids:
        import ipywidgets
        from ipymusicgen import MusicClient
        if os.environ.get("BENCH_IMPL") == "legacy":
            sys.path.insert(0, os.environ["BENCH_ROOT"])
            from benchmarks._legacy_watcher import TaskWatcher
        else:
            from ipymusicgen.widgets import TaskWatcher
        client = MusicClient()
        out["loaded"] = rss()  # the watcher's own modules and the client are not the watcher's data
        before = len(ipywidgets.widgets.widget._instances)
        watcher = TaskWatcher(ids, client=client, autostart=False)
        out["cards"] = rss()
        changed = watcher.poll_once()
        assert len(changed) == len(ids) and watcher.done, (len(changed), watcher.last_error)
        out["watching"] = rss()
        out["models"] = len(ipywidgets.widgets.widget._instances) - before
print(json.dumps(out))
"""


def _child(side: str, env: dict[str, str] | None = None) -> dict[str, int]:
    code = "import sys; sys.argv = ['bench', %r]\n" % side + _CHILD  # noqa: UP031 - a literal in code text
    return fresh_python(code, env=env, timeout=300)


def run(*, quick: bool = False) -> list[Row]:
    count, rounds = (100, 1) if quick else (1000, 3)
    loaded: dict[str, list[int]] = {"extension": [], "baseline": []}
    warm_bytecode()  # compiling costs memory too: no measured child may compile
    for index in range(rounds):
        for side in ("extension", "baseline") if index % 2 == 0 else ("baseline", "extension"):
            loaded[side].append(_child(side)["loaded"])
    with Sandbox(stage_seconds=STAGE_SECONDS, song_seconds=4, faults="", keys={DEMO_KEY: 10**6}) as sandbox:
        clock = ManualClock()
        sandbox.state.clock = clock
        ids = make_tasks(sandbox, count)
        clock.advance(3 * STAGE_SECONDS)  # complete: every card shows everything
        env = {**sandbox.env(), "BENCH_IDS": ",".join(ids), "BENCH_ROOT": str(ROOT)}
        legacy = _child("extension", {**env, "BENCH_IMPL": "legacy"})
        new = _child("extension", env)
    mb = 1024 * 1024
    ext, base = median(loaded["extension"]), median(loaded["baseline"])
    return [
        Row(
            7,
            "RSS: shell + %load_ext vs shell + the same imports",
            round(ext / mb, 1),
            "MB",
            baseline=round(base / mb, 1),
            ratio=round(ratio(ext, base), 3),
            details={"samples_mb": {k: [round(v / mb, 1) for v in vs] for k, vs in loaded.items()}},
        ),
        _watching_row(count, new, legacy),
        Row(
            7,
            f"widget models watching {count:,} complete tasks, new vs stock widgets",
            new["models"],
            "models",
            baseline=legacy["models"],
            ratio=round(ratio(new["models"], legacy["models"]), 4),
            target=f"<= {MODELS_TARGET}",
            passed=new["models"] <= MODELS_TARGET,
        ),
    ]


MEMORY_TARGET_MB = 10.0
MODELS_TARGET = 3


def _watching_row(count: int, new: dict[str, int], legacy: dict[str, int]) -> Row:
    """Memory the watcher adds (after the first poll) over the process just before it: new vs stock widgets."""
    mb = 1024 * 1024
    added = (new["watching"] - new["loaded"]) / mb
    added_legacy = (legacy["watching"] - legacy["loaded"]) / mb
    return Row(
        7,
        f"RSS added by a watcher of {count:,} complete tasks, new vs stock widgets",
        round(added, 1),
        "MB",
        baseline=round(added_legacy, 1),
        ratio=round(ratio(max(added, 0.0), added_legacy), 3),
        target=f"<= {MEMORY_TARGET_MB:g} MB",
        passed=added <= MEMORY_TARGET_MB,
        details={
            "kb_per_task_new": round(added * 1024 / count, 2),
            "kb_per_task_legacy": round(added_legacy * 1024 / count, 2),
            "child_new_mb": {k: round(v / mb, 1) for k, v in new.items() if k != "models"},
            "child_legacy_mb": {k: round(v / mb, 1) for k, v in legacy.items() if k != "models"},
        },
    )


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row.as_dict()))
