"""The one retry policy: which answers are worth asking again, and how long to wait before doing so.

The client's reads, the watcher's polling rounds and a batch's rate-limited creates all ask here, so
`Retry-After` is read in one place and every wait is bounded (NaN, infinity, negative, or a date years
away never becomes a sleep). Paid creates are never retried once they may have reached the service:
that rule lives in the client's paid flow, not here.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from typing import Any

import httpx

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""Statuses a read is asked again after (a paid create never is)."""
MAX_RETRY_AFTER = 60.0
"""The longest server-asked wait honoured; a longer (or unreadable) one falls back to our own backoff."""
BACKOFF_BASE, BACKOFF_CAP, BACKOFF_JITTER = 0.5, 8.0, 0.25
"""Reads: 0.5 s x 2^attempt, capped at 8 s, less up to 25 % jitter (so many clients do not retry in step)."""
MAX_POLL_BACKOFF = 60.0
"""Longest wait between polling rounds while the service keeps failing."""


def _response_of(source: Any) -> httpx.Response | None:
    if source is None or isinstance(source, httpx.Response):
        return source
    response = getattr(source, "response", None)  # an APIStatusError carries the answer it came from
    return response if isinstance(response, httpx.Response) else None


def retry_after(source: httpx.Response | BaseException | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `Retry-After` in seconds or as an HTTP date).

    `source` is a response or an error carrying one. None when absent, unreadable, not finite, negative,
    or longer than `MAX_RETRY_AFTER`: the caller then uses its own backoff.
    """
    response = _response_of(source)
    if response is None:
        return None
    headers = response.headers
    try:
        if "retry-after-ms" in headers:
            seconds = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            value = headers["retry-after"].strip()
            try:
                seconds = float(value)
            except ValueError:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        else:
            return None
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= MAX_RETRY_AFTER else None


def backoff_delay(attempt: int, source: httpx.Response | BaseException | None = None) -> float:
    """The wait before retry number `attempt + 1` of a read: what the server asked, else capped exponential."""
    asked = retry_after(source)
    if asked is not None:
        return asked
    return min(BACKOFF_BASE * 2 ** min(attempt, 32), BACKOFF_CAP) * (1 - BACKOFF_JITTER * random.random())


def poll_backoff(interval: float, failures: int) -> float:
    """The wait after `failures` failed polling rounds in a row: interval x 2^failures, capped."""
    if failures <= 0:
        return interval
    return min(interval * 2 ** min(failures, 32), max(MAX_POLL_BACKOFF, interval))


RATE_LIMIT_BASE, RATE_LIMIT_CAP = 1.0, 60.0
"""Creates answered 429: 1 s x 2^streak, capped at 60 s, jittered, whatever the header says (a Retry-After of 0
from a service that keeps answering 429 must not turn a batch into a storm of creates)."""


def rate_limit_delay(streak: int, source: httpx.Response | BaseException | None = None) -> float:
    """The pause after the `streak`-th 429 in a row on one key: the longer of what the server asked and ours."""
    ours = min(RATE_LIMIT_BASE * 2 ** min(max(streak - 1, 0), 32), RATE_LIMIT_CAP)
    ours *= 1 - BACKOFF_JITTER * random.random()
    asked = retry_after(source)
    return max(ours, asked if asked is not None else 0.0)
