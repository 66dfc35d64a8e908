"""The sandbox answers every bad input with a 4xx and an envelope like the service's, never a 500."""

from __future__ import annotations

import math

import httpx
import pytest

from ipymusicgen.sandbox import Sandbox

GENERATE = "/v1/music/generate"


def post_raw(sandbox: Sandbox, path: str, body: bytes, base: str | None = None) -> httpx.Response:
    headers = {"x-api-key": sandbox.api_key, "content-type": "application/json"}
    return httpx.post(f"{base or sandbox.base_url}{path}", content=body, headers=headers, timeout=30)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b'{"action": "extend", "style": "x", "continue_song_id": "s", "continue_at": NaN}',
        b'{"action": "auto", "style": "x", "instrumental": Infinity}',
        b'{"action": "auto", "style": -Infinity}',
        b"not json",
        b"",
        b'{"action": "auto", "style": {"deep": ' + b"[" * 40 + b"1" + b"]" * 40 + b"}}",
    ],
)
def test_a_hostile_body_is_a_4xx_not_a_500(sandbox: Sandbox, body: bytes) -> None:
    answer = post_raw(sandbox, GENERATE, body)
    assert 400 <= answer.status_code < 500, answer.text[:300]
    assert isinstance(answer.json(), dict)


def test_nan_in_a_v2_body_is_a_4xx(sandbox: Sandbox) -> None:
    body = b'{"is_auto": 0, "model_version": "v4.5", "prompt": "x", "continue_at": NaN, "continue_song_id": "s"}'
    answer = post_raw(sandbox, "/v2/submit", body, base=sandbox.v2_base_url)
    assert 400 <= answer.status_code < 500


@pytest.mark.parametrize(
    "settings",
    [
        {"stage_seconds": "abc"},
        {"stage_seconds": None},
        {"song_seconds": -1},
        {"stage_seconds": 0},
        {"max_running": "many"},
        {"max_running": 0},
        {"envelope_tasks": "yes"},
        {"bogus": 1},
    ],
)
def test_bad_settings_are_a_400_with_an_envelope(sandbox: Sandbox, settings: dict) -> None:
    before = sandbox.state.stage_seconds
    answer = httpx.post(f"{sandbox.base_url}/_sandbox/settings", json=settings)
    assert answer.status_code == 400
    assert answer.json()["status"] == 400 and answer.json()["message"]
    assert sandbox.state.stage_seconds == before


@pytest.mark.parametrize("text", ["NaN", "Infinity", "1e999"])
def test_non_finite_settings_in_raw_json_are_refused(sandbox: Sandbox, text: str) -> None:
    answer = post_raw(sandbox, "/_sandbox/settings", f'{{"stage_seconds": {text}}}'.encode())
    assert answer.status_code in (400, 422)
    assert math.isfinite(sandbox.state.stage_seconds)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0])
def test_a_sandbox_refuses_non_finite_timings_when_made(value: float) -> None:
    with pytest.raises(ValueError, match="seconds"):
        Sandbox(stage_seconds=value)
    with pytest.raises(ValueError, match="seconds"):
        Sandbox(song_seconds=value)


def test_session_says_which_sandbox_timing_is_bad(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipymusicgen.workspace import session

    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)  # no key: the session's first client starts its sandbox
    try:
        for bad in ("abc", "nan", "-1", "inf"):
            monkeypatch.setenv("MUSICGEN_SANDBOX_STAGE_SECONDS", bad)
            session.reset()
            with pytest.raises(ValueError, match="MUSICGEN_SANDBOX_STAGE_SECONDS"):
                session.get_client()
            assert session.embedded_sandbox() is None
    finally:
        session.reset()
