"""Every feature through a real team gateway, as a user of it sees it: MUSICGEN_BASE_URL and MUSICGEN_V2_BASE_URL
point at the gateway and MUSICGEN_API_KEY is the user's token, nothing else set up. The gateway fronts a keyed
sandbox whose only key is the canary, searched for in every output, widget state, file, tool result and log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, paid_counts, post, settled
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen import session
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

BUDGET = 200
UPSTREAM_SECRETS = (CANARY_KEY, "sandbox@example.invalid", "sandbox-member")
"""What the upstream account would tell about itself: the key, its e-mail and member id."""


@dataclass
class Team:
    gateway: GatewayThread
    database: str
    token: str
    folder: Path

    @property
    def journal(self) -> Path:
        return self.folder / "journal.sqlite3"

    def calls(self) -> list[dict[str, Any]]:
        ledger = open_ledger(self.database)
        try:
            return ledger.calls()
        finally:
            ledger.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    """The paid service behind the gateway: a sandbox that knows only the canary key."""
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def team(upstream: Sandbox, clean_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    """A gateway on a SQLite ledger, one user (alice) with a budget, and this process set up as her notebook
    would be: the three variables, plus a private journal and archive (the test's own folder)."""
    upstream.reset()
    database = str(tmp_path / "gateway.sqlite3")
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        token = add_user(database, "alice", budget=BUDGET)
        for name, value in gateway.env(token).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "journal.sqlite3"))
        monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
        monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
        monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
        monkeypatch.setenv("MUSICGEN_ANALYZE", "off")
        session.shutdown()
        try:
            yield Team(gateway, database, token, tmp_path)
        finally:
            session.shutdown()


def assert_no_upstream_secret(*texts: object) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        for secret in UPSTREAM_SECRETS:
            assert secret not in shown, f"{secret!r} leaked into {shown[:200]!r}"


def assert_no_canary_in_files(folder: Path) -> None:
    """Every file the test made (journal, archive, library, the gateway's ledger) searched for the canary."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert CANARY_KEY.encode() not in path.read_bytes(), path


@pytest.fixture
def shell(team: Team) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    names = set(ip.user_ns)
    with capture_output():
        ip.run_line_magic("load_ext", "ipymusicgen")
    ip.run_line_magic("config", "MusicGen.auto_watch = False")
    yield ip
    ip.run_line_magic("unload_ext", "ipymusicgen")
    ip.config.pop("MusicGen", None)
    for name in set(ip.user_ns) - names:
        ip.user_ns.pop(name, None)


# -- the magics ---------------------------------------------------------------------------------------------------


def test_the_magics_make_songs_lyrics_extras_and_v2_through_the_gateway(
    team: Team,
    shell: InteractiveShell,
    upstream: Sandbox,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    with capture_output() as out:
        songs = shell.run_cell_magic("musicgen", "--wait --timeout 30", "lo-fi rain on a tin roof\n")
        lyrics = shell.run_line_magic("lyrics", "a song about the first snow")
        song_id = songs[0].id
        asked = shell.run_line_magic("musicgen_wav", song_id)
        wav = shell.run_line_magic("musicgen_wav", f"--yes {song_id}")
        v2 = shell.run_cell_magic("musicgen", "--v2 --wait --timeout 30", "dreamy synth pop\n")
        settled(team.database)
        report = shell.run_line_magic("musicgen_key", "")
    assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
    assert lyrics and lyrics.title is not None
    assert asked is None and "Pay about" in out.stdout, "the paid extra asks first"
    assert wav is not None and (wav.path or wav.value)
    assert [s.state for s in v2] == [TaskState.COMPLETE] * 2
    calls = team.calls()
    spent = sum(c["measured"] if c["measured"] is not None else c["estimated"] for c in calls)
    assert report.info.key_name == "alice" and report.info.key_music_counts == BUDGET - spent
    assert report.info.email is None and report.info.member_id is None
    assert {c["endpoint"] for c in calls} == {
        "/v1/music/generate",
        "/v1/lyrics",
        "/v1/music/generate-wav",
        "/v2/submit",
    }
    assert all(c["state"] == "done" for c in calls)
    assert paid_counts(upstream)["/v1/music/generate-wav"] == 1
    logged = capfd.readouterr()
    assert_no_upstream_secret(
        out.stdout, out.stderr, repr(report), report._repr_html_(), caplog.text, logged.out, logged.err
    )
    for value in (songs, v2, lyrics, wav):
        assert_no_upstream_secret(repr(value))
    session.shutdown()
    assert_no_canary_in_files(team.folder)


# -- the song extras take a song's own id ---------------------------------------------------------------------------


def test_a_song_extra_takes_the_song_id_of_the_callers_own_task_and_nobody_elses(team: Team, upstream: Sandbox) -> None:
    """A v1 task's song has an id of its own (its record's `song_id`), which the client sends to the extras:
    the gateway finds it among the caller's own tasks' records; another user asking for it gets "no such song"."""
    session.get_client()  # nothing: the variables alone set the client up
    ids = post(team.gateway.url, "/v1/music/generate", team.token, {"action": "auto", "style": "x"}).json()
    task_ids = ids["data"]["ids"]
    records = session.get_client().wait(task_ids, timeout=30)
    song_id = records[0].song_id
    assert song_id and song_id not in task_ids
    bob = add_user(team.database, "bob")
    foreign = post(team.gateway.url, f"/v1/music/generate-wav?song_id={song_id}", bob, None).json()
    assert foreign["status"] != 200 and song_id in foreign["message"], "bob cannot pay for alice's song"
    wav = post(team.gateway.url, f"/v1/music/generate-wav?song_id={song_id}", team.token, None).json()
    assert wav["status"] == 200, wav
    assert paid_counts(upstream)["/v1/music/generate-wav"] == 2  # bob's went up as an id that does not exist
