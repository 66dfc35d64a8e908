"""Deterministic SVG cover art for simulated songs.

Titles and styles come from users, so every piece of text is stripped of
characters XML forbids and escaped (including quotes) before it touches the
document; nothing untrusted is ever placed in an attribute or a tag name.
"""

from __future__ import annotations

import hashlib
import re
from types import MappingProxyType
from xml.sax.saxutils import escape

SIZE = 512
TITLE_LIMIT = 40
STYLE_LIMIT = 60
ELLIPSIS = "\u2026"
# Characters that are not allowed anywhere in an XML 1.0 document.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_ESCAPES = MappingProxyType({'"': "&quot;", "'": "&apos;"})


def display_text(text: str, limit: int) -> str:
    """Drop XML-illegal characters and cut long text with an ellipsis."""
    clean = _XML_INVALID.sub("", text)
    if len(clean) <= limit:
        return clean
    return clean[: limit - 1] + ELLIPSIS


def xml_text(text: str) -> str:
    """Escape &, <, > and both quote kinds so text cannot break out."""
    return escape(text, _ESCAPES)


def palette(title: str, style: str) -> list[int]:
    """Stable bytes for colours/shapes; sha256, never the salted hash()."""
    digest = hashlib.sha256(f"{title}\x1f{style}".encode("utf-8", "surrogatepass")).digest()
    return list(digest)


def hsl(hue: int, saturation: int, lightness: int) -> str:
    """CSS hsl() colour string from integer components."""
    return f"hsl({hue % 360},{saturation}%,{lightness}%)"


def gradient(seed: list[int]) -> str:
    """Two-stop diagonal background gradient."""
    hue = seed[0] * 360 // 256
    shift = 60 + seed[1] % 120
    start = hsl(hue, 55 + seed[2] % 30, 25 + seed[3] % 20)
    stop = hsl(hue + shift, 55 + seed[4] % 30, 45 + seed[5] % 20)
    return (
        '<linearGradient id="bg" x1="0" y1="0" x2="1" y2="1">'
        f'<stop offset="0" stop-color="{start}"/><stop offset="1" stop-color="{stop}"/>'
        "</linearGradient>"
    )


def shapes(seed: list[int]) -> str:
    """A few translucent circles and a polygon, placed from the digest."""
    parts = []
    for i in range(5):
        x, y, r, h = seed[6 + 4 * i : 10 + 4 * i]
        parts.append(
            f'<circle cx="{x * 2}" cy="{y * 2}" r="{30 + r % 140}" '
            f'fill="{hsl(h * 360 // 256, 70, 60)}" fill-opacity="0.35"/>'
        )
    points = " ".join(f"{seed[26 + 2 * i] * 2},{seed[27 + 2 * i] * 2}" for i in range(3))
    parts.append(f'<polygon points="{points}" fill="white" fill-opacity="0.12"/>')
    return "".join(parts)


def render_cover(title: str, style: str) -> bytes:
    """512x512 SVG (UTF-8) with a pattern from title+style and the title on it."""
    seed = palette(title, style)
    shown_title = xml_text(display_text(title, TITLE_LIMIT))
    shown_style = xml_text(display_text(style, STYLE_LIMIT))
    svg = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SIZE}" height="{SIZE}" viewBox="0 0 {SIZE} {SIZE}">'
        f"<defs>{gradient(seed)}</defs>"
        f'<rect width="{SIZE}" height="{SIZE}" fill="url(#bg)"/>'
        f"{shapes(seed)}"
        f'<rect x="0" y="{SIZE - 150}" width="{SIZE}" height="150" fill="black" fill-opacity="0.45"/>'
        f'<text id="title" x="32" y="{SIZE - 88}" font-family="sans-serif" font-size="30" '
        f'font-weight="bold" fill="white">{shown_title}</text>'
        f'<text id="style" x="32" y="{SIZE - 48}" font-family="sans-serif" font-size="18" '
        f'fill="white" fill-opacity="0.8">{shown_style}</text>'
        "</svg>"
    )
    return svg.encode("utf-8")
