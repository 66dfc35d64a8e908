"""Tests for the sandbox's pure synthesis: audio, encoders, cover art, lyrics."""

from __future__ import annotations

import io
import wave
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from audio_utils import mp3_duration

from ipymusicgen.sandbox import audio
from ipymusicgen.sandbox.cover import render_cover
from ipymusicgen.sandbox.lyricsgen import generate_lyrics

SR = audio.SAMPLE_RATE
SVG_NS = "{http://www.w3.org/2000/svg}"

# --------------------------------------------------------------------------
# Audio
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def song() -> np.ndarray:
    return audio.synthesize("late night drive, synthwave", seconds=10.0, vocal=True)


@pytest.fixture(scope="module")
def instrumental() -> np.ndarray:
    return audio.synthesize("late night drive, synthwave", seconds=10.0, vocal=False)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def test_same_seed_text_gives_identical_samples(song: np.ndarray) -> None:
    again = audio.synthesize("late night drive, synthwave", seconds=10.0, vocal=True)
    assert again.dtype == np.float32
    np.testing.assert_array_equal(song, again)


def test_different_text_changes_tempo_key_and_samples(song: np.ndarray) -> None:
    texts = ["late night drive, synthwave", "sunny reggae morning", "doom metal", "lullaby", "bossa nova", "edm"]
    params = [audio.song_params(t) for t in texts]
    assert all(80 <= p.bpm <= 141 for p in params)
    assert len({round(p.bpm) for p in params}) > 1
    assert len({(p.tonic, p.minor) for p in params}) > 1
    other = audio.synthesize("sunny reggae morning", seconds=10.0, vocal=True)
    assert rms(song - other) > 0.05


def test_params_use_a_stable_hash_not_python_hash() -> None:
    # A fixed expectation: this would change between processes with hash().
    assert audio.seed_from_text("abc") == int("ba7816bf8f01cfea", 16)


@pytest.mark.parametrize("seconds", [0.0, 0.01, 1.0, 3.3337, 7.25, 61.5])
@pytest.mark.parametrize("sample_rate", [22050, 16000])
def test_exact_length(seconds: float, sample_rate: int) -> None:
    samples = audio.synthesize("length", seconds=seconds, vocal=False, sample_rate=sample_rate)
    assert samples.shape == (round(seconds * sample_rate),)


def test_rejects_negative_or_nan_length() -> None:
    with pytest.raises(ValueError):
        audio.synthesize("x", seconds=-1.0, vocal=False)
    with pytest.raises(ValueError):
        audio.synthesize("x", seconds=float("nan"), vocal=False)


@pytest.mark.parametrize("vocal", [True, False])
def test_amplitude_in_range_and_not_silent(vocal: bool) -> None:
    for text in ("a", "rainy tokyo", "Ünïcødé ✨"):
        samples = audio.synthesize(text, seconds=12.0, vocal=vocal)
        assert np.isfinite(samples).all()
        assert float(np.abs(samples).max()) <= 1.0
        assert rms(samples) > 0.05
        # Fades: starts and ends (near) silent instead of with a click.
        assert abs(float(samples[0])) < 1e-3 and abs(float(samples[-1])) < 1e-3


def test_vocal_and_instrumental_differ(song: np.ndarray, instrumental: np.ndarray) -> None:
    assert song.shape == instrumental.shape
    assert rms(song - instrumental) > 0.05


def test_song_is_built_on_the_beat_grid() -> None:
    """Energy autocorrelation peaks at one bar: the drums really follow the tempo."""
    params = audio.song_params("groove check")
    samples = audio.synthesize("groove check", seconds=40.0, vocal=False)
    hop = 64
    energy = np.square(samples[: samples.size // hop * hop]).reshape(-1, hop).sum(axis=1)
    energy = energy - energy.mean()

    def correlation(lag_samples: int) -> float:
        lag = round(lag_samples / hop)
        return float(np.dot(energy[:-lag], energy[lag:]))

    on_bar = correlation(params.bar)
    off_grid = correlation(params.bar + params.step // 2)  # half a 16th late
    assert on_bar > 1.5 * off_grid


def test_mp3_has_frame_sync_and_decodes_to_the_right_duration(song: np.ndarray) -> None:
    data = audio.encode_mp3(song, SR)
    assert data[:3] == b"ID3" or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0)
    assert abs(mp3_duration(data) - 10.0) / 10.0 < 0.05


def test_render_song_returns_mp3_bytes() -> None:
    data, media_type = audio.render_song("render me", seconds=5.0, vocal=False)
    assert media_type == "audio/mpeg"
    assert abs(mp3_duration(data) - 5.0) / 5.0 < 0.05
    # ~64 kbps: a 5 s clip is tens of kB, not a raw PCM dump.
    assert 20_000 < len(data) < 80_000


def test_wav_round_trips_through_the_wave_module(song: np.ndarray) -> None:
    data = audio.encode_wav(song, SR)
    with wave.open(io.BytesIO(data), "rb") as reader:
        assert reader.getnchannels() == 1
        assert reader.getsampwidth() == 2
        assert reader.getframerate() == SR
        assert reader.getnframes() == song.size
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    assert np.abs(pcm / 32767.0 - song).max() < 2 / 32767


def test_encode_falls_back_to_wav_without_lameenc(monkeypatch: pytest.MonkeyPatch, song: np.ndarray) -> None:
    data, media_type = audio.encode(song, SR)
    assert media_type == "audio/mpeg"
    monkeypatch.setattr(audio, "lameenc", None)
    data, media_type = audio.encode(song, SR)
    assert media_type == "audio/wav"
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"


def test_pcm_conversion_clips_instead_of_wrapping() -> None:
    pcm = np.frombuffer(audio.to_pcm16(np.array([2.0, -2.0, 0.5], dtype=np.float32)), dtype="<i2")
    assert pcm.tolist() == [32767, -32767, 16383]


def test_concatenate_crossfades_and_keeps_range() -> None:
    a = np.ones(1000, dtype=np.float32)
    b = -np.ones(500, dtype=np.float32)
    joined = audio.concatenate([a, b], crossfade_seconds=100 / SR, sample_rate=SR)
    assert joined.shape == (1000 + 500 - 100,)
    assert float(np.abs(joined).max()) <= 1.0
    fade = joined[900:1000]
    assert fade[0] > 0.9 and fade[-1] < -0.9 and np.all(np.diff(fade) < 0)
    np.testing.assert_array_equal(joined[:900], a[:900])
    np.testing.assert_array_equal(joined[1000:], b[100:])


def test_concatenate_edge_cases() -> None:
    assert audio.concatenate([]).shape == (0,)
    parts = [np.full(10, 0.5, np.float32), np.full(3, 0.25, np.float32), np.zeros(0, np.float32)]
    plain = audio.concatenate(parts, crossfade_seconds=0.0)
    np.testing.assert_array_equal(plain, np.concatenate(parts))
    # Overlap is capped at half a clip, so short parts are never swallowed.
    short = audio.concatenate([np.ones(4, np.float32), np.ones(4, np.float32)], crossfade_seconds=1.0)
    assert short.shape == (6,)
    songs = [audio.synthesize(t, seconds=3.0, vocal=False) for t in ("one", "two", "three")]
    joined = audio.concatenate(songs, crossfade_seconds=0.05)
    assert joined.shape == (3 * 3 * SR - 2 * round(0.05 * SR),)
    assert float(np.abs(joined).max()) <= 1.0


# --------------------------------------------------------------------------
# Cover art
# --------------------------------------------------------------------------

HOSTILE_TITLES = [
    "<img src=x onerror=alert(1)>",
    '"]]></svg><script>alert(1)</script>',
    'Tom & Jerry\'s "best" <b>hits</b>',
    "' onload='alert(1)",
    "<!-- --><![CDATA[x]]>&amp;",
]


def svg_text(root: ET.Element, element_id: str) -> str:
    (node,) = [n for n in root.iter(f"{SVG_NS}text") if n.get("id") == element_id]
    return node.text or ""


@pytest.mark.parametrize("title", HOSTILE_TITLES)
def test_cover_escapes_hostile_titles(title: str) -> None:
    svg = render_cover(title, style=title)
    root = ET.fromstring(svg)  # raises if the document was broken out of
    assert root.tag == f"{SVG_NS}svg"
    assert root.get("width") == "512" and root.get("height") == "512"
    local_names = {el.tag.split("}")[-1].lower() for el in root.iter()}
    assert not local_names & {"script", "img", "b", "foreignobject"}
    assert svg_text(root, "title") == title
    assert all(not any(k.startswith("on") for k in el.attrib) for el in root.iter())
    assert b"<script" not in svg and b"<img" not in svg


def test_cover_truncates_long_titles_and_strips_control_characters() -> None:
    title = "A very long title " * 20
    shown = svg_text(ET.fromstring(render_cover(title, "pop")), "title")
    assert len(shown) <= 40 and shown.endswith("\u2026")
    assert title.startswith(shown[:-1])
    weird = svg_text(ET.fromstring(render_cover("bell\x07\x00 song", "x\x1b")), "title")
    assert weird == "bell song"


def test_cover_is_deterministic_and_depends_on_title_and_style() -> None:
    first = render_cover("Neon Rain", "synthwave")
    assert first == render_cover("Neon Rain", "synthwave")
    assert first != render_cover("Neon Rain", "jazz")
    assert first != render_cover("Neon Snow", "synthwave")
    assert first.decode("utf-8").count("<circle") >= 3


# --------------------------------------------------------------------------
# Lyrics
# --------------------------------------------------------------------------


def test_lyrics_have_structure_and_prompt_words() -> None:
    lyrics, title = generate_lyrics("a song about rainy Tokyo nights and neon lights")
    for tag in ("[Verse 1]", "[Chorus]", "[Verse 2]", "[Bridge]", "[Outro]"):
        assert tag in lyrics
    lower = lyrics.lower()
    for word in ("rainy", "tokyo", "neon"):
        assert word in lower
    assert 0 < len(title) <= 80
    choruses = [block for block in lyrics.split("\n\n") if block.startswith("[Chorus]")]
    assert len(choruses) >= 2 and len(set(choruses)) == 1
    assert len(lyrics.splitlines()) > 20


def test_lyrics_are_deterministic_and_prompt_specific() -> None:
    assert generate_lyrics("summer love") == generate_lyrics("summer love")
    assert generate_lyrics("summer love") != generate_lyrics("winter heartbreak")


@pytest.mark.parametrize("prompt", ["", "   ", "!!!", "x" * 5000, "amour éternel sous la pluie", "123 456"])
def test_lyrics_handle_odd_prompts(prompt: str) -> None:
    lyrics, title = generate_lyrics(prompt)
    assert "[Verse 1]" in lyrics and "[Chorus]" in lyrics
    assert 0 < len(title) <= 80
