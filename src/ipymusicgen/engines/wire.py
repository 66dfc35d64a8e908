"""What every engine's wire rules share: a request on the wire, an answer read, and the money rules.

The money rules are the client's (`client.responses`): one rule for "may this paid call have been carried
out" (`is_doubtful`) and one for how a key echoed by a server is scrubbed (`key_pattern`: as is, URL-encoded,
JSON-escaped, in any case). The gateway and the sandbox read them here too, so no copy can drift.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client.responses import Endpoint, is_doubtful, key_pattern


class Charge(enum.Enum):
    """What a paid call's ending says about money."""

    CHARGED = "charged"
    """The engine answered with the song: paid."""
    NOT_CHARGED = "not charged"
    """A definite refusal before any work (401, 403, 400, 404, 422, 429): nothing was paid."""
    UNKNOWN = "may have been charged"
    """The request may have reached the engine and no usable answer came back: never sent again."""


def charge_of_status(status: int) -> Charge:
    """A status's meaning for money: 2xx charged; a timeout, 303 or 5xx (but 501/505) unknown; the rest refused."""
    if 200 <= status < 300:
        return Charge.CHARGED
    if is_doubtful(status) or 300 <= status < 400:  # a redirect is never followed: the create may have been done
        return Charge.UNKNOWN
    return Charge.NOT_CHARGED


def scrub(text: str, key: str | None) -> str:
    """Text with the key masked however a server echoed it (the client's one rule)."""
    if not key or len(key) < 4 or not isinstance(text, str):
        return text
    return key_pattern(key).sub("***", text)


def scrub_bytes(body: bytes, key: str | None) -> bytes:
    """An answer's bytes with the key masked however a server echoed it (the rule of `scrub`, on bytes that may not
    be UTF-8: an engine's answer is often the audio itself)."""
    if not key or len(key) < 4 or not body:
        return body
    return re.compile(key_pattern(key).pattern.encode(), re.IGNORECASE).sub(b"***", body)


@dataclass(frozen=True)
class WordTimestamp:
    word: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class WireRequest:
    """A request as it goes on the wire: the endpoint (its path, method, paid), the query and the JSON body."""

    endpoint: Endpoint
    params: Mapping[str, str] = field(default_factory=dict)
    json: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""
    """The path when it depends on the request (Lyria's model is in it); else the endpoint's."""

    @property
    def url_path(self) -> str:
        return self.path or self.endpoint.path


@dataclass(frozen=True)
class EngineAnswer:
    """A synchronous engine's answer: the audio itself and what came with it."""

    audio: bytes = field(repr=False)
    media_type: str
    lyrics: str | None = None
    title: str | None = None
    timestamps: tuple[WordTimestamp, ...] = ()
    duration_seconds: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def suffix(self) -> str:
        kind = self.media_type.split(";")[0].strip().lower()
        return {"audio/mpeg": ".mp3", "audio/mp3": ".mp3", "audio/wav": ".wav", "audio/x-wav": ".wav"}.get(
            kind, ".opus" if "opus" in kind else ".bin"
        )


class AnswerError(ValueError):
    """An answer that could not be read as a song; `charge` says what it means for money."""

    def __init__(self, message: str, charge: Charge = Charge.UNKNOWN) -> None:
        self.charge = charge
        super().__init__(message)


@dataclass(frozen=True)
class EngineRules:
    """One engine's wire rules, as one value the client, the gateway and the sandbox read."""

    provider: str
    key_header: str
    env_key: str
    env_base_url: str
    default_base_url: str
    endpoints: tuple[Endpoint, ...]
    error_text: Callable[[Any], str]
    """The server's message from a decoded error body (`{"detail": ...}`, `{"error": {...}}`, ...)."""

    def headers(self, key: str) -> dict[str, str]:
        return {self.key_header: key}

    def paid_paths(self) -> frozenset[str]:
        return frozenset(e.path for e in self.endpoints if e.paid)
