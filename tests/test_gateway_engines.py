"""The team gateway serves ElevenLabs and Gemini (Lyria) at the engines' own paths, in front of a keyed sandbox that
serves both, on both ledgers: the project's own client and the official `elevenlabs` SDK pointed at the gateway
with a gateway token as their key; dollar budgets (a credits budget never pays a dollar call), Idempotency-Key, an
answer lost after sending, `gateway spend --by provider`, and the team's key never in any answer, row or file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli
from hostile_server import HostileServer, RawRequest, respond
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)
from pydantic import SecretStr

from ipymusicgen.config import Settings
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger

pytest.importorskip("lameenc")  # the sandbox's MP3s
LYRIA_CLIP = "/v1beta/models/lyria-3-clip-preview:generateContent"


def lyria_body(text: str) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    """Every provider the gateway fronts: a sandbox that knows only the canary key."""
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def gateway(
    database: str, upstream: Sandbox, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayThread]:
    for name in ("ELEVENLABS_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    upstream.reset()
    engines = {"elevenlabs": (upstream.engines_base_url, CANARY_KEY), "lyria": (upstream.engines_base_url, CANARY_KEY)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        yield running


def dollar_user(database: str, name: str, dollars: str | None, credits: int | None = None) -> str:
    token = add_user(database, name, budget=credits)
    if dollars is not None:
        code, out = cli("user", "budget-usd", name, dollars, "--database", database)
        assert code == 0, out
    return token


def engine_counts(upstream: Sandbox) -> dict[str, int]:
    return {p: n for p, n in upstream.request_counts().items() if p.startswith(("/v1/music", "/v1beta", "/v1/models"))}


def el_post(gateway: GatewayThread, token: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/music", json=body, headers={"xi-api-key": token, **headers}, timeout=60)


def engine_rows(database: str) -> list[dict[str, Any]]:
    ledger = open_ledger(database)
    try:
        return ledger_dollars.calls(ledger)
    finally:
        ledger.close()


def client_through(gateway: GatewayThread, token: str, tmp_path: Path) -> Any:
    """The project's own client with the gateway as every provider's base URL and the gateway token as each key."""
    from ipymusicgen.workspace.workspace import build_client

    settings = Settings.from_env().with_changes(
        api_key=token,
        base_url=gateway.url,
        v2_base_url=gateway.url,
        elevenlabs_base_url=gateway.url,
        gemini_base_url=gateway.url,
        elevenlabs_api_key=SecretStr(token),
        gemini_api_key=SecretStr(token),
        journal_path=tmp_path / f"journal-{token[-6:]}.sqlite3",
        poll_interval=0.05,
    )
    return build_client(settings, archive=False)


def test_the_projects_client_makes_elevenlabs_and_lyria_songs_through_the_gateway(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    token = dollar_user(database, "alice", "5")
    client = client_through(gateway, token, tmp_path)
    try:
        ids = client.generate(provider="elevenlabs", style="lo-fi rain", seconds=5).ids
        ids += client.generate(provider="lyria", style="sea shanty").ids
        songs = client.wait(ids, interval=0.05, timeout=60)
        assert [s.state for s in songs] == [TaskState.COMPLETE, TaskState.COMPLETE], [s.fail_reason for s in songs]
        files = [client.download(s, tmp_path / "songs") for s in songs]
        assert all(f.stat().st_size > 1000 for f in files)
    finally:
        client.engine_calls.join(30)
        client.close()
    assert engine_counts(upstream) == {"/v1/music": 1, LYRIA_CLIP: 1}  # each sent once, on the team's key
    rows = engine_rows(database)
    assert sorted((r["provider"], r["state"], r["estimated_usd"]) for r in rows) == [  # sent in parallel
        ("elevenlabs", "done", 750_000),  # $0.75 a started minute
        ("lyria", "done", 40_000),  # a clip: $0.04
    ]
    code, out = cli("spend", "--by", "provider", "--database", database)
    assert code == 0
    lines = out.splitlines()
    assert "elevenlabs\tusd\t1\t$0.75\t-\t0" in lines and "lyria\tusd\t1\t$0.04\t-\t0" in lines
    assert not any(line.startswith("musicful") for line in lines)  # no credits were spent, none added
    _, shown = cli("user", "budget-usd", "alice", "5", "--database", database)
    assert "charged $0.79" in shown
    # the team's key is in no file: the ledger, the journal, the songs
    for path in [*tmp_path.rglob("*")]:
        if path.is_file():
            assert CANARY_KEY.encode() not in path.read_bytes(), path


def test_the_official_elevenlabs_sdk_composes_through_the_gateway_and_gets_its_own_errors(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    from elevenlabs import ElevenLabs
    from elevenlabs.core.api_error import ApiError

    token = dollar_user(database, "sam", "$2")
    sdk = ElevenLabs(api_key=token, base_url=gateway.url)
    audio = b"".join(sdk.music.compose(prompt="lo-fi rain", music_length_ms=4_000, request_options={"max_retries": 0}))
    assert len(audio) > 1000
    with pytest.raises(ApiError) as refused:
        b"".join(ElevenLabs(api_key="mgw_not_a_token", base_url=gateway.url).music.compose(prompt="x"))
    assert refused.value.status_code == 401
    assert refused.value.body == {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}}
    assert engine_counts(upstream) == {"/v1/music": 1}  # the bad token never reached the engine


def test_gemini_takes_the_token_as_its_header_or_its_key_parameter(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = dollar_user(database, "gil", "1")
    by_header = httpx.post(gateway.url + LYRIA_CLIP, json=lyria_body("folk"), headers={"x-goog-api-key": token})
    by_query = httpx.post(gateway.url + LYRIA_CLIP, params={"key": token}, json=lyria_body("folk"))
    assert by_header.status_code == by_query.status_code == 200, by_query.text
    assert by_query.json()["candidates"][0]["content"]["parts"]
    wrong = httpx.post(gateway.url + LYRIA_CLIP, params={"key": "mgw_wrong"}, json=lyria_body("folk"))
    assert wrong.status_code == 400 and wrong.json()["error"]["status"] == "INVALID_ARGUMENT"
    missing = httpx.post(gateway.url + LYRIA_CLIP, json=lyria_body("folk"))
    assert missing.status_code == 403 and missing.json()["error"]["status"] == "PERMISSION_DENIED"
    unknown = httpx.post(gateway.url + "/v1beta/models/lyria-9:generateContent", params={"key": token}, json={})
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    assert "no dollar price" in unknown.json()["error"]["message"]
    assert engine_counts(upstream) == {LYRIA_CLIP: 2}
    assert all(r["provider"] == "lyria" for r in engine_rows(database))


def test_googles_own_sdk_generates_a_lyria_clip_through_the_gateway(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types

    token = dollar_user(database, "hal", "1")

    def sdk(key: str) -> genai.Client:
        options = types.HttpOptions(base_url=gateway.url, retry_options=types.HttpRetryOptions(attempts=1))
        return genai.Client(api_key=key, http_options=options)

    client, wrong = sdk(token), sdk("mgw_wrong")  # each kept alive: a client closes its pool once collected
    answer = client.models.generate_content(
        model="lyria-3-clip-preview",
        contents="a cheerful folk song",
        config=types.GenerateContentConfig(response_modalities=["AUDIO", "TEXT"]),
    )
    assert [p.inline_data.mime_type for p in answer.parts if p.inline_data] == ["audio/mpeg"]
    with pytest.raises(genai_errors.ClientError) as refused:
        wrong.models.generate_content(model="lyria-3-clip-preview", contents="folk")
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    with pytest.raises(genai_errors.ClientError) as unknown:
        client.models.generate_content(model="lyria-9", contents="folk")
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    assert sum(engine_counts(upstream).values()) == 1
    assert [(r["provider"], r["state"]) for r in engine_rows(database)] == [("lyria", "done")]


def test_a_credits_budget_never_pays_a_dollar_call(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    token = dollar_user(database, "bob", None, credits=500)  # credits only
    answer = el_post(gateway, token, {"prompt": "x", "music_length_ms": 5_000})
    assert answer.status_code == 402
    message = answer.json()["detail"]["message"]
    assert "bob has no dollar budget" in message and "gateway user budget-usd bob 5" in message
    assert "\n" not in message
    client = client_through(gateway, token, tmp_path)
    try:
        [song] = client.wait(client.generate(provider="lyria", style="folk").ids, interval=0.05, timeout=30)
    finally:
        client.engine_calls.join(30)
        client.close()
    assert song.state == TaskState.FAILED and "no dollar budget" in song.fail_reason
    assert "not charged" in song.fail_reason
    assert engine_counts(upstream) == {} and engine_rows(database) == []
    ledger = open_ledger(database)
    try:
        assert ledger.totals()["bob"] == 0  # no credits moved
    finally:
        ledger.close()


def test_two_users_budgets_are_each_their_own_and_a_refusal_gives_the_price_back(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    carol = dollar_user(database, "carol", "1.00")
    dave = dollar_user(database, "dave", "2")
    assert el_post(gateway, carol, {"prompt": "a", "music_length_ms": 60_000}).status_code == 200  # $0.75
    over = el_post(gateway, carol, {"prompt": "b", "music_length_ms": 30_000})
    assert over.status_code == 402
    said = over.json()["detail"]["message"]
    assert "carol's dollar budget" in said and "charged $0.75" in said and "needs about $0.75" in said
    assert el_post(gateway, dave, {"prompt": "c", "music_length_ms": 10_000}).status_code == 200
    short = el_post(gateway, dave, {"prompt": "d", "music_length_ms": 2_000})  # ElevenLabs refuses < 3 s: 422
    assert short.status_code == 422
    assert engine_counts(upstream) == {"/v1/music": 3}
    ledger = open_ledger(database)
    try:
        standing = ledger_dollars.standing(ledger)
    finally:
        ledger.close()
    assert standing["carol"] == (1_000_000, 750_000)
    assert standing["dave"] == (2_000_000, 750_000)  # the refused call's $0.75 was given back
    assert standing[""] == (None, 1_500_000)
    _, listed = cli("user", "list", "--database", database)
    assert listed.splitlines() == [
        "carol\tbudget -\tspent 0\tdollars $1.00 charged $0.75",
        "dave\tbudget -\tspent 0\tdollars $2.00 charged $0.75",
    ]


def test_an_answer_lost_after_sending_may_have_been_charged_and_is_never_sent_again(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = dollar_user(database, "erin", "10")
    upstream.set_faults("drop:after=true:path=/v1/music")  # the engine made the song; its answer is lost
    body = {"prompt": "storm", "music_length_ms": 4_000}
    lost = el_post(gateway, token, body, **{"Idempotency-Key": "k-1"})
    assert lost.status_code == 503 and "may have been charged" in lost.json()["detail"]["message"]
    again = el_post(gateway, token, body, **{"Idempotency-Key": "k-1"})
    assert again.status_code == 503 and "NOT sent again" in again.json()["detail"]["message"]
    assert engine_counts(upstream) == {"/v1/music": 1}
    kept = el_post(gateway, token, body, **{"Idempotency-Key": "k-2"})
    assert kept.status_code == 200 and kept.headers["content-type"].startswith("audio/")
    repeat = el_post(gateway, token, body, **{"Idempotency-Key": "k-2"})
    assert repeat.status_code == 200 and repeat.content == kept.content  # the kept answer, not a second song
    other = el_post(gateway, token, {**body, "prompt": "calm"}, **{"Idempotency-Key": "k-2"})
    assert other.status_code == 409
    assert engine_counts(upstream) == {"/v1/music": 2}
    assert [r["state"] for r in engine_rows(database)] == ["unknown", "done"]
    _, out = cli("spend", "--by", "provider", "--database", database)
    assert "elevenlabs\tusd\t2\t$1.50\t-\t1" in out.splitlines()  # the unknown call keeps its price


def test_a_gateway_without_engine_keys_serves_no_engine_path(database: str, upstream: Sandbox, clean_env: None) -> None:
    token = add_user(database, "nia", budget=10)
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as plain:
        answer = httpx.post(plain.url + "/v1/music", json={"prompt": "x"}, headers={"xi-api-key": token})
    assert answer.status_code == 404


@pytest.fixture
def echoing(hostile_server: Callable[..., HostileServer]) -> HostileServer:
    """An engine that echoes the key it was sent in every form a server might: as is, upper case, URL-encoded,
    JSON-escaped, in a header and in a body that is not UTF-8."""
    import urllib.parse

    def handler(request: RawRequest, sock: Any) -> None:
        key = request.headers.get("xi-api-key") or request.headers.get("x-goog-api-key") or ""
        echoed = f"{key} {key.upper()} {urllib.parse.quote(key, safe='')} {json.dumps(key)[1:-1]}"
        respond(sock, 401, {"detail": {"status": "invalid_api_key", "message": f"bad key {echoed}"}},
                headers={"retry-after": key, "x-debug": key})  # fmt: skip

    return hostile_server(handler)


def test_the_team_key_is_scrubbed_from_every_engine_answer(
    tmp_path: Path, clean_env: None, upstream: Sandbox, echoing: HostileServer
) -> None:
    database = str(tmp_path / "gateway.sqlite3")
    key = "sk_Canary/Key+With=Odd"
    token = dollar_user(database, "ivy", "1")
    engines = {"elevenlabs": (echoing.url, key), "lyria": (echoing.url, key)}
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url, engines=engines) as running:
        answers = [
            el_post(running, token, {"prompt": "x", "music_length_ms": 4_000}),
            httpx.post(running.url + LYRIA_CLIP, params={"key": token}, json=lyria_body("x")),
        ]
    import urllib.parse

    forms = [key, key.upper(), key.lower(), urllib.parse.quote(key, safe=""), json.dumps(key)[1:-1]]
    for answer in answers:
        assert answer.status_code == 401
        seen = answer.text + json.dumps(dict(answer.headers))
        assert not [f for f in forms if f.lower() in seen.lower()], seen
        assert "x-debug" not in answer.headers
    assert [r.headers.get("xi-api-key") or r.headers.get("x-goog-api-key") for r in echoing.requests] == [key, key]
    assert all(token not in r.raw.decode("latin-1") for r in echoing.requests)  # the user's token stays here
    assert key.encode() not in Path(database).read_bytes()
    assert [r["state"] for r in engine_rows(database)] == ["refused", "refused"]  # a 401 charged nothing


def test_serve_takes_engine_keys_only_from_its_environment() -> None:
    import argparse

    from ipymusicgen.errors import InsecureTransportError
    from ipymusicgen.gateway.engine_cli import engines_from
    from ipymusicgen.gateway.server import check_upstream

    flags = argparse.Namespace(upstream_elevenlabs="https://el.example", upstream_gemini=None)
    with pytest.raises(ValueError, match="ELEVENLABS_API_KEY"):
        engines_from(flags, environ={})
    found = engines_from(flags, environ={"ELEVENLABS_API_KEY": "k1", "GEMINI_API_KEY": "k2"})
    assert found == {
        "elevenlabs": ("https://el.example", "k1"),
        "lyria": ("https://generativelanguage.googleapis.com", "k2"),
    }
    with pytest.raises(InsecureTransportError):
        check_upstream("http://engines.example.com", environ={})
    on_sandbox = argparse.Namespace(upstream_elevenlabs=None, upstream_gemini=None, engine_sandbox=("http://x", "d"))
    assert engines_from(on_sandbox, environ={"ELEVENLABS_API_KEY": "real"}) == {
        "elevenlabs": ("http://x", "d"),
        "lyria": ("http://x", "d"),
    }  # `serve --sandbox` never sends a real key anywhere


def test_a_price_is_never_below_the_table() -> None:
    from ipymusicgen.gateway.engine_routes import price_of

    assert price_of("elevenlabs", "music_v1", None) == Decimal("7.50")  # the engine picks: its longest, 10 min
    assert price_of("elevenlabs", "music_v1", 0.001) == Decimal("0.75")
    assert price_of("lyria", "lyria-3-pro-preview", None) == Decimal("0.08")


def test_stem_separation_goes_through_the_gateway_priced_by_the_uploads_length(
    gateway: GatewayThread, database: str, upstream: Sandbox, tmp_path: Path
) -> None:
    from ipymusicgen.client.engine_stems import separate_stems

    token = dollar_user(database, "jo", "5")
    song = el_post(gateway, token, {"prompt": "drums", "music_length_ms": 4_000})
    assert song.status_code == 200
    form = {"stem_variation_id": "two_stems_v1"}
    upload = {"file": ("song.mp3", song.content, "audio/mpeg")}
    headers = {"xi-api-key": token, "Idempotency-Key": "stems-1"}
    first = httpx.post(gateway.url + "/v1/music/stem-separation", data=form, files=upload, headers=headers, timeout=60)
    assert first.status_code == 200 and first.content.startswith(b"PK")
    again = httpx.post(gateway.url + "/v1/music/stem-separation", data=form, files=upload, headers=headers, timeout=60)
    assert again.content == first.content  # another multipart boundary, the same request: the kept answer
    empty = httpx.post(gateway.url + "/v1/music/stem-separation", data=form, headers={"xi-api-key": token})
    assert empty.status_code == 422
    client = client_through(gateway, token, tmp_path)
    try:
        zipped = separate_stems(client, "my-song", song.content, seconds=4.0)
    finally:
        client.close()
    assert zipped.read_bytes().startswith(b"PK")
    assert engine_counts(upstream) == {"/v1/music": 1, "/v1/music/stem-separation": 2}
    rows = engine_rows(database)
    assert [(r["model"], r["state"], r["estimated_usd"]) for r in rows] == [
        ("music_v1", "done", 750_000),
        ("stem-separation", "done", 750_000),  # a 4 s song: one started minute at $0.75
        ("stem-separation", "done", 750_000),
    ]
