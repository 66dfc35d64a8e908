"""Figure 17: a synchronous engine's song through the client vs the raw HTTP call, against one sandbox.

Both sides ask the sandbox's ElevenLabs endpoint for the same 3-second song (`POST /v1/music`, the same body).
The raw side is one httpx POST. The client side is `client.generate(provider="elevenlabs", ...)` plus
`client.wait(ids)`: the capability check, the background thread, the spooled audio and the local record.
Sides alternate in rounds, and the medians of wall time per song are compared. The sandbox's synthesis is in
both, so the ratio is the client's whole cost of making the call safe.
"""

from __future__ import annotations

import time

import httpx

from ipymusicgen.engines import elevenlabs as el
from ipymusicgen.models.providers import build_engine_request
from ipymusicgen.sandbox import Sandbox

from ._common import Row, interleaved, median, ratio, spread

TARGET = 1.10
SECONDS = 3.0


def run(*, quick: bool = False) -> list[Row]:
    rounds = 2 if quick else 9
    fields = {"provider": "elevenlabs", "prompt": "benchmark", "seconds": SECONDS}
    wire = el.build(build_engine_request(**fields))
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="") as sandbox:
        url = sandbox.engines_base_url + wire.url_path
        headers = el.RULES.headers(sandbox.api_key)
        with sandbox.client(journal=False, archive=False) as client, httpx.Client(timeout=120) as bare:

            def ours() -> float:
                start = time.perf_counter()
                [song] = client.wait(client.generate(**fields), timeout=120, interval=0.02)
                assert song.audio_url, song.fail_reason
                return time.perf_counter() - start

            def theirs() -> float:
                start = time.perf_counter()
                response = bare.post(url, json=dict(wire.json), headers=headers)
                response.raise_for_status()
                assert response.content
                return time.perf_counter() - start

            ours(), theirs()  # warm-up: the pools' connections, the synthesizer's first use
            samples = interleaved({"client": ours, "httpx": theirs}, rounds)
    ours_s, theirs_s = median(samples["client"]), median(samples["httpx"])
    value = ratio(ours_s, theirs_s)
    return [
        Row(
            17,
            f"ElevenLabs {SECONDS:g} s song: client generate+wait vs raw POST",
            round(ours_s * 1e3, 1),
            "ms/song",
            baseline=round(theirs_s * 1e3, 1),
            ratio=round(value, 3),
            target=f"<= {TARGET}",
            passed=value <= TARGET,
            details={
                "rounds": rounds,
                "ratio_of_fastest": round(ratio(min(samples["client"]), min(samples["httpx"])), 3),
                **{name: spread([v * 1e3 for v in vals]) for name, vals in samples.items()},
            },
        )
    ]
