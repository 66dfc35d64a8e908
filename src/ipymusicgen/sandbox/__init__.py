"""Local simulator of the music service: both hosts, a demo key, real audio, optional faults.

`from ipymusicgen.sandbox import Sandbox` is cheap; FastAPI, uvicorn and numpy load on `start()`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..config import DEMO_KEY

if TYPE_CHECKING:
    from .faults import FaultPlan, FaultRule
    from .sandbox import Sandbox

__all__ = ["DEMO_KEY", "FaultPlan", "FaultRule", "Sandbox"]

_LAZY = MappingProxyType(
    {
        "Sandbox": ".sandbox",
        "FaultPlan": ".faults",
        "FaultRule": ".faults",
        "parse_faults": ".faults",
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
