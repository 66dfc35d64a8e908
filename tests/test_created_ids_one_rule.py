"""One rule for the ids a paid service answer created (`engines.musicful.created_ids`), used by every part of the
gateway that reads them: its paid path, the fair queue's ledger and pump, and the batch worker. Each is fed every
answer shape the engine module knows, and hostile ones; all must read what the engine rule reads."""

from __future__ import annotations

import json

import pytest

from ipymusicgen.engines import musicful
from ipymusicgen.gateway import app as gateway_app
from ipymusicgen.gateway import batch_worker
from ipymusicgen.storage import ledger_queue


def _envelope(data: object, status: object = 200) -> bytes:
    return json.dumps({"status": status, "message": "ok", "data": data}).encode()


SHAPES: list[tuple[str, bytes, list[str]]] = [
    ("v1 ids", _envelope({"ids": ["t1", "t2"]}), ["t1", "t2"]),
    ("v1 task_ids", _envelope({"task_ids": ["t3", "t4"]}), ["t3", "t4"]),
    ("v1 one task_id", _envelope({"task_id": "t5"}), ["t5"]),
    ("v1 a bare list of ids in the envelope", _envelope(["t6", "t7"]), ["t6", "t7"]),
    ("v1 numeric ids", _envelope({"ids": [41, 42]}), ["41", "42"]),
    ("v1 status as a digit string", _envelope({"ids": ["t8"]}, "200"), ["t8"]),
    ("v1 bare object", b'{"task_ids": ["t9"]}', ["t9"]),
    ("v2 songs", _envelope([{"song_id": "s1", "status": "running"}, {"song_id": "s2"}]), ["s1", "s2"]),
    ("v2 songs under songs", _envelope({"songs": [{"song_id": "s3"}]}), ["s3"]),
    ("v2 bare list", b'[{"song_id": "s4"}]', ["s4"]),
    # hostile or broken: nothing was created that can be named
    ("an error envelope naming ids", _envelope({"ids": ["leak"]}, 500), []),
    ("a refusal envelope naming ids", _envelope({"ids": ["leak"]}, 400), []),
    ("ids that are not ids", _envelope({"ids": [None, {"a": 1}, ["x"]]}), []),
    ("booleans as ids", _envelope({"ids": [True]}), []),
    ("empty ids", _envelope({"ids": ["", ""]}), []),
    ("songs without ids", _envelope([{"song_id": ""}, {"title": "x"}]), []),
    ("data null", _envelope(None), []),
    ("not JSON", b"<html>502 Bad Gateway</html>", []),
    ("not UTF-8", b"\xff\xfe\x00", []),
    ("empty", b"", []),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000, []),
    ("a JSON number", b"7", []),
]

CALLERS = {
    "gateway paid path": gateway_app._created_ids,
    "fair queue ledger": ledger_queue.created_ids,
    "batch worker": batch_worker.created_ids,
}


@pytest.mark.parametrize(("what", "body", "expected"), SHAPES, ids=[s[0] for s in SHAPES])
def test_the_engine_rule_reads_each_shape(what: str, body: bytes, expected: list[str]) -> None:
    assert musicful.created_ids(body) == expected


@pytest.mark.parametrize("caller", list(CALLERS), ids=list(CALLERS))
def test_every_gateway_part_reads_created_ids_by_the_engine_rule(caller: str) -> None:
    read = CALLERS[caller]
    wrong = {}
    for what, body, expected in SHAPES:
        try:
            got = read(body)
        except Exception as exc:  # a hostile answer must never break the caller
            got = f"raised {type(exc).__name__}"
        if got != expected:
            wrong[what] = got
    assert wrong == {}, f"{caller} reads created ids by another rule"
    assert read is musicful.created_ids  # no copy left to drift


def test_none_is_no_answer() -> None:
    assert musicful.created_ids(None) == []
