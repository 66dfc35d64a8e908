"""The journal: every paid attempt and task id recorded before the call returns, state as polling learns it."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from pathlib import Path

import httpx
import pytest

from ipymusicgen import CreateOutcomeUnknownError, InsufficientCreditsError, MusicClient
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.sandbox import DEMO_KEY
from ipymusicgen.storage.journal import Journal, default_journal_path

BASE = "http://127.0.0.1:9"


def make_client(handler, journal: Journal, **kwargs) -> MusicClient:
    """A client on a mock transport that archives nothing: an archiver would download from its own thread
    after the test, into a journal the test has closed (a JournalWriteWarning in a later test)."""
    kwargs.setdefault("archive", False)
    return MusicClient(
        api_key="journal-test-key",
        base_url=BASE,
        v2_base_url="http://127.0.0.1:10",
        journal=journal,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        **kwargs,
    )


def test_generate_records_attempt_before_sending_and_ids_after(journal: Journal) -> None:
    seen_during_send: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_during_send.append([a.outcome for a in journal.attempts()])
        return httpx.Response(200, json={"status": 200, "message": "Success", "data": {"ids": ["t1", "t2"]}})

    client = make_client(handler, journal)
    client.generate(action="custom", title="Night Drive", lyrics="la la", style="synthwave")
    assert seen_during_send == [["pending"]]
    (attempt,) = journal.attempts()
    assert attempt.outcome == "submitted"
    assert attempt.payload["title"] == "Night Drive"
    assert attempt.host == BASE
    entries = {e.id: e for e in journal.unfinished()}
    assert set(entries) == {"t1", "t2"}
    assert entries["t1"].title == "Night Drive" and entries["t1"].style == "synthwave"
    assert "journal-test-key" not in journal.path.read_bytes().decode("latin-1")


def test_unknown_outcome_is_recorded_and_not_resent(journal: Journal) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ReadTimeout("no answer", request=request)

    client = make_client(handler, journal)
    with pytest.raises(CreateOutcomeUnknownError) as info:
        client.generate(style="ambient")
    assert len(calls) == 1
    (attempt,) = journal.attempts(outcome="unknown")
    assert attempt.id == info.value.attempt_id
    assert attempt.payload == {"action": "auto", "instrumental": 0, "style": "ambient"}


def test_rejected_attempt_is_recorded(journal: Journal) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": 400, "message": "Insufficient credits", "data": None})

    with pytest.raises(InsufficientCreditsError):
        make_client(handler, journal).generate(style="x")
    (attempt,) = journal.attempts()
    assert attempt.outcome == "rejected" and "credits" in (attempt.note or "")
    assert journal.unfinished() == []


def test_polling_updates_state_and_urls(journal: Journal) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/music/generate":
            return httpx.Response(200, json={"status": 200, "message": "Success", "data": {"ids": ["a", "b"]}})
        return httpx.Response(
            200,
            json=[
                {"id": "a", "status": 0, "duration": 5000, "audio_url": "http://127.0.0.1:9/a.mp3", "title": "A"},
                {"id": "b", "status": 3, "fail_code": 500, "fail_reason": "boom"},
            ],
        )

    with make_client(handler, journal) as client:
        client.wait(client.generate(style="x").ids, interval=0.001)
    assert journal.unfinished() == []
    states = {e.id: (e.state, e.audio_url, e.fail_reason) for e in journal.history()}
    assert states == {"a": ("complete", "http://127.0.0.1:9/a.mp3", None), "b": ("failed", None, "boom")}
    assert [e.id for e in journal.history(state="failed")] == ["b"]
    assert [e.id for e in journal.history(text="A")] == ["a"]


def test_v2_submissions_are_recorded_as_v2(journal: Journal) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        songs = [{"song_id": "s1", "status": "RUNNING"}, {"song_id": "s2", "status": "RUNNING"}]
        return httpx.Response(200, json={"status": 200, "message": "Success", "data": songs})

    make_client(handler, journal).submit_v2(is_auto=1, model_version="v4.5", prompt="sea shanty")
    entries = journal.unfinished(host="http://127.0.0.1:10")
    assert sorted(e.id for e in entries) == ["s1", "s2"]
    assert all(e.version == 2 for e in entries)


def test_observe_ignores_tasks_it_never_saw(journal: Journal) -> None:
    journal.observe([TaskRecord(id="stranger", status=0)])
    assert journal.history() == []


def _write_many(path: str, prefix: str, count: int) -> None:
    journal = Journal(path)
    for n in range(count):
        attempt = journal.begin("generate", "http://h", {"n": n})
        journal.submitted(attempt, [f"{prefix}-{n}-a", f"{prefix}-{n}-b"])
    journal.close()


def test_two_processes_share_one_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite3")
    Journal(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_many, args=(path, name, 40)) for name in ("k1", "k2")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 160
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _answer_generate(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": 200, "message": "Success", "data": {"ids": ["d1", "d2"]}})


def test_a_plain_client_of_a_real_service_journals_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_JOURNAL", raising=False)
    transport = httpx.MockTransport(_answer_generate)
    with MusicClient("k", base_url="https://api.example", http_client=httpx.Client(transport=transport)) as client:
        client.generate(action="auto", style="default journal")
        path = client.journal.path
    assert path == default_journal_path() and path.parent.parent == Path(os.environ["XDG_DATA_HOME"])
    with Journal(path) as durable:
        assert {"d1", "d2"} <= {e.id for e in durable.unfinished("https://api.example")}


def test_loopback_clients_journal_but_the_demo_key_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy or tunnel on 127.0.0.1 in front of the paid service is a real service: journalled, by identity."""
    monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "local.sqlite3"))
    transport = httpx.MockTransport(_answer_generate)
    with MusicClient("k", base_url=BASE, http_client=httpx.Client(transport=transport)) as client:
        client.generate(action="auto", style="through a local proxy")
        assert client.journal is not None and client.journal.path == tmp_path / "local.sqlite3"
    with Journal(tmp_path / "local.sqlite3") as local:
        assert {e.id for e in local.unfinished()} == {"d1", "d2"}
    assert MusicClient("k", base_url="https://api.example", journal=False).journal is None
    assert MusicClient(DEMO_KEY, base_url=BASE, http_client=httpx.Client(transport=transport)).journal is None
