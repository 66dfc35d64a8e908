"""The team gateway: one upstream key, one budget and one ledger for many notebooks and machines.

It speaks the service's own API (v1 and v2 on one host), so a notebook points `MUSICGEN_BASE_URL` and
`MUSICGEN_V2_BASE_URL` at it and uses its user token as `MUSICGEN_API_KEY`; it holds the only copy of the
upstream key (`MUSICGEN_UPSTREAM_KEY`) and enforces budgets and idempotency on a shared ledger.
"""

from __future__ import annotations

from .app import Gateway, create_app

__all__ = ["Gateway", "create_app"]
