"""Procedural song synthesis for the local music-service simulator.

The sandbox has to hand back real, listenable songs without any model, and
fast enough that a 3-minute track costs a fraction of a second of CPU.  So a
song is built from a handful of 4-bar section loops (intro, verse, chorus,
bridge, outro) that are rendered once with vectorised numpy and then tiled.
Every musical choice is derived from a SHA-256 of the seed text, so the same
request always yields the same audio.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import math
import wave
from dataclasses import dataclass

import numpy as np

try:  # MP3 is preferred, but the sandbox must still work without lameenc.
    import lameenc
except ImportError:  # pragma: no cover - depends on the environment
    lameenc = None

SAMPLE_RATE = 22050
MP3_BITRATE_KBPS = 64
MP3_QUALITY = 7
BARS_PER_LOOP = 4
STEPS_PER_BAR = 16

MAJOR = np.array([0, 2, 4, 5, 7, 9, 11])
MINOR = np.array([0, 2, 3, 5, 7, 8, 10])
# Progressions as 0-based scale degrees (diminished chords avoided).
MAJOR_PROGRESSIONS = ((0, 4, 5, 3), (5, 3, 0, 4), (0, 5, 3, 4), (1, 4, 0, 5), (0, 3, 4, 3), (3, 0, 4, 4))
MINOR_PROGRESSIONS = ((0, 5, 2, 6), (0, 3, 4, 0), (0, 6, 5, 6), (0, 5, 3, 4), (3, 0, 5, 6), (0, 2, 6, 5))

# Melody rhythms per bar in eighth notes; negative values are rests.
BAR_RHYTHMS = (
    (2, 2, 2, 2),
    (1, 1, 2, 1, 1, 2),
    (3, 1, 2, 2),
    (2, 1, 1, 4),
    (1, 1, 1, 1, 2, 2),
    (-1, 1, 2, 2, 2),
    (3, 3, 2),
    (2, 2, 1, 1, 2),
)
CADENCE_RHYTHMS = ((2, 2, 3, -1), (4, 2, -2), (3, 3, -2), (2, 6), (-1, 1, 1, 1, 4))

# Drum patterns: one bar of 16th-note steps; 'X' accent, 'x' normal, 'o' ghost.
KICK_PATTERNS = ("X...x...X...x...", "X.....x.X.......", "X..x..x.X.......", "X...X...X...X...")
SNARE_PATTERNS = ("....X.......X...", "....X.......X..o", "....X..o....X...")
HAT_8THS = "x.x.x.x.x.x.x.x."
HAT_16THS = "xoxoxoxoxoxoxoxo"
HALF_TIME_KICK = "X.......x......."

# Vowel formants (Hz) and their relative gains, for the voice-like lead.
VOWELS = np.array(
    [
        [800.0, 1150.0, 2900.0],  # a
        [450.0, 1750.0, 2550.0],  # e
        [300.0, 2250.0, 3000.0],  # i
        [450.0, 800.0, 2830.0],  # o
        [350.0, 650.0, 2700.0],  # u
    ]
)
FORMANT_GAINS = np.array([1.0, 0.55, 0.25])
FORMANT_WIDTHS = np.array([90.0, 110.0, 160.0])


@dataclass(frozen=True)
class SongParams:
    """Every seed-derived musical choice; exposed so tests can compare songs."""

    bpm: float
    step: int  # samples per 16th note (integer so patterns tile exactly)
    tonic: int  # pitch class 0..11
    minor: bool
    verse_progression: tuple[int, ...]
    chorus_progression: tuple[int, ...]
    pad_tilt: float
    lead_timbre: str
    bass_pattern: int
    kick_pattern: int
    snare_pattern: int
    seed: int

    @property
    def scale(self) -> np.ndarray:
        """Scale intervals of the song's mode."""
        return MINOR if self.minor else MAJOR

    @property
    def bar(self) -> int:
        """Samples per bar."""
        return self.step * STEPS_PER_BAR

    @property
    def loop(self) -> int:
        """Samples per section loop."""
        return self.bar * BARS_PER_LOOP


def seed_from_text(seed_text: str) -> int:
    """Stable 64-bit seed; Python's hash() is salted per process, sha256 is not."""
    digest = hashlib.sha256(seed_text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def song_params(seed_text: str, sample_rate: int = SAMPLE_RATE) -> SongParams:
    """Derive tempo, key, harmony and timbre deterministically from the text."""
    seed = seed_from_text(seed_text)
    rng = np.random.default_rng(seed)
    step = max(1, round(sample_rate * 60.0 / float(rng.integers(80, 141)) / 4))
    minor = bool(rng.integers(0, 2))
    progressions = MINOR_PROGRESSIONS if minor else MAJOR_PROGRESSIONS
    verse, chorus = rng.choice(len(progressions), size=2, replace=False)
    return SongParams(
        bpm=sample_rate * 60.0 / (4 * step),
        step=step,
        tonic=int(rng.integers(0, 12)),
        minor=minor,
        verse_progression=progressions[verse],
        chorus_progression=progressions[chorus],
        pad_tilt=float(rng.uniform(1.2, 2.2)),
        lead_timbre=str(rng.choice(["saw", "square", "triangle", "organ"])),
        bass_pattern=int(rng.integers(0, 4)),
        kick_pattern=int(rng.integers(0, len(KICK_PATTERNS))),
        snare_pattern=int(rng.integers(0, len(SNARE_PATTERNS))),
        seed=seed,
    )


# --------------------------------------------------------------------------
# Low-level voice rendering
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """ADSR-style shape in seconds; sustain is a level, not a time."""

    attack: float
    decay: float
    sustain: float
    release: float


@dataclass(frozen=True)
class NoteSeq:
    """A monophonic run of notes that exactly covers a loop; amp 0 is a rest."""

    freqs: np.ndarray
    lengths: np.ndarray
    amps: np.ndarray


def midi_to_hz(midi: np.ndarray | float) -> np.ndarray:
    """Equal-tempered pitch, A4 = 440 Hz."""
    return 440.0 * 2.0 ** ((np.asarray(midi, dtype=np.float64) - 69.0) / 12.0)


def degree_to_midi(degree: np.ndarray | int, tonic_midi: int, scale: np.ndarray) -> np.ndarray:
    """Map (possibly negative / multi-octave) scale degrees to MIDI notes."""
    octave, index = np.divmod(np.asarray(degree), 7)
    return tonic_midi + 12 * octave + scale[index]


def note_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample position inside its note and that note's length."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    total = int(lengths.sum())
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return pos.astype(np.float32), np.repeat(lengths, lengths).astype(np.float32)


def envelope(pos: np.ndarray, note_len: np.ndarray, env: Envelope, sample_rate: int) -> np.ndarray:
    """Vectorised attack/decay/release so every note starts and ends at zero."""
    attack = np.minimum(pos / max(env.attack * sample_rate, 1.0), 1.0)
    body = env.sustain + (1.0 - env.sustain) * np.exp(pos * np.float32(-1.0 / (env.decay * sample_rate)))
    release = np.clip((note_len - pos) / max(env.release * sample_rate, 1.0), 0.0, 1.0)
    return (attack * body * release).astype(np.float32)


def smooth(values: np.ndarray, width: int) -> np.ndarray:
    """O(n) moving average (cumsum trick) used for the singer's portamento."""
    if width <= 1:
        return values
    padded = np.concatenate((np.full(width, values[0]), values))
    csum = np.cumsum(padded, dtype=np.float64)
    return ((csum[width:] - csum[:-width]) / width).astype(values.dtype)


def phase_track(freq: np.ndarray, sample_rate: int) -> np.ndarray:
    """Continuous phase (wrapped to 2*pi, float32) so glides never click."""
    cycles = np.cumsum(freq, dtype=np.float64)
    cycles *= 1.0 / sample_rate
    cycles -= np.floor(cycles)
    phase = np.empty(cycles.shape, dtype=np.float32)
    np.multiply(cycles, 2.0 * np.pi, out=phase, casting="same_kind")
    return phase


def harmonic_stack(phase: np.ndarray, count: int) -> np.ndarray:
    """Rows sin(k*phase) for k = 1..count via the Chebyshev recurrence.

    sin((k+1)x) = 2cos(x)sin(kx) - sin((k-1)x) costs two multiply-adds per
    harmonic instead of a transcendental call, which is most of the speed-up.
    """
    stack = np.empty((count, phase.shape[0]), dtype=np.float32)
    np.sin(phase, out=stack[0])
    if count > 1:
        twice_cos = 2.0 * np.cos(phase)
        np.multiply(twice_cos, stack[0], out=stack[1])  # sin(2x) = 2cos(x)sin(x)
        for k in range(2, count):
            np.multiply(twice_cos, stack[k - 1], out=stack[k])
            stack[k] -= stack[k - 2]
    return stack


def audible_harmonics(freq: float, weights: np.ndarray, sample_rate: int) -> int:
    """How many partials to render: below Nyquist and not negligibly quiet."""
    below_nyquist = int(0.45 * sample_rate / (freq * 1.03))
    loud = np.nonzero(np.abs(weights) > 0.01 * np.abs(weights).max())[0]
    last_loud = int(loud[-1]) + 1 if loud.size else 1
    return max(1, min(below_nyquist, last_loud))


def additive(
    phase: np.ndarray,
    notes: NoteSeq,
    weights: np.ndarray,
    sample_rate: int,
) -> np.ndarray:
    """Sum harmonics note by note: one harmonic stack + matrix-vector per note.

    Looping over notes (tens per loop), never samples, keeps it vectorised and
    lets each note drop harmonics above Nyquist (no aliasing).
    """
    out = np.zeros(phase.shape[0], dtype=np.float32)
    start = 0
    for freq, length, amp, w in zip(notes.freqs, notes.lengths, notes.amps, weights, strict=True):
        stop = start + int(length)
        if amp > 0.0:
            count = audible_harmonics(float(freq), w, sample_rate)
            stack = harmonic_stack(phase[start:stop], count)
            # einsum, not @: BLAS would spin extra threads for no real gain.
            out[start:stop] = np.einsum("k,kt->t", (w[:count] * amp).astype(np.float32), stack)
        start = stop
    return out


def render_voice(
    notes: NoteSeq,
    weights: np.ndarray,
    env: Envelope,
    sample_rate: int,
    *,
    vibrato: float = 0.0,
    glide: float = 0.0,
) -> np.ndarray:
    """Render a monophonic note sequence with envelope, vibrato and glide."""
    pos, note_len = note_positions(notes.lengths)
    freq = np.repeat(notes.freqs.astype(np.float32), notes.lengths)
    if glide > 0.0:
        freq = smooth(freq, int(glide * sample_rate))
    if vibrato > 0.0:
        t = np.arange(freq.shape[0], dtype=np.float32) * np.float32(2.0 * np.pi * 5.5 / sample_rate)
        depth = vibrato * np.minimum(pos / (0.3 * sample_rate), 1.0)
        freq = freq * (1.0 + depth * np.sin(t))
    tone = additive(phase_track(freq, sample_rate), notes, weights, sample_rate)
    return tone * envelope(pos, note_len, env, sample_rate)


# --------------------------------------------------------------------------
# Timbres
# --------------------------------------------------------------------------


def tilt_weights(count: int, tilt: float, odd_only: bool = False) -> np.ndarray:
    """Harmonic amplitudes falling as 1/k**tilt (the 'brightness' knob)."""
    k = np.arange(1, count + 1, dtype=np.float64)
    weights = 1.0 / k**tilt
    if odd_only:
        weights[1::2] = 0.0
    return weights / np.sqrt((weights**2).sum())


def lead_weights(timbre: str) -> np.ndarray:
    """Instrumental lead spectra: classic synth / organ shapes."""
    if timbre == "saw":
        return tilt_weights(14, 1.0)
    if timbre == "square":
        return tilt_weights(15, 1.0, odd_only=True)
    if timbre == "triangle":
        weights = tilt_weights(15, 2.0, odd_only=True)
        weights[2::4] *= -1.0
        return weights
    organ = np.array([1.0, 0.7, 0.45, 0.0, 0.3, 0.0, 0.0, 0.2])
    return organ / np.sqrt((organ**2).sum())


def vowel_weights(freqs: np.ndarray, vowels: np.ndarray, count: int = 24) -> np.ndarray:
    """Sawtooth source through three vowel formants, evaluated per note.

    Sampling resonance curves at each harmonic is the additive equivalent of a
    formant filter, without any per-sample IIR loop.
    """
    k = np.arange(1, count + 1, dtype=np.float64)
    partials = np.multiply.outer(freqs, k)[:, :, None]  # note x harmonic x 1
    formants = VOWELS[vowels][:, None, :]  # note x 1 x formant
    resonance = FORMANT_GAINS / (1.0 + ((partials - formants) / FORMANT_WIDTHS) ** 2)
    weights = resonance.sum(axis=2) / k
    norm = np.sqrt((weights**2).sum(axis=1, keepdims=True))
    return weights / np.maximum(norm, 1e-9)


# --------------------------------------------------------------------------
# Parts: pads, bass, melody, drums
# --------------------------------------------------------------------------


def chord_degrees(root: int) -> np.ndarray:
    """Diatonic triad on a scale degree."""
    return np.array([root, root + 2, root + 4])


def render_pads(params: SongParams, progression: tuple[int, ...], sample_rate: int) -> np.ndarray:
    """Sustained triads, one chord per bar, voiced around middle C."""
    tonic_midi = 48 + params.tonic
    chords = np.array([chord_degrees(d) for d in progression])  # bar x voice
    midi = degree_to_midi(chords, tonic_midi, params.scale)
    midi = np.where(midi < 53, midi + 12, midi)  # keep the voicing compact
    lengths = np.full(len(progression), params.bar)
    weights = tilt_weights(8, params.pad_tilt)
    env = Envelope(attack=0.25, decay=1.5, sustain=0.7, release=0.25)
    out = np.zeros(params.loop, dtype=np.float32)
    for voice in range(midi.shape[1]):
        freqs = midi_to_hz(midi[:, voice])
        notes = NoteSeq(freqs, lengths, np.ones(len(progression)))
        out += render_voice(notes, np.tile(weights, (len(progression), 1)), env, sample_rate, vibrato=0.003)
    return out / 3.0


def bass_notes(params: SongParams, progression: tuple[int, ...]) -> NoteSeq:
    """Root-based bass riff; pattern choice gives each song its groove."""
    eighth = 2 * params.step
    patterns = (
        ((0, 2), (0, 2), (0, 2), (0, 2)),  # quarter-note roots
        ((0, 1),) * 8,  # driving eighths
        ((0, 3), (0, 3), (0, 2)),  # 3-3-2 push
        ((0, 2), (7, 2), (12, 2), (7, 2)),  # root-fifth-octave walk
    )[params.bass_pattern]
    tonic_midi = 36 + params.tonic
    freqs, lengths = [], []
    for degree in progression:
        root = int(degree_to_midi(degree, tonic_midi, params.scale))
        root = root - 12 if root > 47 else root
        for interval, eighths in patterns:
            freqs.append(float(midi_to_hz(root + interval)))
            lengths.append(eighths * eighth)
    return NoteSeq(np.array(freqs), np.array(lengths), np.ones(len(freqs)))


def render_bass(params: SongParams, progression: tuple[int, ...], sample_rate: int) -> np.ndarray:
    """Round, plucked bass: a few low harmonics with a fast decay."""
    notes = bass_notes(params, progression)
    weights = np.tile(np.array([1.0, 0.45, 0.2, 0.08]), (len(notes.freqs), 1))
    env = Envelope(attack=0.005, decay=0.25, sustain=0.45, release=0.04)
    return render_voice(notes, weights, env, sample_rate)


def nearest_chord_tone(prev: int, chord_root: int, low: int, high: int, rng: np.random.Generator) -> int:
    """Closest chord tone to the previous note so the tune moves smoothly."""
    candidates = [d for d in range(low, high + 1) if (d - chord_root) % 7 in (0, 2, 4)]
    best = min(abs(d - prev) for d in candidates)
    closest = [d for d in candidates if abs(d - prev) == best]
    return int(closest[int(rng.integers(0, len(closest)))])


def reflect(degree: int, low: int, high: int) -> int:
    """Bounce off the range limits instead of sticking to them."""
    if degree > high:
        return max(low, 2 * high - degree)
    if degree < low:
        return min(high, 2 * low - degree)
    return degree


def melody_bar(
    rhythm: tuple[int, ...],
    steps: list[int],
    prev: int,
    chord_root: int,
    bounds: tuple[int, int],
    rng: np.random.Generator,
) -> tuple[list[int], int]:
    """Degrees for one bar: start on a chord tone, then follow the motif steps."""
    degrees: list[int] = []
    current = nearest_chord_tone(prev, chord_root, *bounds, rng)
    beat = 0
    for index, value in enumerate(rhythm):
        if index > 0 and value > 0:
            current = reflect(current + steps[index % len(steps)], *bounds)
            if beat % 4 == 0:  # strong beats land on chord tones
                current = nearest_chord_tone(current, chord_root, *bounds, rng)
        degrees.append(current)
        beat += abs(value)
    return degrees, current


def compose_melody(
    params: SongParams,
    progression: tuple[int, ...],
    rng: np.random.Generator,
    lift: int,
) -> tuple[list[int], list[int], list[bool]]:
    """A 4-bar phrase: motif (bars 1-2), repeat (bar 3), cadence (bar 4)."""
    first, second = (BAR_RHYTHMS[i] for i in rng.choice(len(BAR_RHYTHMS), size=2, replace=False))
    rhythms = (first, second, first, CADENCE_RHYTHMS[int(rng.integers(0, len(CADENCE_RHYTHMS)))])
    motif = [int(s) for s in rng.choice([-3, -2, -1, -1, 0, 1, 1, 2, 3], size=8)]
    bounds = (lift, lift + 8)
    degrees: list[int] = []
    eighths: list[int] = []
    sounding: list[bool] = []
    prev = lift + int(rng.integers(2, 6))
    for rhythm, chord_root in zip(rhythms, progression, strict=True):
        bar_degrees, prev = melody_bar(rhythm, motif, prev, chord_root, bounds, rng)
        degrees += bar_degrees
        eighths += [abs(v) for v in rhythm]
        sounding += [v > 0 for v in rhythm]
    return degrees, eighths, sounding


def melody_notes(
    params: SongParams,
    progression: tuple[int, ...],
    rng: np.random.Generator,
    *,
    lift: int,
    tonic_midi: int,
) -> NoteSeq:
    """Turn a composed phrase into frequencies and sample lengths."""
    degrees, eighths, sounding = compose_melody(params, progression, rng, lift)
    freqs = midi_to_hz(degree_to_midi(np.array(degrees), tonic_midi, params.scale))
    amps = np.where(sounding, rng.uniform(0.8, 1.0, size=len(degrees)), 0.0)
    # Rests keep the previous pitch so the phase/glide stays continuous.
    for i in range(1, len(freqs)):
        if not sounding[i]:
            freqs[i] = freqs[i - 1]
    lengths = np.array(eighths) * 2 * params.step
    return NoteSeq(freqs, lengths, amps)


def tonic_at_or_above(base: int, tonic: int) -> int:
    """Lowest MIDI note >= base whose pitch class is the tonic."""
    return base + (tonic - base) % 12


def render_lead(
    params: SongParams,
    progression: tuple[int, ...],
    rng: np.random.Generator,
    *,
    vocal: bool,
    lift: int,
    sample_rate: int,
) -> np.ndarray:
    """The melody, sung (formant voice) or played (synth/organ lead)."""
    if vocal:
        tonic_midi = tonic_at_or_above(50, params.tonic)  # singer's range
        notes = melody_notes(params, progression, rng, lift=lift, tonic_midi=tonic_midi)
        vowels = rng.integers(0, len(VOWELS), size=len(notes.freqs))
        weights = vowel_weights(notes.freqs, vowels)
        env = Envelope(attack=0.04, decay=0.6, sustain=0.8, release=0.08)
        voice = render_voice(notes, weights, env, sample_rate, vibrato=0.018, glide=0.04)
        return voice + breath(notes, rng, sample_rate)
    tonic_midi = tonic_at_or_above(57, params.tonic)
    notes = melody_notes(params, progression, rng, lift=lift, tonic_midi=tonic_midi)
    weights = np.tile(lead_weights(params.lead_timbre), (len(notes.freqs), 1))
    env = Envelope(attack=0.01, decay=0.3, sustain=0.55, release=0.06)
    return render_voice(notes, weights, env, sample_rate, vibrato=0.004)


def breath(notes: NoteSeq, rng: np.random.Generator, sample_rate: int) -> np.ndarray:
    """Short consonant-like noise at each sung onset, so the voice articulates."""
    pos, _ = note_positions(notes.lengths)
    amps = np.repeat(notes.amps.astype(np.float32), notes.lengths)
    noise = rng.standard_normal(pos.shape[0], dtype=np.float32)
    noise = np.diff(noise, prepend=np.float32(0.0))  # tilt towards hiss
    burst = np.exp(pos * np.float32(-1.0 / (0.012 * sample_rate)))
    return 0.025 * noise * burst * amps


def drum_shots(sample_rate: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One-shot kick, snare, hat and crash from decaying sines and noise."""

    def seconds(duration: float) -> np.ndarray:
        return np.arange(int(duration * sample_rate), dtype=np.float32) / sample_rate

    t = seconds(0.4)
    kick_freq = 48.0 + 110.0 * np.exp(-t / 0.03)
    kick = np.sin(phase_track(kick_freq, sample_rate)) * np.exp(-t / 0.16)
    t = seconds(0.25)
    snare_noise = np.diff(rng.standard_normal(t.shape[0] + 1).astype(np.float32))
    snare = 0.22 * snare_noise * np.exp(-t / 0.07) + 0.6 * np.sin(2 * np.pi * 185.0 * t) * np.exp(-t / 0.04)
    t = seconds(0.07)
    hat = np.diff(rng.standard_normal(t.shape[0] + 1).astype(np.float32), n=1) * np.exp(-t / 0.015)
    t = seconds(1.2)
    crash = np.diff(rng.standard_normal(t.shape[0] + 1).astype(np.float32)) * np.exp(-t / 0.35)
    return {"kick": kick, "snare": snare, "hat": 0.3 * hat, "crash": 0.12 * crash}


def pattern_hits(pattern: str, step: int, bars: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample offsets and velocities for a one-bar pattern repeated over bars."""
    velocity = {"X": 1.0, "x": 0.75, "o": 0.4}
    steps = [i for i, c in enumerate(pattern) if c in velocity]
    vels = [velocity[pattern[i]] for i in steps]
    offsets = np.array([(b * STEPS_PER_BAR + s) * step for b in range(bars) for s in steps], dtype=np.int64)
    return offsets, np.array(vels * bars, dtype=np.float32)


def place_hits(shot: np.ndarray, offsets: np.ndarray, vels: np.ndarray, length: int) -> np.ndarray:
    """Mix one-shots into a loop, wrapping tails so the loop tiles seamlessly."""
    if offsets.size == 0:
        return np.zeros(length, dtype=np.float32)
    index = (offsets[:, None] + np.arange(shot.shape[0])[None, :]) % length
    values = vels[:, None] * shot[None, :]
    return np.bincount(index.ravel(), weights=values.ravel(), minlength=length).astype(np.float32)


def render_drums(params: SongParams, shots: dict[str, np.ndarray], kit: dict[str, str]) -> np.ndarray:
    """Drum loop for a section; `kit` maps shot name to its one-bar pattern."""
    out = np.zeros(params.loop, dtype=np.float32)
    for name, pattern in kit.items():
        if name == "crash":  # only on the downbeat of the loop
            offsets, vels = np.array([0]), np.array([1.0], dtype=np.float32)
        else:
            offsets, vels = pattern_hits(pattern, params.step, BARS_PER_LOOP)
        out += place_hits(shots[name], offsets, vels, params.loop)
    return out


# --------------------------------------------------------------------------
# Arrangement
# --------------------------------------------------------------------------


def section_plan(blocks: int) -> list[str]:
    """Pop-song form over 4-bar blocks, stretched or cut to the length."""
    if blocks <= 2:
        return ["verse", "chorus"][:blocks]
    body = ["verse", "verse", "chorus", "chorus", "verse", "chorus", "chorus", "bridge"]
    plan = ["intro"]
    while len(plan) < blocks - 1:
        plan.append(body[(len(plan) - 1) % len(body)])
    return [*plan, "outro"]


def section_loops(params: SongParams, vocal: bool, sample_rate: int) -> dict[str, np.ndarray]:
    """Mix each section's 4-bar loop once; the song just tiles these."""
    rng = np.random.default_rng([params.seed, 1])
    verse, chorus = params.verse_progression, params.chorus_progression
    pads_v = render_pads(params, verse, sample_rate)
    pads_c = render_pads(params, chorus, sample_rate)
    bass_v = render_bass(params, verse, sample_rate)
    bass_c = render_bass(params, chorus, sample_rate)
    lead_v = render_lead(params, verse, rng, vocal=vocal, lift=0, sample_rate=sample_rate)
    lead_c = render_lead(params, chorus, rng, vocal=vocal, lift=2, sample_rate=sample_rate)
    shots = drum_shots(sample_rate, rng)
    kick, snare = KICK_PATTERNS[params.kick_pattern], SNARE_PATTERNS[params.snare_pattern]
    drums_v = render_drums(params, shots, {"kick": kick, "snare": snare, "hat": HAT_8THS})
    drums_c = render_drums(params, shots, {"kick": kick, "snare": snare, "hat": HAT_16THS, "crash": ""})
    drums_soft = render_drums(params, shots, {"kick": HALF_TIME_KICK, "hat": HAT_8THS})
    lead_gain = 0.36 if vocal else 0.38
    return {
        "intro": 0.4 * pads_v + 0.25 * bass_v + 0.6 * drums_soft,
        "verse": 0.25 * pads_v + 0.3 * bass_v + 0.55 * drums_v + lead_gain * lead_v,
        "chorus": 0.3 * pads_c + 0.32 * bass_c + 0.6 * drums_c + 1.1 * lead_gain * lead_c,
        "bridge": 0.4 * pads_c + 0.25 * bass_v + 0.5 * drums_soft + 0.8 * lead_gain * lead_v,
        "outro": 0.4 * pads_v + 0.25 * bass_v + 0.5 * drums_soft,
    }


def normalise(loops: dict[str, np.ndarray], peak: float = 0.9) -> dict[str, np.ndarray]:
    """One shared gain for all sections keeps the dynamics between them."""
    loudest = max(float(np.abs(loop).max()) for loop in loops.values())
    gain = np.float32(peak / loudest) if loudest > 0 else np.float32(1.0)
    return {name: (loop * gain).astype(np.float32) for name, loop in loops.items()}


def arrange(loops: dict[str, np.ndarray], plan: list[str], total: int, sample_rate: int) -> np.ndarray:
    """Tile section loops; crossfade each change so tails never click."""
    block = next(iter(loops.values())).shape[0]
    out = np.concatenate([loops[name] for name in plan]) if plan else np.zeros(0, np.float32)
    ramp = min(int(0.01 * sample_rate), block)
    fade = np.linspace(0.0, 1.0, ramp, dtype=np.float32)
    for index in range(1, len(plan)):
        if plan[index] != plan[index - 1]:
            start = index * block
            # The previous loop is periodic, so its continuation is its start.
            out[start : start + ramp] = loops[plan[index - 1]][:ramp] * (1 - fade) + loops[plan[index]][:ramp] * fade
    return out[:total]


def apply_fades(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Short fade-in against clicks, a longer fade-out so the song ends."""
    count = samples.shape[0]
    fade_in = min(int(0.3 * sample_rate), count // 4)
    fade_out = min(int(2.0 * sample_rate), count // 4)
    if fade_in > 0:
        samples[:fade_in] *= np.linspace(0.0, 1.0, fade_in, dtype=np.float32) ** 2
    if fade_out > 0:
        samples[count - fade_out :] *= np.linspace(1.0, 0.0, fade_out, dtype=np.float32) ** 2
    return samples


def synthesize(seed_text: str, *, seconds: float, vocal: bool, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Render a full song as float32 mono in [-1, 1], round(seconds*rate) long."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite non-negative number, got {seconds!r}")
    total = round(seconds * sample_rate)
    if total == 0:
        return np.zeros(0, dtype=np.float32)
    params = song_params(seed_text, sample_rate)
    loops = normalise(section_loops(params, vocal, sample_rate))
    plan = section_plan(-(-total // params.loop))
    out = arrange(loops, plan, total, sample_rate)
    return np.clip(apply_fades(out, sample_rate), -1.0, 1.0)


def concatenate(parts: list[np.ndarray], crossfade_seconds: float = 0.05, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Join clips with linear crossfades ("concat"/"extend").

    Linear weights sum to one, so the result stays within [-1, 1].  Each
    overlap is capped at half of either neighbour so fades never collide.
    """
    clips = [np.asarray(p, dtype=np.float32).reshape(-1) for p in parts]
    if not clips:
        return np.zeros(0, dtype=np.float32)
    wanted = max(0, round(crossfade_seconds * sample_rate))
    overlaps = [min(wanted, a.shape[0] // 2, b.shape[0] // 2) for a, b in itertools.pairwise(clips)]
    total = sum(c.shape[0] for c in clips) - sum(overlaps)
    out = np.zeros(total, dtype=np.float32)
    position = 0
    for index, clip in enumerate(clips):
        clip = clip.copy()
        head = overlaps[index - 1] if index > 0 else 0
        tail = overlaps[index] if index < len(overlaps) else 0
        if head:
            clip[:head] *= np.linspace(0.0, 1.0, head + 2, dtype=np.float32)[1:-1]
        if tail:
            clip[clip.shape[0] - tail :] *= np.linspace(1.0, 0.0, tail + 2, dtype=np.float32)[1:-1]
        out[position : position + clip.shape[0]] += clip
        position += clip.shape[0] - tail
    return out


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def to_pcm16(samples: np.ndarray) -> bytes:
    """Little-endian 16-bit PCM, clipped so out-of-range input cannot wrap."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


def encode_mp3(samples: np.ndarray, sample_rate: int) -> bytes:
    """CBR mono MP3; quality 7 is LAME's fast setting, fine for previews."""
    if lameenc is None:
        raise RuntimeError("lameenc is not installed; use encode_wav instead")
    encoder = lameenc.Encoder()
    encoder.set_channels(1)
    encoder.set_in_sample_rate(sample_rate)
    encoder.set_bit_rate(MP3_BITRATE_KBPS)
    encoder.set_quality(MP3_QUALITY)
    encoder.silence()
    return bytes(encoder.encode(to_pcm16(samples)) + encoder.flush())


def encode_wav(samples: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV, the dependency-free fallback."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(sample_rate)
        writer.writeframes(to_pcm16(samples))
    return buffer.getvalue()


def encode(samples: np.ndarray, sample_rate: int) -> tuple[bytes, str]:
    """MP3 when lameenc is available, else WAV; returns (data, media type)."""
    if lameenc is not None:
        return encode_mp3(samples, sample_rate), "audio/mpeg"
    return encode_wav(samples, sample_rate), "audio/wav"


def render_song(seed_text: str, *, seconds: float, vocal: bool) -> tuple[bytes, str]:
    """Synthesize and encode in one call, what the simulator endpoints need."""
    return encode(synthesize(seed_text, seconds=seconds, vocal=vocal), SAMPLE_RATE)
