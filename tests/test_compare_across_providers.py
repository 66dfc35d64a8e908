"""Blind tests across providers (issue 37, "Compare engines"): an ElevenLabs or Lyria take beside a service take,
in A/B and ABX, and nothing the page receives before the vote tells the engine: no URL (the engines' host, a
`file:` path of the kernel's answer), no duration, no format, no sample rate, no size. Read off the wire (the
widget's state and every message with its bytes), against real songs of the sandbox's service and engines."""

from __future__ import annotations

import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_compare_blind import Wire

from ipymusicgen import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.widgets.compare import CompareView

KEY = "blind-engines-key-0123"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 3}


def engine_client(service: Sandbox, tmp_path: Path, archive: Path | bool) -> MusicClient:
    from ipymusicgen.workspace.workspace import build_client

    settings = Settings.from_env().with_changes(
        api_key=service.api_key,
        base_url=service.base_url,
        v2_base_url=service.v2_base_url,
        **service.engine_settings(KEY),
        journal_path=tmp_path / "journal.sqlite3",
        poll_interval=0.05,
    )
    return build_client(settings, archive=archive)


@pytest.fixture(params=["elevenlabs", "lyria"])
def takes(request: pytest.FixtureRequest, service: Sandbox, tmp_path: Path) -> Iterator[tuple[list[Any], str]]:
    """A service take and an engine take, neither archived: the engine's audio is only its kept answer."""
    client = engine_client(service, tmp_path, archive=False)
    try:
        engine_kw: dict[str, Any] = {"seconds": 5} if request.param == "elevenlabs" else {}
        [engine] = client.wait(client.generate(provider=request.param, style="folk", **engine_kw), timeout=60,
                               interval=0.05)  # fmt: skip
        ids = client.generate(style="folk")
        service.clock.stages(100)  # the service's song is finished when next asked
        service_song = client.wait(ids, timeout=60, interval=0.05)[0]
        yield [service_song, engine], request.param
    finally:
        client.engine_calls.join(30)
        client.close()


def shape(wav: bytes) -> tuple[int, int, int]:
    with wave.open(io.BytesIO(wav)) as read:
        return read.getnchannels(), read.getframerate(), read.getnframes()


def tells(song: Any) -> list[str]:
    url = urlsplit(str(getattr(song, "audio_url", "") or ""))
    found = [song.id, url.netloc, url.path, Path(url.path).name, str(getattr(song, "provider", "") or "")]
    found += [str(getattr(song, "model", "") or ""), str(song.duration_seconds or "")]
    return [t for t in found if t and len(t) > 2]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ab", "abx"])
def test_an_engine_take_beside_a_service_take_is_told_apart_by_nothing_but_sound(
    takes: tuple[list[Any], str], mode: str, tmp_path: Path
) -> None:
    songs, provider = takes
    assert songs[1].audio_url and not songs[1].audio_url.startswith("http")  # the engine's kept answer
    assert songs[0].duration_seconds != songs[1].duration_seconds or provider  # lengths differ as made
    with Library(tmp_path / "journal.sqlite3") as library:
        view = CompareView(songs, library=library, mode=mode, seed=3, min_listen_s=0)
        wire = Wire(view)
        players = view.data["players"]
        assert all(set(p) == {"label", "source"} for p in players)
        heard = [wire.ask(p["source"]) for p in players]
        for content, payload in heard:
            assert "error" not in content, content
            assert content["type"] == "audio/wav" and payload is not None and content["size"] == len(payload)
        assert len({shape(payload or b"") for _, payload in heard}) == 1  # one channel count, rate, length
        assert len({content["size"] for content, _ in heard}) == 1  # one size
        shown = wire.text()  # the messages and the bytes (tags are text)
        said = "\n".join(json.dumps(data, default=str) for data, _ in wire.sent)  # the messages alone
        for secret in [*tells(songs[0]), *tells(songs[1]), provider, "file:", "elevenlabs", "lyria", "musicful"]:
            assert secret not in (said if secret.replace(".", "").isdigit() else shown), secret
        view.close()


def test_only_an_engines_own_kept_answer_is_taken_from_a_file_url(tmp_path: Path) -> None:
    from ipymusicgen.widgets.compare import engine_answer

    spool = tmp_path / "engine-audio"
    spool.mkdir()
    ours = spool / "elevenlabs-0123.mp3"
    ours.write_bytes(b"ID3")
    stranger = tmp_path / "elsewhere" / "elevenlabs-0123.mp3"
    stranger.parent.mkdir()
    stranger.write_bytes(b"ID3")
    (spool / "notes-0123.mp3").write_bytes(b"ID3")
    assert engine_answer(ours.as_uri()) == str(ours.resolve())
    for url in (stranger.as_uri(), (spool / "notes-0123.mp3").as_uri(), (spool / "lyria-gone.mp3").as_uri(),
                "file:///etc/passwd", "https://example.com/elevenlabs-0123.mp3", None, 7, "file:\x00"):  # fmt: skip
        assert engine_answer(url) is None, url
