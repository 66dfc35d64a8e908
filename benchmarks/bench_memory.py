"""Figure 7: resident memory (RSS, psutil) of a fresh IPython process after `%load_ext` and while watching.

- after %load_ext: an `InteractiveShell` with `%load_ext ipymusicgen`, against the same shell after
  `import ipywidgets, httpx, pydantic` (the libraries the extension builds on).
- watching: the same process then creates a `TaskWatcher` over N tasks of a sandbox running in the
  benchmark process and polls once; the tasks are already complete, so every card is filled in
  (player, cover, lyrics): the most a card holds. Reported as MB and KB per task, twice: with a card
  for every task (as a user who pages to the end has; comparable with figures from before paging)
  and with the default watcher, which builds cards for its first page of tasks only.
No target is set; the numbers are reported.
"""

from __future__ import annotations

import json

from ipymusicgen.sandbox import DEMO_KEY, Sandbox

from ._common import Row, fresh_python, median, ratio, warm_bytecode
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
        from ipymusicgen import MusicClient
        from ipymusicgen.widgets import TaskWatcher
        if os.environ.get("BENCH_PAGE_SIZE"):
            TaskWatcher.page_size = int(os.environ["BENCH_PAGE_SIZE"])
        watcher = TaskWatcher(ids, client=MusicClient(), autostart=False)
        out["cards"] = rss()
        changed = watcher.poll_once()
        assert len(changed) == len(ids) and watcher.done, (len(changed), watcher.last_error)
        out["watching"] = rss()
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
        env = {**sandbox.env(), "BENCH_IDS": ",".join(ids)}
        watched = _child("extension", {**env, "BENCH_PAGE_SIZE": str(count)})
        paged = _child("extension", env)
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
        _watching_row(f"RSS watching {count:,} complete tasks, a card each, vs before", watched, count),
        _watching_row(f"RSS watching {count:,} complete tasks, default watcher, vs before", paged, count),
    ]


def _watching_row(name: str, watched: dict[str, int], count: int) -> Row:
    mb = 1024 * 1024
    per_task = (watched["watching"] - watched["loaded"]) / count
    return Row(
        7,
        name,
        round(watched["watching"] / mb, 1),
        "MB",
        baseline=round(watched["loaded"] / mb, 1),
        ratio=round(ratio(watched["watching"], watched["loaded"]), 2),
        details={
            "kb_per_task": round(per_task / 1024, 1),
            "cards_created_mb": round((watched["cards"] - watched["loaded"]) / mb, 1),
            "after_first_poll_mb": round((watched["watching"] - watched["cards"]) / mb, 1),
            "child": {k: round(v / mb, 1) for k, v in watched.items()},
        },
    )


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row.as_dict()))
