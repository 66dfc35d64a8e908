"""`%%musicgen --provider elevenlabs --seconds 90 [--seed N] [--instrumental]`: the cell's lyrics become the
engine's (a composition plan, one section per stanza, for ElevenLabs); a request the engine cannot honour is a
one-line UsageError naming the provider and the field; nothing is sent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError

from ipymusicgen.engines import elevenlabs as el
from ipymusicgen.models.providers import EngineRequest
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.notebook.args import parse_musicgen
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace import session

STANZAS = "rain on the roof\nsoft and slow\n\nmorning light\nlet it go"
ENGINE_SETTINGS = ("elevenlabs_base_url", "gemini_base_url", "elevenlabs_api_key", "gemini_api_key")


@pytest.fixture
def engine_shell(sandbox_shell: object, sandbox: Sandbox) -> Iterator[object]:
    """The sandbox shell, its session's engines pointed at the same sandbox (and back to none after)."""
    session.configure(**sandbox.engine_settings())
    yield sandbox_shell
    session.configure(**dict.fromkeys(ENGINE_SETTINGS))


def test_the_cells_stanzas_become_an_elevenlabs_song_of_the_length_asked(engine_shell, sandbox: Sandbox) -> None:
    songs = engine_shell.run_cell_magic(
        "musicgen", '--provider elevenlabs --seconds 12 --seed 4 --style "sad piano" --wait --no-watch', STANZAS
    )
    [song] = list(songs)
    assert song.state is TaskState.COMPLETE and song.provider == "elevenlabs"
    assert song.duration_seconds == 12 and song.lyrics == STANZAS
    assert sandbox.request_counts() == {"/v1/music": 1}


def test_a_lyria_clip_from_the_line_form(engine_shell, sandbox: Sandbox) -> None:
    songs = engine_shell.run_line_magic("musicgen", "--provider lyria --wait --no-watch cheerful folk with harmonica")
    [song] = list(songs)
    assert song.provider == "lyria" and song.duration_seconds == 30
    assert list(sandbox.request_counts()) == ["/v1beta/models/lyria-3-clip-preview:generateContent"]


def test_the_magic_returns_the_ids_at_once_without_wait(engine_shell, sandbox: Sandbox) -> None:
    result = engine_shell.run_line_magic("musicgen", "--provider elevenlabs --seconds 5 --no-watch lo-fi")
    [task_id] = result.ids
    assert task_id.startswith("elevenlabs-")
    [song] = session.get_client().wait(result, timeout=60, interval=0.05)
    assert song.state is TaskState.COMPLETE


@pytest.mark.parametrize(
    ("line", "cell", "said"),
    [
        ("--provider lyria --seconds 90 folk", None, "seconds: lyria (lyria-3-clip-preview) always makes 30 s clips"),
        ("--provider elevenlabs --seconds 2 folk", None, "seconds: elevenlabs (music_v1) makes songs of 3 s or more"),
        ("--provider elevenlabs --seconds 700 folk", None, "at most 600"),
        ("--provider elevenlabs --seed 3 --seconds 30 folk", None, "seed: elevenlabs (music_v1) takes a seed only"),
        ("--provider lyria --continue-song-id abc", "la la", "extend: lyria (lyria-3-clip-preview) cannot extend"),
        ("--provider elevenlabs --instrumental --style pop", STANZAS, "instrumental: elevenlabs"),
        ("--provider suno folk", None, "provider: must be one of musicful, elevenlabs, lyria"),
        ("--seconds 30 lo-fi", None, "--seconds belong to --provider elevenlabs or lyria"),
        ("--v2 --seed 3 lo-fi", None, "--seed belong to --provider"),
        ("--provider elevenlabs --gender f folk", None, "--gender belong to the service's songs"),
    ],
)
def test_what_an_engine_cannot_honour_is_a_one_line_usage_error(line: str, cell: str | None, said: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_musicgen(line, cell)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_the_body_is_the_lyrics_beside_a_description_else_the_description() -> None:
    with_style = parse_musicgen('--provider elevenlabs --style "sad piano" --seconds 60 --seed 2', STANZAS).request
    assert isinstance(with_style, EngineRequest)
    assert (with_style.prompt, with_style.lyrics, with_style.seed) == ("sad piano", STANZAS, 2)
    plan = el.build(with_style).json["composition_plan"]
    assert [s["lines"] for s in plan["sections"]] == [
        ["rain on the roof", "soft and slow"],
        ["morning light", "let it go"],
    ]
    assert [s["duration_ms"] for s in plan["sections"]] == [30_000, 30_000]
    alone = parse_musicgen("--provider elevenlabs --instrumental --seconds 90", "lo-fi beat with rain").request
    assert (alone.prompt, alone.lyrics, alone.instrumental, alone.seconds) == ("lo-fi beat with rain", None, True, 90)
    assert el.build(alone).json == {"model_id": "music_v1", "prompt": "lo-fi beat with rain", "music_length_ms": 90_000,
                                    "force_instrumental": True}  # fmt: skip


def test_the_service_keeps_its_own_requests() -> None:
    call = parse_musicgen("--provider musicful lo-fi beat")
    assert not isinstance(call.request, EngineRequest) and call.request.action == "auto"
