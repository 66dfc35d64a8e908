"""`%%musicgen --provider elevenlabs|lyria`: the magic's options and cell as a synchronous engine's request.

The cell body is the lyrics when a description is given (`--style`/`--prompt`), else the description (with
`--instrumental`, or when there is no description at all). ElevenLabs turns the lyrics into a composition plan,
one section per stanza; Lyria gets them in its prompt. Every check is the capability table's
(`models/providers.py`), so a refusal names the provider and the field, and nothing is sent.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from ..models.providers import MUSICFUL, SYNCHRONOUS, EngineRequest, build_engine_request, check_provider

ENGINE_ONLY = ("seconds", "seed", "timestamps")
"""Options only a synchronous engine takes (the service's requests have no length or seed)."""
MUSICFUL_ONLY = ("action", "gender", "audio_url", "singer_id", "continue_at", "v2", "is_auto")


def provider_of(args: Any) -> str:
    return check_provider(getattr(args, "provider", None))


def refuse_engine_options(args: Any, provider: str) -> None:
    """The service's requests: `--seconds`, `--seed` or `--timestamps` would be dropped silently, so say so."""
    given = [f"--{n}" for n in ENGINE_ONLY if getattr(args, n, None) not in (None, False)]
    if given:
        raise UsageError(
            f"{' and '.join(given)} belong to --provider elevenlabs or lyria; {provider} songs take no such field"
        )


def engine_request(args: Any, body: str, provider: str) -> EngineRequest:
    """The request for `provider` from the magic's options and the cell body (lyrics or description)."""
    if provider not in SYNCHRONOUS or provider == MUSICFUL:
        raise UsageError(f"{provider} is not a synchronous engine")
    wrong = [f"--{n.replace('_', '-')}" for n in MUSICFUL_ONLY if getattr(args, n, None) not in (None, False)]
    if wrong:
        raise UsageError(f"{' and '.join(wrong)} belong to the service's songs, not --provider {provider}")
    description = args.style or args.prompt
    lyrics = args.lyrics
    if body:
        if description or args.lyrics:
            if lyrics:
                raise UsageError(f"{provider} already has --lyrics and --style; there is nowhere to put the cell text.")
            lyrics = body
        else:
            description = body
    fields: dict[str, Any] = {
        "provider": provider,
        "model": args.mv or args.model_version,
        "prompt": description or "",
        "lyrics": lyrics,
        "title": args.title,
        "seconds": args.seconds,
        "seed": args.seed,
        "instrumental": bool(args.instrumental),
        "timestamps": bool(args.timestamps),
        "extend": args.continue_song_id,
    }
    return build_engine_request(**fields)
