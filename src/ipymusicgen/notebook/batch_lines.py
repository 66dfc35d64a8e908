"""Batch rows from `%musicgen` lines or a notebook variable: what a `%%musicgen_batch` cell and the studio's
Batch tab both read, so a batch line means exactly what the single `%musicgen` line means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..errors import MusicGenError, one_line
from .args import parse_musicgen

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

MUSICGEN_MAGICS = "MusicGen"
"""Registry name of the `%musicgen` magics, whose line parser (and model defaults) batch lines reuse."""


def parse_lines(text: str, shell: InteractiveShell | None) -> list[Any]:
    """Request models from `%musicgen` lines (blank lines and `# comments` skipped); UsageError names the line."""
    namespace = shell.user_ns if shell is not None else {}
    magics = shell.magics_manager.registry.get(MUSICGEN_MAGICS) if shell is not None else None
    requests = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("%"):
            line = line.lstrip("%")
            line = line[len("musicgen") :].strip() if line.startswith("musicgen") else line
        try:
            if magics is not None and hasattr(magics, "parse_line"):
                call = magics.parse_line(line)
            else:
                call = parse_musicgen(line, namespace=namespace)
        except UsageError as exc:
            raise UsageError(f"line {number}: {one_line(exc)}") from None
        except MusicGenError as exc:
            raise UsageError(f"line {number}: {one_line(exc)}") from None
        for note in _notes(call):
            print(f"Note (line {number}): {note}")
        requests.append(call.request)
    if not requests:
        raise UsageError("no rows: put one %musicgen line per song in the cell, or use --from VARIABLE")
    return requests


def _notes(call: Any) -> list[str]:
    """What `%musicgen` would note for this line: fields left as typed, fields the service ignores."""
    notes = list(getattr(call, "notes", []) or [])
    kept = getattr(call, "kept", None)
    if kept:
        why = "only {name} and {name.attr} of your variables are replaced"
        notes.insert(0, f"{', '.join(kept)} left as typed: {why}")
    return notes


def holds_rows(value: Any) -> bool:
    """Is this a variable a batch can take its rows from: a DataFrame, or a list of dicts/request models?"""
    if type(value).__name__ == "DataFrame" and hasattr(value, "to_dict"):
        return True
    return isinstance(value, list | tuple) and all(isinstance(v, Mapping) or hasattr(v, "to_payload") for v in value)


def rows_from_variable(name: str, namespace: Mapping[str, Any]) -> Any:
    """A DataFrame or a list of dicts/request models named `name`; UsageError when it is not one."""
    if name not in namespace:
        raise UsageError(f"--from {name}: no variable named {name!r} in this notebook")
    value = namespace[name]
    if holds_rows(value):
        return value if type(value).__name__ == "DataFrame" else list(value)
    raise UsageError(f"--from {name}: expected a DataFrame or a list of dicts, not {type(value).__name__}")


def parse_grid(text: str, namespace: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """A grid cell's `field: value` lines: values joined by `|` make an axis, one value is a base field.

    action: auto
    style: lo-fi | jazz | {third_style}
    mv: MFV2.0 | MFV3.0

    Values are text (the request models turn "1" into 1 where a number is meant); `{var}` is expanded.
    """
    from .interpolate import expand

    base: dict[str, Any] = {}
    axes: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        field, colon, value = line.partition(":")
        field = field.strip()
        if not colon or not field.isidentifier():
            raise UsageError(f"line {number}: write `field: value` or `field: one | two` (got {line!r})")
        if field in base or field in axes:
            raise UsageError(f"line {number}: {field} is given twice")
        values = [_typed(field, expand(part.strip(), namespace)) for part in value.split("|")]
        if any(part == "" for part in values):  # a 0 is a value (an on/off axis), only nothing is empty
            raise UsageError(f"line {number}: {field} has an empty value")
        if len(values) > 1:
            axes[field] = values
        else:
            base[field] = values[0]
    if not axes:
        raise UsageError("a grid needs at least one axis: a line like `style: lo-fi | jazz`")
    return base, axes


NUMBER_FIELDS = frozenset({"instrumental", "is_auto", "continue_at"})
"""Grid fields whose text means a number (the request models then check it like any other value)."""


def _typed(field: str, text: str) -> Any:
    if field not in NUMBER_FIELDS or not text:
        return text
    try:
        number = float(text)
    except ValueError:
        return text  # the models name the field and say what it takes
    return int(number) if number.is_integer() and "." not in text else number
