"""Attacks on ElevenLabs stems as a paid extra (issue 37): two threads asking at once pay for one separation;
a song whose audio is gone sends nothing, is not left 'may have been charged', and can be asked again once its
audio is back."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ipymusicgen import MusicClient
from ipymusicgen.archive.extras import make_extra
from ipymusicgen.config import Settings
from ipymusicgen.errors import MusicGenError
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

KEY = "stems-attack-key-0123"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
STEMS = "/v1/music/stem-separation"


@pytest.fixture
def engine_clients(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., MusicClient]]:
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory(**changes: Any) -> MusicClient:
        settings = Settings.from_env().with_changes(
            **{
                "api_key": service.api_key,
                "base_url": service.base_url,
                "v2_base_url": service.v2_base_url,
                "elevenlabs_base_url": service.engines_base_url,
                "gemini_base_url": service.engines_base_url,
                "elevenlabs_api_key": SecretStr(KEY),
                "gemini_api_key": SecretStr(KEY),
                "journal_path": tmp_path / "journal.sqlite3",
                "poll_interval": 0.05,
                **changes,
            }
        )
        made.append(client := build_client(settings, archive=changes.pop("archive", False)))
        return client

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


def engine_song(client: MusicClient) -> Any:
    [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=60, interval=0.05)
    return song


def stem_attempts(tmp_path: Path) -> list[Any]:
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        return [a for a in journal.attempts() if a.endpoint == "elevenlabs stem separation"]
    finally:
        journal.close()


@pytest.mark.slow
def test_stems_asked_by_racing_threads_are_paid_for_once(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    song = engine_song(client).id
    start = threading.Barrier(4)
    results: list[Any] = []
    errors: list[BaseException] = []

    def ask() -> None:
        start.wait()
        try:
            results.append(make_extra(client, song, "stems"))
        except BaseException as exc:  # said below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert service.request_counts().get(STEMS) == 1 and len(stem_attempts(tmp_path)) == 1
    assert sum(r.sent for r in results) == 1
    assert {r.state for r in results} <= {"made", "reused", "elsewhere"}


def test_stems_of_a_song_whose_audio_is_gone_send_nothing_and_can_be_asked_again(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    record = engine_song(client)
    kept = client.engine_calls.local_file(record)
    assert kept is not None
    moved = kept.with_name("moved-away")
    kept.rename(moved)
    with pytest.raises(MusicGenError) as refused:
        make_extra(client, record.id, "stems")
    said = str(refused.value)
    assert "may have been charged" not in said and "\n" not in said.strip()
    assert service.request_counts().get(STEMS) is None and stem_attempts(tmp_path) == []
    moved.rename(kept)  # the audio is back: the stems are made, once, with no force needed
    made = make_extra(client, record.id, "stems")
    assert made.state == "made" and made.sent and service.request_counts().get(STEMS) == 1


@pytest.mark.parametrize("kind", ["wav", "mp4", "vibe"])
def test_a_service_extra_of_an_engines_song_is_refused_before_anything_is_sent(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, kind: str
) -> None:
    client = engine_clients()
    song = engine_song(client).id
    before = dict(service.request_counts())
    with pytest.raises(MusicGenError) as refused:
        make_extra(client, song, kind)
    said = str(refused.value)
    assert "lyria" in said and kind in said.lower() and "nothing was sent" in said and "\n" not in said
    sent = {k: v - before.get(k, 0) for k, v in service.request_counts().items() if v != before.get(k, 0)}
    assert not {k for k in sent if "key_info" not in k and "tasks" not in k}, sent
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        assert [a.endpoint for a in journal.attempts()] == ["lyria generate"]  # the song's own call only
    finally:
        journal.close()
    again = make_extra(client, song, "stems")  # the engine's own extra is still there to make
    assert again.state == "made"


def test_stems_are_priced_by_the_audio_uploaded_not_only_the_length_the_record_says(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    import io
    import wave

    client = engine_clients()
    record = engine_song(client)  # a Lyria clip: its record says 30 s
    kept = client.engine_calls.local_file(record)
    assert kept is not None and record.duration_seconds is not None and record.duration_seconds <= 31
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:  # what is uploaded is 130 s long: three started minutes
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(b"\x00\x00" * 8000 * 130)
    kept.write_bytes(out.getvalue())
    with contextlib.suppress(MusicGenError):  # the price is journalled before sending, whatever the answer
        make_extra(client, record.id, "stems")
    [attempt] = stem_attempts(tmp_path)
    assert attempt.payload["estimate_usd"] == "2.25"  # not $0.75 (the record's 30 s)
