"""One home per engine's wire rules (paths, auth header, request and answer shapes, what is paid, what may have
been charged, how an echoed key is scrubbed), used alike by the client, the gateway and the sandbox.

`wire` holds what every engine shares; `musicful` the service of the spec, `elevenlabs` ElevenLabs Music and
`lyria` Google's Lyria 3 through the Gemini API. `engine(provider)` finds one by its provider id.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from . import elevenlabs, lyria, musicful
from .wire import EngineRules

ENGINES: Mapping[str, EngineRules] = MappingProxyType(
    {
        musicful.RULES.provider: musicful.RULES,
        elevenlabs.RULES.provider: elevenlabs.RULES,
        lyria.RULES.provider: lyria.RULES,
    }
)


def engine(provider: str) -> EngineRules:
    """The wire rules of a provider id (`musicful`, `elevenlabs`, `lyria`)."""
    return ENGINES[provider]


__all__ = ["ENGINES", "EngineRules", "elevenlabs", "engine", "lyria", "musicful"]
