"""The service of the spec (v1 and v2) as an engine: its endpoints, its `x-api-key` header, and the ids a paid
answer created, read from every shape the client reads: the one rule the gateway's paid path, fair queue and batch
worker read them by.

The endpoint table itself stays in `client.responses` (the client's flows are built on it); this module is
where anyone but the client reads it.
"""

from __future__ import annotations

import json
from typing import Any

from .. import config
from ..client.responses import (
    GENERATE,
    KEY_INFO,
    LYRICS,
    MP4,
    QUERY_V2,
    SUBMIT_V2,
    TASKS,
    VIBE,
    WAV,
    _error_text,
    _is_envelope,
    v2_songs,
)
from ..models.providers import MUSICFUL
from ..models.schema import GenerateResult
from .wire import EngineRules

KEY_HEADER = "x-api-key"
ENV_KEY = config.ENV_KEY
ENV_BASE_URL = config.ENV_BASE_URL
DEFAULT_BASE_URL = config.DEFAULT_BASE_URL
ENDPOINTS = (GENERATE, LYRICS, KEY_INFO, TASKS, VIBE, WAV, MP4, SUBMIT_V2, QUERY_V2)


def created_ids(body: bytes | str | Any) -> list[str]:
    """Task ids (v1) or song ids (v2) a paid answer created, enveloped or bare, in any shape the client reads.

    The one rule for every reader (the gateway's paid path, its fair queue and its batch worker): an envelope
    whose status is not 200 created nothing that can be named, an empty id names nothing, and a hostile body
    (not JSON, nested too deeply) is no ids, never an error."""
    try:
        data = json.loads(body) if isinstance(body, bytes | str) else body
    except (ValueError, RecursionError):
        return []
    if _is_envelope(data):
        if str(data["status"]) != "200":
            return []
        data = data.get("data")
    if data is None:
        return []
    try:
        return [str(i) for i in GenerateResult.model_validate(data).ids if str(i)]
    except (ValueError, TypeError, RecursionError):
        pass
    try:
        return [str(s.id) for s in v2_songs(data) if s.id]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return []


RULES = EngineRules(
    provider=MUSICFUL,
    key_header=KEY_HEADER,
    env_key=ENV_KEY,
    env_base_url=ENV_BASE_URL,
    default_base_url=DEFAULT_BASE_URL,
    endpoints=ENDPOINTS,
    error_text=_error_text,
)
