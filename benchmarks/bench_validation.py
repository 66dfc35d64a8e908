"""Figure 2: the cost of validating a request body before it is sent, against just serializing it.

For every v1 action shape and for v2: `build_*_request(body).to_payload()` (what the client does
before each paid call: validate every field, then dump the JSON-ready body) against
`json.dumps(body)` of the same dict. The target is an absolute one: under 50 µs per request.
Times are CPU time of the measuring thread, medians of interleaved rounds.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from typing import Any

from ipymusicgen.models.schema import build_generate_request, build_v2_request

from ._common import Row, interleaved, median, ratio

TARGET_US = 50.0
LYRICS = "[Verse]\nrain on the window, tea on the stove\n[Chorus]\nslow, slow, let the morning go\n" * 4

BODIES: dict[str, dict[str, Any]] = {
    "v1 auto": {"action": "auto", "mv": "MFV2.0", "style": "lo-fi rain, mellow piano", "instrumental": 0},
    "v1 custom": {
        "action": "custom",
        "mv": "MFV2.0",
        "style": "indie folk",
        "lyrics": LYRICS,
        "title": "Slow Morning",
        "gender": "female",
    },
    "v1 extend": {
        "action": "extend",
        "mv": "MFV2.0",
        "style": "indie folk",
        "lyrics": LYRICS,
        "continue_at": 42.5,
        "continue_song_id": "0b9c2f4e-5a7d-4f1e-9a57-2f8d3c6b1e90",
    },
    "v1 concat": {"action": "concat", "continue_song_id": "0b9c2f4e-5a7d-4f1e-9a57-2f8d3c6b1e90"},
    "v1 upload": {"action": "upload", "audio_url": "https://example.com/take-1.mp3"},
    "v1 upload_extend": {
        "action": "upload_extend",
        "mv": "MFV2.0",
        "style": "garage rock",
        "lyrics": LYRICS,
        "continue_at": 30,
        "audio_url": "https://example.com/take-1.mp3",
    },
    "v1 artist_consistency": {
        "action": "artist_consistency",
        "mv": "MFV2.0",
        "style": "soul",
        "lyrics": LYRICS,
        "title": "Same Voice",
        "singer_id": "singer-1234567890abc",
    },
    "v2": {
        "is_auto": 0,
        "model_version": "v4.5",
        "prompt": "a warm soul ballad about slow mornings",
        "lyrics": LYRICS,
        "title": "Slow Morning",
        "instrumental": 0,
    },
}


def _builder(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    if name == "v2":
        return lambda body: build_v2_request(body).to_payload()
    return lambda body: build_generate_request(body).to_payload()


def _per_call(call: Callable[[], object], count: int) -> Callable[[], float]:
    """CPU seconds of this thread per call: time spent descheduled on a busy machine is not counted."""

    def sample() -> float:
        start = time.thread_time()
        for _ in range(count):
            call()
        return (time.thread_time() - start) / count

    return sample


def _row(name: str, body: dict[str, Any], rounds: int, count: int) -> Row:
    build = _builder(name)
    payload = build(body)  # also builds the model's validator once (models build on first use)
    assert payload, name
    samples = interleaved(
        {
            "validate": _per_call(lambda: build(body), count),
            "json.dumps": _per_call(lambda: json.dumps(body), count),
        },
        rounds,
    )
    ours, theirs = median(samples["validate"]) * 1e6, median(samples["json.dumps"]) * 1e6
    return Row(
        2,
        f"validate {name} vs json.dumps",
        round(ours, 2),
        "µs/request",
        baseline=round(theirs, 2),
        ratio=round(ratio(ours, theirs), 2),
        target=f"< {TARGET_US:.0f} µs",
        passed=ours < TARGET_US,
        details={"fields": len(body)},
    )


def run(*, quick: bool = False) -> list[Row]:
    rounds, count = (3, 200) if quick else (7, 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a body that warns would not be a fair, valid request
        return [_row(name, body, rounds, count) for name, body in BODIES.items()]


if __name__ == "__main__":
    for row in run():
        print(row)
