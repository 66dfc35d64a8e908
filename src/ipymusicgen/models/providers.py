"""The engines a song can be made by, and what each field means there: one capability table per provider+model.

`musicful` is the service of the spec (v1 and v2; its own models in `schema.py`). `elevenlabs` (ElevenLabs
Music) and `lyria` (Google's Lyria 3 through the Gemini API) answer the create call with the audio itself.
`EngineRequest` validates a song for one of those two against its row of `CAPABILITIES`: a request the engine
cannot honour (a Lyria clip of 90 s, ElevenLabs below 3 s or above 600 s, an extend on Lyria, a seed where the
API refuses one) is refused before anything is sent, in one line naming the provider and the field. The facts
behind each bound are cited, with the date they were read, in docs/providers.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import FieldProblem, RequestValidationError

MUSICFUL = "musicful"
ELEVENLABS = "elevenlabs"
LYRIA = "lyria"
PROVIDERS = (MUSICFUL, ELEVENLABS, LYRIA)
"""Provider ids; `musicful` (the service of the spec) is the default."""
SYNCHRONOUS = (ELEVENLABS, LYRIA)
"""The engines that answer the create call with the audio itself (no task to poll)."""


@dataclass(frozen=True)
class Capability:
    """What one provider's model can do. `seconds`: the lengths it takes (None: it takes no length)."""

    provider: str
    model: str
    min_seconds: float | None
    max_seconds: float | None
    fixed_seconds: float | None = None
    """A model that always makes this length (Lyria 3 Clip: 30 s); asking any other is refused."""
    seed: Literal["never", "with_lyrics", "always"] = "never"
    """When the API takes a seed: ElevenLabs refuses one beside a plain prompt (only with a composition plan)."""
    instrumental: bool = True
    lyrics: bool = True
    extend: bool = False
    timestamps: bool = False
    """Whether the engine can return word timestamps (ElevenLabs' detailed variant)."""
    seconds_meaning: str = ""

    def describe(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "seconds": self.seconds_meaning,
            "seed": self.seed,
            "instrumental": self.instrumental,
            "lyrics": self.lyrics,
            "extend": self.extend,
            "timestamps": self.timestamps,
        }


CAPABILITIES: Mapping[tuple[str, str], Capability] = MappingProxyType(
    {
        (ELEVENLABS, "music_v1"): Capability(
            ELEVENLABS,
            "music_v1",
            3.0,
            600.0,
            seed="with_lyrics",
            timestamps=True,
            seconds_meaning="music_length_ms (3 s to 600 s); with lyrics, split evenly over the plan's sections",
        ),
        **{  # the section plan (MusicPrompt) is music_v1's: no lyrics plan here yet
            (ELEVENLABS, model): Capability(
                ELEVENLABS,
                model,
                3.0,
                600.0,
                lyrics=False,
                timestamps=True,
                seconds_meaning="music_length_ms (3 s to 600 s)",
            )
            for model in ("music_v2", "music_v2_5")
        },
        (LYRIA, "lyria-3-clip-preview"): Capability(
            LYRIA,
            "lyria-3-clip-preview",
            30.0,
            30.0,
            fixed_seconds=30.0,
            seconds_meaning="always a 30 s clip",
        ),
        (LYRIA, "lyria-3-pro-preview"): Capability(
            LYRIA,
            "lyria-3-pro-preview",
            30.0,
            180.0,
            seconds_meaning="asked for in the prompt (the model decides; up to about 3 minutes)",
        ),
    }
)
DEFAULT_MODELS = MappingProxyType({ELEVENLABS: "music_v1", LYRIA: "lyria-3-clip-preview"})
DEFAULT_STANZA_SECONDS = 30.0
"""A stanza's length in an ElevenLabs composition plan when lyrics come without `seconds`."""


def refuse(provider: str, field: str, message: str) -> RequestValidationError:
    """The one-line refusal: `seconds: lyria (lyria-3-clip-preview) always makes 30 s clips (got 90)...`."""
    return RequestValidationError([FieldProblem(field, f"{provider} {message}; nothing was sent")])


def check_provider(value: Any) -> str:
    provider = (value or MUSICFUL) if isinstance(value, str | type(None)) else value
    if not isinstance(provider, str) or provider.strip().lower() not in PROVIDERS:
        shown = str(provider)[:40]
        raise RequestValidationError(
            [FieldProblem("provider", f"must be one of {', '.join(PROVIDERS)} (got {shown!r}); nothing was sent")]
        )
    return provider.strip().lower()


def capability(provider: str, model: str | None) -> Capability:
    name = model or DEFAULT_MODELS[provider]
    found = CAPABILITIES.get((provider, name))
    if found is None:
        known = ", ".join(m for p, m in CAPABILITIES if p == provider)
        raise refuse(provider, "model", f"has no model {name[:60]!r} (known: {known})")
    return found


def stanzas(lyrics: str) -> list[list[str]]:
    """The lyrics' stanzas (blocks between blank lines), each its non-empty lines."""
    blocks: list[list[str]] = [[]]
    for raw in lyrics.splitlines():
        line = raw.strip()
        if not line:
            if blocks[-1]:
                blocks.append([])
            continue
        blocks[-1].append(line)
    return [b for b in blocks if b]


class EngineRequest(BaseModel):
    """A song for a synchronous engine, checked against its capability row before anything is sent."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # %load_ext stays cheap

    provider: Literal["elevenlabs", "lyria"]
    model: str | None = Field(default=None, description="The engine's model id; its default when not given.")
    prompt: str = Field(default="", max_length=4000, description="What the song should sound like (style, mood).")
    lyrics: str | None = Field(default=None, max_length=20000, description="Lyrics; stanzas split by blank lines.")
    title: str | None = Field(default=None, max_length=200)
    seconds: float | None = Field(default=None, description="The song's length in seconds, where the engine takes one.")
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    instrumental: bool = False
    timestamps: bool = Field(default=False, description="Ask for word timestamps (ElevenLabs' detailed answer).")
    output_format: str | None = Field(default=None, max_length=40, pattern=r"^[a-z0-9_]+$")
    extend: str | None = Field(default=None, description="A song id to extend: no synchronous engine can.")

    @property
    def capability(self) -> Capability:
        return capability(self.provider, self.model)

    def to_payload(self) -> dict[str, Any]:
        """The request as a batch row records it (its provider included): what a re-run compares."""
        return self.model_dump(exclude_none=True)

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODELS[self.provider]

    @property
    def length_seconds(self) -> float | None:
        """The length the song will have, as far as it is known before it is made (for prices and the sandbox)."""
        cap = self.capability
        if cap.fixed_seconds is not None or self.seconds is not None:
            return cap.fixed_seconds or self.seconds
        if cap.provider == ELEVENLABS and self.lyrics and self.lyrics.strip():  # a plan: its stanzas' length
            return DEFAULT_STANZA_SECONDS * len(stanzas(self.lyrics))
        return None


def build_engine_request(**fields: Any) -> EngineRequest:
    """An `EngineRequest` from keyword fields, every refusal one line naming the provider and the field."""
    provider = check_provider(fields.get("provider"))
    if provider not in SYNCHRONOUS:
        raise RequestValidationError([FieldProblem("provider", f"{provider} is not a synchronous engine")])
    fields = {k: v for k, v in fields.items() if v is not None}
    fields["provider"] = provider
    if "style" in fields and "prompt" not in fields:
        fields["prompt"] = fields.pop("style")
    try:
        request = EngineRequest.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "request"
        text = first["msg"] if first["type"] != "extra_forbidden" else "is not a field this engine takes"
        raise refuse(provider, field, text) from None
    check_capability(request)
    return request


def check_capability(request: EngineRequest) -> None:
    cap = request.capability
    name = f"{cap.provider} ({cap.model})"
    seconds = request.seconds
    if request.extend is not None and not cap.extend:
        raise refuse(name, "extend", "cannot extend a song")
    if seconds is not None:
        if isinstance(seconds, bool) or not math.isfinite(seconds):
            raise refuse(name, "seconds", f"takes a finite number of seconds (got {seconds!r})")
        if cap.fixed_seconds is not None and seconds != cap.fixed_seconds:
            raise refuse(name, "seconds", f"always makes {cap.fixed_seconds:g} s clips (got {seconds:g})")
        if cap.min_seconds is not None and seconds < cap.min_seconds:
            raise refuse(name, "seconds", f"makes songs of {cap.min_seconds:g} s or more (got {seconds:g})")
        if cap.max_seconds is not None and seconds > cap.max_seconds:
            raise refuse(name, "seconds", f"makes songs of at most {cap.max_seconds:g} s (got {seconds:g})")
    if request.lyrics is not None and request.lyrics.strip():
        if not cap.lyrics:
            raise refuse(name, "lyrics", "takes no lyrics")
        if request.instrumental:
            raise refuse(name, "instrumental", "cannot make an instrumental song from lyrics")
    has_lyrics = bool(request.lyrics and request.lyrics.strip())
    if request.seed is not None:
        if cap.seed == "never":
            raise refuse(name, "seed", "takes no seed")
        if cap.seed == "with_lyrics" and not has_lyrics:
            raise refuse(name, "seed", "takes a seed only with lyrics (a composition plan), not beside a prompt")
    if request.timestamps and not cap.timestamps:
        raise refuse(name, "timestamps", "returns no word timestamps")
    if not request.prompt.strip() and not has_lyrics:
        raise refuse(name, "prompt", "needs a prompt (style) or lyrics")
    if cap.provider == ELEVENLABS and has_lyrics:
        _check_plan_fits(name, request)


PLAN_SECTION_SECONDS = (3.0, 120.0)
"""ElevenLabs' bounds of one composition plan section (SongSection.duration_ms: 3,000 to 120,000 ms)."""
PLAN_MAX_LINES = 30
PLAN_MAX_LINE_CHARS = 200


def _check_plan_fits(name: str, request: EngineRequest) -> None:
    """One section per stanza: each must fit the plan's bounds (lines per section, characters per line, length)."""
    blocks = stanzas(request.lyrics or "")
    for number, block in enumerate(blocks, 1):
        if len(block) > PLAN_MAX_LINES:
            raise refuse(name, "lyrics", f"takes at most {PLAN_MAX_LINES} lines per stanza (stanza {number})")
        if any(len(line) > PLAN_MAX_LINE_CHARS for line in block):
            raise refuse(name, "lyrics", f"takes lines of at most {PLAN_MAX_LINE_CHARS} characters (stanza {number})")
    seconds = request.seconds if request.seconds is not None else DEFAULT_STANZA_SECONDS * len(blocks)
    longest = request.capability.max_seconds
    if longest is not None and seconds > longest:  # 30 s a stanza when no length is given: too many stanzas
        raise refuse(name, "lyrics", f"makes songs of at most {longest:g} s: {len(blocks)} stanzas of 30 s are longer")
    each = seconds / len(blocks)
    low, high = PLAN_SECTION_SECONDS
    if not low <= each <= high:
        raise refuse(
            name,
            "seconds",
            f"gives each stanza {low:g} s to {high:g} s: {seconds:g} s over {len(blocks)} stanza(s) is "
            f"{each:.3g} s each",
        )
