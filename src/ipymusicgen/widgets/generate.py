"""`GenerateForm`: the v1 generate request as a form whose fields follow the chosen action."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as w

from ..client.faces import MusicClient
from ..models.schema import ACTIONS, TITLE_MAX, V1_MODELS, ModelLimits, build_generate_request, shape_fields, word_count
from .form import FieldRow, Form

DEFAULT_MODEL_LABEL = "service default"
FIELD_ORDER = (
    "mv",
    "instrumental",
    "style",
    "lyrics",
    "title",
    "gender",
    "continue_at",
    "continue_song_id",
    "audio_url",
    "singer_id",
)


def limits_text(limits: ModelLimits | None) -> str:
    """'up to 8 min, 5,000 lyrics words' for a model, or a note that the limits are not known."""
    if limits is None:
        return "limits unknown"
    minutes = limits.max_seconds / 60
    return f"up to {minutes:g} min, {limits.max_lyrics_words:,} lyrics words"


def model_options(models: Mapping[str, ModelLimits]) -> list[tuple[str, str]]:
    """Dropdown options: each model with its limits, after a 'service default' choice ('')."""
    return [(DEFAULT_MODEL_LABEL, ""), *((f"{name} ({limits_text(lim)})", name) for name, lim in models.items())]


def lyrics_limit(model: str, models: Mapping[str, ModelLimits]) -> int | None:
    """The lyrics word limit shown for the chosen model; the largest one for the service default."""
    if not model:
        return max(m.max_lyrics_words for m in models.values())
    limits = models.get(model)
    return limits.max_lyrics_words if limits else None


class GenerateForm(Form[list[str]]):
    """A v1 generate request: pick an action and see exactly the fields of its shape.

    Validation is the request models' (`build_generate_request`); the form only shows their problems
    next to the fields. Submitting calls `client.generate(...)` and hands the new task ids to callbacks.
    """

    _mode_field = "action"
    _model_field = "mv"

    def __init__(self, client: MusicClient | None = None, **values: Any) -> None:
        self._action = w.Dropdown(options=list(ACTIONS), value="auto")
        self._instrumental = w.Checkbox(value=False, indent=False)
        controls: dict[str, w.ValueWidget] = {
            "mv": w.Dropdown(options=model_options(V1_MODELS), value=""),
            "instrumental": self._instrumental,
            "style": w.Textarea(placeholder="genre, mood, instruments — e.g. lo-fi piano, rainy night", rows=2),
            "lyrics": w.Textarea(placeholder="[Verse]\n…", rows=6),
            "title": w.Text(),
            "gender": w.Dropdown(options=[("any", ""), ("male", "male"), ("female", "female")], value=""),
            "continue_at": w.Text(placeholder="seconds into the song"),
            "continue_song_id": w.Text(),
            "audio_url": w.Text(placeholder="https://…"),
            "singer_id": w.Text(placeholder="from generate-vibe"),
        }
        counted = {"mv", "lyrics", "title"}
        self._rows = {"action": FieldRow("action", self._action)}
        self._rows.update({name: FieldRow(name, controls[name], count=name in counted) for name in FIELD_ORDER})
        self._rows["action"].set_required(True)
        super().__init__(client, "Generate", list(self._rows.values()))
        self._observe_rows()
        self._action.observe(lambda _change: self._apply_action(), names="value")
        self._instrumental.observe(lambda _change: self._apply_instrumental(), names="value")
        self._apply_action()
        self._apply_instrumental()
        if values:
            self.set_values(**values)
        self._changed()

    # -- public API ------------------------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        """The request as it stands: the action and the non-empty fields of its shape."""
        action = self._action.value
        values: dict[str, Any] = {"action": action}
        for name in shape_fields(action):
            if name == "lyrics" and self._instrumental.value:
                continue  # pure music: the service ignores lyrics, so they are not sent
            value = self._value_of(name)
            if value is not None and value != "":
                values[name] = value
        return values

    # -- form plumbing ---------------------------------------------------------------------------------

    def _build(self) -> Any:
        return build_generate_request(self.values(), allow_unknown_models=self._client.settings.allow_unknown_models)

    def _call_service(self, request: Any) -> list[str]:
        return list(self._client.generate(request).ids)

    def _describe(self, result: list[str]) -> str:
        return f"submitted {len(result)} task(s): {', '.join(result)}"

    def _apply_action(self) -> None:
        shape = shape_fields(self._action.value)
        for name in FIELD_ORDER:
            row = self._rows[name]
            row.shown = name in shape
            row.set_required(shape.get(name, False))
        self._changed()

    def _apply_instrumental(self) -> None:
        self._rows["lyrics"].control.disabled = bool(self._instrumental.value)
        self._changed()

    def _update_counts(self) -> None:
        model = self._rows["mv"].control.value
        self._rows["mv"].set_count(limits_text(V1_MODELS.get(model)) if model else "limits of the service default")
        title = self._rows["title"].control.value
        self._rows["title"].set_count(f"{len(title)} / {TITLE_MAX}")
        limit = lyrics_limit(model, V1_MODELS)
        words = word_count(self._rows["lyrics"].control.value)
        suffix = " (instrumental: not sent)" if self._instrumental.value else ""
        self._rows["lyrics"].set_count(f"{words:,} / {limit:,} words{suffix}" if limit else f"{words:,} words")

    def __repr__(self) -> str:
        return self._short_repr("GenerateForm", self.values())
