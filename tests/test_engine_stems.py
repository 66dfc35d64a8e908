"""ElevenLabs stem separation as a paid extra of a song (issue 37): made once per song like its WAV (a second ask
reuses the ZIP, nothing paid again), journalled before sending and priced in dollars, never sent again after an
answer that may have been charged, not charged on a definite refusal; the sandbox plays ElevenLabs."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ipymusicgen import MusicClient
from ipymusicgen.archive.extras import UnknownExtraError, make_extra
from ipymusicgen.config import Settings
from ipymusicgen.errors import APIStatusError, MusicGenError
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal

KEY = "stems-test-key-0123"
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
        made.append(client := build_client(settings, archive=tmp_path / "archive"))
        return client

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


def engine_song(client: MusicClient) -> str:
    [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=60, interval=0.05)
    return song.id


def stem_attempts(tmp_path: Path) -> list[Any]:
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        return [a for a in journal.attempts() if a.endpoint == "elevenlabs stem separation"]
    finally:
        journal.close()


def test_stems_are_made_once_kept_beside_the_song_and_reused(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    song = engine_song(client)
    first = make_extra(client, song, "stems")
    assert (
        first.state == "made"
        and first.sent
        and first.path is not None
        and first.path.suffixes[-2:] == [".stems", ".zip"]
    )
    with zipfile.ZipFile(io.BytesIO(first.path.read_bytes())) as archive:
        assert len(archive.namelist()) == 2  # two_stems_v1: vocals and instrumental
    again = make_extra(client, song, "stems")
    assert again.state == "reused" and not again.sent and again.path == first.path
    assert service.request_counts().get(STEMS) == 1  # paid once
    [attempt] = stem_attempts(tmp_path)
    assert attempt.outcome == "submitted" and attempt.payload["estimate_usd"] == "0.75"  # a 30 s clip: one minute
    assert KEY not in str(attempt.payload)
    with Library(tmp_path / "journal.sqlite3") as library:
        eleven = {r["provider"]: r for r in library.spend(by="provider").rows}["elevenlabs"]
    assert eleven["calls"] == 1 and eleven["credits_estimated"] is None  # dollars, never credits


def test_a_stem_separation_that_may_have_been_charged_is_not_sent_again(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    song = engine_song(client)
    service.set_faults(f"server_error:count=1:path={STEMS}")
    with pytest.raises(APIStatusError):
        make_extra(client, song, "stems")
    service.set_faults("")
    with pytest.raises(UnknownExtraError, match="may have been charged"):
        make_extra(client, song, "stems")
    assert service.request_counts().get(STEMS) == 1
    [attempt] = stem_attempts(tmp_path)
    assert attempt.outcome == "unknown"


def test_a_wrong_key_refuses_the_stems_uncharged_and_an_ask_after_sends_them(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    song = engine_song(engine_clients())
    wrong = engine_clients(elevenlabs_api_key=SecretStr("not-the-key-\x1b[31m"))
    with pytest.raises(APIStatusError, match="not charged") as refused:
        make_extra(wrong, song, "stems")
    assert "not-the-key" not in str(refused.value) and "\x1b" not in str(refused.value)
    assert stem_attempts(tmp_path)[0].outcome == "rejected"
    assert make_extra(engine_clients(), song, "stems").state == "made"  # a refusal held nothing: asked again


def test_stems_of_a_song_without_finished_audio_send_nothing(
    engine_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = engine_clients()
    with pytest.raises(MusicGenError):
        make_extra(client, "elevenlabs-" + "0" * 32, "stems")
    assert service.request_counts().get(STEMS) is None and stem_attempts(tmp_path) == []
    with pytest.raises(MusicGenError, match="no finished audio"):  # not held as being sent: asked again, said again
        make_extra(client, "elevenlabs-" + "0" * 32, "stems")


@pytest.mark.parametrize("price", ["NaN", "-1", "0", "1e30"])
def test_a_hostile_stems_price_refuses_before_anything_is_sent(
    engine_clients: Callable[..., MusicClient], service: Sandbox, monkeypatch: pytest.MonkeyPatch, price: str
) -> None:
    client = engine_clients()
    song = engine_song(client)
    monkeypatch.setenv("MUSICGEN_DOLLAR_PRICES", f"elevenlabs:stem-separation={price}")
    with pytest.raises(MusicGenError, match="MUSICGEN_DOLLAR_PRICES"):
        make_extra(client, song, "stems")
    assert service.request_counts().get(STEMS) is None
