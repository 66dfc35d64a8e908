"""Whether a queue seat held by a call whose outcome is unknown can be freed before `HOLD_MAX` (600 s).

A seat stands for one generation running upstream under the key. A call left unknown (an answer lost after the
upstream may have made its tasks, a replica killed mid-send) used to hold its seat for the whole `HOLD_MAX`, so one
lost answer took a seat from the team for ten minutes. The upstream can be asked, as `gateway reconcile` asks: its
task list (every task of the key) shows whether any task no user owns fits what the call sent (its style and title).
None fits: nothing of that call runs upstream, so its seat is free. Some fit: the seat is freed once they are all
finished, as a sent call's is. The call itself stays unknown in the ledger (its reservation kept): only `gateway
reconcile` settles money; this frees the seat alone. A call that cannot be asked about (a v2 submit, a generate
that sent no style, a task list that cannot be read) keeps its seat until `HOLD_MAX`, as before.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..models.tasks import v1_state
from ..storage.ledger import OpenCall
from .reconcile import DEAD_AFTER, GENERATE, _fits, _sent

if TYPE_CHECKING:
    from .app import Gateway

TASKS = "/v1/music/tasks"


_UNREAD: Any = object()


class UnknownSeats:
    """One watch round's look at the upstream for the unknown calls holding seats: the open calls and the key's task
    list are read once a round, however many seats such calls hold."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._calls: dict[int, OpenCall] | None = None
        self._records: Any = _UNREAD
        self._owned: set[str] = set()

    async def free(self, call_id: int) -> bool:
        """Whether nothing of unknown call `call_id` still runs upstream (False whenever that cannot be told)."""
        if self._calls is None:
            calls = await self.gateway.blocking(self.gateway.ledger.open_calls, DEAD_AFTER)
            self._calls = {c.id: c for c in calls}
        call = self._calls.get(call_id)
        if call is None or call.endpoint != GENERATE or _sent(call)[0] is None:
            return False
        if self._records is _UNREAD:
            self._records = _task_list(await self.gateway.upstream.aread_or_none(TASKS))
            if self._records is not None:
                ids = [r["id"] for r in self._records]
                self._owned = await self.gateway.blocking(self.gateway.ledger.owned_any, ids)
        if self._records is None:
            return False
        fitting = [r for r in self._records if r["id"] not in self._owned and _fits(r, _sent(call))]
        return all(_finished(r) for r in fitting)


def _task_list(answer: Any) -> list[dict[str, Any]] | None:
    if answer is None or answer.status_code != 200:
        return None
    try:
        data = json.loads(answer.body)
    except ValueError:
        return None
    records = data.get("data") if isinstance(data, dict) else data
    if not isinstance(records, list):
        return None
    return [r for r in records if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]]


def _finished(record: dict[str, Any]) -> bool:
    status, code = record.get("status"), record.get("fail_code")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    return v1_state(status, code, record.get("fail_reason") or None).finished
