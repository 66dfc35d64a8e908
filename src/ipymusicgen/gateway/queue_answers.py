"""What a caller sees of a queued create: the answer with the gateway's own ids, and those ids as they are polled.

A queued v1 create answers as the service does (`data.ids`, two ids) with `state: queued` and its `position` in line;
a v2 submit, its songs with status `QUEUED`. Polled (the service's own task and query routes), an id waiting shows
`state: queued` and its place (status 1: a client reads it as still being made); once sent, the upstream's records
under the ids the caller holds; a row refused or cancelled, failed with the reason; a send whose outcome is not known,
`state: unknown` until `gateway reconcile` settles it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from ..storage.ledger import DONE, QUEUED, REFUSED, UNKNOWN
from ..storage.ledger_queue import CANCELLED, WAITING, Looked, created_ids

V2_SUBMIT = "/v2/submit"
QUEUED_NOTE = "queued by the gateway: sent when one of the team key's seats frees"
UNKNOWN_NOTE = "sent, but its outcome is not known yet (the gateway sending it stopped): it may have been made"


def queued_answer(endpoint: str, ids: tuple[str, ...], position: int, waiting: bool = True) -> JSONResponse:
    """The create's answer while it waits: the service's shape, with the gateway's ids, its state and place (a
    repeat of its Idempotency-Key once it was sent: the same ids, sent; polling them tells the rest)."""
    place = {"position": position} if waiting else {}
    if endpoint == V2_SUBMIT:
        status = "QUEUED" if waiting else "RUNNING"
        songs = [{"song_id": i, "status": status, **place, "audio": "", "audio_duration": -1} for i in ids]
        return JSONResponse({"status": 200, "message": "Success", "data": songs})
    data = {"ids": list(ids), "state": "queued" if waiting else "sent", **place}
    if waiting:
        data["note"] = QUEUED_NOTE
    return JSONResponse({"status": 200, "message": "Success", "data": data})


def _message(body: bytes | None) -> str:
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    message = data.get("message") if isinstance(data, dict) else None
    return str(message) if message else "the upstream service refused it"


def asked(looked: Looked) -> dict[str, str]:
    """{stand-in: the id the caller asked for} of a row sent with a stand-in (`renamed` reads it back), else {}."""
    return {looked.swap[0]: looked.swap[1]} if looked.swap is not None else {}


def upstream_id(looked: Looked) -> str | None:
    """The upstream's id for one of the gateway's ids, once its call was answered."""
    if looked.call_state != DONE:
        return None
    made = created_ids(looked.body)
    return made[looked.index] if looked.index < len(made) else None


def record(looked: Looked, v2: bool) -> dict[str, Any]:
    """A stand-in record for a gateway id the upstream has no record under (waiting, sending, refused, unknown)."""
    if looked.row_state == WAITING or looked.call_state in (QUEUED,):
        state, status, extra = "queued", 1, {"position": looked.position, "note": QUEUED_NOTE}
    elif looked.row_state == CANCELLED or looked.call_state == REFUSED:
        state, status, extra = "failed", 3, {"fail_reason": _message(renamed(looked.body or b"", asked(looked)))}
    elif looked.call_state == UNKNOWN:
        state, status, extra = "unknown", 1, {"note": UNKNOWN_NOTE}
    elif looked.call_state == DONE:  # answered with fewer songs than ids handed out
        state, status, extra = "failed", 3, {"fail_reason": "the upstream made fewer songs than this call's ids"}
    else:  # being sent this moment
        state, status, extra = "queued", 1, {"position": 0, "note": "being sent"}
    if v2:
        words = {"queued": "QUEUED", "failed": "ERROR", "unknown": "RUNNING"}
        return {"song_id": looked.task_id, "status": words[state], "state": state, "audio_duration": -1, **extra}
    return {"id": looked.task_id, "status": status, "state": state, "duration": -1, "audio_url": "", **extra}


def renamed(body: bytes, names: dict[str, str]) -> bytes:
    """The upstream's ids in an answer read as the gateway's ids the caller holds (each id is a unique token)."""
    for theirs, ours in names.items():
        body = body.replace(json.dumps(theirs)[1:-1].encode(), json.dumps(ours)[1:-1].encode())
    return body


def with_records(answer: Response | None, records: list[dict[str, Any]], order: list[str], key: str) -> Response:
    """`answer` (a task or query answer, bare or wrapped) with `records` added, every record in the order asked; no
    answer, or an error: the records alone, wrapped as the service wraps its answers."""
    data: Any = None
    wrapped: dict[str, Any] | None = None
    if answer is not None and answer.status_code == 200:
        try:
            data = json.loads(bytes(answer.body))
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            wrapped, data = data, data["data"]
    if not isinstance(data, list):
        data, wrapped = [], {"status": 200, "message": "Success"}
    every = [r for r in data if isinstance(r, dict)] + records
    rank = {task_id: n for n, task_id in enumerate(order)}
    every.sort(key=lambda r: rank.get(str(r.get(key)), len(rank)))
    return JSONResponse({**wrapped, "data": every} if wrapped is not None else every)
