"""The studio's provider picker: which fields the Song tab shows for each engine, and its request there.

The capability table (`models.providers.CAPABILITIES`) decides: a Lyria 3 clip has no length to choose, a seed
shows only where the API takes one, word timestamps only where the engine returns them. The request is the same
`EngineRequest` the client and the magics build, so a refusal is the table's one line, under its field; the price
is in US dollars (`models.dollar_prices`), never credits.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from ..errors import FieldProblem, RequestValidationError
from ..models.dollar_prices import DollarPriceError, estimate
from ..models.providers import CAPABILITIES, DEFAULT_MODELS, ELEVENLABS, LYRIA, MUSICFUL, EngineRequest, capability
from ..models.providers import build_engine_request as build_request
from .pane import FieldSpec

PROVIDER_CHOICES = (("the service", MUSICFUL), ("ElevenLabs Music", ELEVENLABS), ("Google Lyria 3", LYRIA))
MODEL_FIELDS = MappingProxyType({ELEVENLABS: "model_elevenlabs", LYRIA: "model_lyria"})
"""Each engine's model picker (a select of its own: the options follow the provider)."""
ENGINE_ONLY = ("seconds", "seed", "timestamps", *MODEL_FIELDS.values())
"""Fields the service's song never shows."""


def _models(provider: str) -> tuple[tuple[str, str], ...]:
    default = DEFAULT_MODELS[provider]
    names = [default, *(m for p, m in CAPABILITIES if p == provider and m != default)]
    return tuple((name, name) for name in names)


SUNG = "Ask for each word's time: the card marks the line being sung."
PROVIDER_SPEC = FieldSpec(
    "provider",
    "Engine",
    "select",
    options=PROVIDER_CHOICES,
    hint="provider",
    description="Who makes the song: the service (credits), or ElevenLabs or Lyria (US dollars per song).",
)
ENGINE_SPECS = (
    FieldSpec("model_elevenlabs", "Model", "select", options=_models(ELEVENLABS), hint="model_id"),
    FieldSpec("model_lyria", "Model", "select", options=_models(LYRIA), hint="model"),
    FieldSpec(
        "seconds",
        "Length (s)",
        "number",
        "seconds",
        description="How long the song is, where the engine takes a length.",
    ),
    FieldSpec("seed", "Seed", "number", "a whole number", description="The same seed and plan make the same song."),
    FieldSpec(
        "timestamps",
        "Word timestamps",
        "checkbox",
        hint="with_timestamps",
        description="Ask for each word's time: the card marks the line being sung.",
    ),
)


def is_engine(typed: dict[str, Any]) -> bool:
    return typed.get("provider") in MODEL_FIELDS


def visible(typed: dict[str, Any]) -> list[str]:
    """The Song tab's fields for an engine, as its capability row allows."""
    provider = typed["provider"]
    model_field = MODEL_FIELDS[provider]
    cap = capability(provider, typed.get(model_field) or None)
    shown = ["provider", model_field, "title", "style"]
    shown += ["lyrics"] if cap.lyrics else []
    shown += ["instrumental"] if cap.instrumental else []
    shown += ["seconds"] if cap.fixed_seconds is None else []
    shown += ["seed"] if cap.seed != "never" else []
    shown += ["timestamps"] if cap.timestamps else []
    return shown


def count_words(typed: dict[str, Any]) -> dict[str, str]:
    provider = typed["provider"]
    cap = capability(provider, typed.get(MODEL_FIELDS[provider]) or None)
    return {"seconds": cap.seconds_meaning, "provider": "priced in US dollars"}


RENAMED = MappingProxyType({"prompt": "style", "model": "", "extend": ""})


def build(values: dict[str, Any]) -> EngineRequest:
    """The shown values as an `EngineRequest`; a refusal names the studio's field (style, not prompt)."""
    provider = values["provider"]
    fields: dict[str, Any] = {
        "provider": provider,
        "model": values.get(MODEL_FIELDS[provider]),
        "prompt": values.get("style"),
        "lyrics": values.get("lyrics"),
        "title": values.get("title"),
        "seconds": values.get("seconds"),
        "seed": values.get("seed"),
        "instrumental": bool(values.get("instrumental")),
        "timestamps": bool(values.get("timestamps")),
    }
    try:
        return build_request(**fields)
    except RequestValidationError as exc:
        model_field = MODEL_FIELDS[provider]
        problems = [
            FieldProblem(RENAMED.get(p.field, p.field) or (model_field if p.field == "model" else ""), p.message)
            for p in exc.problems
        ]
        raise RequestValidationError(problems) from None


def cost_words(request: EngineRequest) -> str:
    """'costs about $0.75 (estimate, elevenlabs music_v1)': dollars, before anything is sent."""
    try:
        price = estimate(request)
    except DollarPriceError as exc:  # a bad price table: say so; a paid step still asks first
        return f"cost unknown ({exc})"
    return f"costs about ${price:.2f} (estimate, {request.provider} {request.model_name})"
