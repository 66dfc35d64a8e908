"""The session's own sandbox stays out of the user's journal (by identity) and leaves no temp folder behind.

Runs a real process with a private TMPDIR: it uses the shared session (sandbox mode), shuts it down once,
uses it again and exits; nothing named ipymusicgen-* may be left in its temp directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

USE_THE_SESSION = """
import json, os, sys, tempfile
from pathlib import Path
from ipymusicgen.workspace import session

temp = Path(tempfile.gettempdir())
client = session.get_client()
made = client.generate(action="auto", style="temp folder test")
done = client.wait(made.ids, timeout=60)
path = client.download(done[0], sys.argv[1])
first = session.get_journal()
report = {
    "journal": str(first.path),
    "entries": len(first.history()),
    "during": sorted(p.name for p in temp.iterdir() if p.name.startswith("ipymusicgen")),
    "download": str(path),
}
session.shutdown()
report["after_shutdown"] = sorted(p.name for p in temp.iterdir() if p.name.startswith("ipymusicgen"))
session.get_client().generate(action="auto", style="again, then exit without shutdown")
report["second_journal"] = str(session.get_journal().path)
print("REPORT=" + json.dumps(report))
"""


@pytest.mark.slow
def test_a_process_using_the_session_leaves_no_temp_folder_and_no_user_journal(tmp_path: Path) -> None:
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    songs = tmp_path / "songs"
    user_journal = tmp_path / "user-journal.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {
            "TMPDIR": str(private_tmp),
            "MUSICGEN_JOURNAL": str(user_journal),  # set, but the session's own sandbox must not write to it
            "MUSICGEN_SANDBOX_STAGE_SECONDS": "0.05",
            "MUSICGEN_SANDBOX_SONG_SECONDS": "2",
            "MUSICGEN_POLL_INTERVAL": "0.05",
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", USE_THE_SESSION, str(songs)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("REPORT="))
    report = json.loads(line[len("REPORT=") :])

    journal = Path(report["journal"])
    assert journal.parent.parent == private_tmp and journal.parent.name.startswith("ipymusicgen-sandbox-")
    assert report["entries"] == 2  # the sandbox's songs went to its throwaway journal...
    assert not user_journal.exists()  # ...never to the user's
    assert journal.parent.name in report["during"]
    assert journal.parent.name not in report["after_shutdown"]  # shutdown() removes it
    assert Path(report["second_journal"]).parent != journal.parent
    assert Path(report["download"]).parent == songs and Path(report["download"]).stat().st_size > 0
    assert sorted(p.name for p in private_tmp.iterdir()) == []  # exit removes the rest (journal, archived songs)


@pytest.mark.slow  # starts a kernel
def test_a_kernel_that_shuts_down_leaves_no_sandbox_temp_folder(tmp_path: Path) -> None:
    """As when a notebook is run with nbclient or a kernel is restarted: `%musicgen` in sandbox mode, then shutdown."""
    from jupyter_client.manager import KernelManager

    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {"TMPDIR": str(private_tmp), "MUSICGEN_SANDBOX_STAGE_SECONDS": "0.05", "MUSICGEN_SANDBOX_SONG_SECONDS": "2"}
    )
    manager = KernelManager(kernel_name="python3", shutdown_wait_time=60)  # a slow machine still exits cleanly
    manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        code = (
            "%load_ext ipymusicgen\n"
            "songs = %musicgen --wait --no-watch a tune for the temp folder test\n"
            "import tempfile, os\n"
            "names = sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith('ipymusicgen'))\n"
            "print('DURING=' + ','.join(names))"
        )
        out: list[str] = []
        reply = client.execute_interactive(
            code,
            timeout=120,
            output_hook=lambda m: out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        during = next(x for x in "".join(out).splitlines() if x.startswith("DURING="))
        assert "ipymusicgen-sandbox-" in during
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)  # a clean shutdown, as Jupyter does
    assert sorted(p.name for p in private_tmp.iterdir() if p.name.startswith("ipymusicgen")) == []
