"""What the studio's panes share about fields: numbers as typed, problems per field, error headings.

The panes never validate on their own: they ask the request models (the same ones the client uses)
and file each `FieldProblem` under its field; these helpers do that filing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import (
    APIConnectionError,
    AuthenticationError,
    FieldProblem,
    InsufficientCreditsError,
    MusicGenError,
    RequestValidationError,
    UnprocessableEntityError,
)


def parse_number(text: str) -> int | float | str | None:
    """'' -> None, '12' -> 12, '12.5' -> 12.5; anything else is passed on for the models to refuse."""
    text = text.strip()
    if not text:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def number_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def problems_by_field(problems: Iterable[FieldProblem], fields: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Split problems into those of known fields (first one per field) and the rest, as plain lines."""
    known = set(fields)
    per_field: dict[str, list[str]] = {}
    general: list[str] = []
    for problem in problems:
        name = next((part for part in problem.field.split(".") if part in known), "")
        if name:
            per_field.setdefault(name, []).append(problem.message)
        else:
            general.append(str(problem))
    # a union field (e.g. `continue_at: float | int`) reports once per member: the first says enough
    return {name: messages[0] for name, messages in per_field.items()}, general


def server_problems(exc: UnprocessableEntityError) -> list[FieldProblem]:
    """The service's 422 entries as field problems (`loc` minus `body`; the form finds the field in it)."""
    problems = []
    for entry in exc.detail:
        names = [str(part) for part in entry.loc if part != "body"]
        problems.append(FieldProblem(".".join(names), entry.msg or entry.type))
    return problems


def error_title(exc: BaseException) -> str:
    """A short heading that says what kind of failure this is."""
    if isinstance(exc, AuthenticationError):
        return "API key problem"
    if isinstance(exc, InsufficientCreditsError):
        return "No credits left"
    if isinstance(exc, UnprocessableEntityError | RequestValidationError):
        return "The request was refused"
    if isinstance(exc, APIConnectionError):
        return "Could not talk to the service"
    if isinstance(exc, MusicGenError):
        return "The service reported an error"
    return "Unexpected error"
