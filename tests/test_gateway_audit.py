"""Issue 31 read line by line against the gateway: every paid path priced by the cost table (and nothing paid
forwarded unpriced), key info that tells the caller only their own credits, budgets at their odd bounds, and a
user's token never shown again after `user add` (not in `user list`, spend, answers, logs or rows)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, paid_counts, post
from helpers import wait_until
from hostile_server import HostileServer, RawRequest, respond
from pg_server import postgres_server  # noqa: F401  (the session fixture)

from ipymusicgen.models.costs import ENV_COSTS
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.ledger_engines import open_ledger

TABLE = "MFV3.0=4,MFV2.0=5,MFV1.5X=6,MFV1.0=7,v4.5-plus=10,v4.5=8,v3.0=9,lyrics=2,wav=11,mp4=12,vibe=13,*=17"
"""A cost table unlike the defaults, so a price taken from anywhere but the table shows."""
PRICES = dict(entry.split("=") for entry in TABLE.split(","))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 10_000}, max_running=100) as server:
        yield server


@pytest.fixture
def database(tmp_path: Path) -> str:
    return str(tmp_path / "gateway.sqlite3")


@pytest.fixture
def gateway(database: str, upstream: Sandbox, clean_env: None) -> Iterator[GatewayThread]:
    upstream.reset()
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as running:
        yield running


SONG = "some-song-id"
PAID_CALLS = [
    ("/v1/music/generate", {"action": "auto", "style": "s", "mv": "MFV3.0"}, "MFV3.0"),
    ("/v1/music/generate", {"action": "custom", "style": "s", "lyrics": "la", "title": "t", "mv": "MFV2.0"}, "MFV2.0"),
    (
        "/v1/music/generate",
        {"action": "extend", "continue_song_id": SONG, "continue_at": 10, "mv": "MFV1.5X"},
        "MFV1.5X",
    ),
    ("/v1/music/generate", {"action": "concat", "continue_song_id": SONG}, "*"),
    ("/v1/music/generate", {"action": "upload", "audio_url": "https://files.example.net/a.mp3"}, "*"),
    ("/v1/music/generate", {"action": "upload_extend", "continue_song_id": SONG, "mv": "MFV1.0"}, "MFV1.0"),
    ("/v1/music/generate", {"action": "artist_consistency", "singer_id": "singer", "mv": "MFV9.9"}, "*"),
    ("/v1/music/generate", {"action": "auto", "style": "no model named"}, "*"),
    ("/v2/submit", {"is_auto": 1, "prompt": "p", "model_version": "v4.5"}, "v4.5"),
    ("/v2/submit", {"is_auto": 1, "prompt": "p", "model_version": "v3.0"}, "v3.0"),
    ("/v2/submit", {"is_auto": 1, "prompt": "p", "model_version": "v4.5-plus"}, "v4.5-plus"),
    ("/v2/submit", {"is_auto": 1, "prompt": "p", "model_version": "v9"}, "*"),
    ("/v1/lyrics", {"prompt": "rain"}, "lyrics"),
    (f"/v1/music/generate-wav?song_id={SONG}", None, "wav"),
    (f"/v1/music/generate-mp4?song_id={SONG}", None, "mp4"),
    (f"/v1/music/generate-vibe?song_id={SONG}", None, "vibe"),
]


def test_every_paid_path_of_the_service_reserves_its_cost_table_price(
    gateway: GatewayThread, database: str, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_COSTS, TABLE)
    token = add_user(database, "ada")
    for number, (path, body, _) in enumerate(PAID_CALLS):
        post(gateway.url, path, token, body, **{"Idempotency-Key": f"k{number}"})  # what upstream says: no matter
    rows = {row["idem_key"]: row for row in open_ledger(database).calls()}
    for number, (path, body, entry) in enumerate(PAID_CALLS):
        assert rows[f"k{number}"]["estimated"] == int(PRICES[entry]), (path, body)
    sent = {path: n for path, n in paid_counts(upstream).items() if path != "/v1/music/tasks"}  # tasks: owner look-ups
    assert sum(sent.values()) == len(PAID_CALLS), "each sent once, after its price was reserved"


def test_a_paid_call_over_a_budget_is_refused_by_its_table_price_for_the_song_extras_too(
    gateway: GatewayThread, database: str, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_COSTS, TABLE)
    token = add_user(database, "bo", budget=12)  # a WAV (11) fits, a voice (13) does not, nor the fallback (17)
    refused = post(gateway.url, f"/v1/music/generate-vibe?song_id={SONG}", token, None).json()
    assert refused["status"] == 400 and "bo's budget" in refused["message"]
    post(gateway.url, f"/v1/music/generate-wav?song_id={SONG}", token, None)  # no such song: refused, released
    assert post(gateway.url, "/v1/lyrics", token, {"prompt": "p"}).json()["status"] == 200
    assert paid_counts(upstream) == {"/v1/music/generate-wav": 1, "/v1/lyrics": 1}
    assert [(c["model"], c["estimated"]) for c in open_ledger(database).calls()] == [("wav", 11), (None, 2)]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/music/generate-stems?song_id=x"),  # a paid endpoint the gateway does not know: no price
        ("POST", "/v1/music/generate/"),  # redirected to the priced path (as the service does), never sent
        ("POST", "/v2/submit/extra"),
        ("PUT", "/v1/music/generate"),
        ("GET", "/v1/music/generate"),
        ("GET", "/v1/lyrics"),
        ("POST", "/v1/music/tasks?ids=a"),
        ("POST", "/v1/get_api_key_info"),
    ],
)
def test_a_path_or_method_the_gateway_has_no_price_for_is_refused_never_forwarded(
    gateway: GatewayThread, database: str, upstream: Sandbox, method: str, path: str
) -> None:
    token = add_user(database, "cy")
    answer = httpx.request(method, gateway.url + path, headers={"x-api-key": token}, json={"prompt": "p"})
    assert answer.status_code in (307, 404, 405)
    assert paid_counts(upstream) == {}
    assert open_ledger(database).calls() == []


def test_key_info_tells_the_caller_their_own_credits_and_nothing_of_the_upstream_account(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    straight = httpx.get(upstream.base_url + "/v1/get_api_key_info", headers={"x-api-key": CANARY_KEY}).json()["data"]
    token = add_user(database, "dee", budget=40)
    assert cli("team", "budget", "30", "--database", database)[0] == 0
    answer = httpx.get(gateway.url + "/v1/get_api_key_info", headers={"x-api-key": token})
    record = answer.json()["data"]
    assert record["key_music_counts"] == 30, "the smaller of dee's budget and the team's"
    assert record["key_name"] == "dee"
    for field in ("x_api_key", "email", "member_id", "key_name", "key_created_at", "key_updated_at"):
        if straight.get(field):
            assert str(straight[field]) not in answer.text, field
    assert CANARY_KEY not in answer.text and token not in answer.text
    assert cli("team", "budget", "0", "--database", database)[0] == 0
    assert (
        httpx.get(gateway.url + "/v1/get_api_key_info", headers={"x-api-key": token}).json()["data"]["key_music_counts"]
        == 0
    )


ODD_CREDITS = ["NaN", "nan", "inf", "-1", "-0", "1.5", "1e3", "", " 5", "+5", "0x10", "²", "١٢", "5 credits"]
HUGE_CREDITS = [str(2**63), str(10**30), "9" * 400]


@pytest.mark.parametrize("value", ODD_CREDITS + HUGE_CREDITS)
@pytest.mark.parametrize("command", ["user add", "user budget", "team budget"])
def test_an_odd_budget_is_refused_in_one_line_and_changes_nothing(
    database: str, command: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("user", "add", "eli", "--budget", "5", "--database", database)[0] == 0
    capsys.readouterr()
    args = {
        "user add": ["user", "add", "fay", "--database", database, "--budget", value],
        "user budget": ["user", "budget", "--database", database, "eli", value],
        "team budget": ["team", "budget", "--database", database, value],
    }[command]
    with pytest.raises(SystemExit) as exited:
        cli(*args)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "whole number of credits" in err, err
    assert "Traceback" not in err
    ledger = open_ledger(database)
    try:
        assert [(u.name, u.budget) for u in ledger.users()] == [("eli", 5)] and ledger.team_budget() is None
    finally:
        ledger.close()


def test_the_largest_budget_is_taken_and_holds(database: str) -> None:
    from ipymusicgen.gateway.cli import MAX_CREDITS

    assert cli("team", "budget", str(MAX_CREDITS), "--database", database)[0] == 0
    token = add_user(database, "gil", budget=MAX_CREDITS)
    assert token.startswith("mgw_")
    ledger = open_ledger(database)
    try:
        assert ledger.remaining("gil") == MAX_CREDITS
        assert ledger.reserve("gil", "k", "/v1/lyrics", None, 1).kind == "new"
        assert ledger.remaining("gil") == MAX_CREDITS - 1
    finally:
        ledger.close()


def test_a_budget_of_zero_refuses_every_paid_call_naming_whose_budget(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = add_user(database, "hal", budget=0)
    for path, body, _ in PAID_CALLS:
        sent = post(gateway.url, path, token, body)
        assert sent.status_code == 200, "the service's way: an error inside an HTTP 200"
        answer = sent.json()
        assert answer["status"] == 400 and answer["data"] is None
        assert answer["message"].startswith("Insufficient credits: no credits left in hal's budget (budget 0, spent 0;")
        assert answer["message"].endswith("Only the gateway's admin can raise it (gateway user budget hal N).")
    assert cli("user", "budget", "hal", "50", "--database", database)[0] == 0
    assert cli("team", "budget", "0", "--database", database)[0] == 0
    for path, body, _ in PAID_CALLS:
        answer = post(gateway.url, path, token, body).json()
        said = answer["message"]
        assert said.startswith("Insufficient credits: no credits left in the team budget (budget 0, spent 0;"), path
        assert said.endswith("(gateway team budget N)."), path
    assert paid_counts(upstream) == {}
    assert open_ledger(database).calls() == []


def test_a_token_is_shown_once_by_user_add_and_never_again(
    gateway: GatewayThread,
    database: str,
    upstream: Sandbox,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    code, out = cli("user", "add", "ivy", "--budget", "20", "--database", database)
    token = out.strip().splitlines()[-1]
    assert code == 0 and out.count(token) == 1 and out.rstrip("\n").endswith("\n" + token)
    capfd.readouterr()
    seen = [
        post(gateway.url, "/v1/music/generate", token, {"action": "auto", "style": "s", "mv": "MFV3.0"}).text,
        post(gateway.url, "/v1/music/generate", token, {"action": "nope"}).text,
        post(gateway.url, "/v1/lyrics", token, {"prompt": "p"}, host="evil.example").text,
        httpx.get(gateway.url + "/v1/get_api_key_info", headers={"x-api-key": token}).text,
        httpx.get(gateway.url + "/v1/music/tasks", headers={"x-api-key": token}).text,
        httpx.get(gateway.url + "/v1/get_api_key_info", headers={"x-api-key": token + "x"}).text,
    ]
    for args in (["user", "list"], ["spend"], ["spend", "--by", "model"], ["user", "budget", "ivy", "30"]):
        seen.append(cli(*args, "--database", database)[1])
    assert cli("user", "revoke", "ivy", "--database", database)[0] == 0
    seen.append(httpx.get(gateway.url + "/v1/get_api_key_info", headers={"x-api-key": token}).text)
    ledger = open_ledger(database)
    try:
        with ledger._cursor() as cur:
            seen += [repr(cur.all(f"SELECT * FROM {table}")) for table in ("users", "team", "calls", "tasks", "meter")]
    finally:
        ledger.close()
    seen += [Path(database).read_bytes().decode("latin-1")]
    seen += [p.read_bytes().decode("latin-1") for p in Path(database).parent.glob("gateway.sqlite3-*")]
    captured = capfd.readouterr()
    seen += [captured.out, captured.err, caplog.text]
    assert all(token not in text for text in seen)
    assert all(token[4:20] not in text for text in seen), "not even a part of it"
    assert any("ivy" in text for text in seen)  # the search ran over real text


@pytest.mark.parametrize("table", ["lyrics=0", "MFV3.0=-3", "wav=nan", "*=1.5", "MFV3.0"])
def test_serve_refuses_to_start_on_a_cost_table_that_would_send_calls_unpriced(
    database: str, table: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    started: list[dict] = []
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.append(kwargs))
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    monkeypatch.setenv(ENV_COSTS, table)
    assert cli("serve", "--database", database)[0] == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ENV_COSTS in err and len(err.strip().splitlines()) == 1
    assert started == [], "never served with a price the budgets cannot hold"
    monkeypatch.setenv(ENV_COSTS, "lyrics=1")
    assert cli("serve", "--database", database)[0] == 0 and len(started) == 1


@pytest.mark.slow  # starts, stops and starts a PostgreSQL server
def test_a_call_in_flight_when_postgresql_goes_down_answers_its_user_and_reaches_the_ledger_when_it_is_back(
    clean_env: None, request: pytest.FixtureRequest, hostile_server: Callable[..., HostileServer]
) -> None:
    server = request.getfixturevalue("postgres_server")
    database = server.new_database()
    release = threading.Event()
    generates: list[RawRequest] = []

    def upstream(raw: RawRequest, sock: socket.socket) -> None:
        """The service, holding each generate until the test lets it answer (state, not time)."""
        if raw.path == "/v1/music/generate":
            generates.append(raw)
            release.wait(60)
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"ids": [f"t{len(generates)}"]}})
        elif raw.path == "/v1/get_api_key_info":
            respond(sock, 200, {"status": 200, "message": "Success", "data": {"key_music_counts": 100}})
        else:
            respond(sock, 200, [])

    service = hostile_server(upstream)
    token = add_user(database, "ned", budget=20)
    body = {"action": "auto", "style": "s", "mv": "MFV3.0"}
    answers: list[httpx.Response] = []
    with GatewayThread(database, service.url, service.url) as gateway:
        sender = threading.Thread(
            target=lambda: answers.append(
                post(gateway.url, "/v1/music/generate", token, body, **{"Idempotency-Key": "f"})
            )
        )
        sender.start()
        wait_until(lambda: len(generates) == 1, "the call to reach upstream")
        server.halt()  # the ledger goes away while the call is upstream
        try:
            release.set()
            sender.join(60)
            (answer,) = answers  # charged upstream: its user gets the ids, kept until the ledger takes them
            assert answer.status_code == 200 and answer.json()["data"]["ids"] == ["t1"]
        finally:
            server.resume()
        wait_until(lambda: not len(gateway.gateway.backlog), "the kept answer written to the ledger")
        repeat = post(gateway.url, "/v1/music/generate", token, body, **{"Idempotency-Key": "f"})
        assert repeat.json() == answer.json(), "the first answer, never sent again"
        fresh = post(gateway.url, "/v1/music/generate", token, body, **{"Idempotency-Key": "g"})
        assert fresh.json()["status"] == 200, "the first call after the restart succeeds"
    assert len(generates) == 2
    _, out = cli("spend", "--database", database)
    assert out.splitlines()[1].split("\t")[:3] == ["ned", "2", "6"] and out.splitlines()[1].endswith("\t0")
    assert {c["idem_key"]: c["state"] for c in open_ledger(database).calls()} == {"f": "done", "g": "done"}
    assert open_ledger(database).remaining("ned") == 14, "both charged"
    with open_ledger(database) as ledger:
        assert ledger.tasks_of("ned") == ["t1", "t2"], "the call's task is ned's"


def test_none_lifts_a_users_or_the_teams_cap_as_if_never_set(database: str) -> None:
    add_user(database, "ola", budget=5)
    assert cli("team", "budget", "7", "--database", database)[0] == 0
    assert cli("user", "budget", "ola", "none", "--database", database) == (0, "ola: budget none (no cap)\n")
    assert cli("team", "budget", "none", "--database", database) == (0, "team budget none (no cap)\n")
    ledger = open_ledger(database)
    try:
        assert ledger.team_budget() is None and ledger.remaining("ola") is None
    finally:
        ledger.close()
    assert cli("user", "list", "--database", database)[1] == "ola\tbudget -\tspent 0\n"


def test_a_forged_host_is_refused_on_every_route_before_the_token_is_even_looked_at(
    gateway: GatewayThread, database: str, upstream: Sandbox
) -> None:
    token = add_user(database, "pia")
    for method, path, body in [
        ("GET", "/v1/music/tasks?ids=a", None),
        ("GET", "/v1/music/tasks", None),
        ("GET", "/v2/query?song_id=a", None),
        ("GET", "/v1/get_api_key_info", None),
        *(("POST", path, body) for path, body, _ in PAID_CALLS),
    ]:
        for sent in (token, "not-a-token"):
            headers = {"x-api-key": sent, "host": "evil.example:8790"}
            answer = httpx.request(method, gateway.url + path, json=body, headers=headers)
            assert answer.status_code == 403 and answer.json() == {"detail": "This host name is not served here"}, path
    assert paid_counts(upstream) == {} and open_ledger(database).calls() == []


@pytest.mark.parametrize("name", ["", "two words", "a/b", "x" * 65, "名前", "-dash-first"])
def test_a_bad_user_name_is_refused_in_one_line_before_any_ledger_is_made(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "gateway.sqlite3"
    with pytest.raises(SystemExit) as exited:
        cli("user", "add", "--database", str(database), "--", name)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1 and "user name" in err, err
    assert not database.exists()


def test_a_notebooks_install_does_not_bring_the_gateways_libraries_and_the_gateway_extra_does() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    names = {"psycopg", "uvloop", "httptools", "aiohttp"}

    def named(requirements: list[str]) -> set[str]:
        return {req.split("[")[0].split(">")[0].split(";")[0].split("=")[0].strip() for req in requirements}

    assert not named(project["dependencies"]) & names, "a notebook user never needs the gateway's server libraries"
    assert named(project["optional-dependencies"]["gateway"]) >= names


@pytest.mark.parametrize(
    ("missing", "database_url"),
    [("aiohttp", None), ("psycopg", "postgresql://gateway@127.0.0.1:1/musicgen")],
)
def test_serve_without_the_gateway_extra_says_what_to_install_in_one_line(
    missing: str,
    database_url: str | None,
    database: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_env: None,
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real_find_spec(name, *a)
    )
    started: list[dict] = []
    monkeypatch.setattr("ipymusicgen.gateway.server.serve", lambda **kwargs: started.append(kwargs))
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", CANARY_KEY)
    assert cli("serve", "--database", database_url or database)[0] == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and missing in err and "pip install 'ipymusicgen[gateway]'" in err, err
    assert started == []
    if database_url:  # the admin commands on a PostgreSQL ledger say the same
        assert cli("user", "list", "--database", database_url)[0] == 2
        assert "ipymusicgen[gateway]" in capsys.readouterr().err
