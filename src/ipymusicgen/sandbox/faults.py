"""Fault plans: which requests the sandbox answers badly, decided deterministically from a seed.

A client is only as good as its handling of a bad day, so the sandbox can rate-limit, fail, stall,
garble, or hang up on chosen requests. A plan is a list of rules; the first rule that matches a
request and fires decides its fault. Compact form (CLI, `MUSICGEN_SANDBOX_FAULTS`):

    rate_limit:count=2:path=/v1/music/tasks,server_error:rate=0.1,slow:seconds=2

Stdlib only: this module is imported by `Sandbox` before anything heavy is loaded.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

ENV_FAULTS = "MUSICGEN_SANDBOX_FAULTS"
FAULT_KINDS = ("rate_limit", "server_error", "slow", "malformed", "envelope_error", "task_fail", "drop")
CREATING_PATHS = ("/v1/music/generate", "/v2/submit")
"""`task_fail` only makes sense where tasks are made; without a `path` it applies to these."""
DEFAULT_SLOW_SECONDS = 3.0
DEFAULT_FAIL_CODE = 500
DEFAULT_FAIL_REASON = "Generation failed (sandbox fault injection)"
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class FaultRule:
    """One kind of fault for the next `count` matching requests, or each with probability `rate`.

    With neither `count` nor `rate` a rule fires once. `path` limits it to one path (or, for a path
    like `/files`, everything under it). `after=True` lets the request be handled first (credits are
    charged, tasks made) and only then spoils the answer: the nastiest case for a paid call.
    """

    kind: str
    count: int | None = None
    rate: float | None = None
    path: str | None = None
    seconds: float = DEFAULT_SLOW_SECONDS
    fail_code: int = DEFAULT_FAIL_CODE
    fail_reason: str = DEFAULT_FAIL_REASON
    after: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")
        if self.count is not None and self.count < 0:
            raise ValueError(f"{self.kind}: count must be 0 or more (got {self.count})")
        if self.rate is not None and not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"{self.kind}: rate must be between 0 and 1 (got {self.rate})")
        if self.count is None and self.rate is None:
            object.__setattr__(self, "count", 1)
        if self.path is not None and not self.path.startswith("/"):
            object.__setattr__(self, "path", "/" + self.path)

    def matches(self, path: str) -> bool:
        if self.path is None:
            return self.kind != "task_fail" or path in CREATING_PATHS
        base = self.path.rstrip("/") or "/"
        return path == base or path.startswith(base + "/")

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if value is not None}


def _rule_from_mapping(data: Mapping[str, Any]) -> FaultRule:
    known = set(FaultRule.__dataclass_fields__)
    aliases = {"code": "fail_code", "reason": "fail_reason", "times": "count", "p": "rate"}
    fields: dict[str, Any] = {}
    for name, value in data.items():
        name = aliases.get(name, name)
        if name not in known:
            raise ValueError(f"unknown fault option {name!r}; known: {', '.join(sorted(known))}")
        fields[name] = value
    if "kind" not in fields:
        raise ValueError("a fault needs a kind")
    for name, cast in (("count", int), ("rate", float), ("seconds", float), ("fail_code", int)):
        if fields.get(name) is not None:
            fields[name] = cast(fields[name])
    if isinstance(fields.get("after"), str):
        fields["after"] = fields["after"].strip().lower() in _TRUE
    return FaultRule(**fields)


def parse_rule(text: str) -> FaultRule:
    """`kind[:name=value]*`, e.g. `rate_limit:count=2:path=/v1/music/tasks`; a path may hold colons
    (`server_error:path=/v1beta/models/lyria-3-clip-preview:generateContent:count=2`)."""
    kind, *options = [part.strip() for part in text.strip().split(":")]
    data: dict[str, Any] = {"kind": kind}
    last = None
    for option in options:
        name, sep, value = option.partition("=")
        if not sep:
            if name == "after":
                data["after"] = True
                continue
            if last == "path":  # a path with a colon: Gemini's `/v1beta/models/lyria-3-clip-preview:generateContent`
                data["path"] += ":" + option
                continue
            raise ValueError(f"fault option {option!r} in {text!r} is not name=value")
        last = name.strip()
        data[last] = value.strip()
    return _rule_from_mapping(data)


def parse_faults(spec: str | Iterable[Any] | Mapping[str, Any] | FaultPlan | None) -> list[FaultRule]:
    """Rules from the compact string, a dict `{"spec": ...}` / `{"faults": [...]}`, or a list."""
    if spec is None:
        return []
    if isinstance(spec, FaultPlan):
        return spec.rules
    if isinstance(spec, FaultRule):
        return [spec]
    if isinstance(spec, str):
        return [parse_rule(part) for part in spec.split(",") if part.strip()]
    if isinstance(spec, Mapping):
        if "kind" in spec:
            return [_rule_from_mapping(spec)]
        if "spec" in spec or "faults" in spec:
            return parse_faults(spec.get("spec") or spec.get("faults") or [])
        raise ValueError("a fault mapping needs 'kind', 'spec' or 'faults'")
    rules: list[FaultRule] = []
    for item in spec:
        rules.extend(parse_faults(item))
    return rules


@dataclass
class FaultPlan:
    """Live rules with their remaining counts; thread-safe and reproducible for a given seed."""

    rules: list[FaultRule] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)

    @classmethod
    def from_spec(cls, spec: Any, seed: int = 0) -> FaultPlan:
        return cls(parse_faults(spec), seed=seed)

    def replace_rules(self, spec: Any) -> None:
        """Swap in new rules (and restart the random sequence, so a run can be replayed)."""
        rules = parse_faults(spec)
        with self._lock:
            self.rules = rules
            self._rng = random.Random(self.seed)

    def pick(self, path: str) -> FaultRule | None:
        """The fault for this request, if any; uses up one of the rule's count."""
        with self._lock:
            for index, rule in enumerate(self.rules):
                if not rule.matches(path) or rule.count == 0:
                    continue
                if rule.rate is not None and self._rng.random() >= rule.rate:
                    continue
                if rule.count is not None:
                    self.rules[index] = replace(rule, count=rule.count - 1)
                return rule
        return None

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.to_dict() for rule in self.rules]
