"""Issue 41's lossy source: a WAV or FLAC decoded from an MP3 (lameenc, then miniaudio) is flagged with the
encoder's low-pass as its cutoff; full-band noise, a full-band FLAC, a tone and silence are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from signals import RATE, write_wav

from ipymusicgen.lab.analysis import analyze_file

pytestmark = pytest.mark.slow  # librosa per file


def through_mp3(signal: np.ndarray, kbps: int, rate: int = RATE) -> np.ndarray:
    import lameenc
    import miniaudio

    encoder = lameenc.Encoder()
    encoder.set_bit_rate(kbps)
    encoder.set_in_sample_rate(rate)
    encoder.set_channels(2)
    encoder.set_quality(2)
    mp3 = bytes(encoder.encode((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes()) + encoder.flush())
    decoded = miniaudio.decode(mp3, output_format=miniaudio.SampleFormat.SIGNED16, nchannels=2, sample_rate=rate)
    return np.frombuffer(decoded.samples, dtype=np.int16).reshape(-1, 2) / 32768


def noise(seconds: float = 8, seed: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.15, (int(seconds * RATE), 2))


@pytest.mark.parametrize(("kbps", "low", "high"), [(96, 13_500, 16_000), (128, 15_500, 17_500), (320, 19_000, 20_600)])
def test_a_wav_decoded_from_an_mp3_is_flagged_with_its_cutoff(tmp_path: Path, kbps: int, low: int, high: int) -> None:
    found = analyze_file(write_wav(tmp_path / "paid.wav", through_mp3(noise(), kbps)))
    assert found.lossy_cutoff_hz is not None and low <= found.lossy_cutoff_hz <= high, found.lossy_cutoff_hz
    assert found.lossy_sourced and "lossy source" in str(found)


def test_a_flac_decoded_from_an_mp3_is_flagged_and_a_full_band_flac_is_not(tmp_path: Path) -> None:
    import soundfile

    soundfile.write(tmp_path / "lossy.flac", through_mp3(noise(seed=9), 160), RATE, subtype="PCM_16")
    soundfile.write(tmp_path / "full.flac", noise(seed=9), RATE, subtype="PCM_16")
    assert analyze_file(tmp_path / "lossy.flac").lossy_cutoff_hz is not None
    assert analyze_file(tmp_path / "full.flac").lossy_cutoff_hz is None


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_full_band_noise_a_tone_and_silence_are_not_flagged(tmp_path: Path, rate: int) -> None:
    t = np.arange(rate * 6) / rate
    full = np.random.default_rng(5).normal(0, 0.15, (rate * 6, 2))
    for name, signal in (("noise", full), ("tone", 0.5 * np.sin(2 * np.pi * 997 * t)), ("silence", np.zeros(rate * 3))):
        found = analyze_file(write_wav(tmp_path / f"{name}.wav", signal, rate=rate))
        assert found.lossy_cutoff_hz is None and not found.lossy_sourced, name


def test_an_mp3_itself_gets_no_verdict(tmp_path: Path) -> None:
    from signals import write_mp3

    assert analyze_file(write_mp3(tmp_path / "song.mp3", noise())).lossy_cutoff_hz is None
