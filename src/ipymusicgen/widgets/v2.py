"""`V2Form`: the v2 submit request; `is_auto` switches between description and custom mode."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from ..client.faces import MusicClient
from ..models.schema import PROMPT_MAX, TITLE_MAX, V2_MODELS, V2Request, build_v2_request, word_count
from .form import FieldRow, Form
from .generate import limits_text, lyrics_limit

FIELD_ORDER = (
    "is_auto",
    "model_version",
    "prompt",
    "lyrics",
    "title",
    "instrumental",
    "continue_at",
    "continue_song_id",
)
AUTO_FIELDS = frozenset({"is_auto", "model_version", "prompt"})
"""With is_auto=1 the service applies only these (music-service.md, v2 rule 1)."""


class V2Form(Form[list[str]]):
    """A v2 song: description mode (is_auto=1: prompt and model only) or custom mode (all fields).

    Validation is `build_v2_request`'s; submitting calls `client.submit_v2(...)` and hands the new
    song ids to callbacks.
    """

    _mode_field = "is_auto"
    _model_field = "model_version"

    def __init__(self, client: MusicClient | None = None, **values: Any) -> None:
        models = list(V2_MODELS)
        self._is_auto = w.ToggleButtons(options=[("description", 1), ("custom", 0)], value=1)
        self._instrumental = w.Checkbox(value=False, indent=False)
        controls: dict[str, w.ValueWidget] = {
            "is_auto": self._is_auto,
            "model_version": w.Dropdown(
                options=[(f"{name} ({limits_text(V2_MODELS[name])})", name) for name in models], value=models[0]
            ),
            "prompt": w.Textarea(placeholder="what the song should sound like", rows=2),
            "lyrics": w.Textarea(placeholder="[Verse]\n…", rows=6),
            "title": w.Text(),
            "instrumental": self._instrumental,
            "continue_at": w.Text(placeholder="seconds (to extend a song)"),
            "continue_song_id": w.Text(placeholder="song to extend"),
        }
        counted = {"model_version", "prompt", "lyrics", "title"}
        self._rows = {name: FieldRow(name, controls[name], count=name in counted) for name in FIELD_ORDER}
        required = {name: field.is_required() for name, field in V2Request.model_fields.items()}
        for name, row in self._rows.items():
            row.set_required(required.get(name, False))
        super().__init__(client, "Submit (v2)", list(self._rows.values()))
        self._observe_rows()
        self._is_auto.observe(lambda _change: self._apply_mode(), names="value")
        self._instrumental.observe(lambda _change: self._apply_instrumental(), names="value")
        self._apply_mode()
        self._apply_instrumental()
        if values:
            self.set_values(**values)
        self._changed()

    def values(self) -> dict[str, Any]:
        """The request as it stands: with is_auto=1 only the fields the service applies."""
        values: dict[str, Any] = {}
        for name in FIELD_ORDER:
            if not self._rows[name].shown or (name == "lyrics" and self._instrumental.value):
                continue
            value = self._value_of(name)
            if value is not None and value != "":
                values[name] = value
        return values

    def _build(self) -> Any:
        return build_v2_request(self.values(), allow_unknown_models=self._client.settings.allow_unknown_models)

    def _call_service(self, request: Any) -> list[str]:
        return [song.id for song in self._client.submit_v2(request)]

    def _describe(self, result: list[str]) -> str:
        return f"submitted {len(result)} song(s): {', '.join(result)}"

    def _apply_mode(self) -> None:
        auto = self._is_auto.value == 1
        for name, row in self._rows.items():
            row.shown = not auto or name in AUTO_FIELDS
        self._changed()

    def _apply_instrumental(self) -> None:
        self._rows["lyrics"].control.disabled = bool(self._instrumental.value)
        self._changed()

    def _update_counts(self) -> None:
        model = self._rows["model_version"].control.value
        self._rows["model_version"].set_count(limits_text(V2_MODELS.get(model)))
        self._rows["prompt"].set_count(f"{len(self._rows['prompt'].control.value)} / {PROMPT_MAX}")
        self._rows["title"].set_count(f"{len(self._rows['title'].control.value)} / {TITLE_MAX}")
        limit = lyrics_limit(model, V2_MODELS)
        words = word_count(self._rows["lyrics"].control.value)
        self._rows["lyrics"].set_count(f"{words:,} / {limit:,} words" if limit else f"{words:,} words")

    def __repr__(self) -> str:
        return self._short_repr("V2Form", self.values())
