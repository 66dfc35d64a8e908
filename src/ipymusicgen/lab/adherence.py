"""What a request asked for (a tempo, a key, a length) beside what the song measures: "128 bpm" or "in D minor" in
its style or prompt, a length in seconds from the request itself (`--seconds 90`).

`asked_of(texts, seconds=...)` reads the request; `compare(asked, measures)` puts each asked value beside the
measured one with whether it is met: a tempo within 2% (its half or double counts as met, said so), the same
key (its relative said so), a length within 5%.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

TEMPO_TOLERANCE = 0.02
LENGTH_TOLERANCE = 0.05
_BPM = re.compile(r"(?<![\d.])(\d{2,3}(?:\.\d+)?)\s*-?\s*bpm\b", re.IGNORECASE)
_KEY = re.compile(r"\bin\s+([A-Ga-g])\s*(#|♯|b|♭|sharp|flat)?\s*(major|minor|maj|min|m)\b", re.IGNORECASE)
_ARTICLE_AFTER = re.compile(
    r"[\s-]+(?!(?:and|or|with|at|for|by|from|to|in|on|over|under|then|but|feat|featuring|plus|bpm)\b)[a-z]",
    re.IGNORECASE,
)
"""After a lower-case "in a minor": a word that "minor" qualifies makes the "a" an article ("in a minor key", "in a
major way", "a minor-key ballad"); a comma, a number or a joining word ("in a minor with strings") leaves the note A."""
_PITCHES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
_KEY_NAMES = frozenset(f"{tonic} {mode}" for tonic in _PITCHES for mode in ("major", "minor"))
_NATURAL = MappingProxyType({"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11})


def asked_of(texts: Iterable[str | None], *, seconds: float | None = None) -> dict[str, Any]:
    """The tempo, key and length a request named: {"bpm": 128.0, "key": "D minor", "seconds": 90.0} (only those
    it named). The first of each in `texts` (style, prompt, title...) counts."""
    asked: dict[str, Any] = {}
    for text in texts:
        if not text:
            continue
        if "bpm" not in asked and (tempo := _BPM.search(text)):
            value = float(tempo.group(1))
            if 20 <= value <= 400:
                asked["bpm"] = value
        if "key" not in asked and (key := _named_key(text)):
            asked["key"] = key
    if seconds is not None and seconds > 0:
        asked["seconds"] = float(seconds)
    return asked


def _named_key(text: str) -> str | None:
    """The first key `text` names; "in a minor key" is an article and a mode (no key named), "in A minor key" is
    A minor."""
    for key in _KEY.finditer(text):
        if key.group(1) == "a" and not key.group(2) and _ARTICLE_AFTER.match(text, key.end()):
            continue
        return _key_name(key.group(1), key.group(2), key.group(3))
    return None


def _key_name(letter: str, accidental: str | None, mode: str) -> str:
    pitch = _NATURAL[letter.upper()]
    accidental = (accidental or "").lower()
    if accidental in ("#", "♯", "sharp"):
        pitch += 1
    elif accidental in ("b", "♭", "flat"):
        pitch -= 1
    quality = "major" if mode.lower() in ("major", "maj") else "minor"
    if mode == "M":  # "in CM": a capital M is major
        quality = "major"
    return f"{_PITCHES[pitch % 12]} {quality}"


def compare(asked: dict[str, Any], measures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each asked value with the measured one and whether it is met (None when nothing was measured)."""
    found: dict[str, dict[str, Any]] = {}
    measures = {name: _measured(name, measures.get(name)) for name in ("bpm", "key", "duration_s")}
    if "bpm" in asked:
        want, got = asked["bpm"], measures.get("bpm")
        met = None if got is None else abs(got - want) <= TEMPO_TOLERANCE * want
        octave = got is not None and not met and any(abs(got * f - want) <= TEMPO_TOLERANCE * want for f in (2, 0.5))
        found["bpm"] = {"asked": want, "measured": got, "met": met, **({"octave": True} if octave else {})}
    if "key" in asked:
        want, got = asked["key"], measures.get("key")
        found["key"] = {"asked": want, "measured": got, "met": None if got is None else got == want}
        if got is not None and got != want and _relative(want) == got:
            found["key"]["relative"] = True
    if "seconds" in asked:
        want, got = asked["seconds"], measures.get("duration_s")
        met = None if got is None else abs(got - want) <= LENGTH_TOLERANCE * want
        found["seconds"] = {"asked": want, "measured": got, "met": met}
    return found


def _measured(name: str, value: Any) -> Any:
    """A measured value as compared, or None when it cannot be one (a damaged or forged row: a string tempo,
    NaN, 1e308, a key that is none of the 24)."""
    if name == "key":
        return value if isinstance(value, str) and value in _KEY_NAMES else None
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if number and 0 < value <= 1e6 else None


def _relative(key: str) -> str:
    tonic, mode = key.split()
    pitch = _PITCHES.index(tonic)
    return f"{_PITCHES[(pitch + 9) % 12]} minor" if mode == "major" else f"{_PITCHES[(pitch + 3) % 12]} major"


def summary(adherence: dict[str, dict[str, Any]]) -> str:
    """ "asked 128 BPM, measured 64.0 (half or double); asked D minor, measured D minor" for a card or a repr."""
    parts = []
    for name, row in adherence.items():
        unit = {"bpm": " BPM", "seconds": " s"}.get(name, "")
        want = f"{row['asked']:g}{unit}" if isinstance(row["asked"], float) else row["asked"]
        got = row["measured"]
        if isinstance(got, float) and name == "seconds":
            got = round(got, 1)  # a length to a tenth of a second: "measured 87.3 s", not 87.3123
        shown = "nothing" if got is None else (f"{got:g}{unit}" if isinstance(got, float) else got)
        note = " (its half or double)" if row.get("octave") else " (its relative)" if row.get("relative") else ""
        mark = "" if row["met"] is None else (" ✓" if row["met"] else " ✗")
        parts.append(f"asked {want}, measured {shown}{note}{mark}")
    return "; ".join(parts)
