"""The one place that decides what server text may become in HTML (widgets and magics outputs).

Server-supplied text (titles, styles, lyrics, error messages) is always escaped, and only plain
http(s) URLs ever become players, images or links: a `javascript:`/`data:`/`file:` URL is dropped.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

_SCHEMES = frozenset({"http", "https"})
_REFUSED = re.compile(r"[\s\x00-\x1f\x7f]")
"""Whitespace (Unicode's, as str.isspace), C0 controls and DEL: one scan, not a Python loop per character (cards
check several URLs each on every redraw)."""


def esc(text: object) -> str:
    """Escaped text for HTML content or attributes; None becomes the empty string."""
    return "" if text is None else html.escape(str(text), quote=True)


def http_url(url: object) -> str | None:
    """The URL if it is an absolute http(s) URL without whitespace or control characters, else None."""
    if not isinstance(url, str):
        return None
    candidate = url.strip()
    if not candidate or _REFUSED.search(candidate):
        return None
    try:
        parts = urlsplit(candidate)
    except ValueError:
        return None
    if parts.scheme.lower() not in _SCHEMES or not parts.netloc:
        return None
    return candidate


def public_address(url: str) -> str:
    """scheme://host[:port]/path of a service address: no user info, query or fragment (they may hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}".rstrip("/")


def link(url: object, text: object | None = None) -> str:
    """An `<a>` for an http(s) URL (opens in a new tab); anything else is just its escaped text."""
    safe = http_url(url)
    label = esc(text if text is not None else (safe or ""))
    if safe is None:
        return label
    return f'<a href="{esc(safe)}" target="_blank" rel="noopener noreferrer">{label}</a>'


def pre(text: object) -> str:
    """Escaped multi-line text that keeps its line breaks (lyrics)."""
    return f'<pre style="white-space: pre-wrap; margin: 0">{esc(text)}</pre>'


def error_html(message: object) -> str:
    """An escaped error line, styled so it reads as an error and not as output."""
    return f'<span style="color: #b00020">{esc(message)}</span>' if message else ""


def note_html(message: object) -> str:
    """An escaped secondary line (counts, hints, status)."""
    return f'<span style="color: #555">{esc(message)}</span>' if message else ""
