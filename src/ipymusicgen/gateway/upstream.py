"""Talking to the real service: the client's own transport, reads under the ONE retry policy, paid calls once.

The upstream key is added here and nowhere else, and every answer is scrubbed of it before it goes back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..client.retry import RETRYABLE_STATUS, backoff_delay
from ..client.transport import bounded_transport

READ_RETRIES = 3
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
PASSED_HEADERS = ("content-type", "retry-after", "retry-after-ms")


class NotSent(Exception):
    """The paid call never reached the upstream (no connection): its reservation can be released."""


class MaybeSent(Exception):
    """The paid call may have reached the upstream, but no answer came back: outcome unknown."""


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: bytes
    headers: dict[str, str]


class Upstream:
    def __init__(self, base_url: str, v2_base_url: str, key: str, *, sleep: Any = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.v2_base_url = v2_base_url.rstrip("/")
        self._key = key
        self.sleep = sleep
        """How the retry policy's waits are waited (tests pass a fake clock)."""
        self._http = httpx.Client(transport=bounded_transport(), timeout=TIMEOUT, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def _url(self, path: str) -> str:
        return (self.v2_base_url if path.startswith("/v2/") else self.base_url) + path

    def _answer(self, response: httpx.Response) -> Answer:
        body = response.content
        if self._key:
            body = body.replace(self._key.encode(), b"***")
        headers = {k: v for k, v in response.headers.items() if k.lower() in PASSED_HEADERS}
        return Answer(response.status_code, body, headers)

    def read(self, path: str, params: dict[str, str] | None = None) -> Answer:
        """A GET, asked again on a retryable status or a transport error, with the one policy's waits."""
        attempt = 0
        while True:
            try:
                response = self._http.get(self._url(path), params=params, headers={"x-api-key": self._key})
            except httpx.HTTPError:
                if attempt >= READ_RETRIES:
                    raise
                self.sleep(backoff_delay(attempt))
                attempt += 1
                continue
            if response.status_code in RETRYABLE_STATUS and attempt < READ_RETRIES:
                self.sleep(backoff_delay(attempt, response))
                attempt += 1
                continue
            return self._answer(response)

    def paid(self, path: str, params: dict[str, str] | None, json_body: Any) -> Answer:
        """A paid POST, sent once: never retried, whatever happens."""
        try:
            response = self._http.post(self._url(path), params=params, json=json_body, headers={"x-api-key": self._key})
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise NotSent(type(exc).__name__) from None
        except httpx.HTTPError as exc:
            raise MaybeSent(type(exc).__name__) from None
        return self._answer(response)
