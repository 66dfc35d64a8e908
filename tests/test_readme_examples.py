"""Every fenced Python block of README.md and docs/*.md runs, in order, in a fresh process against the sandbox,
so an example cannot drift from the code.

A block runs in a new process unless the line before its fence is a marker:

- `<!-- readme: continues (why) -->`: it needs the block before it, so it runs in that block's process;
- `<!-- readme: skip (why) -->`: it cannot run here (a real key, say), and is left out.

Blocks that are plain Python run as Python (`exec` of the compiled block); blocks that only IPython reads
(`%` magics, top-level `await`) run in a real `InteractiveShell`, as a notebook cell would. Every block of a
process shares one namespace, as the cells of one notebook do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*readme:\s*(\w+)\s*(\((.+)\))?\s*-->")
MARKERS = {"continues", "skip"}
RUN_SECONDS = 600


@dataclass
class Block:
    document: str
    line: int
    code: str
    marker: str | None = None
    reason: str | None = None


@dataclass
class Run:
    """The blocks one fresh process runs, in order."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.blocks[0].document}:{self.blocks[0].line}"


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().splitlines()
        marker = MARKER.fullmatch(before[-1].strip()) if before else None
        found.append(
            Block(
                path.relative_to(ROOT).as_posix(),
                text.count("\n", 0, match.start()) + 1,
                match.group(1),
                marker.group(1) if marker else None,
                marker.group(3) if marker else None,
            )
        )
    return found


def runs() -> list[Run]:
    grouped: list[Run] = []
    for path in DOCUMENTS:
        previous: Run | None = None
        for block in blocks_of(path):
            if block.marker == "skip":
                continue
            if block.marker == "continues" and previous is not None:
                previous.blocks.append(block)
            else:
                previous = Run([block])
                grouped.append(previous)
    return grouped


CHILD = r"""
import json, sys, traceback
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
for block in json.load(open(sys.argv[1])):
    where = f"{block['document']}:{block['line']}"
    print(f"--- {where}", flush=True)
    try:
        code = compile(block["code"], where, "exec")
    except SyntaxError:  # % magics or top-level await: a notebook cell, run as IPython runs one
        result = shell.run_cell(block["code"], store_history=True)
        if not result.success:
            print(f"FAILED {where}: {result.error_before_exec or result.error_in_exec!r}", file=sys.stderr)
            sys.exit(1)
    else:
        try:
            exec(code, shell.user_ns)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {where}", file=sys.stderr)
            sys.exit(1)
print("--- all blocks ran", flush=True)
"""


def test_every_marker_is_known_and_says_why() -> None:
    """A misspelt marker would silently run (or skip) a block; every marker names its reason."""
    for path in DOCUMENTS:
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            if "readme:" in line and "<!--" in line:
                marker = MARKER.fullmatch(line.strip())
                assert marker and marker.group(1) in MARKERS, f"{path.name}:{line_number}: {line}"
                assert marker.group(3), f"{path.name}:{line_number}: a marker says why in parentheses"


def test_the_readme_and_docs_have_python_examples_to_run() -> None:
    """The README keeps its runnable 30-second tour; the manual's examples live in docs/ and run too."""
    readme = [r for r in runs() if r.blocks[0].document == "README.md"]
    assert len(readme) >= 1 and sum(len(r.blocks) for r in readme) >= 4
    pages = {r.blocks[0].document for r in runs()} - {"README.md"}
    assert {"docs/python-api.md", "docs/batches.md", "docs/library.md", "docs/lab.md"} <= pages
    assert len(runs()) >= 6 and sum(len(r.blocks) for r in runs()) >= 12
    assert all(b.marker != "continues" for b in blocks_of(ROOT / "README.md")[:1])


@pytest.mark.slow  # a process per example, each with its own sandbox
@pytest.mark.parametrize("run", runs(), ids=lambda run: run.name)
def test_the_example_runs_as_written(run: Run, tmp_path: Path) -> None:
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps([vars(b) for b in run.blocks]))
    child = tmp_path / "run_blocks.py"
    child.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}  # no key: the sandbox
    env.update(
        XDG_DATA_HOME=str(tmp_path / "xdg"),
        MUSICGEN_SANDBOX_STAGE_SECONDS="0.3",
        MUSICGEN_SANDBOX_SONG_SECONDS="8",
        MUSICGEN_POLL_INTERVAL="0.2",
        MUSICGEN_ANALYZE="on",
    )
    done = subprocess.run(
        [sys.executable, str(child), str(blocks)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    assert done.stdout.rstrip().endswith("--- all blocks ran"), done.stdout[-2000:]


def test_the_quickstart_names_the_studios_button_and_every_tab() -> None:
    from ipymusicgen.widgets.studio import TAB_TITLES, SongPane

    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    last_words = "".join(next(c for c in reversed(notebook["cells"]) if c["cell_type"] == "markdown")["source"])
    assert f"**{SongPane.submit_label}**" in last_words
    assert all(f"**{title}**" in last_words for title in TAB_TITLES), last_words
