"""`resume()` asks a team gateway again for an engine song whose answer was lost, and never a real engine.

An ElevenLabs or Lyria call whose answer was lost after sending is journalled unknown: it may have been charged,
and is never sent again to an engine (which would make, and charge, a second song). A team gateway is different:
it keeps each engine call's answer under its `Idempotency-Key` (the song's task id, sent with every call), and a
repeat of the key is answered from its ledger, never sent upstream again. So for an unknown attempt journalled
against a base URL whose `GET /gateway/v1/info` lists that engine, `resume()` sends the journalled body once more
under the same key: the kept song comes back (journalled and spooled under its first task id); "may have been
charged" or a kept refusal is what is true, and the attempt says so. The repeat is marked `repeat only`
(`REPEAT_ONLY_HEADER`, asked only of a gateway that listed the engine): a gateway that never saw the key answers
404, never sent nor charged (the attempt is then rejected), and makes no new call. Anything else (no gateway
there, another host, a body this version cannot rebuild) is left unknown, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ..config import DEFAULT_ELEVENLABS_BASE_URL, DEFAULT_GEMINI_BASE_URL
from ..engines.wire import Charge, WireRequest
from ..models.providers import build_engine_request
from ..models.schema import TaskRecord

if TYPE_CHECKING:
    from ..storage.journal import Attempt
    from .engine_calls import EngineCalls

INFO_PATH = "/gateway/v1/info"
REPEAT_ONLY_HEADER = "X-Ipymusicgen-Repeat-Only"
"""On a repeat of an engine call's Idempotency-Key: answer from the ledger only, never make a new call."""
INFO_TIMEOUT = 10.0
ENGINE_HOSTS = frozenset({DEFAULT_ELEVENLABS_BASE_URL, DEFAULT_GEMINI_BASE_URL})
"""The engines' own hosts: never a gateway, so never asked for its info (nor sent a key on a path they lack)."""


def gateway_engines(base: str, key: str) -> frozenset[str]:
    """The engines a team gateway at `base` serves (its info, read with the user's gateway token); none when
    `base` is no gateway (a real engine answers 404 or refuses the token) or cannot be reached."""
    try:
        answer = httpx.get(base + INFO_PATH, headers={"x-api-key": key}, timeout=INFO_TIMEOUT, follow_redirects=False)
        found = answer.json() if answer.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return frozenset()
    engines = found.get("engines") if isinstance(found, dict) and found.get("gateway") == "ipymusicgen" else None
    return frozenset(e for e in engines if isinstance(e, str)) if isinstance(engines, list) else frozenset()


def _rebuilt(attempt: Attempt) -> tuple[Any, WireRequest] | None:
    """The engine request and the exact body journalled for this attempt, or None when it cannot be sent as it
    was (no body journalled, or a request this version builds otherwise: never a different body under its key)."""
    from .engine_calls import BUILDERS, ENGINE_ID

    payload = attempt.payload
    provider, task_id, journalled = payload.get("provider"), payload.get("task_id"), payload.get("wire")
    if provider not in BUILDERS or not isinstance(task_id, str) or not ENGINE_ID.match(task_id):
        return None
    if not isinstance(journalled, dict) or not isinstance(journalled.get("json"), dict):
        return None
    try:
        request = build_engine_request(**{**journalled["request"], "provider": provider})
        wire = BUILDERS[provider][0](request)
    except Exception:
        return None
    if wire.url_path != journalled.get("path") or dict(wire.params) != journalled.get("params", {}):
        return None
    return request, dataclasses.replace(wire, json=journalled["json"])


def recover(calls: EngineCalls, unknown: Sequence[Attempt]) -> tuple[list[TaskRecord], list[Attempt]]:
    """Ask each unknown engine attempt's gateway again (see the module's docstring): the records of the songs it
    answered or settled, and the attempts still unknown."""
    from .engine_calls import EngineRun, _Ended

    settings = calls._client.settings
    served: dict[str, frozenset[str]] = {}
    got: list[TaskRecord] = []
    left: list[Attempt] = []
    for attempt in unknown:
        rebuilt = _rebuilt(attempt)
        provider = str(attempt.payload.get("provider"))
        key = settings.engine_key(provider) if rebuilt is not None else None
        base = settings.engine_base_url(provider) if rebuilt is not None else ""
        if rebuilt is None or not key or attempt.host.rstrip("/") != base or base.rstrip("/") in ENGINE_HOSTS:
            left.append(attempt)
            continue
        if base not in served:
            served[base] = gateway_engines(base, key)
        if provider not in served[base]:
            left.append(attempt)
            continue
        request, wire = rebuilt
        record = TaskRecord(id=attempt.payload["task_id"], status=1, title=request.title, provider=provider,
                            model=request.model_name, estimate_usd=attempt.payload.get("estimate_usd"))  # fmt: skip
        run = EngineRun(record.id, request, record, attempt.id)
        try:
            answer = calls._send(run, wire, base, key, {REPEAT_ONLY_HEADER: "1"})
        except _Ended as ended:
            if ended.charge is Charge.UNKNOWN:  # the gateway's truth: may have been charged; still unknown
                left.append(dataclasses.replace(attempt, note=ended.message))
                continue
            calls._fail(run, ended.message, ended.charge, ended.status)
            got.append(run.record)
            continue
        calls._finish(run, answer)
        got.append(run.record)
    return got, left
