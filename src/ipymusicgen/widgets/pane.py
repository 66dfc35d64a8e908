"""One request form without any widget (`Pane`) and how its fields are shown (`FieldSpec`).

A pane holds the values as typed, which fields were touched, the problems (from the same request models the
client uses), whether a paid call waits for a confirm, and the status words. The studio's view draws its
`state()` and sends intents back; every rule about a form lives here, once, for every tab.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ..config import PaidAsk
from ..errors import RequestValidationError, UnprocessableEntityError
from ..models.costs import CostTableError, estimate_credits
from ..models.schema import field_descriptions
from .fields import error_title, number_text, parse_number, problems_by_field, server_problems

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..client.faces import MusicClient
    from .watcher import TaskWatcher


class PaneHost(Protocol):
    """What a pane asks of the studio it sits in (its whole interface: no pane reaches past it)."""

    @property
    def client(self) -> MusicClient: ...

    @property
    def watcher(self) -> TaskWatcher: ...

    @property
    def confirm(self) -> bool | None: ...

    @property
    def needs_confirm(self) -> bool: ...

    @property
    def credits_left(self) -> int | None: ...

    def pane_changed(self, pane: Pane, *, revalidate: bool = True) -> None: ...

    def pane_sent(self, pane: Pane, result: Any) -> None: ...

    def show(self, tab: str) -> None: ...

    def use_lyrics(self) -> None: ...


@dataclass(frozen=True)
class FieldSpec:
    """How one request field is shown: a human label, the API name as a hint, the kind of input."""

    name: str
    label: str
    kind: str  # "text" | "textarea" | "select" | "checkbox" | "toggle" | "number"
    placeholder: str = ""
    options: tuple[tuple[str, Any], ...] = ()
    wide: bool = False
    hint: str = ""
    """What the hint shows on hover; the field's API name when empty."""
    description: str = ""
    """What the field means, from its request model (`described_specs`): said on hover."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "hint": self.hint or self.name,
            "kind": self.kind,
            "placeholder": self.placeholder,
            "options": [[label, value] for label, value in self.options],
            "wide": self.wide,
            "description": self.description,
        }


def described_specs(models: Iterable[type[BaseModel]], shown: Iterable[FieldSpec]) -> list[FieldSpec]:
    """The fields of request `models` as a pane shows them: each of `shown` (how it looks) with its model's
    description, then each field of the models that `shown` does not name, as a plain input labelled by its name.
    The models are the one vocabulary: a field added to one appears in the studio, described, unedited."""
    models = tuple(models)
    descriptions = field_descriptions(*models)
    specs = [replace(spec, description=descriptions.get(spec.name, spec.description)) for spec in shown]
    named = {spec.name for spec in specs}
    for name, description in descriptions.items():
        if name not in named:
            label = name.replace("_", " ").capitalize()
            specs.append(FieldSpec(name, label, _input_kind(models, name), description=description))
    return specs


def _input_kind(models: tuple[type[BaseModel], ...], name: str) -> str:
    """A number input for a field whose model takes only numbers; text otherwise (the model refuses the rest)."""
    model = next(m for m in models if name in m.model_fields)
    prop = model.model_json_schema()["properties"][name]
    kinds = {part.get("type") for part in prop.get("anyOf", [prop])} - {"null"}
    return "number" if kinds and kinds <= {"integer", "number"} else "text"


OPEN_CHOICES = frozenset({"mv", "model_version"})
"""Select fields that take a value outside their options (a model the table does not know yet)."""


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class Count:
    """A field's counter ('95 of 80 characters'); `over` draws it in red the moment a limit is passed."""

    text: str
    over: bool = False

    @classmethod
    def of(cls, used: int, limit: int | None, unit: str) -> Count:
        if limit is None:
            return cls(f"{used:,} {unit}")
        return cls(f"{used:,} of {limit:,} {unit}", used > limit)


def quiet(call: Callable[[], Any]) -> Any:
    """Build a request without its IgnoredFieldsWarning (the pane sends only its shape's fields)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


class Pane:
    """One request form without any widget: values as typed, touched fields, problems, status.

    Subclasses give the field specs, which fields show and which are required, the request builder,
    the one client call, and how to say what happened.
    """

    title = ""
    tab = ""
    submit_label = "Send"
    paid = True

    def __init__(self, studio: PaneHost, specs: Iterable[FieldSpec]) -> None:
        self._studio = studio
        self.specs = {spec.name: spec for spec in specs}
        self.typed: dict[str, Any] = {name: self._empty(spec) for name, spec in self.specs.items()}
        self.touched: set[str] = set()
        self.tried = False
        self.problems: dict[str, str] = {}
        self.general: list[str] = []
        self.request: Any = None
        self.status = ""
        self.error_title = ""
        self.error = ""
        self.ids: list[str] = []
        self.busy = False
        self.ask = PaidAsk(lambda: studio.needs_confirm)
        """The shown confirm and the request it priced: "Confirm and send" sends exactly it, or asks again."""
        self._callbacks: list[Callable[[Any], Any]] = []

    @staticmethod
    def _empty(spec: FieldSpec) -> Any:
        if spec.kind == "checkbox":
            return False
        if spec.options:
            return spec.options[0][1]
        return ""

    # -- the Python API (tests, notebooks, the watcher's extend) -------------------------------------

    @property
    def client(self) -> MusicClient:
        return self._studio.client

    @property
    def confirm(self) -> str:
        """The confirm question shown ("" when none): what the request costs, before anything is sent."""
        return self.ask.question

    @property
    def priced(self) -> Any:
        """The payload the shown confirm priced (None when none is shown)."""
        return self.ask.asked.snapshot if self.ask.asked is not None else None

    @property
    def studio(self) -> PaneHost:
        """The studio this pane belongs to (what a notebook shows for it)."""
        return self._studio

    def _ipython_display_(self) -> None:
        """A pane is shown as its studio, opened on the pane's tab."""
        self._studio.show(self.tab)

    def on_submitted(self, callback: Callable[[Any], Any]) -> None:
        self._callbacks.append(callback)

    def set_values(self, **fields: Any) -> None:
        """Prefill fields (e.g. for an extend); None clears one. Prefilled fields count as touched."""
        unknown = sorted(set(fields) - set(self.specs))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no field(s) {', '.join(unknown)}; fields: {', '.join(self.specs)}"
            )
        for name, value in fields.items():
            self._set(name, value)
            self.touched.add(name)
        self._studio.pane_changed(self)

    def type(self, name: str, value: Any) -> None:
        """What the browser sends while someone types: the value changes, the field is not touched yet."""
        if name not in self.specs:
            return
        self._set(name, value)
        self._studio.pane_changed(self)

    def touch(self, name: str) -> None:
        """The field lost focus: from now on its problem may be shown."""
        if name in self.specs and name not in self.touched:
            self.touched.add(name)
            self._studio.pane_changed(self)

    @property
    def valid(self) -> bool:
        return self.request is not None

    def values(self) -> dict[str, Any]:
        """The request as it stands (what `submit()` would validate and send)."""
        return self.request_values()

    @property
    def fields(self) -> dict[str, dict[str, Any]]:
        """Each field as the browser gets it: label, hint, shown, required, count, problem…"""
        return {item["name"]: item for item in self.state()["fields"]}

    @property
    def shown_problems(self) -> dict[str, str]:
        """The problems a person sees: of touched fields, or of all after a submit was tried."""
        return {n: p for n, p in self.problems.items() if self.tried or n in self.touched}

    def submit(self, *, confirmed: bool = True) -> Any:
        """Validate and send once; the result or None (problems and errors are shown, never raised).

        Called from code, the call itself is the decision. The button sends `confirmed=False`: with a
        real key a paid call then waits for the "Confirm and send" button (`confirm` says what it costs).
        """
        if self.busy:
            return None
        self.tried = True
        self.validate()
        if self.request is None:
            self.status = ""
            self.ask.cancel()
            self._studio.pane_changed(self, revalidate=False)
            return None
        if self.paid and not confirmed and not self.ask.press(self.tab, self._snapshot(), self.confirm_question):
            self.status = "waiting for your confirmation"
            self._studio.pane_changed(self, revalidate=False)
            return None
        self.ask.cancel()
        self.busy = True
        self.status, self.error, self.error_title = "sending…", "", ""
        self._studio.pane_changed(self, revalidate=False)
        try:
            result = self._call(self.request)
        except UnprocessableEntityError as exc:
            per_field, general = problems_by_field(server_problems(exc), self.visible())
            self.problems.update(per_field)
            self.error_title, self.error = error_title(exc), "\n".join(general)
            self.status = "nothing was started"
            return None
        except Exception as exc:  # shown in the pane, never as a traceback
            self.error_title = error_title(exc)
            self.error = self.client.redact(str(exc)) or type(exc).__name__
            self.status = "nothing was started"
            return None
        finally:
            self.busy = False
            self._studio.pane_changed(self, revalidate=False)
        self.status = self._describe(result)
        self.tried = False
        self._studio.pane_changed(self, revalidate=False)
        for callback in list(self._callbacks):
            callback(result)
        self._studio.pane_sent(self, result)
        return result

    def confirm_priced(self) -> Any:
        """The "Confirm and send" button: send the request the confirm priced. If the pane's request is no longer
        that one (changed since), nothing is sent and the confirm asks again for the new one."""
        self.validate()
        if self.request is None:
            self.ask.cancel()
            return self.submit(confirmed=False)
        if not self.ask.confirm(self.tab, self._snapshot(), self.confirm_question):
            if self.ask.asked is None:  # no question of this pane stood: ask now, send nothing
                return self.submit(confirmed=False)
            self._studio.pane_changed(self, revalidate=False)  # asked again: the request changed since
            return None
        return self.submit(confirmed=True)

    def _snapshot(self) -> Any:
        """What a confirm compares: the request as data."""
        return self.request.to_payload() if self.request is not None else None

    def cancel(self) -> None:
        self.ask.cancel()
        self.status = "not sent"
        self._studio.pane_changed(self, revalidate=False)

    # -- rules ----------------------------------------------------------------------------------------

    def visible(self) -> list[str]:
        return list(self.specs)

    def required(self) -> set[str]:
        return set()

    def counts(self) -> dict[str, Count | str]:
        """Each field's counter; a `Count` past its limit is drawn in red at once, before any touch."""
        return {}

    def dismiss(self) -> None:
        """Close the error box (the request is unchanged: sending it again is a new decision)."""
        self.error = self.error_title = ""
        self._studio.pane_changed(self, revalidate=False)

    def focus(self, name: str) -> None:
        """A field got the focus (a pane may refresh its choices then)."""

    def estimate(self, request: Any) -> int:
        """The credits a request is estimated to cost (from the price table; no network)."""
        return estimate_credits(request)

    def cost_words(self) -> str:
        """'uses about 3 credits (estimate) · 97 left': the credits left as last read from the key."""
        try:
            text = f"uses about {plural(self.estimate(self.request), 'credit')} (estimate)"
        except CostTableError as exc:  # a typo in the price table: say so; a paid step still asks first
            text = f"cost unknown ({exc})"
        left = self._studio.credits_left
        return text + (f" · {left:,} left" if left is not None else "")

    def confirm_question(self, changed: bool) -> str:
        """What the confirm step asks; `changed`: the request is not the one priced before."""
        again = "The request changed since it was priced. " if changed else ""
        return f"{again}Send this request? It {self.cost_words()}."

    def disabled(self) -> set[str]:
        return set()

    def request_values(self) -> dict[str, Any]:
        """The request as it stands: the shown, non-empty fields as the models take them."""
        values: dict[str, Any] = {}
        for name in self.visible():
            if name in self.disabled():
                continue
            spec, value = self.specs[name], self.typed[name]
            if spec.kind == "checkbox":
                value = int(bool(value))
            elif spec.kind == "number":
                value = parse_number(str(value))
            if value is not None and value != "":
                values[name] = value
        return values

    def validate(self) -> None:
        try:
            self.request = quiet(self._build)
        except RequestValidationError as exc:
            self.request = None
            self.problems, self.general = problems_by_field(exc.problems, self.visible())
            return
        self.problems, self.general = {}, []

    def state(self) -> dict[str, Any]:
        visible, required, disabled = set(self.visible()), self.required(), self.disabled()
        shown, counts = self.shown_problems, self.counts()
        fields = []
        for name, spec in self.specs.items():
            item = spec.as_dict()
            value = self.typed[name]
            item.update(
                value=value if isinstance(value, bool | int | float) else str(value),
                shown=name in visible,
                required=name in required,
                disabled=name in disabled,
                count=str(getattr(count := counts.get(name, ""), "text", count)),
                count_over=bool(getattr(count, "over", False)),
                problem=shown.get(name, ""),
            )
            fields.append(item)
        general = self.general if self.tried else []
        cost = self.cost_words() if self.paid and self.request is not None else ""
        error_stands = bool(shown or general or self.error or self.error_title)
        return {
            "fields": fields,
            "submit_label": self.submit_label,
            "can_submit": not self.busy and not error_stands and (self.request is not None or not self.tried),
            "busy": self.busy,
            "cost": cost,
            "status": self.status,
            "ids": list(self.ids),
            "error_title": self.error_title or ("Please check the marked fields" if general else ""),
            "error": self.error or "\n".join(general),
            "confirm": self.confirm,
        }

    def _set(self, name: str, value: Any) -> None:
        spec = self.specs[name]
        if spec.kind == "checkbox":
            self.typed[name] = bool(value)
        elif spec.kind == "number":
            self.typed[name] = number_text(value) if not isinstance(value, str) else value
        elif spec.kind in ("select", "toggle"):
            known = [v for _label, v in spec.options]
            if value is None:
                value = spec.options[0][1] if spec.options else ""
            if value not in known and isinstance(value, str) and value.isdigit() and int(value) in known:
                value = int(value)  # a toggle's value comes back from the browser as text
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                return  # not a choice the browser could send (a forged intent): nothing changes
            if value not in known and not (name in OPEN_CHOICES and isinstance(value, str)):
                return  # only a model may be one the table does not know (validation then names it)
            if value not in known and value != "":
                options = (*spec.options, (f"{value} (not in the model table)", value))
                self.specs[name] = spec = replace(spec, options=options)
            self.typed[name] = value
        else:
            self.typed[name] = "" if value is None else str(value)
        self.ask.cancel()  # a changed request must be confirmed again
        self.error = self.error_title = ""  # the error was about the request as it was sent

    def _build(self) -> Any:
        raise NotImplementedError

    def _call(self, request: Any) -> Any:
        raise NotImplementedError

    def _describe(self, result: Any) -> str:
        return "sent"

    def __repr__(self) -> str:
        state = "busy" if self.busy else ("ready" if self.valid else "incomplete")
        values = ", ".join(f"{k}={v!r}" if len(repr(v)) < 40 else f"{k}=…" for k, v in self.request_values().items())
        lines = [f"{type(self).__name__}({values}) [{state}]"]
        lines += [f"  {name}: {problem}" for name, problem in self.shown_problems.items()]
        if self.status:
            lines.append(f"  {self.status}")
        return "\n".join(lines)
