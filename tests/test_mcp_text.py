"""A service's text is cleaned in one pass (`mcp.text.service_text`): the same result as looking at every
character, for every kind of character an agent must not be shown."""

from __future__ import annotations

import random
import unicodedata

import pytest

from ipymusicgen.mcp.text import _TERMINAL, HIDDEN, service_text


def one_by_one(text: str, *, lines: bool) -> str:
    """The rule, character by character (how it was written before the one-pass version)."""
    if text.isprintable() or (lines and text.replace("\n", "").replace("\t", "").isprintable()):
        return text
    kept = "\n\t" if lines else ""
    return "".join(
        ch if ch in kept or unicodedata.category(ch) not in HIDDEN else ("" if ch not in "\r\n\t" else " ")
        for ch in _TERMINAL.sub("", text).replace("\r\n", "\n")
    )


HOSTILE = [
    "plain title",
    "red \x1b[31mtitle\x1b[0m",
    "link \x1b]8;;http://x\x07here\x1b]8;;\x07",
    "rtl \u202etxt.exe",
    "zero\u200bwidth\u2060joined",
    "line\r\nbreaks\rand\ttabs\nhere",
    "bell\x07 nul\x00 del\x7f c1\x85\x9b31m",
    "sep\u2028para\u2029end",
    "surrogate \ud800 alone",
    "private \ue000 and unassigned \U000e0080",
    "accents é ñ, CJK 歌, emoji 🎵 and a non-breaking\u00a0space",
    "",
]


@pytest.mark.parametrize("lines", [False, True])
@pytest.mark.parametrize("text", HOSTILE)
def test_each_kind_of_character_is_cleaned_as_before(text: str, lines: bool) -> None:
    assert service_text(text, lines=lines) == one_by_one(text, lines=lines)


@pytest.mark.parametrize("lines", [False, True])
def test_random_text_of_every_plane_is_cleaned_as_before(lines: bool) -> None:
    pool = [chr(c) for c in range(0x250)] + [chr(c) for c in range(0x2000, 0x2070)]
    pool += ["\x1b[", "\x1b]", "\r\n", "歌", "🎵", "\ud800", "\U000e0001", "\ufeff", "\u202e"]
    rng = random.Random(29)
    for _ in range(400):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 60)))
        assert service_text(text, lines=lines) == one_by_one(text, lines=lines), repr(text)


def test_long_lyrics_with_one_control_character_keep_every_line() -> None:
    lyrics = "\n".join(f"[Verse {i}] every little line {i}" for i in range(2000)) + "\x1b[2J\u202e"
    cleaned = service_text(lyrics, lines=True)
    assert cleaned == lyrics[: -len("\x1b[2J\u202e")]
    assert cleaned.count("\n") == 1999
