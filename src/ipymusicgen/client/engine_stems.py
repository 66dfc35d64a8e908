"""ElevenLabs stem separation: a song's audio uploaded once (`POST /v1/music/stem-separation`), its ZIP of stems
kept beside the engines' other answers. A paid extra (`archive.extras`, kind `stems`), made at most once per song.

Money, as every paid call here: priced in dollars and journalled BEFORE it is sent, sent once with no retry (the
ElevenLabs SDK would retry a POST). A connection that never opened sent nothing; a definite refusal (401, 403, 422,
429) is not charged (`APIStatusError` of its status); an answer lost after sending, a 5xx or an answer that is not
a ZIP may have been charged (`CreateOutcomeUnknownError` or a doubtful status), so the extras store keeps it
unknown and it is never sent again unless forced. The key is scrubbed from every message.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .._version import __version__
from ..config import is_loopback, url_scheme
from ..engines import elevenlabs as el
from ..engines.wire import Charge, charge_of_status, scrub
from ..errors import (
    APIConnectionError,
    APIStatusError,
    CreateOutcomeUnknownError,
    InsecureTransportError,
    MissingKeyError,
)
from ..models.dollar_prices import stems_estimate
from .engine_calls import ENGINE_TIMEOUT, NOT_SENT, spool_dir
from .transport import trust_store

if TYPE_CHECKING:
    from .core import _Core

VARIATIONS = ("two_stems_v1", "six_stems_v1")
MAX_ZIP_BYTES = 512 * 1024 * 1024
"""The largest ZIP of stems read: six stems of a 10-minute song are far below it."""


def _checked_base(client: _Core) -> tuple[str, str]:
    settings = client.settings
    key = settings.engine_key(el.RULES.provider)
    if not key:
        raise MissingKeyError(
            f"Stem separation is paid and needs an ElevenLabs key: set {el.ENV_KEY}; nothing was sent."
        )
    base = settings.engine_base_url(el.RULES.provider)
    if url_scheme(base) not in ("http", "https"):
        raise InsecureTransportError(f"The elevenlabs base URL must be http(s) (got {base[:80]!r}); nothing was sent.")
    if settings.is_embedded_sandbox and not is_loopback(base):
        raise InsecureTransportError(
            f"This client plays the embedded sandbox, but its elevenlabs base URL is {base}; nothing was sent."
        )
    if url_scheme(base) == "http" and not is_loopback(base) and not settings.allow_insecure_http:
        raise InsecureTransportError(
            f"Refusing to send the elevenlabs key over plain http to {base}; use https; nothing was sent."
        )
    return key, base


def separate_stems(
    client: _Core, song: str, audio: bytes, *, seconds: float | None = None, variation: str = "two_stems_v1"
) -> Path:
    """The song's stems as a ZIP file (kept privately beside the engines' answers), paid once."""
    if variation not in VARIATIONS:
        raise ValueError(f"variation must be one of {', '.join(VARIATIONS)} (got {str(variation)[:40]!r})")
    if not audio:
        raise ValueError(f"The audio of {song[:80]} is empty: nothing was sent.")
    key, base = _checked_base(client)
    price = stems_estimate(seconds)
    payload = {"provider": el.RULES.provider, "song": song, "variation": variation, "estimate_usd": str(price)}
    journal = client.journal
    attempt = journal.begin(el.STEMS.name, base, payload) if journal is not None else None  # before sending

    def ended(outcome: str, note: str) -> None:
        if journal is not None and attempt is not None:
            write = {"rejected": journal.rejected, "unknown": journal.unknown}[outcome]
            client._journal_write("how the stem separation ended", lambda: write(attempt, note))

    headers = {"User-Agent": f"ipymusicgen/{__version__} httpx/{httpx.__version__}", **el.RULES.headers(key)}
    timeout = httpx.Timeout(ENGINE_TIMEOUT, connect=client.settings.connect_timeout)
    try:
        with httpx.Client(follow_redirects=False, timeout=timeout, verify=trust_store()) as http:
            response = http.post(
                base + el.STEMS.path,
                headers=headers,
                files={"file": ("song.mp3", audio, "audio/mpeg")},
                data={"stem_variation_id": variation},
            )
    except NOT_SENT as exc:
        note = (
            f"Could not reach elevenlabs at {base} ({scrub(str(exc), key)[:200]}); nothing was sent, nothing charged."
        )
        ended("rejected", note)
        raise APIConnectionError(note) from None
    except httpx.HTTPError as exc:
        note = (
            f"The stem separation may have reached elevenlabs but no answer came back ({scrub(str(exc), key)[:200]}). "
            "It may have been charged; it was NOT sent again."
        )
        ended("unknown", note)
        raise CreateOutcomeUnknownError(note) from None
    status = response.status_code
    if not 200 <= status < 300:
        text = scrub(_said(response), key)[:300]
        charged = charge_of_status(status)
        said = f"HTTP {status}" + (f": {text}" if text else "")
        if charged is Charge.NOT_CHARGED:
            note = f"elevenlabs refused the stem separation ({said}); not charged."
        else:
            note = f"elevenlabs answered {said}: the stem separation may have been charged; NOT sent again."
        ended("rejected" if charged is Charge.NOT_CHARGED else "unknown", note)
        raise APIStatusError(note, response=None, body=None, status_code=status)
    body = response.content
    if not body.startswith(b"PK") or len(body) > MAX_ZIP_BYTES:
        note = "The stem separation's answer was not a ZIP of stems: it may have been charged; NOT sent again."
        ended("unknown", note)
        raise CreateOutcomeUnknownError(note)
    path = _spool(client, body)
    if journal is not None and attempt is not None:
        client._journal_write("the stem separation", lambda: journal.submitted(attempt, []))
    return path


def _said(response: httpx.Response) -> str:
    import json

    try:
        body: Any = json.loads(response.content) if response.content.strip() else None
    except (ValueError, RecursionError):
        return response.content[:300].decode("utf-8", "replace")
    try:
        return el.error_text(body) if body is not None else ""
    except Exception:  # a hostile body's shape costs only its message
        return ""


def _spool(client: _Core, body: bytes) -> Path:
    """Kept as `elevenlabs-stems-<hex>.zip` in the engines' private folder (a name `EngineCalls.local_file` owns)."""
    folder = spool_dir(client)
    target = folder / f"{el.RULES.provider}-stems-{uuid.uuid4().hex}.zip"
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".part-", delete=False) as part:
        part.write(body)
    os.replace(part.name, target)
    return target
