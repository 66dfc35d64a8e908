"""`safe_html.http_url`: the one rule for which server URLs may become players, images or links. Cards call it
several times each on every redraw (figure 15), so it scans with one pattern; every character it refused
before is refused still (checked over all of Unicode)."""

from __future__ import annotations

import sys

import pytest

from ipymusicgen.safe_html import http_url

URL = "https://cdn.example.com/songs/a.mp3"


def refused_before(ch: str) -> bool:
    """The rule as first written: whitespace (Unicode's), C0 controls and DEL."""
    return ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F


def test_every_character_is_refused_inside_a_url_exactly_when_it_was_before() -> None:
    characters = [chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF]  # no lone surrogates
    refused = [ch for ch in characters if refused_before(ch)]
    assert len(refused) > 30
    for ch in refused:
        assert http_url(f"https://cdn.example.com/so{ch}ngs/a.mp3") is None, hex(ord(ch))
    allowed = [ch for ch in characters if not refused_before(ch)]
    for start in range(0, len(allowed), 256):  # the rest, 256 at a time in one path: all kept
        candidate = "https://cdn.example.com/" + "".join(allowed[start : start + 256])
        assert http_url(candidate) == candidate, hex(ord(allowed[start]))


@pytest.mark.parametrize("ch", ["\t", "\n", " ", "\x00", "\x1f", "\x7f", "\x85", "\xa0", "\u2028", "\u3000"])
def test_whitespace_and_control_characters_anywhere_are_refused(ch: str) -> None:
    assert http_url(URL.replace("songs", f"so{ch}ngs")) is None
    assert http_url(URL + ch + "x") is None


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        (URL, URL),
        ("  " + URL + "\n", URL),  # surrounding whitespace is trimmed, as before
        ("HTTP://cdn.example.com/a.mp3", "HTTP://cdn.example.com/a.mp3"),
        ("javascript:alert(1)", None),
        ("data:audio/mp3;base64,AAAA", None),
        ("file:///etc/passwd", None),
        ("https://", None),
        ("/relative/a.mp3", None),
        ("", None),
        (None, None),
        (42, None),
        ("https://[::1", None),
    ],
)
def test_only_absolute_http_urls_are_kept(url: object, kept: str | None) -> None:
    assert http_url(url) == kept
