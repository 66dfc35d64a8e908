"""`studio()`: every request as one designed front end (an anywidget), with one watcher below.

The browser only draws and sends intents (a field's new value, "touched", "submit", "confirm", a tab).
Everything else is decided here: which fields an action has, which are required, the problems (from the
same request models the client uses), when a problem may be shown (after the field was touched or a
submit was tried), the cost of a call, whether a paid call needs a confirm step, and what the status
line says. The Batch tab is a pane too (`batch_pane`); its progress view and the Library view are drawn inside
their tabs as child views of the studio's one model.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

import anywidget
import ipywidgets as w
import traitlets

from ..client.faces import MusicClient
from ..models.providers import MUSICFUL, EngineRequest
from ..models.schema import (
    ACTIONS,
    PROMPT_MAX,
    TITLE_MAX,
    V1_MODELS,
    V1_SHAPES,
    V2_MODELS,
    KeyInfo,
    LyricsRequest,
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
from . import engine_fields
from ._static import front_end
from .batch_pane import BatchPane
from .fields import error_title
from .library import LibraryView
from .offered import Offers, allows, controls
from .pane import Count, FieldSpec, Pane, described_specs, plural
from .text import TextRepr
from .watcher import TaskWatcher

TAB_IDS = ("song", "v2", "lyrics", "batch", "library", "key")
TAB_TITLES = ("Song", "Prompt (v4.5 models)", "Lyrics", "Batch", "Library", "Key")
TAB_HINTS = MappingProxyType({"v2": "the service's v2 endpoint: a prompt and the v3.0 to v4.5-plus models"})
"""A tab's API name, on hover: music words on the tab, the service's word in its hint."""
TAB_BLURBS = MappingProxyType(
    {
        "batch": "Many songs at once: one %musicgen line each, or the rows of a DataFrame.",
        "library": "Every song you have made: search, play, keep the take you like.",
    }
)
"""A line at the top of a tab that is not a single request."""

ACTION_LABELS = MappingProxyType(
    {
        "auto": "From a description",
        "custom": "Custom (my lyrics)",
        "extend": "Extend a song",
        "concat": "Join an extended song",
        "upload": "Use an uploaded file",
        "upload_extend": "Extend an upload",
        "artist_consistency": "With a chosen singer",
    }
)


def limits_words(limits: ModelLimits | None) -> str:
    """'songs up to 8 minutes, lyrics up to 5,000 words' for a model, in words a person reads."""
    if limits is None:
        return "limits not known for this model"
    minutes = limits.max_seconds / 60
    return f"songs up to {minutes:g} minutes, lyrics up to {limits.max_lyrics_words:,} words"


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
                engine_fields.PROVIDER_SPEC,
                *described_specs(
                    V1_SHAPES.values(),
                    [
                        FieldSpec(
                            "action", "What to do", "select", options=tuple((ACTION_LABELS[a], a) for a in ACTIONS)
                        ),
                        FieldSpec("mv", "Model", "select", options=model_choices(V1_MODELS, "")),
                        FieldSpec("title", "Title", "text", "a name for the song"),
                        FieldSpec(
                            "gender", "Voice", "select", options=(("any", ""), ("male", "male"), ("female", "female"))
                        ),
                        FieldSpec(
                            "style",
                            "Style",
                            "textarea",
                            "genre, mood, instruments — e.g. lo-fi piano, rainy night",
                            wide=True,
                        ),
                        FieldSpec("lyrics", "Lyrics", "textarea", "[Verse]\n…", wide=True),
                        FieldSpec("instrumental", "Instrumental", "checkbox"),
                        FieldSpec("continue_song_id", "Song to continue", "text", "id of a finished song"),
                        FieldSpec("continue_at", "Continue from (s)", "number", "seconds into the song"),
                        FieldSpec("audio_url", "Audio file URL", "text", "https://…"),
                        FieldSpec("singer_id", "Singer", "text", "a singer id"),
                    ],
                ),
                *engine_fields.ENGINE_SPECS,
            ],
        )

    def visible(self) -> list[str]:
        """The provider picker first; then the fields its engine takes (the service's: its action's shape)."""
        if engine_fields.is_engine(self.typed):
            return engine_fields.visible(self.typed)
        shape = shape_fields(self.typed["action"])
        return ["provider", *(name for name in self.specs if name == "action" or name in shape)]

    def required(self) -> set[str]:
        if engine_fields.is_engine(self.typed):
            return {"provider"}
        return {"action"} | {name for name, needed in shape_fields(self.typed["action"]).items() if needed}

    def disabled(self) -> set[str]:
        return {"lyrics"} if self.typed["instrumental"] else set()

    def counts(self) -> dict[str, Count | str]:
        if engine_fields.is_engine(self.typed):
            return {
                **engine_fields.count_words(self.typed),
                "title": Count.of(len(self.typed["title"]), 200, "characters"),
            }
        model = self.typed["mv"]
        limits = V1_MODELS.get(model) if model else None
        words_max = limits.max_lyrics_words if limits else max(m.max_lyrics_words for m in V1_MODELS.values())
        words = word_count(self.typed["lyrics"])
        return {
            "mv": limits_words(limits) if model else "the service picks the model",
            "title": Count.of(len(self.typed["title"]), TITLE_MAX, "characters"),
            "lyrics": "not sent: instrumental" if self.typed["instrumental"] else Count.of(words, words_max, "words"),
        }

    def request_values(self) -> dict[str, Any]:
        """The shown values; the service's song names no provider (its request is the service's, as before)."""
        values = super().request_values()
        if values.get("provider") == MUSICFUL:
            del values["provider"]
        return values

    def _build(self) -> Any:
        values = self.request_values()
        if engine_fields.is_engine(self.typed):
            return engine_fields.build(values)
        allow = self.client.settings.allow_unknown_models
        return build_generate_request(values, allow_unknown_models=allow)

    def cost_words(self) -> str:
        """An engine's song in US dollars; the service's in credits (the pane's words)."""
        if isinstance(self.request, EngineRequest):
            return engine_fields.cost_words(self.request)
        return super().cost_words()

    def _call(self, request: Any) -> list[str]:
        self.ids = list(self.client.generate(request).ids)  # an EngineRequest runs in the background
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
            described_specs(
                [V2Request],
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
            ),
        )

    def visible(self) -> list[str]:
        return [n for n in self.specs if self.typed["is_auto"] != 1 or n in self.AUTO_FIELDS]

    def required(self) -> set[str]:
        fields = V2Request.model_fields
        return {n for n in self.visible() if n in fields and fields[n].is_required()}

    def disabled(self) -> set[str]:
        return {"lyrics"} if self.typed["instrumental"] else set()

    def counts(self) -> dict[str, Count | str]:
        model = self.typed["model_version"]
        limits = V2_MODELS.get(model)
        words_max = limits.max_lyrics_words if limits else None
        words = word_count(self.typed["lyrics"])
        return {
            "model_version": limits_words(limits),
            "prompt": Count.of(len(self.typed["prompt"]), PROMPT_MAX, "characters"),
            "title": Count.of(len(self.typed["title"]), TITLE_MAX, "characters"),
            "lyrics": Count.of(words, words_max, "words"),
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
            studio,
            described_specs(
                [LyricsRequest], [FieldSpec("prompt", "What about", "textarea", "what the lyrics are about", wide=True)]
            ),
        )
        self.result: LyricsResult | None = None

    def required(self) -> set[str]:
        return {"prompt"}

    def counts(self) -> dict[str, Count | str]:
        return {"prompt": Count.of(len(self.typed["prompt"]), PROMPT_MAX, "characters")}

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
            self._studio.key_changed()
            return None
        self.info, self.checked = info, datetime.now()
        self.problem = self.error = ""
        self._studio.key_changed()
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

    _esm, _css = front_end("studio")
    tab = traitlets.Unicode("song").tag(sync=True)
    tabs = traitlets.List().tag(sync=True)
    panes = traitlets.Dict().tag(sync=True)
    key = traitlets.Dict().tag(sync=True)
    batch_view = anywidget.WidgetTrait().tag(sync=True)
    """The Batch tab's progress view, drawn inside the tab under its form (a child view)."""
    library_view = anywidget.WidgetTrait().tag(sync=True)
    """The Library tab's view, drawn inside the tab (a child view)."""


class Studio(TextRepr, w.VBox):
    """The studio: one anywidget with every tab (the Batch and Library views inside theirs), one watcher.

    Python API: `studio.song`, `.v2`, `.lyrics`, `.batch` (panes with `set_values`, `submit`, `touch`),
    `studio.library`, `studio.select("key")`, `studio.refresh_key()`, `studio.watcher`.
    """

    def __init__(
        self, client: MusicClient | None = None, *, confirm: bool | None = None, watcher: TaskWatcher | None = None
    ) -> None:
        """`watcher=` makes this studio send into an existing watcher (a card's extend does that)."""
        if client is None:
            from ..workspace.session import get_client

            client = get_client()
        self._client = client
        self._confirm = confirm
        self.key_info = KeyPane(self)
        self._sync_lock = threading.RLock()
        self._key_checking = False
        self._view = StudioView()
        self._view.add_class("ipymusicgen-studio-view")
        self._owns_watcher = watcher is None
        if watcher is None:
            watcher = TaskWatcher(client=client)
            watcher.confirm_required = confirm  # a card's concat is paid: it confirms as the panes do
        self.watcher = watcher
        self.song = SongPane(self)
        self.v2 = V2Pane(self)
        self.lyrics = LyricsPane(self)
        self.batch = BatchPane(self)
        self._panes: dict[str, Pane] = {"song": self.song, "v2": self.v2, "lyrics": self.lyrics, "batch": self.batch}
        # the request sent goes with its songs: a failed call's Retry sends it again
        self.song.on_submitted(lambda ids: self.watcher.add(ids, request=_retryable(self.song.request)))
        self.v2.on_submitted(lambda songs: self.watcher.add(songs, v2=True, request=self.v2.request))
        self.watcher.use_forms(self._pane_for_extend)  # a card's extend opens this studio's pane
        self.library = LibraryView(client=client, watcher=self.watcher)
        self.library.confirm_required = confirm  # its cards' WAV / MP4 are paid: they ask as the panes do
        self._view.batch_view = self.batch.view
        self._view.library_view = self.library
        self._view.tabs = [
            {"id": t, "title": title, "blurb": TAB_BLURBS.get(t, ""), "hint": TAB_HINTS.get(t, "")}
            for t, title in zip(TAB_IDS, TAB_TITLES, strict=True)
        ]
        for pane in self._panes.values():
            pane.validate()
        self._view.panes = {name: pane.state() for name, pane in self._panes.items()}
        self._view.key = self.key_info.state()
        self._view.on_msg(self._on_msg)
        self._view.observe(self._tab_changed, names="tab")
        super().__init__([self._view, self.watcher])
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
        for widget in (self.batch.view, self.library):
            widget.close()
        self._view.close()
        super().close()

    # -- plumbing -----------------------------------------------------------------------------------------

    @property
    def confirm(self) -> bool | None:
        """The caller's confirm choice (`studio(confirm=...)`): None follows the key; every paid control keeps it."""
        return self._confirm

    @property
    def credits_left(self) -> int | None:
        """The credits left as last read from the key (None until read)."""
        return self.key_info.credits

    def pane_changed(self, pane: Pane, *, revalidate: bool = True) -> None:
        """A pane's state changed: draw it again (revalidated first unless the pane just did)."""
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

    def pane_sent(self, pane: Pane, _result: Any) -> None:
        """A pane sent its request: the credits left are read again for the cost lines."""
        if pane.paid and self.key_info.info is not None:
            self.refresh_key()

    def _pane_for_extend(self, v2: bool) -> Pane:
        self.select("v2" if v2 else "song")
        return self.v2 if v2 else self.song

    def _tab_changed(self, change: dict[str, Any]) -> None:
        if change["new"] == "batch":
            self.batch.focus("source")  # a DataFrame made since is offered at once
        elif change["new"] == "library":
            self.library.refresh(everything=True)  # songs made since the studio opened are in it
        if change["new"] == "key" and self.key_info.info is None:
            self.refresh_key()  # read lazily: only when someone looks

    def offers(self) -> Offers:
        """What the studio shows now (`offered`): every tab's button, and on the shown tab: its pane's shown fields
        (typed into only when not disabled; targets "form/field"), Submit while it may be pressed, the confirm step's
        buttons and Dismiss while drawn, "Use in a song" once lyrics are written, the Key tab's "Check again"."""
        tab = self.tab
        found = controls("ready") | {("tab", t) for t in TAB_IDS}
        if tab == "key":
            found |= controls("refresh_key")
        state = self._view.panes.get(tab)
        if not isinstance(state, dict):
            return found
        if tab == "lyrics" and state.get("lyrics"):
            found |= controls("use_lyrics")
        for field in state.get("fields", ()):
            if field.get("shown"):
                name = f"{tab}/{field['name']}"
                found |= {("touch", name), ("focus", name)}
                if not field.get("disabled"):
                    found.add(("input", name))
        if state.get("confirm"):
            found |= {("confirm", tab), ("cancel", tab)}
        elif state.get("can_submit"):
            found.add(("submit", tab))
        if state.get("error"):
            found.add(("dismiss", tab))
        return found

    @staticmethod
    def _target(content: dict[str, Any]) -> Any:
        """What an intent names: a tab, a pane ("song"), a pane's field ("song/style"), or nothing ("")."""
        kind, form, name = content.get("kind"), content.get("form", ""), content.get("name")
        if kind == "tab":
            return content.get("tab")
        if not isinstance(form, str):
            return None
        if kind in ("input", "touch", "focus"):
            return f"{form}/{name}" if isinstance(name, str) and "/" not in form else None
        return form

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if not allows(self.offers(), content.get("kind"), self._target(content)):  # not shown now: nothing done
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
        elif kind == "focus":
            pane.focus(str(content.get("name")))
        elif kind == "dismiss":
            pane.dismiss()
        elif kind == "submit":
            pane.submit(confirmed=False)
        elif kind == "confirm" and pane.confirm:  # only a confirm step Python showed, for the request it priced
            pane.confirm_priced()
        elif kind == "cancel":
            pane.cancel()

    def key_changed(self) -> None:
        """The key was read again: the Key tab and every cost line say the new credits."""
        self._view.key = self.key_info.state()
        for pane in self._panes.values():
            self.pane_changed(pane, revalidate=False)  # the cost line says the credits left

    def __repr__(self) -> str:
        tabs = " | ".join(t["title"] for t in self._view.tabs)
        return f"Studio [{tabs}] (tab: {self.tab})\n{self._panes.get(self.tab, self.song)!r}\n{self.watcher!r}"


def _retryable(request: Any) -> Any:
    """What a failed card's Retry may send again: never an engine's song, which may have been charged."""
    return None if isinstance(request, EngineRequest) else request


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "—"


def studio(client: MusicClient | None = None, *, confirm: bool | None = None) -> Studio:
    """Open the studio over the session's workspace (its shared client, unless one is given): Song, v2, Lyrics,
    Batch, Library and Key tabs above one task watcher. `confirm`: True asks before every paid control, False never
    does, None asks with a key that may cost money."""
    return Studio(client, confirm=confirm)


def extend_studio(watcher: TaskWatcher) -> Studio:
    """A studio for a lone watcher's extend: its panes send into that watcher (what builders of a lone watcher
    pass as its `open_extend_studio`; the watcher cannot import the studio, which sits above it)."""
    return Studio(watcher.client, confirm=watcher.confirm_required, watcher=watcher)


__all__ = [
    "TAB_IDS",
    "TAB_TITLES",
    "LyricsPane",
    "Pane",
    "SongPane",
    "Studio",
    "StudioView",
    "V2Pane",
    "extend_studio",
    "studio",
]
