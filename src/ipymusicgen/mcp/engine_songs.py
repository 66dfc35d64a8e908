"""The agent server's songs on a synchronous engine (ElevenLabs Music, Lyria) and prices in dollars.

`generate_song(provider=..., seconds=...)`: the tool's fields become an `EngineRequest`, checked against the
capability table (`models.providers`) before anything is sent, every refusal one line naming the provider and the
field. An engine's song is priced in US dollars (`models.dollar_prices`); the service's calls in credits, and in
dollars too where the user set a credit rate. Consent shows the dollars first, then the provider's own unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import FieldProblem, MusicGenError, RequestValidationError
from ..models import dollar_prices
from ..models.providers import MUSICFUL, EngineRequest, build_engine_request, check_provider

CENT = Decimal("0.01")
NOT_ENGINE_FIELDS = ("action",)
"""generate_song's own fields that mean nothing to an engine when left at their defaults."""


@dataclass(frozen=True)
class EngineSong:
    """An engine's song as the desk plans it: the checked request, shown and hashed by its payload."""

    engine: EngineRequest

    @property
    def provider(self) -> str:
        return self.engine.provider

    def to_payload(self) -> dict[str, Any]:
        request = self.engine
        payload = {
            "provider": request.provider,
            "model": request.model_name,
            "seconds": request.seconds,
            "style": request.prompt or None,
            "title": request.title,
            "lyrics": request.lyrics,
            "seed": request.seed,
            "instrumental": request.instrumental or None,
        }
        return {k: v for k, v in payload.items() if v is not None}

    def describe(self) -> str:
        """What will be made, in the server's words: `one elevenlabs (music_v1) song of 90 s`."""
        seconds = self.engine.length_seconds
        length = f" of {seconds:g} s" if seconds is not None else " (its length chosen by the engine)"
        return f"one {self.provider} ({self.engine.model_name}) song{length}"


def provider_of(fields: dict[str, Any]) -> str:
    """The provider the tool's `provider` names (musicful when none), or one line naming the field."""
    return check_provider(fields.get("provider"))


def engine_song(provider: str, fields: dict[str, Any]) -> EngineSong:
    """The tool's fields as a checked engine song; a field the engine cannot honour is refused (nothing sent)."""
    values = {k: v for k, v in fields.items() if v is not None and k not in NOT_ENGINE_FIELDS and k != "provider"}
    if fields.get("action") not in (None, "auto", "custom"):
        raise RequestValidationError([FieldProblem("action", f"{provider} makes new songs only; nothing was sent")])
    if "instrumental" in values and not isinstance(values["instrumental"], bool):
        values["instrumental"] = bool(values["instrumental"])
    return EngineSong(build_engine_request(provider=provider, **values))


def no_seconds(provider: str) -> RequestValidationError:
    return RequestValidationError(
        [FieldProblem("seconds", f"{provider} takes no length (its models decide it); nothing was sent")]
    )


def dollars_of(kind: str, request: Any, credits: int) -> Decimal | None:
    """A call's price in dollars: an engine's from the price table (a bad table refuses: `DollarPriceError`), a
    service call's only where the user set a credit rate (else None: shown in credits only)."""
    if kind == "engine":
        return dollar_prices.estimate(request.engine).quantize(CENT)
    try:
        return dollar_prices.service_dollars(credits).quantize(CENT)
    except MusicGenError:  # no MUSICGEN_CREDIT_DOLLARS: the credits alone
        return None


def price_view(kind: str, credits: int, dollars: Decimal | None) -> dict[str, Any]:
    """The card's price: `dollars` first; `amount` and `unit` the provider's own (an engine's own unit is USD)."""
    if kind == "engine":
        return {"amount": str(dollars), "unit": "USD", "dollars": str(dollars)}
    if dollars is None:
        return {"amount": credits, "unit": "credits", "dollars": None, "dollars_note": "set MUSICGEN_CREDIT_DOLLARS to "
                "see dollars"}  # fmt: skip
    return {"amount": credits, "unit": "credits", "dollars": str(dollars)}


__all__ = ["MUSICFUL", "EngineSong", "dollars_of", "engine_song", "no_seconds", "price_view"]
