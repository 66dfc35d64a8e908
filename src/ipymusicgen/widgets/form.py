"""What every form shares: labelled field rows, problem display, the submit button and server errors.

Forms never validate on their own: they ask the request models (the same ones the client uses) and
show the `FieldProblem`s next to the fields. They never raise into the notebook either: any error of
a submit lands, escaped, in the form's error area.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import ipywidgets as w

from ..client.faces import MusicClient
from ..errors import (
    APIConnectionError,
    AuthenticationError,
    FieldProblem,
    InsufficientCreditsError,
    MusicGenError,
    RequestValidationError,
    UnprocessableEntityError,
)
from ..safe_html import error_html, esc, note_html
from .text import TextRepr

T = TypeVar("T")
LABEL_WIDTH = "130px"


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


def ensure_option(dropdown: w.Dropdown, value: str) -> None:
    """Add a model name the table does not know (new models; the client decides if it may be sent)."""
    if value and value not in [v for _label, v in dropdown.options]:
        dropdown.options = [*dropdown.options, (f"{value} (not in the model table)", value)]


class FieldRow(w.HBox):
    """One field: its input, an optional live count, and the field's problem (if any)."""

    def __init__(self, name: str, control: w.ValueWidget, label: str | None = None, *, count: bool = False) -> None:
        self.name = name
        self._label = label or name
        self._control = control
        self._count = w.HTML()
        self._problem = w.HTML()
        self._count_text = ""
        self._problem_text = ""
        control.description = self._label
        control.style = {"description_width": LABEL_WIDTH}
        self._count.layout.display = None if count else "none"
        super().__init__([control, self._count, self._problem])

    @property
    def control(self) -> w.ValueWidget:
        return self._control

    @property
    def problem(self) -> str:
        """The problem currently shown (plain text), or ''."""
        return self._problem_text

    @property
    def count(self) -> str:
        """The live count currently shown (plain text), or ''."""
        return self._count_text

    @property
    def shown(self) -> bool:
        return self.layout.display != "none"

    @shown.setter
    def shown(self, value: bool) -> None:
        self.layout.display = None if value else "none"

    def set_required(self, required: bool) -> None:
        """Mark a required field with a `*` after its label."""
        self._control.description = self._label + (" *" if required else "")

    def set_problem(self, message: str | None) -> None:
        self._problem_text = message or ""
        self._problem.value = error_html(message)

    def set_count(self, text: str) -> None:
        self._count_text = text
        self._count.value = note_html(text)


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


def quiet(call: Callable[[], T]) -> T:
    """Run a request builder without its IgnoredFieldsWarning (the form leaves those fields out)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


class Form(TextRepr, w.VBox, Generic[T]):
    """Base of the forms: rows, an error area, a status line, a submit button, and callbacks.

    Subclasses provide `_rows`, `_build()` (validate into a request, may raise RequestValidationError)
    and `_call_service(request)` (the one client call); `submit()` does the rest.
    """

    _rows: dict[str, FieldRow]
    _mode_field: str | None = None
    """The field that decides which others are shown (`action`, `is_auto`): prefilled first."""
    _model_field: str | None = None
    """The model picker: a prefilled name outside the table is added to it (the service adds models)."""
    _number_fields: frozenset[str] = frozenset({"continue_at"})

    def __init__(self, client: MusicClient | None, submit_label: str, children: list[w.Widget]) -> None:
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self._callbacks: list[Callable[[T], Any]] = []
        self._busy = False
        self._valid = False
        self._error_from_validation = False
        self._error = w.HTML()
        self._status = w.HTML()
        self._button = w.Button(description=submit_label, button_style="primary", icon="play")
        self._button.on_click(lambda _button: self.submit())
        super().__init__([*children, w.HBox([self._button, self._status]), self._error])
        self.add_class("ipymusicgen-form")

    # -- public API ------------------------------------------------------------------------------------

    @property
    def client(self) -> MusicClient:
        return self._client

    @property
    def fields(self) -> Mapping[str, FieldRow]:
        """The field rows by name (to inspect what is shown)."""
        return dict(self._rows)

    @property
    def valid(self) -> bool:
        return self._valid

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def error(self) -> str:
        """The error area's HTML (escaped), '' when there is none."""
        return self._error.value

    @property
    def submit_button(self) -> w.Button:
        return self._button

    def on_submitted(self, callback: Callable[[T], Any]) -> None:
        """Call `callback(result)` after each successful submit."""
        self._callbacks.append(callback)

    def set_values(self, **fields: Any) -> None:
        """Prefill fields (e.g. for an extend): the mode field first; None clears a field."""
        unknown = sorted(set(fields) - set(self._rows))
        if unknown:
            known = ", ".join(self._rows)
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(unknown)}; fields: {known}")
        for name in sorted(fields, key=lambda name: name != self._mode_field):
            control, value = self._rows[name].control, fields[name]
            if isinstance(control, w.Checkbox):
                control.value = bool(value)
            elif name == self._mode_field:
                control.value = value
            elif name == self._model_field:
                ensure_option(control, value or "")
                control.value = value or ""
            elif name in self._number_fields:
                control.value = number_text(value)
            else:
                control.value = "" if value is None else str(value)

    def submit(self) -> T | None:
        """What the button does: validate, send once, show errors in the form; the result or None."""
        if self._busy:
            return None
        try:
            request = quiet(self._build)
        except RequestValidationError as exc:
            self._show_problems(exc.problems)
            return None
        self._set_busy(True)
        self._status.value = note_html("sending…")
        try:
            result = self._call_service(request)
        except UnprocessableEntityError as exc:
            self._show_problems(server_problems(exc), heading=error_title(exc), server=True)
            self._status.value = ""
            return None
        except Exception as exc:  # shown in the form, never as a traceback
            self.show_error(exc)
            self._status.value = ""
            return None
        finally:
            self._set_busy(False)
        self._error.value = ""
        self._error_from_validation = False
        self._status.value = note_html(self._describe(result))
        for callback in list(self._callbacks):
            callback(result)
        return result

    def show_error(self, exc: BaseException | str) -> None:
        """Show an error (escaped) in the form's error area."""
        self._error_from_validation = False
        if isinstance(exc, str):
            self._error.value = error_html(exc)
            return
        self._error.value = f"<b>{esc(error_title(exc))}</b><br>{error_html(exc) or esc(type(exc).__name__)}"

    # -- for subclasses ---------------------------------------------------------------------------------

    def _value_of(self, name: str) -> Any:
        """A field's value as the request models take it (checkbox -> 0/1, number text -> number)."""
        control = self._rows[name].control
        if isinstance(control, w.Checkbox):
            return int(bool(control.value))
        if name in self._number_fields:
            return parse_number(control.value)
        return control.value

    def _build(self) -> Any:
        raise NotImplementedError

    def _call_service(self, request: Any) -> T:
        raise NotImplementedError

    def _describe(self, result: T) -> str:
        return "sent"

    def _revalidate(self) -> None:
        """Validate the current values with the request models and show problems next to fields."""
        try:
            quiet(self._build)
        except RequestValidationError as exc:
            self._show_problems(exc.problems)
            return
        self._show_problems([])

    def _show_problems(self, problems: list[FieldProblem], *, heading: str = "", server: bool = False) -> None:
        """Problems next to their fields, the rest in the error area; client problems block submit."""
        visible = [name for name, row in self._rows.items() if row.shown]
        per_field, general = problems_by_field(problems, visible)
        for name, row in self._rows.items():
            row.set_problem(per_field.get(name))
        lines = [error_html(line) for line in general]
        if heading:
            lines.insert(0, f"<b>{esc(heading)}</b>")
        if lines or self._error_from_validation or server:
            self._error.value = "<br>".join(lines)
            self._error_from_validation = not server and bool(lines)
        if not server:
            self._valid = not problems
        self._refresh_button()

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self._refresh_button()

    def _refresh_button(self) -> None:
        self._button.disabled = self._busy or not self._valid

    def _observe_rows(self) -> None:
        for row in self._rows.values():
            row.control.observe(lambda _change: self._changed(), names="value")

    def _changed(self) -> None:
        self._update_counts()
        self._revalidate()

    def _update_counts(self) -> None:
        """Refresh the live counts; forms with counts override this."""

    def _short_repr(self, name: str, values: Mapping[str, Any]) -> str:
        state = "busy" if self._busy else ("ready" if self._valid else "invalid")
        shown = ", ".join(f"{k}={v!r}" if len(repr(v)) < 40 else f"{k}=…" for k, v in values.items())
        problems = [f"{row.name}: {row.problem}" for row in self._rows.values() if row.problem]
        text = f"{name}({shown}) [{state}]"
        return text + ("\n  " + "\n  ".join(problems) if problems else "")
