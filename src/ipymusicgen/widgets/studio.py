"""`studio()`: every request as one designed front end (an anywidget), with one watcher below.

The browser only draws and sends intents (a field's new value, "touched", "submit", "confirm", a tab).
Everything else is decided here: which fields an action has, which are required, the problems (from the
same request models the client uses), when a problem may be shown (after the field was touched or a
submit was tried), the cost of a call, whether a paid call needs a confirm step, and what the status
line says. The Batch and Library tabs show their own widgets (when their modules are installed).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anywidget
import ipywidgets as w
import traitlets

from ..client.faces import MusicClient
from ..errors import RequestValidationError, UnprocessableEntityError
from ..models.costs import CostTableError, estimate_credits
from ..models.schema import (
    ACTIONS,
    PROMPT_MAX,
    TITLE_MAX,
    V1_MODELS,
    V2_MODELS,
    KeyInfo,
    LyricsResult,
    ModelLimits,
    V2Request,
    V2Song,
    build_generate_request,
    build_lyrics_request,
    build_v2_request,
    shape_fields,
    word_count,
)
from ..notebook.display import CREDITS_API_TERM, mask_key
from ..safe_html import public_address
from ._static import css, esm
from .batch import BatchForm
from .fields import error_title, number_text, parse_number, problems_by_field, server_problems
from .library import LibraryView
from .text import TextRepr
from .watcher import TaskWatcher, provide_extend_studio

TAB_IDS = ("song", "v2", "lyrics", "batch", "library", "key")
TAB_TITLES = ("Song", "Prompt (v4.5 models)", "Lyrics", "Batch", "Library", "Key")
TAB_HINTS = {"v2": "the service's v2 endpoint: a prompt and the v3.0 to v4.5-plus models"}
"""A tab's API name, on hover: music words on the tab, the service's word in its hint."""
TAB_BLURBS = {
    "batch": "Many songs at once: one line each, or a DataFrame. The form is right below.",
    "library": "Every song you have made: search, play, keep the take you like. It is right below.",
}
"""The embedded sandbox's key: requests with it cost nothing real, so they need no confirm step."""

ACTION_LABELS = {
    "auto": "From a description",
    "custom": "Custom (my lyrics)",
    "extend": "Extend a song",
    "concat": "Join an extended song",
    "upload": "Use an uploaded file",
    "upload_extend": "Extend an upload",
    "artist_consistency": "With a chosen singer",
}


@dataclass(frozen=True)
class FieldSpec:
    """How one request field is shown: a human label, the API name as a hint, the kind of input."""

    name: str
    label: str
    kind: str  # "text" | "textarea" | "select" | "checkbox" | "toggle" | "number"
    placeholder: str = ""
    options: tuple[tuple[str, Any], ...] = ()
    wide: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "hint": self.name,
            "kind": self.kind,
            "placeholder": self.placeholder,
            "options": [[label, value] for label, value in self.options],
            "wide": self.wide,
        }


OPEN_CHOICES = frozenset({"mv", "model_version"})
"""Select fields that take a value outside their options (a model the table does not know yet)."""


def limits_words(limits: ModelLimits | None) -> str:
    """'songs up to 8 minutes, lyrics up to 5,000 words' for a model, in words a person reads."""
    if limits is None:
        return "limits not known for this model"
    minutes = limits.max_seconds / 60
    return f"songs up to {minutes:g} minutes, lyrics up to {limits.max_lyrics_words:,} words"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _quiet(call: Callable[[], Any]) -> Any:
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

    def __init__(self, studio: Studio, specs: Iterable[FieldSpec]) -> None:
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
        self.confirm = ""
        self.priced: Any = None
        """The request the shown confirm priced: "Confirm and send" sends exactly it, or asks again."""
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
    def studio(self) -> Studio:
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
        self._studio._changed(self)

    def type(self, name: str, value: Any) -> None:
        """What the browser sends while someone types: the value changes, the field is not touched yet."""
        if name not in self.specs:
            return
        self._set(name, value)
        self._studio._changed(self)

    def touch(self, name: str) -> None:
        """The field lost focus: from now on its problem may be shown."""
        if name in self.specs and name not in self.touched:
            self.touched.add(name)
            self._studio._changed(self)

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
            self.status, self.confirm = "", ""
            self._studio._changed(self, revalidate=False)
            return None
        if self.paid and self._studio.needs_confirm and not confirmed:
            self.priced = self.request
            self.confirm = f"Send this request? It {self._studio.cost_words(self.request)}."
            self.status = "waiting for your confirmation"
            self._studio._changed(self, revalidate=False)
            return None
        self.confirm = ""
        self.busy = True
        self.status, self.error, self.error_title = "sending…", "", ""
        self._studio._changed(self, revalidate=False)
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
            self._studio._changed(self, revalidate=False)
        self.status = self._describe(result)
        self.tried = False
        self._studio._changed(self, revalidate=False)
        for callback in list(self._callbacks):
            callback(result)
        self._studio._after_submit(self, result)
        return result

    def confirm_priced(self) -> Any:
        """The "Confirm and send" button: send the request the confirm priced. If the pane's request is no longer
        that one (changed since), nothing is sent and the confirm asks again for the new one."""
        priced, self.priced = self.priced, None
        self.validate()
        current = self.request
        if priced is None or current is None or priced.to_payload() != current.to_payload():
            return self.submit(confirmed=False)
        return self.submit(confirmed=True)

    def cancel(self) -> None:
        self.priced = None
        self.confirm, self.status = "", "not sent"
        self._studio._changed(self, revalidate=False)

    # -- rules ----------------------------------------------------------------------------------------

    def visible(self) -> list[str]:
        return list(self.specs)

    def required(self) -> set[str]:
        return set()

    def counts(self) -> dict[str, str]:
        return {}

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
            self.request = _quiet(self._build)
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
                count=counts.get(name, ""),
                problem=shown.get(name, ""),
            )
            fields.append(item)
        general = self.general if self.tried else []
        cost = self._studio.cost_words(self.request) if self.paid and self.request is not None else ""
        return {
            "fields": fields,
            "submit_label": self.submit_label,
            "can_submit": not self.busy and (self.request is not None or not self.tried),
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
                self.specs[name] = spec = FieldSpec(spec.name, spec.label, spec.kind, spec.placeholder, options)
            self.typed[name] = value
        else:
            self.typed[name] = "" if value is None else str(value)
        self.confirm, self.priced = "", None  # a changed request must be confirmed again

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


def model_choices(models: Mapping[str, ModelLimits], default: str | None) -> tuple[tuple[str, str], ...]:
    choices = tuple((name, name) for name in models)
    return (
        ((f"service default ({default})" if default else "service default", ""), *choices)
        if default is not None
        else choices
    )


class SongPane(Pane):
    """A v1 song: the action decides which fields show and which are required (the models' shapes)."""

    title = "Song"
    tab = "song"
    submit_label = "Make songs"

    def __init__(self, studio: Studio) -> None:
        super().__init__(
            studio,
            [
                FieldSpec("action", "What to do", "select", options=tuple((ACTION_LABELS[a], a) for a in ACTIONS)),
                FieldSpec("mv", "Model", "select", options=model_choices(V1_MODELS, "")),
                FieldSpec("title", "Title", "text", "a name for the song"),
                FieldSpec("gender", "Voice", "select", options=(("any", ""), ("male", "male"), ("female", "female"))),
                FieldSpec(
                    "style", "Style", "textarea", "genre, mood, instruments — e.g. lo-fi piano, rainy night", wide=True
                ),
                FieldSpec("lyrics", "Lyrics", "textarea", "[Verse]\n…", wide=True),
                FieldSpec("instrumental", "Instrumental", "checkbox"),
                FieldSpec("continue_song_id", "Song to continue", "text", "id of a finished song"),
                FieldSpec("continue_at", "Continue from (s)", "number", "seconds into the song"),
                FieldSpec("audio_url", "Audio file URL", "text", "https://…"),
                FieldSpec("singer_id", "Singer", "text", "a singer id"),
            ],
        )

    def visible(self) -> list[str]:
        shape = shape_fields(self.typed["action"])
        return [name for name in self.specs if name == "action" or name in shape]

    def required(self) -> set[str]:
        return {"action"} | {name for name, needed in shape_fields(self.typed["action"]).items() if needed}

    def disabled(self) -> set[str]:
        return {"lyrics"} if self.typed["instrumental"] else set()

    def counts(self) -> dict[str, str]:
        model = self.typed["mv"]
        limits = V1_MODELS.get(model) if model else None
        words_max = limits.max_lyrics_words if limits else max(m.max_lyrics_words for m in V1_MODELS.values())
        words = word_count(self.typed["lyrics"])
        return {
            "mv": limits_words(limits) if model else "the service picks the model",
            "title": f"{len(self.typed['title'])} of {TITLE_MAX} characters",
            "lyrics": "not sent: instrumental" if self.typed["instrumental"] else f"{words:,} of {words_max:,} words",
        }

    def _build(self) -> Any:
        allow = self.client.settings.allow_unknown_models
        return build_generate_request(self.request_values(), allow_unknown_models=allow)

    def _call(self, request: Any) -> list[str]:
        self.ids = list(self.client.generate(request).ids)
        return self.ids

    def _describe(self, result: list[str]) -> str:
        return f"{plural(len(result), 'song')} started"


class V2Pane(Pane):
    """A v2 song: description mode sends prompt and model only; custom mode sends every field."""

    title = "v2"
    tab = "v2"
    submit_label = "Make songs"
    AUTO_FIELDS = ("is_auto", "model_version", "prompt")

    def __init__(self, studio: Studio) -> None:
        super().__init__(
            studio,
            [
                FieldSpec("is_auto", "Mode", "toggle", options=(("Describe it", 1), ("Write it myself", 0))),
                FieldSpec("model_version", "Model", "select", options=model_choices(V2_MODELS, None)),
                FieldSpec("title", "Title", "text", "a name for the song"),
                FieldSpec("instrumental", "Instrumental", "checkbox"),
                FieldSpec("prompt", "Description", "textarea", "what the song should sound like", wide=True),
                FieldSpec("lyrics", "Lyrics", "textarea", "[Verse]\n…", wide=True),
                FieldSpec("continue_song_id", "Song to continue", "text", "id of a finished song"),
                FieldSpec("continue_at", "Continue from (s)", "number", "seconds into the song"),
            ],
        )

    def visible(self) -> list[str]:
        return [n for n in self.specs if self.typed["is_auto"] != 1 or n in self.AUTO_FIELDS]

    def required(self) -> set[str]:
        fields = V2Request.model_fields
        return {n for n in self.visible() if n in fields and fields[n].is_required()}

    def disabled(self) -> set[str]:
        return {"lyrics"} if self.typed["instrumental"] else set()

    def counts(self) -> dict[str, str]:
        model = self.typed["model_version"]
        limits = V2_MODELS.get(model)
        words_max = limits.max_lyrics_words if limits else None
        words = word_count(self.typed["lyrics"])
        return {
            "model_version": limits_words(limits),
            "prompt": f"{len(self.typed['prompt'])} of {PROMPT_MAX} characters",
            "title": f"{len(self.typed['title'])} of {TITLE_MAX} characters",
            "lyrics": f"{words:,} of {words_max:,} words" if words_max else f"{words:,} words",
        }

    def _build(self) -> Any:
        allow = self.client.settings.allow_unknown_models
        return build_v2_request(self.request_values(), allow_unknown_models=allow)

    def _call(self, request: Any) -> list[V2Song]:
        songs = self.client.submit_v2(request)
        self.ids = [song.id for song in songs]
        return songs  # the watcher keeps what the answer says (title, lyrics): the v2 query answers them blank

    def _describe(self, result: list[V2Song]) -> str:
        return f"{plural(len(result), 'song')} started"


class LyricsPane(Pane):
    """Lyrics from a prompt; "Use in a song" puts them into the Song tab as a custom song."""

    title = "Lyrics"
    tab = "lyrics"
    submit_label = "Write lyrics"

    def __init__(self, studio: Studio) -> None:
        super().__init__(
            studio, [FieldSpec("prompt", "What about", "textarea", "what the lyrics are about", wide=True)]
        )
        self.result: LyricsResult | None = None

    def required(self) -> set[str]:
        return {"prompt"}

    def counts(self) -> dict[str, str]:
        return {"prompt": f"{len(self.typed['prompt'])} of {PROMPT_MAX} characters"}

    def _build(self) -> Any:
        return build_lyrics_request(self.typed["prompt"])

    def _call(self, request: Any) -> LyricsResult:
        self.result = self.client.lyrics(request.prompt)
        return self.result

    def use_in_song(self) -> None:
        """Put the lyrics into the Song tab as a custom song (and show that tab)."""
        self._studio.use_lyrics()

    def _describe(self, result: LyricsResult) -> str:
        return f"{plural(len([ln for ln in result.text.splitlines() if ln.strip()]), 'line')} of lyrics written"

    def state(self) -> dict[str, Any]:
        data = super().state()
        if self.result is not None:
            data["lyrics"] = {"title": self.result.title or "", "text": self.result.text}
        return data


class KeyPane:
    """The Key tab: the key's status in words, its credits, the one key mask; read on demand, never raised."""

    tab = "key"

    def __init__(self, studio: Studio) -> None:
        self._studio = studio
        self.info: KeyInfo | None = None
        self.checked: datetime | None = None
        self.problem = ""
        self.error = ""

    @property
    def studio(self) -> Studio:
        return self._studio

    def _ipython_display_(self) -> None:
        self._studio.show(self.tab)

    def refresh(self) -> KeyInfo | None:
        """Read the key's credits and status again; a failure is said in the tab, never raised."""
        client = self._studio.client
        try:
            info = client.key_info()
        except Exception as exc:  # shown in the Key tab
            self.problem, self.error = error_title(exc), client.redact(str(exc))
            self._studio._key_changed()
            return None
        self.info, self.checked = info, datetime.now()
        self.problem = self.error = ""
        self._studio._key_changed()
        return info

    @property
    def credits(self) -> int | None:
        return self.info.key_music_counts if self.info is not None else None

    def state(self) -> dict[str, Any]:
        """What the Key tab shows; the key itself only ever as its mask."""
        client, info = self._studio.client, self.info
        key = client.settings.key_value()
        sandbox = client.settings.is_free
        if self.problem:
            status = f"{self.problem}: the service did not accept a key check"
        elif info is None:
            status = "not checked yet"
        else:
            status = "key works" + (" (the built-in sandbox: songs are made locally, for free)" if sandbox else "")
        rows = []
        if info is not None:
            rows = [
                ["Key name", client.redact(info.key_name or "") or "unnamed", "key_name"],
                ["Key status code", "" if info.key_status is None else str(info.key_status), "key_status"],
                ["Created", _when(info.key_created_at), "key_created_at"],
                ["Last used", _when(info.key_recently_used_at), "key_recently_used_at"],
                ["Checked", _when(self.checked), ""],
            ]
        return {
            "status": status,
            "ok": info is not None and not self.problem,
            "credits": "" if self.credits is None else f"{self.credits:,}",
            "credits_hint": CREDITS_API_TERM,
            "mask": mask_key(key),
            "service": "built-in sandbox" if sandbox else public_address(client.settings.base_url),
            "rows": rows,
            "error": self.error,
            "confirm": self._studio.needs_confirm,
        }

    def __repr__(self) -> str:
        if self.info is None:
            return f"Key: {self.state()['status']}"
        return f"Key {self.state()['mask']}: {self.credits} credits left ({CREDITS_API_TERM})"


class StudioView(anywidget.AnyWidget):
    """The one front-end model of the studio: tabs, the forms, the key panel (state in, intents out)."""

    _esm = esm("studio")
    _css = css("studio")
    tab = traitlets.Unicode("song").tag(sync=True)
    tabs = traitlets.List().tag(sync=True)
    panes = traitlets.Dict().tag(sync=True)
    key = traitlets.Dict().tag(sync=True)


class Studio(TextRepr, w.VBox):
    """The studio: one anywidget with the forms, the Batch/Library widgets when installed, one watcher.

    Python API: `studio.song`, `.v2`, `.lyrics` (panes with `set_values`, `submit`, `touch`),
    `studio.select("key")`, `studio.refresh_key()`, `studio.watcher`.
    """

    def __init__(
        self, client: MusicClient | None = None, *, confirm: bool | None = None, watcher: TaskWatcher | None = None
    ) -> None:
        """`watcher=` makes this studio send into an existing watcher (a card's extend does that)."""
        if client is None:
            from ..session import get_client

            client = get_client()
        self._client = client
        self._confirm = confirm
        self.key_info = KeyPane(self)
        self._sync_lock = threading.RLock()
        self._key_checking = False
        self._view = StudioView()
        self._view.add_class("ipymusicgen-studio-view")
        self.song = SongPane(self)
        self.v2 = V2Pane(self)
        self.lyrics = LyricsPane(self)
        self._panes: dict[str, Pane] = {"song": self.song, "v2": self.v2, "lyrics": self.lyrics}
        self._owns_watcher = watcher is None
        if watcher is None:
            watcher = TaskWatcher(client=client)
            watcher.confirm_required = confirm  # a card's concat is paid: it confirms as the panes do
        self.watcher = watcher
        self.song.on_submitted(lambda ids: self.watcher.add(ids))
        self.v2.on_submitted(lambda songs: self.watcher.add(songs, v2=True))
        self.watcher._form_provider = self._pane_for_extend  # a card's extend opens this studio's pane
        batch_form = BatchForm(client=client, watcher=self.watcher)
        batch_form.confirm_required = confirm  # the Batch tab confirms as the other panes do
        self.embedded: dict[str, w.Widget] = {
            "batch": batch_form,
            "library": LibraryView(client=client, watcher=self.watcher),
        }
        for widget in self.embedded.values():
            widget.layout.display = "none"
        self._view.tabs = [
            {
                "id": t,
                "title": title,
                "available": t not in ("batch", "library") or t in self.embedded,
                "blurb": TAB_BLURBS.get(t, ""),
                "hint": TAB_HINTS.get(t, ""),
            }
            for t, title in zip(TAB_IDS, TAB_TITLES, strict=True)
        ]
        for pane in self._panes.values():
            pane.validate()
        self._view.panes = {name: pane.state() for name, pane in self._panes.items()}
        self._view.key = self.key_info.state()
        self._view.on_msg(self._on_msg)
        self._view.observe(self._tab_changed, names="tab")
        super().__init__([self._view, *self.embedded.values(), self.watcher])
        self.add_class("ipymusicgen-studio")

    # -- public API ----------------------------------------------------------------------------------

    @property
    def client(self) -> MusicClient:
        return self._client

    @property
    def view(self) -> StudioView:
        return self._view

    @property
    def tab(self) -> str:
        return self._view.tab

    def select(self, tab: str) -> None:
        if tab not in TAB_IDS:
            raise ValueError(f"no tab {tab!r}; tabs: {', '.join(TAB_IDS)}")
        self._view.tab = tab

    def show(self, tab: str) -> None:
        """Display the studio opened on `tab`."""
        from IPython.display import display

        self.select(tab)
        display(self)

    @property
    def needs_confirm(self) -> bool:
        """A paid call is confirmed first with a real key; the embedded sandbox's demo key costs nothing."""
        return self._client.settings.needs_confirm(self._confirm)

    def cost_words(self, request: Any) -> str:
        """'uses about 3 credits · 97 left' (the credits left as last read from the key)."""
        try:
            text = f"uses about {plural(estimate_credits(request), 'credit')}"
        except CostTableError as exc:  # a typo in the price table: say so; a paid step still asks first
            text = f"cost unknown ({exc})"
        left = self.key_info.credits
        return text + (f" · {left:,} left" if left is not None else "")

    def refresh_key(self) -> KeyInfo | None:
        """Read the key's credits and status again (the Key tab and the cost line show them)."""
        return self.key_info.refresh()

    @property
    def generate(self) -> SongPane:
        """The Song tab's pane (its name before the studio had a v2 tab of the same kind)."""
        return self.song

    def use_lyrics(self) -> None:
        """Put the written lyrics into the Song tab as a custom song and show that tab."""
        result = self.lyrics.result
        if result is None:
            raise ValueError("No lyrics yet: write some first.")
        fields: dict[str, Any] = {"action": "custom", "lyrics": result.text, "instrumental": False}
        if result.title and not self.song.request_values().get("title"):  # a title in use is kept
            fields["title"] = result.title
        self.song.set_values(**fields)
        self.select("song")

    def close(self) -> None:
        """Stop the watcher's polling (when the studio made it) and close every part."""
        if self._owns_watcher:
            self.watcher.close()
        for widget in self.embedded.values():
            widget.close()
        self._view.close()
        super().close()

    # -- plumbing -----------------------------------------------------------------------------------------

    def _changed(self, pane: Pane, *, revalidate: bool = True) -> None:
        if revalidate:
            pane.validate()
        name = next(n for n, p in self._panes.items() if p is pane)
        with self._sync_lock:  # the key check may land from its thread while someone types
            self._view.panes = {**self._view.panes, name: pane.state()}

    def _check_key_once(self) -> None:
        """When the studio is first drawn, read the credits for the cost line, off the kernel's thread
        (a slow service must not hold up the notebook); later views do not ask again."""
        if self._key_checking or self.key_info.info is not None:
            return
        self._key_checking = True
        threading.Thread(target=self.refresh_key, name="ipymusicgen-studio-key", daemon=True).start()

    def _after_submit(self, pane: Pane, _result: Any) -> None:
        if pane.paid and self.key_info.info is not None:
            self.refresh_key()

    def _pane_for_extend(self, v2: bool) -> Pane:
        self.select("v2" if v2 else "song")
        return self.v2 if v2 else self.song

    def _tab_changed(self, change: dict[str, Any]) -> None:
        for tab, widget in self.embedded.items():
            widget.layout.display = None if change["new"] == tab else "none"
        if change["new"] == "key" and self.key_info.info is None:
            self.refresh_key()  # read lazily: only when someone looks

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind, pane = content.get("kind"), self._panes.get(str(content.get("form")))
        if kind == "ready":
            self._check_key_once()
        elif kind == "tab" and content.get("tab") in TAB_IDS:
            self.select(str(content["tab"]))
        elif kind == "refresh_key":
            self.refresh_key()
        elif kind == "use_lyrics" and self.lyrics.result is not None:
            self.use_lyrics()
        elif pane is None:
            return
        elif kind == "input":
            pane.type(str(content.get("name")), content.get("value"))
        elif kind == "touch":
            pane.touch(str(content.get("name")))
        elif kind == "submit":
            pane.submit(confirmed=False)
        elif kind == "confirm" and pane.confirm:  # only a confirm step Python showed, for the request it priced
            pane.confirm_priced()
        elif kind == "cancel":
            pane.cancel()

    def _key_changed(self) -> None:
        self._view.key = self.key_info.state()
        for pane in self._panes.values():
            self._changed(pane, revalidate=False)  # the cost line says the credits left

    def __repr__(self) -> str:
        tabs = " | ".join(t["title"] for t in self._view.tabs if t["available"])
        return f"Studio [{tabs}] (tab: {self.tab})\n{self._panes.get(self.tab, self.song)!r}\n{self.watcher!r}"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "—"


def studio(client: MusicClient | None = None, *, confirm: bool | None = None) -> Studio:
    """Open the studio: Song, v2, Lyrics, Batch, Library and Key tabs above one task watcher."""
    return Studio(client, confirm=confirm)


def _extend_studio(watcher: TaskWatcher) -> Studio:
    """A studio for a lone watcher's extend: its panes send into that watcher."""
    return Studio(watcher.client, confirm=watcher.confirm_required, watcher=watcher)


provide_extend_studio(_extend_studio)  # the watcher cannot import the studio (it sits below it)


__all__ = ["TAB_IDS", "TAB_TITLES", "LyricsPane", "Pane", "SongPane", "Studio", "StudioView", "V2Pane", "studio"]
