"""Loudness and true peak as a mastering engineer measures them: on full-band float samples at the file's own
rate, against references computed here (pyloudnorm on the float samples; a 32x oversampled peak), in WAV
(float and 24-bit), FLAC and MP3; and errors that name the file (an HTML page, an empty file, a WAV saved
as .mp3 decoded by its content)."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import miniaudio
import numpy as np
import pyloudnorm
import pytest
import soundfile
from scipy.signal import resample_poly

from ipymusicgen.lab import levels
from ipymusicgen.lab.analysis import analyze_file
from ipymusicgen.lab.decoding import AudioFileError, blocks, open_audio

pytestmark = pytest.mark.slow  # librosa's first tempo estimate compiles and imports for seconds


def faded(signal: np.ndarray, rate: int, seconds: float = 0.05) -> np.ndarray:
    """Raised-cosine ends, so a cut at the start or end adds no overshoot of its own."""
    ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(int(seconds * rate)) / int(seconds * rate))
    out = signal.copy()
    out[: len(ramp)] *= ramp[:, None] if out.ndim == 2 else ramp
    out[len(out) - len(ramp) :] *= (ramp[::-1])[:, None] if out.ndim == 2 else ramp[::-1]
    return out


def tone(freq: float, dbfs: float, rate: int, *, seconds: float = 6.0, phase: float = 0.0, channels: int = 1):
    t = np.arange(int(seconds * rate)) / rate
    signal = 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t + phase)
    frames = np.stack([signal] * channels, axis=1)
    return faded(frames, rate)


def write(path: Path, frames: np.ndarray, rate: int, subtype: str) -> Path:
    if subtype == "MP3":
        import lameenc

        encoder = lameenc.Encoder()
        encoder.set_bit_rate(320)
        encoder.set_in_sample_rate(rate)
        encoder.set_channels(frames.shape[1])
        encoder.set_quality(2)
        pcm = (np.clip(frames, -1, 1) * 32767).astype("<i2")
        path.write_bytes(encoder.encode(pcm.tobytes()) + encoder.flush())
        return path
    soundfile.write(str(path), frames, rate, subtype=subtype)
    return path


FORMATS = [("float.wav", "FLOAT"), ("pcm24.wav", "PCM_24"), ("song.flac", "PCM_24"), ("song.mp3", "MP3")]


def decoded(path: Path) -> tuple[np.ndarray, int]:
    """The file's float samples as miniaudio decodes them at its own rate: the reference's input."""
    audio = open_audio(path)
    return np.concatenate(list(blocks(audio))).astype(np.float64), audio.sample_rate


def reference_true_peak(frames: np.ndarray) -> float:
    return float(20 * np.log10(np.abs(resample_poly(frames, 32, 1, axis=0)).max()))


@pytest.mark.parametrize(("name", "subtype"), FORMATS)
@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_a_12_khz_tone_at_minus_1_dbfs_reads_its_true_loudness(tmp_path: Path, name: str, subtype: str, rate: int):
    frames = tone(12_000, -1.0, rate, channels=2)
    path = write(tmp_path / name, frames, rate, subtype)
    found = analyze_file(path)
    samples, decoded_rate = decoded(path)
    assert decoded_rate == rate
    reference = pyloudnorm.Meter(rate).integrated_loudness(samples)
    assert found.lufs == pytest.approx(reference, abs=0.1)
    if subtype != "MP3":  # lossless: the float samples written are the samples read
        assert found.lufs == pytest.approx(pyloudnorm.Meter(rate).integrated_loudness(frames), abs=0.1)
        assert found.lufs > -6  # a 16 kHz copy read -23 LUFS: the tone was above its band
    assert found.true_peak_db == pytest.approx(reference_true_peak(samples), abs=0.2)
    assert found.true_peak_db >= 20 * np.log10(np.abs(samples).max()) - 0.01


@pytest.mark.parametrize(("name", "subtype"), [f for f in FORMATS if f[1] != "MP3"])
@pytest.mark.parametrize("rate", [44_100, 48_000, 96_000])
def test_a_hot_master_reads_its_inter_sample_overs(tmp_path: Path, name: str, subtype: str, rate: int) -> None:
    """A fs/4 sine at 45 degrees: every sample is at +-full scale, the wave between them is 3 dB above it."""
    frames = tone(rate / 4, 3.0103, rate, phase=np.pi / 4, channels=2) * (1 - 2**-23)
    path = write(tmp_path / name, frames, rate, subtype)
    found = analyze_file(path)
    samples, _ = decoded(path)
    assert found.true_peak_db == pytest.approx(reference_true_peak(samples), abs=0.2)
    assert found.true_peak_db == pytest.approx(3.01, abs=0.2)
    assert found.true_peak_db > 2.5  # the 16 kHz copy read +0.3


@pytest.mark.parametrize(("name", "subtype"), FORMATS)
@pytest.mark.parametrize(
    "make",
    [
        lambda rate: tone(997, -0.5, rate, channels=2),
        lambda rate: tone(rate / 4, 0.0, rate, phase=np.pi / 4),
        lambda rate: tone(rate / 2 - 1000, -0.3, rate),
        lambda rate: np.clip(np.random.default_rng(7).normal(0, 0.4, (rate * 3, 2)), -0.99, 0.99),
        lambda rate: np.sign(tone(220, 0.0, rate)) * 0.95,  # a square wave: a hard-clipped master
    ],
    ids=["sine", "fs4-45deg", "near-nyquist", "loud-noise", "square"],
)
def test_the_true_peak_is_never_below_the_sample_peak(tmp_path: Path, name: str, subtype: str, make) -> None:
    rate = 44_100
    path = write(tmp_path / name, make(rate), rate, subtype)
    found = analyze_file(path)
    samples, _ = decoded(path)
    sample_peak = 20 * np.log10(np.abs(samples).max())
    assert found.true_peak_db >= sample_peak - 0.01
    assert found.true_peak_db == pytest.approx(reference_true_peak(samples), abs=0.2)


def test_levels_streamed_in_blocks_match_the_whole_signal(tmp_path: Path) -> None:
    """Any block size (even shorter than the oversampling context) gives the whole signal's numbers."""
    rate = 48_000
    rng = np.random.default_rng(3)
    frames = rng.normal(0, 0.2, (rate * 5, 2)) * np.linspace(0, 1, rate * 5)[:, None]
    frames[rate * 2 + 17] = (0.999, -0.999)  # a single hot sample sits across a block edge somewhere
    whole = levels.measure_levels([frames], rate, 2)
    for size in (7, 100, 4801, 65_536):
        pieces = [frames[i : i + size] for i in range(0, len(frames), size)]
        assert levels.measure_levels(pieces, rate, 2) == whole
    assert whole.lufs == pytest.approx(pyloudnorm.Meter(rate).integrated_loudness(frames), abs=0.01)
    assert whole.true_peak_db == pytest.approx(reference_true_peak(frames), abs=0.2)


def test_memory_stays_a_few_blocks_whatever_the_rate(tmp_path: Path) -> None:
    """A minute of 96 kHz stereo float (44 MB as float32) is measured holding a few blocks of it."""
    rate, seconds = 96_000, 60
    t = np.arange(rate * seconds) / rate
    signal = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    path = tmp_path / "long.wav"
    soundfile.write(str(path), np.stack([signal, signal], axis=1), rate, subtype="FLOAT")
    del t
    audio = open_audio(path)
    tracemalloc.start()
    try:
        found = levels.measure_levels(blocks(audio), audio.sample_rate, audio.channels)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    steady = np.stack([signal[: rate * 5]] * 2, axis=1).astype(np.float64)  # a steady tone: 5 s read the same
    assert found.lufs == pytest.approx(pyloudnorm.Meter(rate).integrated_loudness(steady), abs=0.05)
    assert peak < 20e6, f"{peak / 1e6:.0f} MB"


def test_an_html_page_saved_as_a_song_names_the_file_and_what_it_is(tmp_path: Path) -> None:
    page = tmp_path / "expired.mp3"
    page.write_text("<!DOCTYPE html><html><body>Link expired</body></html>")
    with pytest.raises(AudioFileError, match=r"expired\.mp3.*an HTML page"):
        analyze_file(page)


def test_an_empty_file_names_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.mp3"
    empty.touch()
    with pytest.raises(AudioFileError, match=r"empty\.mp3.*empty \(0 bytes\)"):
        analyze_file(empty)


@pytest.mark.parametrize("junk", [b"\x00" * 5000, b"PK\x03\x04" + bytes(range(256)) * 20, b"ID3\x04\x00" + b"\x00" * 3])
def test_junk_and_broken_headers_name_the_file(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "junk.mp3"
    path.write_bytes(junk)
    with pytest.raises(AudioFileError, match=r"junk\.mp3"):
        analyze_file(path)


def test_an_m4a_names_the_file_and_the_format_miniaudio_lacks(tmp_path: Path) -> None:
    path = tmp_path / "song.mp3"
    path.write_bytes(b"\x00\x00\x00\x20ftypM4A " + b"\x00" * 2000)
    with pytest.raises(AudioFileError, match=r"song\.mp3.*M4A"):
        analyze_file(path)


@pytest.mark.parametrize(("subtype", "suffix"), [("PCM_16", ".mp3"), ("PCM_24", ".flac"), ("FLAC", ".wav")])
def test_a_file_under_the_wrong_name_is_decoded_by_its_content(tmp_path: Path, subtype: str, suffix: str) -> None:
    rate = 48_000
    frames = tone(997, -6.0, rate, channels=2)
    right = tmp_path / ("right.flac" if subtype == "FLAC" else "right.wav")
    soundfile.write(str(right), frames, rate, subtype="PCM_24" if subtype == "FLAC" else subtype)
    wrong = tmp_path / f"misnamed{suffix}"
    shutil.copy(right, wrong)
    with pytest.raises(miniaudio.DecodeError):
        miniaudio.get_file_info(str(wrong))  # picked by the name, the decoder fails: the reason to sniff
    found, expected = analyze_file(wrong), analyze_file(right)
    assert found.lufs == expected.lufs == pytest.approx(-6.0, abs=0.1)  # -6 dBFS in both channels
    assert found.duration_s == pytest.approx(6.0, abs=0.01)


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(AudioFileError, match=r"gone\.mp3"):
        analyze_file(tmp_path / "gone.mp3")


def test_a_failed_analysis_leaves_no_stale_measures(sandbox, tmp_path: Path) -> None:
    """A song measured once, then its file turns out broken: its old numbers go, its error stays, filters skip it."""
    from ipymusicgen.song_library import Library
    from ipymusicgen.storage.journal import Journal

    journal = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal), archive=False) as client:
        ids = list(client.generate(action="auto", style="measured then broken").ids)
        client.wait(ids)
    good = write(tmp_path / "good.wav", tone(997, -6.0, 44_100, channels=2), 44_100, "PCM_24")
    broken = tmp_path / "broken.mp3"
    broken.write_text("<html>gone</html>")
    with Library(journal) as library:
        library.store.analysed(ids[0], analyze_file(good).as_dict())
        assert library.song(ids[0]).lufs == pytest.approx(-6.0, abs=0.1)
        with pytest.raises(AudioFileError) as failed:
            analyze_file(broken)
        library.store.analysis_failed(ids[0], str(failed.value))
        song = library.song(ids[0])
        assert "broken.mp3" in (song.analysis_error or "") and "HTML" in (song.analysis_error or "")
        measures = (song.bpm, song.musical_key, song.lufs, song.true_peak_db, song.silence_start_s, song.silence_end_s)
        assert measures == (None,) * 6
        assert library.count(lufs=(-20, 0)) == 0
        library.store.analysed(ids[0], analyze_file(good).as_dict())  # measured again: numbers back, error gone
        assert library.song(ids[0]).analysis_error is None and library.song(ids[0]).lufs is not None


def test_analysing_a_song_by_id_whose_file_broke_records_the_error(tmp_path: Path, monkeypatch) -> None:
    from helpers import wait_until

    from ipymusicgen import analyze
    from ipymusicgen.sandbox import Sandbox
    from ipymusicgen.song_library import Library
    from ipymusicgen.workspace import session

    monkeypatch.setenv("MUSICGEN_ANALYZE", "off")
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    journal = tmp_path / "journal.sqlite3"
    with Sandbox(stage_seconds=0.1, song_seconds=4, faults="", keys={"mg-broken-key": 20}) as server:
        session.configure(api_key="mg-broken-key", base_url=server.base_url, v2_base_url=server.v2_base_url,
                          journal_path=str(journal), poll_interval=0.05)  # fmt: skip
        try:
            client = session.get_client()
            song = next(iter(client.generate(action="auto", style="to break").ids))
            client.wait([song])
            with Library(journal) as library:
                wait_until(lambda: library.archived_path(song) is not None, "the song archived")
                path = library.archived_path(song)
            assert analyze(song).lufs is not None
            path.write_bytes(b"<!DOCTYPE html><html>expired</html>")
            with pytest.raises(AudioFileError, match="HTML page") as failed:
                analyze(song)
            assert str(path) in str(failed.value)
            with Library(journal) as library:
                kept = library.song(song)
            assert kept.lufs is None and kept.bpm is None and str(path) in (kept.analysis_error or "")
        finally:
            session.shutdown()
            session.configure(api_key=None, base_url=None, v2_base_url=None, journal_path=None, poll_interval=None)


@pytest.mark.parametrize(
    ("rate", "channels", "subtype", "name"),
    [(8_000, 1, "PCM_16", "low.wav"), (22_050, 1, "PCM_U8", "eight-bit.wav"), (192_000, 2, "PCM_24", "hi.flac"),
     (44_100, 2, "VORBIS", "song.ogg"), (48_000, 3, "FLOAT", "three.wav")],
)  # fmt: skip
def test_other_rates_widths_and_formats_read_their_reference(tmp_path: Path, rate, channels, subtype, name) -> None:
    frames = tone(997 if rate > 8_000 else 440, -3.0, rate, channels=channels)
    path = tmp_path / name
    soundfile.write(str(path), frames, rate, subtype=subtype)
    found = analyze_file(path)
    samples, decoded_rate = decoded(path)
    assert decoded_rate == rate
    assert found.lufs == pytest.approx(pyloudnorm.Meter(rate).integrated_loudness(samples), abs=0.1)
    assert found.true_peak_db == pytest.approx(reference_true_peak(samples), abs=0.2)
    assert found.true_peak_db >= 20 * np.log10(np.abs(samples).max()) - 1e-6
    assert found.duration_s == pytest.approx(6.0, abs=0.02)


def test_too_short_for_loudness_still_has_a_true_peak(tmp_path: Path) -> None:
    path = tmp_path / "blip.wav"
    soundfile.write(str(path), tone(997, -6.0, 48_000, seconds=0.3), 48_000, subtype="FLOAT")
    found = analyze_file(path)
    assert found.lufs is None and found.true_peak_db == pytest.approx(-6.0, abs=0.2)


def test_a_folder_and_a_truncated_file_name_themselves(tmp_path: Path) -> None:
    folder = tmp_path / "song.mp3"
    folder.mkdir()
    with pytest.raises(AudioFileError, match=r"song\.mp3"):
        analyze_file(folder)
    whole = write(tmp_path / "whole.wav", tone(997, -6.0, 44_100, channels=2), 44_100, "PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole.read_bytes()[:30])  # the RIFF header, cut before its format chunk ends
    with pytest.raises(AudioFileError, match=r"cut\.wav"):
        analyze_file(cut)
    short = tmp_path / "short.wav"
    short.write_bytes(whole.read_bytes()[: len(whole.read_bytes()) // 2])  # half the samples: measured, shorter
    assert analyze_file(short).duration_s == pytest.approx(3.0, abs=0.05)


def test_key_finding_on_a_song_with_nothing_pitched_prints_no_warning() -> None:
    """librosa warns "Trying to estimate tuning from empty frequency set" on silence; the key's tuning is
    worked out the same way without it (a newcomer's test run printed 22 of them)."""
    import warnings

    import numpy as np

    from ipymusicgen.lab.analysis import ANALYSIS_RATE, musical_key

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert musical_key(np.zeros(ANALYSIS_RATE * 3, dtype=np.float32)) is None
