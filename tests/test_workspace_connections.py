"""One connection per journal file per process: however often `library()`, `waveform()`, `analyze()` and the
archiver open the workspace's file, `sqlite3.connect` is called for it once (counted where it is called, so a
connection opened and closed again each time counts too, not only those open at the end)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from jupyter_utils import QUICK_SANDBOX, sandbox_env

COUNT_CONNECTS = """
import json, sqlite3, warnings
from pathlib import Path

targets = []
real_connect = sqlite3.connect

def counting(target, *args, **kwargs):
    targets.append(str(target))
    return real_connect(target, *args, **kwargs)

sqlite3.connect = counting  # before ipymusicgen is imported: storage calls sqlite3.connect(...) at call time
warnings.simplefilter("ignore")

import ipymusicgen
from ipymusicgen.workspace import session

client = ipymusicgen.get_client()
path = Path(session.current_workspace().path).resolve()
rounds = []
for round in range(3):
    ids = list(client.generate(action="auto", style=f"lo-fi {round}").ids)
    client.wait(ids, timeout=120, archived=True)  # the archiver kept each song (reading and writing the file)
    for task_id in ids:
        with ipymusicgen.library() as opened:
            assert opened.song(task_id).archive_path, task_id
        assert ipymusicgen.waveform(task_id, points=16).shape == (16, 2)
        try:
            ipymusicgen.analyze(task_id)  # measured and kept in the library (or the extra is not installed)
        except ImportError:
            pass
    ipymusicgen.export(ids, path.parent / f"exports-{round}")
    rounds.append(sum(1 for t in targets if str(path) in t or path.as_uri() in t))
print("ROUNDS=" + json.dumps(rounds))
"""


def test_one_sqlite_connect_per_journal_file_however_often_it_is_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COUNT_CONNECTS)],
        capture_output=True, text=True, timeout=300, check=False,
        env=sandbox_env(MUSICGEN_ANALYZE="on", **QUICK_SANDBOX),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = json.loads(done.stdout.split("ROUNDS=")[-1])
    assert rounds == [1, 1, 1], rounds  # connected once, in the first round; never again
