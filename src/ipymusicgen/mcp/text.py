"""Text the server did not write, made safe to show: an agent's words quoted in a question, a service's words
cleaned before they reach an agent.

An agent's words in a consent question are quoted with every quote, backslash, line break, control and format
character (bidi overrides such as U+202E, isolates, zero-width joiners) escaped visibly, so they can neither
close their quotes nor start a new line nor reorder what the user reads. A service's titles and lyrics lose
terminal escape sequences (ANSI CSI/OSC) and control and format characters; lyrics keep their line breaks.
"""

from __future__ import annotations

import re
import unicodedata

HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode categories that draw nothing or move what follows: controls, format (bidi), surrogates, unassigned."""
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
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


def service_text(text: object, *, lines: bool = False) -> str:
    """A service's text without terminal escapes, control or format characters; line breaks kept if `lines`."""
    plain = str(text)
    if plain.isprintable() or (lines and plain.replace("\n", "").replace("\t", "").isprintable()):
        return plain  # the common case, checked in C: nothing hidden (a space other than " " takes the long way)
    plain = _TERMINAL.sub("", plain)
    kept = "\n\t" if lines else ""
    return "".join(
        ch if ch in kept or unicodedata.category(ch) not in HIDDEN else ("" if ch not in "\r\n\t" else " ")
        for ch in plain.replace("\r\n", "\n")
    )
