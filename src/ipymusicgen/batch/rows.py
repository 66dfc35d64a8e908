"""A batch's rows: validated whole before anything is sent, each with its request's hash (what a re-run compares
under the batch's name), and the errors a batch refuses with.

A DataFrame's NaN/None means "not given"; anywhere else a NaN is a value, refused naming its field.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import FieldProblem, MusicGenError, RequestValidationError
from ..models.providers import MUSICFUL, EngineRequest, build_engine_request, check_provider
from ..models.schema import V2Request, build_generate_request, build_v2_request


class BatchError(MusicGenError, ValueError):
    """A batch refused before anything was sent (a bad row, a changed row, over budget)."""


class BatchBudgetError(BatchError):
    """The batch's estimate is more than the budget or the music counts left; nothing was sent."""

    def __init__(self, message: str, *, estimate: int, budget: int | None, counts_left: int | None) -> None:
        super().__init__(message)
        self.estimate, self.budget, self.counts_left = estimate, budget, counts_left


class BatchFailedError(MusicGenError):
    """Raised by `Batch.raise_for_failures()` when rows failed or may have been sent without an answer."""


# ---------------------------------------------------------------------------------------------------
# Rows


@dataclass
class BatchRow:
    """One request of a batch and what became of it."""

    index: int
    request: Any
    v2: bool
    state: str = "pending"
    ids: list[str] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    error: str | None = None
    cost: int = 0
    """Estimated credits of its create (set once it is sent; 0 for a row not sent)."""
    request_hash: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    last_change: float | None = None
    rate_limited: int = 0
    """How many of its creates this run were answered 429 (nothing was created)."""
    stalled: bool = False
    """Failed because none of its songs changed state within the batch's `stall_timeout` (the engine decides it,
    the store keeps it): a re-run follows its songs again rather than report it failed."""

    @property
    def number(self) -> int:
        """The row as people count it, from 1: every table, view and message shows this (`index` is the store's)."""
        return self.index + 1

    @property
    def finished(self) -> bool:
        return self.state in ("complete", "failed", "unknown", "skipped")

    def describe(self) -> str:
        body = self.request.to_payload()
        text = body.get("style") or body.get("prompt") or body.get("title") or body.get("action") or ""
        return str(text)[:60]


def _plain(value: Any, *, nan_is_missing: bool = False) -> Any:
    """A cell as a plain value: numpy scalars → Python, 1.0 → 1. NaN → None ("not given") only for a DataFrame's
    cells (`nan_is_missing`), where pandas writes a missing value so; anywhere else a NaN is a value the models
    refuse, naming its field, as a single call refuses it."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        with contextlib.suppress(ValueError, TypeError):
            value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None if nan_is_missing else value
        if value.is_integer():
            return int(value)
    return value


def _is_dataframe(requests: Any) -> bool:
    return type(requests).__name__ == "DataFrame" and hasattr(requests, "to_dict")


def _raw_rows(requests: Any) -> list[Any]:
    if _is_dataframe(requests):
        return [
            {k: v for k, v in ((str(k), _plain(v, nan_is_missing=True)) for k, v in r.items()) if v is not None}
            for r in requests.to_dict("records")
        ]
    if isinstance(requests, Mapping | str):
        raise BatchError("batch() takes an iterable of requests (mappings or request models) or a DataFrame")
    return list(requests)


def _validate_row(raw: Any, allow_unknown_models: bool) -> tuple[Any, bool]:
    if isinstance(raw, EngineRequest):  # checked when it was built (a retried row, the studio's request)
        return raw, False
    if isinstance(raw, V2Request):
        return build_v2_request(raw, allow_unknown_models=allow_unknown_models), True
    if isinstance(raw, Mapping):
        body = {k: v for k, v in ((str(k), _plain(v)) for k, v in raw.items()) if v is not None}
        if "provider" in body:  # a row may name its engine: `musicful` (the service), `elevenlabs`, `lyria`
            provider = check_provider(body.pop("provider"))
            if provider != MUSICFUL:
                return build_engine_request(provider=provider, **body), False
        v2 = bool(body.pop("v2", False)) or "is_auto" in body or "model_version" in body
        if v2:
            return build_v2_request(body, allow_unknown_models=allow_unknown_models), True
        return build_generate_request(body, allow_unknown_models=allow_unknown_models), False
    if hasattr(raw, "to_payload") and hasattr(raw, "action"):
        return build_generate_request(raw, allow_unknown_models=allow_unknown_models), False
    why = f"a request is a mapping or a request model, not {type(raw).__name__}"
    raise RequestValidationError([FieldProblem("", why)])


def validate_rows(requests: Any, *, allow_unknown_models: bool = False) -> list[BatchRow]:
    """Every row validated, or `BatchError` naming each bad row and field; nothing is sent either way."""
    rows: list[BatchRow] = []
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, raw in enumerate(_raw_rows(requests)):
            try:
                request, v2 = _validate_row(raw, allow_unknown_models)
            except RequestValidationError as exc:
                problems.append(f"row {index + 1}: {exc}")
                continue
            rows.append(BatchRow(index, request, v2, request_hash=request_hash(request, v2)))
    if problems:
        shown = problems[:10] + ([f"... and {len(problems) - 10} more bad rows"] if len(problems) > 10 else [])
        raise BatchError("The batch was refused whole, nothing was sent:\n" + "\n".join(shown))
    if not rows:
        raise BatchError("The batch has no rows.")
    return rows


def request_hash(request: Any, v2: bool) -> str:
    text = json.dumps({"v2": v2, "body": request.to_payload()}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def derive_name(rows: list[BatchRow]) -> str:
    """A name from the requests' hash: re-running the same cell finds the same batch."""
    digest = hashlib.sha256("".join(r.request_hash for r in rows).encode()).hexdigest()
    return f"batch-{digest[:12]}"
