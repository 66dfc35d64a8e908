"""The sandbox's engines' host, tested with the providers' OWN SDKs (`elevenlabs`, `google-genai`), pointed at it
unchanged: they compose and generate, and raise their own error types on a wrong key and a refused request.
Raw HTTP checks the limits, error shapes and faults (429, 5xx, a connection dropped after the request was read)."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError
from elevenlabs.errors import UnprocessableEntityError
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from ipymusicgen.engines import elevenlabs as el
from ipymusicgen.engines import lyria
from ipymusicgen.models.providers import build_engine_request
from ipymusicgen.sandbox import Sandbox

pytest.importorskip("lameenc")  # the sandbox's MP3s (durations below are read from their frames)
mutagen_mp3 = pytest.importorskip("mutagen.mp3")


def seconds_of(mp3: bytes) -> float:
    return float(mutagen_mp3.MP3(io.BytesIO(mp3)).info.length)


@pytest.fixture
def engines(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox


def eleven(sandbox: Sandbox, key: str | None = None) -> ElevenLabs:
    return ElevenLabs(api_key=key or sandbox.api_key, base_url=sandbox.engines_base_url)


KEPT: list[genai.Client] = []


def gemini(sandbox: Sandbox, key: str | None = None) -> genai.Client:
    """Google's client for the sandbox, kept alive for the test (a client closes its pool once collected)."""
    options = types.HttpOptions(base_url=sandbox.engines_base_url, retry_options=types.HttpRetryOptions(attempts=1))
    client = genai.Client(api_key=key or sandbox.api_key, http_options=options)
    KEPT[:] = [*KEPT[-3:], client]
    return client


def test_env_gives_every_providers_base_url_and_demo_key(engines: Sandbox) -> None:
    env = engines.env()
    assert env["MUSICGEN_ELEVENLABS_BASE_URL"] == env["MUSICGEN_GEMINI_BASE_URL"] == engines.engines_base_url
    assert env["ELEVENLABS_API_KEY"] == env["GEMINI_API_KEY"] == env["MUSICGEN_API_KEY"] == engines.api_key
    assert engines.engines_base_url not in (engines.base_url, engines.v2_base_url)


def test_the_elevenlabs_sdk_composes_a_song_of_the_length_asked(engines: Sandbox) -> None:
    audio = b"".join(eleven(engines).music.compose(prompt="lo-fi rain on a window", music_length_ms=5_000))
    assert seconds_of(audio) == pytest.approx(5.0, abs=0.15)
    assert engines.request_counts() == {"/v1/music": 1}


def test_the_elevenlabs_sdk_gets_a_detailed_answer_with_word_timestamps(engines: Sandbox) -> None:
    plan = {
        "positive_global_styles": ["jazz"],
        "negative_global_styles": [],
        "sections": [
            {"section_name": "Verse", "positive_local_styles": [], "negative_local_styles": [], "duration_ms": 3_000,
             "lines": ["hello there", "world"]},
            {"section_name": "Chorus", "positive_local_styles": [], "negative_local_styles": [], "duration_ms": 4_000,
             "lines": ["sing it"]},
        ],
    }  # fmt: skip
    answer = eleven(engines).music.compose_detailed(composition_plan=plan, with_timestamps=True, seed=3)
    words = answer.json["words_timestamps"]
    assert [w["word"] for w in words] == ["hello", "there", "world", "sing", "it"]
    assert words[3]["start_ms"] == 3_000 and words[-1]["end_ms"] == 7_000
    assert [s["lines"] for s in answer.json["composition_plan"]["sections"]] == [["hello there", "world"], ["sing it"]]
    assert seconds_of(answer.audio) == pytest.approx(7.0, abs=0.2)


def test_the_projects_own_reader_reads_the_sandboxs_detailed_answer(engines: Sandbox) -> None:
    request = build_engine_request(provider="elevenlabs", lyrics="one two\n\nthree", seconds=6, timestamps=True)
    wire = el.build(request)
    response = httpx.post(engines.engines_base_url + wire.url_path, json=dict(wire.json),
                          headers=el.RULES.headers(engines.api_key))  # fmt: skip
    song = el.parse_answer(response.headers["content-type"], response.content)
    assert song.lyrics == "one two\n\nthree" and [w.word for w in song.timestamps] == ["one", "two", "three"]
    assert seconds_of(song.audio) == pytest.approx(6.0, abs=0.15)


@pytest.mark.parametrize("length", [2_999, 600_001, 0])
def test_the_elevenlabs_sdk_raises_its_own_422_on_an_out_of_range_length(engines: Sandbox, length: int) -> None:
    with pytest.raises(UnprocessableEntityError) as refused:
        b"".join(eleven(engines).music.compose(prompt="x", music_length_ms=length))
    assert refused.value.status_code == 422
    assert refused.value.body["detail"][0]["loc"] == ["body", "music_length_ms"]


def test_the_elevenlabs_sdk_raises_its_own_error_on_a_wrong_key(engines: Sandbox) -> None:
    with pytest.raises(ApiError) as refused:
        b"".join(eleven(engines, key="sk_wrong_key").music.compose(prompt="x", music_length_ms=4_000))
    assert refused.value.status_code == 401
    assert refused.value.body == {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}}
    assert engines.request_counts() == {"/v1/music": 1}  # the SDK does not retry a 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": "x", "seed": 4}, "seed"),
        ({"prompt": "x", "composition_plan": {"sections": []}}, "prompt"),
        ({}, "prompt"),
        ({"composition_plan": {"sections": [{"duration_ms": 2_000, "lines": []}]}}, "duration_ms"),
        ({"composition_plan": {"sections": [{"duration_ms": 3_000, "lines": ["x" * 201]}]}}, "lines"),
        (
            {"composition_plan": {"sections": [{"duration_ms": 3_000, "lines": []}]}, "force_instrumental": True},
            "force_instrumental",
        ),
        ({"prompt": "x", "model_id": "music_v9"}, "model_id"),
    ],
)
def test_elevenlabs_refusals_are_422s_naming_the_field(engines: Sandbox, body: dict, field: str) -> None:
    response = httpx.post(engines.engines_base_url + "/v1/music", json=body, headers={"xi-api-key": engines.api_key})
    assert response.status_code == 422
    assert field in response.json()["detail"][0]["loc"]


def test_a_missing_elevenlabs_key_is_a_401_saying_so(engines: Sandbox) -> None:
    response = httpx.post(engines.engines_base_url + "/v1/music", json={"prompt": "x"}, headers={"x-api-key": "k"})
    assert response.status_code == 401 and response.json()["detail"]["status"] == "needs_authorization"


def test_the_gemini_sdk_generates_a_lyria_clip_of_30_seconds_with_lyrics_text(engines: Sandbox) -> None:
    answer = gemini(engines).models.generate_content(
        model="lyria-3-clip-preview",
        contents="Create a cheerful acoustic folk song with guitar and harmonica.",
        config=types.GenerateContentConfig(response_modalities=["AUDIO", "TEXT"]),
    )
    texts = [p.text for p in answer.parts if p.text]
    audio = [p.inline_data for p in answer.parts if p.inline_data]
    assert texts and "[" in texts[0]  # lyrics and structure
    assert audio[0].mime_type == "audio/mpeg" and seconds_of(audio[0].data) == pytest.approx(30.0, abs=0.2)


def test_lyria_pro_makes_the_length_its_prompt_names_through_the_projects_request(engines: Sandbox) -> None:
    request = build_engine_request(provider="lyria", model="lyria-3-pro-preview", prompt="folk", seconds=40)
    wire = lyria.build(request)
    response = httpx.post(engines.engines_base_url + wire.url_path, json=dict(wire.json),
                          headers=lyria.RULES.headers(engines.api_key), timeout=60)  # fmt: skip
    song = lyria.parse_answer(response.headers["content-type"], response.content)
    assert seconds_of(song.audio) == pytest.approx(40.0, abs=0.2) and song.lyrics


def test_the_gemini_sdk_raises_its_own_client_error_on_a_wrong_key(engines: Sandbox) -> None:
    with pytest.raises(genai_errors.ClientError) as refused:
        gemini(engines, key="AIza-wrong").models.generate_content(model="lyria-3-clip-preview", contents="folk")
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert "API key not valid" in refused.value.message


def test_the_gemini_sdk_raises_its_own_errors_on_an_unknown_model_and_an_empty_prompt(engines: Sandbox) -> None:
    with pytest.raises(genai_errors.ClientError) as unknown:
        gemini(engines).models.generate_content(model="lyria-9", contents="folk")
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    with pytest.raises(genai_errors.ClientError) as empty:
        gemini(engines).models.generate_content(model="lyria-3-clip-preview", contents="   ")
    assert (empty.value.code, empty.value.status) == (400, "INVALID_ARGUMENT")


def test_a_missing_gemini_key_is_permission_denied(engines: Sandbox) -> None:
    response = httpx.post(engines.engines_base_url + lyria.path("lyria-3-clip-preview"), json={"contents": []})
    assert response.status_code == 403 and response.json()["error"]["status"] == "PERMISSION_DENIED"


def test_faults_play_on_the_engines_paths_in_each_engines_error_shape(engines: Sandbox) -> None:
    engines.set_faults("rate_limit:path=/v1beta/models,server_error:path=/v1/music")
    gemini_path = lyria.path("lyria-3-clip-preview")
    limited = httpx.post(engines.engines_base_url + gemini_path, json={}, headers={"x-goog-api-key": engines.api_key})
    assert limited.status_code == 429 and limited.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    failed = httpx.post(engines.engines_base_url + "/v1/music", json={"prompt": "x"}, headers={"xi-api-key": "k"})
    assert failed.status_code == 500 and "detail" in failed.json()
    with pytest.raises(genai_errors.ServerError):
        engines.set_faults("server_error:path=/v1/models")
        gemini(engines).models.generate_content(model="lyria-3-clip-preview", contents="folk")


def test_a_connection_dropped_after_the_request_was_read_reaches_the_sdk_as_a_transport_error(
    engines: Sandbox,
) -> None:
    engines.set_faults("drop:after=true:path=/v1/music")
    with pytest.raises(httpx.TransportError):
        b"".join(eleven(engines).music.compose(prompt="x", music_length_ms=3_000, request_options={"max_retries": 0}))
    assert engines.request_counts() == {"/v1/music": 1}


@pytest.mark.slow
def test_the_sandbox_command_prints_every_providers_base_url() -> None:
    code = (
        "import threading, sys\n"
        "from ipymusicgen.sandbox.__main__ import main\n"
        "stop = threading.Event(); threading.Timer(1.0, stop.set).start()\n"
        "sys.exit(main(['--stage-seconds', '0.1'], stop=stop))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-1000:]
    for name in (
        "MUSICGEN_ELEVENLABS_BASE_URL=",
        "MUSICGEN_GEMINI_BASE_URL=",
        "ELEVENLABS_API_KEY=",
        "GEMINI_API_KEY=",
    ):
        assert name in done.stdout


def test_base64_audio_of_the_gemini_answer_is_the_mp3(engines: Sandbox) -> None:
    body = {"contents": [{"parts": [{"text": "instrumental ambient"}]}]}
    answer = httpx.post(engines.engines_base_url + lyria.path("lyria-3-clip-preview"), json=body,
                        headers={"x-goog-api-key": engines.api_key}, timeout=60).json()  # fmt: skip
    parts = answer["candidates"][0]["content"]["parts"]
    audio = base64.b64decode(parts[1]["inlineData"]["data"])
    assert audio[:2] in (b"\xff\xfb", b"\xff\xf3", b"ID") and parts[0]["text"].endswith("[Instrumental]")


def test_the_elevenlabs_sdk_separates_a_song_into_stems(engines: Sandbox) -> None:
    import zipfile

    song = b"".join(eleven(engines).music.compose(prompt="lo-fi", music_length_ms=4_000))
    two = b"".join(eleven(engines).music.separate_stems(file=("song.mp3", song, "audio/mpeg")))
    with zipfile.ZipFile(io.BytesIO(two)) as stems:
        assert sorted(stems.namelist()) == ["instrumental.mp3", "vocals.mp3"]
        assert seconds_of(stems.read("vocals.mp3")) == pytest.approx(4.0, abs=0.2)
    six = b"".join(eleven(engines).music.separate_stems(file=("s.mp3", song), stem_variation_id="six_stems_v1"))
    assert len(zipfile.ZipFile(io.BytesIO(six)).namelist()) == 6
    with pytest.raises(UnprocessableEntityError):
        b"".join(eleven(engines).music.separate_stems(file=("s.mp3", song), stem_variation_id="nine_stems"))
    with pytest.raises(ApiError) as refused:
        b"".join(eleven(engines, key="sk_wrong").music.separate_stems(file=("s.mp3", song)))
    assert refused.value.status_code == 401


@pytest.mark.slow
def test_python_m_ipymusicgen_sandbox_runs_the_sandbox_of_every_provider() -> None:
    import signal

    child = subprocess.Popen(
        [sys.executable, "-m", "ipymusicgen", "sandbox", "--stage-seconds", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:  # until the banner is out: the sandbox is serving
            lines.append(line)
            if "Press Ctrl+C" in line:
                break
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    shown = "".join(lines)
    assert "ElevenLabs and Gemini (Lyria) base URL: http://127.0.0.1:" in shown
    assert all(name in shown for name in ("MUSICGEN_ELEVENLABS_BASE_URL=", "GEMINI_API_KEY=sandbox-demo-key"))
