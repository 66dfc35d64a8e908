"""The current deadline: `bounded(seconds)` sets it, `left_of(timeout)` cuts a read's timeout to it. It is a context
variable (each thread starts without one), not module state: the module holds only its name.

Kept apart from the streams that honour it (`deadline_streams`, which need httpcore) so importing the client
loads no httpcore; only making the first sync client does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("ipymusicgen_deadline", default=None)


@contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Reads on this thread's network streams must end within `seconds` from now."""
    token = _DEADLINE.set(time.monotonic() + max(seconds, 0.0))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def left_of(timeout: float | None) -> float | None:
    """A read's timeout cut to what is left of this thread's deadline; past it, the read times out now."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        import httpcore

        raise httpcore.ReadTimeout("the answer did not finish in time")
    return left if timeout is None else min(timeout, left)
