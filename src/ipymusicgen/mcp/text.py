"""Text the server did not write, made safe to show: an agent's words quoted in a question, a service's words
cleaned before they reach an agent.

An agent's words in a consent question are quoted with every quote, backslash, line break, control and format
character (bidi overrides such as U+202E, isolates, zero-width joiners) escaped visibly, so they can neither
close their quotes nor start a new line nor reorder what the user reads. A service's titles and lyrics lose
terminal escape sequences (ANSI CSI/OSC) and control and format characters; lyrics keep their line breaks.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from types import MappingProxyType

HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode categories that draw nothing or move what follows: controls, format (bidi), surrogates, unassigned."""
_ESCAPES = MappingProxyType({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_TERMINAL = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
"""ANSI escape sequences: CSI (colours, clearing the screen), OSC (window titles, links), and two-byte ones."""


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if unicodedata.category(ch) in HIDDEN:
        return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
    return ch


def quoted(text: object, limit: int = 80) -> str:
    """`text` in double quotes, at most `limit` characters of it, every character that could forge escaped."""
    raw = str(text)
    cut = raw[:limit]
    return '"' + "".join(_escape(ch) for ch in cut) + ('…"' if len(raw) > limit else '"')


_NOT_ASCII_SHOWN = re.compile(r"[^ -~]")
"""A character that may hide (anything but printable ASCII): only these are looked at one by one."""


@functools.lru_cache(maxsize=4096)
def _shown(ch: str) -> str:
    """A character as kept: hidden ones dropped, a line break or tab (when not kept) a space."""
    if unicodedata.category(ch) not in HIDDEN:
        return ch
    return " " if ch in "\r\n\t" else ""


def _shown_line(match: re.Match[str]) -> str:
    ch = match.group()
    return ch if ch in "\n\t" else _shown(ch)


def _shown_flat(match: re.Match[str]) -> str:
    return _shown(match.group())


def service_text(text: object, *, lines: bool = False) -> str:
    """A service's text without terminal escapes, control or format characters; line breaks kept if `lines`."""
    plain = str(text)
    if plain.isprintable() or (lines and plain.replace("\n", "").replace("\t", "").isprintable()):
        return plain  # the common case, checked in C: nothing hidden (a space other than " " takes the long way)
    plain = _TERMINAL.sub("", plain).replace("\r\n", "\n")
    return _NOT_ASCII_SHOWN.sub(_shown_line if lines else _shown_flat, plain)  # one pass; ASCII text stays in C
