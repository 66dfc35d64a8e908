"""Sending a synchronous engine's paid call (ElevenLabs Music, Lyria through the Gemini API) once, on the team's key.

The gateway holds each engine's real key in its own environment (`ELEVENLABS_API_KEY`, `GEMINI_API_KEY`); a caller's
gateway token, given in the engine's own auth header (or Gemini's `?key=`), is taken off and the real key put in
the engine's header (`engines.<provider>.RULES.key_header`). Nothing is retried or redirected: the call answers with
the audio itself, so once it may have reached the engine it may have been charged. Every answer is scrubbed of the
key by the engines' one rule (`engines.wire.scrub_bytes`, `scrub`: as is, URL-encoded, JSON-escaped, any case), and
only a few headers pass back.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engines import engine
from ..engines.wire import scrub, scrub_bytes
from .upstream import MaybeSent, NotSent, _close_when_cancelled, close_on_its_loop

ENGINE_TIMEOUT = 900.0
"""Seconds a compose may take (a 10-minute ElevenLabs song takes minutes; the client waits as long)."""
CONNECT_TIMEOUT = 10.0
MAX_ANSWER_BYTES = 128 * 1024 * 1024
"""The largest answer read (ten minutes of audio, base64 in Gemini's JSON, is well under it); a larger one was
sent and is unread: may have been charged."""
PASSED_HEADERS = ("content-type", "retry-after", "song-id")
"""The only upstream headers a caller sees (each scrubbed): the audio's type, a refusal's wait, ElevenLabs' song id."""


@dataclass(frozen=True)
class EngineAnswer:
    status_code: int
    body: bytes
    headers: dict[str, str]

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "application/octet-stream")


def base64_runs(key: str) -> re.Pattern[bytes]:
    """The key as it shows inside a base64 text (Gemini's audio is base64 in its JSON): the run of characters only
    the key's bytes decide, at each of the three alignments it can fall at, standard and URL-safe, `/` JSON-escaped
    too. Built per answer, not cached: no module-level cache holds a key (tests/test_module_state.py)."""
    runs: set[bytes] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + key.encode() + b"\0\0")
        run = encoded[-(-8 * shift // 6) : 8 * (shift + len(key.encode())) // 6]
        runs |= {run, run.replace(b"+", b"-").replace(b"/", b"_"), run.replace(b"/", b"\\/")}
    return re.compile(b"|".join(re.escape(r) for r in sorted(runs, key=len, reverse=True)))


def scrub_base64(body: bytes, key: str) -> bytes:
    """`body` with every base64 rendering of the key overwritten by `A`s of its length, so base64 audio still
    decodes (the key's bytes become others) and the key cannot be read back from it."""
    if len(key) < 8 or not body:
        return body
    return base64_runs(key).sub(lambda m: b"A" * len(m.group()), body)


def _scrub_text(text: str, key: str) -> str:
    return scrub_base64(text.encode("utf-8", "surrogateescape"), key).decode("utf-8", "surrogateescape")


class TooLarge(Exception):
    """An answer past `MAX_ANSWER_BYTES`: the call was carried out, its answer is not kept."""


class EngineUpstream:
    """One engine's upstream: its base URL and the team's key for it (never shown: not in repr, never in an answer)."""

    def __init__(self, provider: str, base_url: str, key: str) -> None:
        self.provider = provider
        self.rules = engine(provider)
        self.base_url = base_url.rstrip("/")
        self._key = key
        self._session: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._keeper: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"EngineUpstream({self.provider!r}, {self.base_url!r})"

    def scrubbed(self, body: bytes, headers: Mapping[str, str]) -> tuple[bytes, dict[str, str]]:
        passed = {
            k.lower(): _scrub_text(scrub(v, self._key), self._key)
            for k, v in headers.items()
            if k.lower() in PASSED_HEADERS and v.isascii() and v.isprintable()
        }  # a value no header can carry (UTF-8, a control) is dropped: it must not cost the caller a paid answer
        return scrub_base64(scrub_bytes(body, self._key), self._key), passed

    def _client(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ENGINE_TIMEOUT, connect=CONNECT_TIMEOUT),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=True,
            )
            self._loop = loop
            self._keeper = loop.create_task(_close_when_cancelled(self._session))  # closed on its loop as it ends
        return self._session

    async def paid(self, path: str, params: Mapping[str, str], body: bytes, content_type: str) -> EngineAnswer:
        """POST once with the team's key; `NotSent` when no connection opened, `MaybeSent` once it may have arrived."""
        import aiohttp

        headers = {**self.rules.headers(self._key), "content-type": content_type or "application/json"}
        try:
            async with self._client().post(
                self.base_url + path, params=dict(params), data=body, headers=headers, allow_redirects=False
            ) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(1 << 16):
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise TooLarge(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
                    chunks.append(chunk)
                content, passed = self.scrubbed(b"".join(chunks), response.headers)
                return EngineAnswer(response.status, content, passed)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NotSent(type(exc).__name__) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, TooLarge) as exc:
            raise MaybeSent(type(exc).__name__) from None

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    def close(self) -> None:
        """Close the pool from outside its loop (the gateway's close); a loop still running is asked to."""
        close_on_its_loop(self._session, self._loop)


class EngineUpstreams:
    """The engines this gateway serves, by provider id (`elevenlabs`, `lyria`)."""

    def __init__(self, engines: Mapping[str, tuple[str, str]]) -> None:
        self.by_provider = {provider: EngineUpstream(provider, url, key) for provider, (url, key) in engines.items()}

    def __repr__(self) -> str:
        return f"EngineUpstreams({sorted(self.by_provider)})"

    def get(self, provider: str) -> EngineUpstream | None:
        return self.by_provider.get(provider)

    def close(self) -> None:
        for upstream in self.by_provider.values():
            upstream.close()
