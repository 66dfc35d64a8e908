"""No paid song is lost: `resume()` finds unfinished tasks in the journal, and a killed kernel's songs are
finished by the next one.

The kill test starts real kernels (jupyter_client) against a sandbox in this process: the first
submits v1 and v2 songs with a watcher polling and is SIGKILLed mid-poll; a second kernel resumes
from the shared journal file and finishes every task. Nothing is ever sent twice (sandbox counts).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ManualClock, wait_until

from ipymusicgen.client.faces import MusicClient, Resumed
from ipymusicgen.config import Settings
from ipymusicgen.errors import CreateOutcomeUnknownError
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

pytestmark = pytest.mark.slow  # kills kernels

GENERATE_PATH = "/v1/music/generate"
SUBMIT_PATH = "/v2/submit"
TASKS_PATH = "/v1/music/tasks"
WAIT = 60.0
"""Generous bound for anything that should take seconds, on a busy shared machine."""


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite3"


def sandbox_client(sandbox: Sandbox, journal: Journal | None, **kwargs: Any) -> MusicClient:
    return sandbox.client(journal=journal, timeout=10, **kwargs)


def submit_both(client: MusicClient) -> tuple[list[str], list[str]]:
    v1 = list(client.generate(action="auto", style="resume me").ids)
    v2 = [song.id for song in client.submit_v2(is_auto=1, model_version="v4.5", prompt="resume me too")]
    return v1, v2


# ---------------------------------------------------------------------------------------------------
# MusicClient.resume() / AsyncMusicClient.resume().


def test_resume_lists_what_another_client_left_unfinished(sandbox: Sandbox, journal_path: Path) -> None:
    first_journal = Journal(journal_path)
    with sandbox_client(sandbox, first_journal) as first:
        v1, v2 = submit_both(first)
    first_journal.close()  # as if the kernel went away

    later_journal = Journal(journal_path)
    with sandbox_client(sandbox, later_journal) as later:
        found = later.resume()
        assert isinstance(found, Resumed)
        assert sorted(found.v1_ids) == sorted(v1) and sorted(found.v2_ids) == sorted(v2)
        assert found.records == () and found.unknown == ()
        assert sorted(found.ids) == sorted(v1 + v2)
        assert sandbox.request_counts().get(TASKS_PATH, 0) == 0  # listing sends nothing
        finished = later.resume(wait=True, timeout=WAIT)
        assert {r.id: r.state for r in finished.records} == dict.fromkeys(v1 + v2, TaskState.COMPLETE)
        assert later.resume().ids == []  # the journal learnt it: nothing left to resume
    assert {e.id: e.state for e in later_journal.history()} == dict.fromkeys(v1 + v2, "complete")
    assert sandbox.request_counts()[GENERATE_PATH] == 1 and sandbox.request_counts()[SUBMIT_PATH] == 1
    later_journal.close()


def test_async_resume_waits_for_the_same_tasks(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    with sandbox_client(sandbox, journal) as first:
        v1, v2 = submit_both(first)

    async def resume() -> tuple[Resumed, Resumed]:
        async with sandbox.async_client(journal=journal, timeout=10) as client:
            return await client.resume(), await client.resume(wait=True, timeout=WAIT)

    listed, finished = asyncio.run(resume())
    assert sorted(listed.ids) == sorted(v1 + v2)
    assert sorted(r.id for r in finished.records) == sorted(v1 + v2)
    assert all(r.state is TaskState.COMPLETE for r in finished.records)
    assert journal.unfinished() == []
    journal.close()


def test_resume_only_takes_tasks_of_its_own_hosts(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    elsewhere = journal.begin("generate", "https://api.example.com", {"action": "auto", "style": "x"})
    journal.submitted(elsewhere, ["other-host-task"])
    doubtful = journal.begin("generate", "https://api.example.com", {"action": "auto", "style": "y"})
    journal.unknown(doubtful, "no answer")
    with sandbox_client(sandbox, journal) as client:
        v1, _ = submit_both(client)
        found = client.resume()
    assert "other-host-task" not in found.ids
    assert sorted(found.v1_ids) == sorted(v1)
    assert found.unknown == ()
    journal.close()


def test_resume_reports_requests_with_an_unknown_outcome(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    sandbox.set_faults(f"drop:after:path={GENERATE_PATH}")
    with sandbox_client(sandbox, journal) as client:
        with pytest.raises(CreateOutcomeUnknownError, match="NOT resent"):
            client.generate(action="auto", style="lost answer")
        found = client.resume(wait=True, timeout=WAIT)
    (attempt,) = found.unknown
    assert attempt.payload["style"] == "lost answer" and attempt.host == sandbox.base_url
    assert found.ids == [] and found.records == ()
    assert "1 unknown" in repr(found)
    assert sandbox.request_counts()[GENERATE_PATH] == 1
    journal.close()


def test_resume_without_a_journal_opens_the_settings_journal(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    with sandbox_client(sandbox, journal) as first:
        v1, v2 = submit_both(first)
    journal.close()
    settings = Settings.from_env().with_changes(journal_path=str(journal_path), poll_interval=0.05)
    with sandbox.client(settings=settings, timeout=10, journal=False) as client:
        assert client.journal is None
        finished = client.resume(wait=True, timeout=WAIT)
        assert sorted(r.id for r in finished.records) == sorted(v1 + v2)
        assert client.journal is not None and client.journal.unfinished() == []


# ---------------------------------------------------------------------------------------------------
# The kill test: real kernels, a SIGKILL mid-poll, a second kernel finishes every task.

KILL_STAGE_SECONDS = 4.0
"""Songs stay unfinished for two stages (8 s): long enough to kill the first kernel mid-poll."""

FIRST_KERNEL = """
%load_ext ipymusicgen
import json, ipymusicgen
from ipymusicgen.workspace import session
first = %musicgen a song the kernel will not live to hear
second = %musicgen --v2 a v2 song submitted just before the crash
client = session.get_client()
third = client.generate(action="custom", title="Third", lyrics="la la", style="folk")
watcher = ipymusicgen.TaskWatcher(list(third.ids))
print("IDS=" + json.dumps({"v1": list(first.ids) + list(third.ids), "v2": list(second)}))
"""

SECOND_KERNEL = """
%load_ext ipymusicgen
import json, ipymusicgen
resumed = %musicgen_resume
records = resumed.wait(timeout=WAIT_SECONDS)
left = ipymusicgen.watch_unfinished()
print("DONE=" + json.dumps({"records": {r.id: r.state.value for r in records}, "left": left.ids}))
"""


@pytest.fixture(scope="module")
def slow_sandbox() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=KILL_STAGE_SECONDS, song_seconds=4, faults="") as server:
        yield server


def kernel_env(sandbox: Sandbox, journal_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(sandbox.env())
    env.update({"MUSICGEN_JOURNAL": str(journal_path), "MUSICGEN_POLL_INTERVAL": "0.3", "PYTHONUNBUFFERED": "1"})
    return env


class Kernel:
    """A real IPython kernel in a subprocess, with a blocking client to run code in it."""

    def __init__(self, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=WAIT)

    def run(self, code: str, timeout: float = WAIT) -> str:
        """Run code; its stdout. A failing cell fails the test with the kernel's traceback."""
        out: list[str] = []
        errors: list[str] = []

        def hook(message: dict[str, Any]) -> None:
            content = message["content"]
            if message["msg_type"] == "stream":
                out.append(content["text"])
            elif message["msg_type"] == "error":
                errors.append("\n".join(content["traceback"]))

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok" and not errors, "\n".join(errors) or str(reply["content"])
        return "".join(out)

    def kill(self) -> None:
        """SIGKILL: no atexit, no cleanup, as when a kernel dies.

        Sent directly: `shutdown_kernel(now=True)` interrupts the kernel (SIGINT) before it kills it, and a
        kernel that handles the interrupt in time is not a killed one. It then only cleans up.
        """
        self.client.stop_channels()
        process = self.manager.provisioner.process  # type: ignore[union-attr]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(WAIT)
        self.manager.shutdown_kernel(now=True)

    @property
    def alive(self) -> bool:
        return self.manager.is_alive()


def tagged(output: str, tag: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith(tag + "="))
    return json.loads(line[len(tag) + 1 :])


def test_a_killed_kernels_songs_are_finished_by_the_next_kernel(slow_sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox = slow_sandbox
    sandbox.reset()
    clock = ManualClock(KILL_STAGE_SECONDS)  # the songs wait for the kill, however slow the machine starts a kernel
    sandbox.state.clock = clock
    try:
        _killed_and_finished(sandbox, clock, tmp_path)
    finally:
        sandbox.state.clock = time.monotonic


def _killed_and_finished(sandbox: Sandbox, clock: ManualClock, tmp_path: Path) -> None:
    journal_path = tmp_path / "kernels.sqlite3"
    env = kernel_env(sandbox, journal_path)

    first = Kernel(env)
    try:
        submitted = tagged(first.run(FIRST_KERNEL), "IDS")
        polls_before = sandbox.request_counts().get(TASKS_PATH, 0)
        wait_until(
            lambda: sandbox.request_counts().get(TASKS_PATH, 0) >= polls_before + 2, "watchers polling", WAIT
        )  # watchers are polling
    finally:
        first.kill()
    assert not first.alive

    ids = submitted["v1"] + submitted["v2"]
    assert len(submitted["v1"]) == 4 and len(submitted["v2"]) == 2
    journal = Journal(journal_path)
    try:
        unfinished = {e.id for e in journal.unfinished()}
        assert unfinished == set(ids), "every task must still be unfinished when the kernel dies"
        assert {a.outcome for a in journal.attempts()} == {"submitted"}
        counts = sandbox.request_counts()
        assert (counts[GENERATE_PATH], counts[SUBMIT_PATH]) == (2, 1)

        clock.stages(3)  # every song is complete now: the next kernel finds them so
        second = Kernel(env)
        try:
            done = tagged(second.run(SECOND_KERNEL.replace("WAIT_SECONDS", str(WAIT)), timeout=WAIT * 2), "DONE")
        finally:
            second.kill()

        assert done["records"] == dict.fromkeys(ids, "complete")
        assert done["left"] == []
        assert {e.id: e.state for e in journal.history(limit=100)} == dict.fromkeys(ids, "complete")
        assert all(e.audio_url for e in journal.history(limit=100))
        counts = sandbox.request_counts()
        assert (counts[GENERATE_PATH], counts[SUBMIT_PATH]) == (2, 1)  # nothing was sent twice
        print(
            f"\nkill test: {len(ids)} tasks submitted by kernel 1 ({counts[GENERATE_PATH]} generate + "
            f"{counts[SUBMIT_PATH]} v2 submit calls), {len(unfinished)} unfinished at the kill, "
            f"{len(done['records'])} finished by kernel 2, 0 creates resent; {counts[TASKS_PATH]} task queries, "
            f"{counts.get('/v2/query', 0)} v2 queries"
        )
    finally:
        journal.close()


# ---------------------------------------------------------------------------------------------------
# A kernel killed in the middle of a paid call: the next kernel's %musicgen_resume lists it as unknown.

MID_CALL = '%load_ext ipymusicgen\n%musicgen --action custom --title "Killed Mid Call" --style "sigkill soul" la la'
RESUME_AFTER = "%load_ext ipymusicgen\n%musicgen_resume"


def test_a_kernel_killed_mid_paid_call_is_listed_unknown_by_the_next_kernel(tmp_path: Path) -> None:
    from hostile_server import SilentServer

    silent = SilentServer()
    journal_path = tmp_path / "mid-call.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {
            "MUSICGEN_API_KEY": "mid-call-test-key",
            "MUSICGEN_BASE_URL": silent.url,
            "MUSICGEN_V2_BASE_URL": silent.url,
            "MUSICGEN_JOURNAL": str(journal_path),
            "MUSICGEN_TIMEOUT": "300",
        }
    )
    try:
        first = Kernel(env)
        try:
            first.client.execute(MID_CALL)  # never answered: the kernel sits in the paid call
            wait_until(lambda: len(silent.requests) == 1, "the request sent", WAIT)
            with Journal(journal_path) as journal:
                (pending,) = journal.attempts(outcome="pending")  # in flight while the kernel lives
                assert pending.title == "Killed Mid Call"
        finally:
            first.kill()

        second = Kernel(env)
        try:
            out = second.run(RESUME_AFTER)
        finally:
            second.kill()
        assert "1 paid request(s) with an unknown outcome" in out
        line = next(x for x in out.splitlines() if "Killed Mid Call" in x)
        assert "(sigkill soul)" in line and "unknown" in line and "ended" in line
        assert "No unfinished tasks to resume." in out
        assert len(silent.requests) == 1  # nothing resent
    finally:
        silent.close()


def test_an_interrupted_paid_call_is_listed_unknown_in_the_same_kernel(tmp_path: Path) -> None:
    """ "Interrupt kernel" during the send: the kernel lives on, and its attempt is unknown, not in flight."""
    from hostile_server import SilentServer

    silent = SilentServer()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {
            "MUSICGEN_API_KEY": "interrupt-test-key",
            "MUSICGEN_BASE_URL": silent.url,
            "MUSICGEN_V2_BASE_URL": silent.url,
            "MUSICGEN_JOURNAL": str(tmp_path / "interrupt.sqlite3"),
            "MUSICGEN_TIMEOUT": "300",
        }
    )
    kernel = Kernel(env)
    try:
        msg_id = kernel.client.execute(MID_CALL, stop_on_error=False)  # the next cell is not aborted
        wait_until(lambda: len(silent.requests) == 1, "the request sent", WAIT)
        kernel.manager.interrupt_kernel()
        while True:
            reply = kernel.client.get_shell_msg(timeout=WAIT)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "error"
        out = kernel.run("%musicgen_resume")
        assert "1 paid request(s) with an unknown outcome" in out
        line = next(x for x in out.splitlines() if "Killed Mid Call" in x)
        assert ": unknown, " in line and "interrupted" in line
        assert len(silent.requests) == 1
    finally:
        kernel.kill()
        silent.close()
