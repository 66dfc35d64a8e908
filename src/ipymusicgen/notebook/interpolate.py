"""`{name}` expansion for magics: the user's variables go in, anything unknown stays as typed.

Lyrics are full of brackets and braces, so a name that is not a variable (or a malformed field) is
left verbatim rather than raising, and `{{` still escapes to `{` as in `str.format`.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

_FORMATTER = string.Formatter()


def _verbatim(field: str, spec: str, conversion: str | None) -> str:
    """The field exactly as the user typed it."""
    text = field
    if conversion:
        text += f"!{conversion}"
    if spec:
        text += f":{spec}"
    return "{" + text + "}"


def _format_field(field: str, spec: str, conversion: str | None, namespace: Mapping[str, Any]) -> str:
    """One field from the namespace; unknown names, positional fields and bad lookups stay verbatim."""
    root = field.split(".", 1)[0].split("[", 1)[0]
    if not root.isidentifier() or root not in namespace:
        return _verbatim(field, spec, conversion)
    try:
        value, _ = _FORMATTER.get_field(field, (), namespace)
        value = _FORMATTER.convert_field(value, conversion)
        return _FORMATTER.format_field(value, spec)
    except Exception:  # any lookup or formatting failure: leave the text as the user wrote it
        return _verbatim(field, spec, conversion)


def expand(text: str, namespace: Mapping[str, Any]) -> str:
    """Replace `{name}`, `{name.attr}`, `{name[0]}` with values from `namespace`; keep the rest.

    Text that `str.format` cannot even parse (a lone `{` or `}`) is returned unchanged.
    """
    if "{" not in text and "}" not in text:
        return text
    try:
        parts = list(_FORMATTER.parse(text))
    except ValueError:
        return text
    out: list[str] = []
    for literal, field, spec, conversion in parts:
        out.append(literal)
        if field is not None:
            out.append(_format_field(field, spec or "", conversion, namespace))
    return "".join(out)


def left_verbatim(text: str, namespace: Mapping[str, Any]) -> list[str]:
    """The `{...}` fields of `text` that `expand` would keep as typed (to warn before a paid request)."""
    if "{" not in text:
        return []
    try:
        parts = list(_FORMATTER.parse(text))
    except ValueError:
        return []
    return [
        _verbatim(field, spec or "", conversion)
        for _literal, field, spec, conversion in parts
        if field is not None
        and _format_field(field, spec or "", conversion, namespace) == _verbatim(field, spec or "", conversion)
    ]
