"""Talking to the real service: reads under the ONE retry policy, paid calls once, the key added here only.

Two faces over one set of rules. The request path is asynchronous: aiohttp's keep-alive pool on the server's own
event loop (its compiled HTTP parser, no thread hop), since on loopback a pure-Python client costs about as much
per request as the rest of the gateway together (figure 16). The sync face (httpx with the client's deadline
transport) serves the rare calls made off the event loop: the meter's readings and key info. Every answer is
scrubbed of the key before it goes back.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..client.responses import key_pattern
from ..client.retry import RETRYABLE_STATUS, backoff_delay
from ..client.transport import bounded_transport

READ_RETRIES = 3
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
PASSED_HEADERS = ("content-type", "retry-after", "retry-after-ms")
"""The only upstream headers a caller sees (an allow-list: no X-*, no cookie, no server detail), each scrubbed."""
MAX_CONNECTIONS = 100
"""Keep-alive connections to each upstream host (httpx's default pool size too)."""


class NotSent(Exception):
    """The paid call never reached the upstream (no connection): its reservation can be released."""


class MaybeSent(Exception):
    """The paid call may have reached the upstream, but no answer came back: outcome unknown."""


class NotEncodable(ValueError):
    """A body that cannot be sent as UTF-8 JSON (a lone surrogate such as "\\ud800" in a text field): refused
    before anything is reserved. `field` names where, as a dotted path."""

    def __init__(self, field: str) -> None:
        super().__init__(f"{field}: text that cannot be encoded as UTF-8 (a lone surrogate)")
        self.field = field


def encode_body(json_body: Any) -> bytes | None:
    """The bytes a paid call sends upstream, made BEFORE its price is reserved: what cannot be encoded is refused
    (`NotEncodable`) while nothing is held, never found half-way through a send."""
    if json_body is None:
        return None
    text = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise NotEncodable(_unencodable(json_body) or "body") from None


def _unencodable(value: Any, where: str = "") -> str | None:
    """The dotted path of the first text (a key or a value) in `value` that UTF-8 cannot encode."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return where or "body"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and _unencodable(key) is not None:
            return path
        found = _unencodable(item, path)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: bytes
    headers: dict[str, str]


def close_on_its_loop(session: Any, loop: asyncio.AbstractEventLoop | None) -> None:
    """Close an aiohttp session made on `loop` from outside it (another thread): a loop still running is asked to,
    and waited for; one that ended closed its sessions itself, and from the loop itself nothing blocks."""
    if session is None or session.closed or loop is None or not loop.is_running():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not loop:
        asyncio.run_coroutine_threadsafe(session.close(), loop).result(10)


def _retry_wait(attempt: int, answer: Answer | None) -> float | None:
    """The one policy for reads: the wait before asking again, or None when `answer` stands (a failure with no
    answer, `None`, past the last retry is raised by the caller)."""
    if answer is not None and (answer.status_code not in RETRYABLE_STATUS or attempt >= READ_RETRIES):
        return None
    if answer is None and attempt >= READ_RETRIES:
        return None
    asked = httpx.Response(answer.status_code, headers=answer.headers) if answer is not None else None
    return backoff_delay(attempt, asked)


class Upstream:
    def __init__(self, base_url: str, v2_base_url: str, key: str, *, sleep: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.v2_base_url = v2_base_url.rstrip("/")
        self._key = key
        self._echo = key_pattern(key) if len(key) >= 4 else None
        """The key however the upstream may echo it (the client's one rule: as is, URL-encoded, JSON-escaped, any
        case); its bytes form scrubs bodies, which may not be UTF-8."""
        self._echo_bytes = re.compile(self._echo.pattern.encode(), re.IGNORECASE) if self._echo else None
        self.sleep = sleep
        """How the retry policy's waits are waited (None: really; tests pass a fake clock, sync or async)."""
        self._http = httpx.Client(transport=bounded_transport(), timeout=TIMEOUT, follow_redirects=False)
        self._session: Any = None  # aiohttp.ClientSession, made on the serving loop by its first request
        self._loop: asyncio.AbstractEventLoop | None = None
        self._keeper: asyncio.Task[None] | None = None

    def close(self) -> None:
        """Let go of both pools. The async one closes itself when its loop ends (see `_client`); a loop still
        running in another thread is asked to close it now."""
        self._http.close()
        close_on_its_loop(self._session, self._loop)

    def _url(self, path: str) -> str:
        return (self.v2_base_url if path.startswith("/v2/") else self.base_url) + path

    def _answer(self, status_code: int, body: bytes, headers: Mapping[str, str]) -> Answer:
        """What may go back to a caller: the body and the allowed headers, the key masked in each."""
        passed = {k.lower(): v for k, v in headers.items() if k.lower() in PASSED_HEADERS}
        if self._echo is not None and self._echo_bytes is not None:
            body = self._echo_bytes.sub(b"***", body)
            passed = {k: self._echo.sub("***", v) for k, v in passed.items()}
        return Answer(status_code, body, passed)

    # -- the sync face: off the event loop ---------------------------------------------------------------

    def read(self, path: str, params: dict[str, str] | None = None) -> Answer:
        """A GET, asked again on a retryable status or a transport error, with the one policy's waits."""
        attempt = 0
        while True:
            try:
                response = self._http.get(self._url(path), params=params, headers={"x-api-key": self._key})
            except httpx.HTTPError:
                answer = None
                if attempt >= READ_RETRIES:
                    raise
            else:
                answer = self._answer(response.status_code, response.content, response.headers)
            wait = _retry_wait(attempt, answer)
            if wait is None and answer is not None:
                return answer
            (self.sleep or time.sleep)(wait)
            attempt += 1

    # -- the async face: the request path ----------------------------------------------------------------

    def _client(self) -> Any:
        """This loop's aiohttp session (one keep-alive pool), made on first use. A task that only waits keeps it:
        when the loop ends (uvicorn's run cancels what is left), the task closes the session on its own loop."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT.read, connect=TIMEOUT.connect),
                connector=aiohttp.TCPConnector(limit_per_host=MAX_CONNECTIONS),
                cookie_jar=aiohttp.DummyCookieJar(),  # one upstream account for every user: no cookie is kept
                auto_decompress=True,
            )
            self._loop = loop
            self._keeper = loop.create_task(_close_when_cancelled(self._session))
        return self._session

    async def _send(self, method: str, path: str, params: dict[str, str] | None, body: bytes | None) -> Answer:
        headers = {"x-api-key": self._key}
        if body is not None:
            headers["content-type"] = "application/json"
        async with self._client().request(
            method, self._url(path), params=params, data=body, headers=headers, allow_redirects=False
        ) as response:
            content = await response.read()
            return self._answer(response.status, content, response.headers)

    async def _wait(self, seconds: float) -> None:
        if self.sleep is None:
            await asyncio.sleep(seconds)
            return
        waited = self.sleep(seconds)
        if inspect.isawaitable(waited):
            await waited

    async def aread(self, path: str, params: dict[str, str] | None = None) -> Answer:
        """`read` on the event loop: the same policy, the same waits."""
        import aiohttp

        attempt = 0
        while True:
            try:
                answer: Answer | None = await self._send("GET", path, params, None)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                answer = None
                if attempt >= READ_RETRIES:
                    raise
            wait = _retry_wait(attempt, answer)
            if wait is None and answer is not None:
                return answer
            await self._wait(wait or 0.0)
            attempt += 1

    async def aread_or_none(self, path: str, params: dict[str, str] | None = None) -> Answer | None:
        """`aread`, or None when the upstream could not be reached (after the policy's retries)."""
        import aiohttp

        try:
            return await self.aread(path, params)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    async def apaid(self, path: str, params: dict[str, str] | None, body: bytes | None) -> Answer:
        """A paid POST of a body made by `encode_body`, sent once: never retried, whatever happens."""
        import aiohttp

        try:
            return await self._send("POST", path, params, body)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NotSent(type(exc).__name__) from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise MaybeSent(type(exc).__name__) from None


async def _close_when_cancelled(session: Any) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()
