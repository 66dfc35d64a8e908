"""Server-side validation with the package's own request models, answered the FastAPI way (422).

Using the client's models keeps the sandbox and the client agreeing on every bound of the spec.
The models warn about ignored fields (`IgnoredFieldsWarning`) for the benefit of the client's user;
on the server that would be noise, so it is silenced here, and only for frames of this module, so a
user's own warnings in the same process still show.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from ..errors import IgnoredFieldsWarning
from ..models.schema import GenerateRequest, LyricsRequest, V2Request, _V1Request

_MODULE_PATTERN = r"ipymusicgen\.sandbox\.validation"

_V1_ADAPTER: TypeAdapter[Any] = TypeAdapter(GenerateRequest)
V2_REFUSALS = frozenset({"continue_at_zero", "continue_at_too_late"})
"""v2 rule 3: a bad `continue_at` is a failed request (envelope 400), not a malformed one (422)."""


def _quiet() -> None:
    """(Re)install the filter: test runners and `catch_warnings` blocks restore the filter list."""
    for action, _message, category, module, _lineno in warnings.filters:
        ours = str(getattr(module, "pattern", module) or "").startswith(_MODULE_PATTERN)
        if action == "ignore" and category is IgnoredFieldsWarning and ours:
            return
    warnings.filterwarnings("ignore", category=IgnoredFieldsWarning, module=_MODULE_PATTERN)


class V2Refusal(Exception):
    """A v2 body that is well-formed but that the service refuses (envelope status 400)."""


def _plain_input(value: Any) -> Any:
    """What a 422 echoes of the input: simple values as they are, anything else as a short text."""
    if value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
        return value if not isinstance(value, str) else value[:200]
    return repr(value)[:200]


def _as_fastapi_error(exc: PydanticValidationError) -> RequestValidationError:
    errors = []
    for error in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": error["type"],
            "loc": ["body", *error["loc"]],
            "msg": error["msg"],
            "input": _plain_input(error.get("input")),
        }
        if error.get("ctx"):
            item["ctx"] = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in error["ctx"].items()}
        errors.append(item)
    return RequestValidationError(errors)


MAX_DEPTH = 32
"""Deepest nesting of a request body the sandbox reads (the service's bodies are flat objects)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth(value: Any) -> int:
    """Nesting depth, walked without recursion (so a hostile body cannot exhaust the stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def _invalid_json(message: str, position: int = 0) -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "json_invalid",
                "loc": ["body", position],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": message[:200]},
            }
        ]
    )


async def read_json(request: Request) -> Any:
    """The JSON body, or a FastAPI-shaped 422 if it is not JSON (NaN/Infinity and deep nesting included)."""
    raw = await request.body()
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise _invalid_json(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise _invalid_json(getattr(exc, "msg", str(exc)), getattr(exc, "pos", 0)) from None
    if _depth(body) > MAX_DEPTH:
        raise _invalid_json(f"nested more than {MAX_DEPTH} levels deep")
    return body


def validate_v1(body: Any) -> _V1Request:
    _quiet()
    try:
        return _V1_ADAPTER.validate_python(body)
    except PydanticValidationError as exc:
        raise _as_fastapi_error(exc) from None


def validate_v2(body: Any) -> V2Request:
    """A v2 request; `V2Refusal` for a bad `continue_at`, 422 for anything else."""
    _quiet()
    try:
        return V2Request.model_validate(body)
    except PydanticValidationError as exc:
        refusals = [e for e in exc.errors() if e["type"] in V2_REFUSALS]
        if refusals and len(refusals) == len(exc.errors()):
            raise V2Refusal(refusals[0]["msg"]) from None
        raise _as_fastapi_error(exc) from None


def validate_lyrics(body: Any) -> LyricsRequest:
    try:
        return LyricsRequest.model_validate(body)
    except PydanticValidationError as exc:
        raise _as_fastapi_error(exc) from None
