"""How long a 429 keeps the queue's seats shrunk, from whatever its Retry-After says (`queue_seats.hold_for`): seconds
or an HTTP-date (RFC 9110), each within [HOLD_AT_LEAST, HOLD_AT_MOST]; anything else is the least hold."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from ipymusicgen.gateway.queue_seats import HOLD_AT_LEAST, HOLD_AT_MOST, hold_for

NOW = 1_800_000_000.0


def _date(seconds_from_now: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + seconds_from_now, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("said", "held"),
    [
        ("0", HOLD_AT_LEAST),
        ("-40", HOLD_AT_LEAST),
        ("NaN", HOLD_AT_LEAST),
        ("-inf", HOLD_AT_LEAST),
        ("1e30", HOLD_AT_MOST),
        ("inf", HOLD_AT_MOST),
        ("9" * 400, HOLD_AT_MOST),
        ("45", 45.0),
        (" 75 ", 75.0),
        ("", HOLD_AT_LEAST),
        (None, HOLD_AT_LEAST),
        ("soon", HOLD_AT_LEAST),
        ("\x00\ud800", HOLD_AT_LEAST),
        (_date(120), 120.0),
        (_date(-3600), HOLD_AT_LEAST),
        (_date(10**7), HOLD_AT_MOST),
        ("Mon, 99 Foo 2026 99:99:99 GMT", HOLD_AT_LEAST),
    ],
)
def test_a_retry_after_in_seconds_or_as_a_date_holds_the_seats_within_bounds(said: str | None, held: float) -> None:
    assert hold_for(said, NOW) == pytest.approx(held, abs=1.0)
