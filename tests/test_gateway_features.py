"""Every feature through a real team gateway, as a user of it sees it: MUSICGEN_BASE_URL and MUSICGEN_V2_BASE_URL
point at the gateway and MUSICGEN_API_KEY is the user's token, nothing else set up. The gateway fronts a keyed
sandbox whose only key is the canary, searched for in every output, widget state, file, tool result and log.
The whole-feature tests are `slow` (each drives a gateway, the sandbox and the feature's whole stack for some
seconds); the gateway faults they found keep a fast test each."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, paid_counts, post, settled
from helpers import wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from pg_server import postgres_server  # noqa: F401  (the session fixture)

from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.ledger_engines import open_ledger
from ipymusicgen.workspace import session

BUDGET = 200
UPSTREAM_SECRETS = (CANARY_KEY, "sandbox@example.invalid", "sandbox-member")
"""What the upstream account would tell about itself: the key, its e-mail and member id."""


@dataclass
class Team:
    gateway: GatewayThread
    database: str
    token: str
    folder: Path

    @property
    def journal(self) -> Path:
        return self.folder / "journal.sqlite3"

    def calls(self) -> list[dict[str, Any]]:
        ledger = open_ledger(self.database)
        try:
            return ledger.calls()
        finally:
            ledger.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    """The paid service behind the gateway: a sandbox that knows only the canary key."""
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000}) as server:
        yield server


@pytest.fixture
def engine() -> str:
    """The ledger's engine: SQLite unless a test parametrizes `engine` with "postgres" too."""
    return "sqlite"


@pytest.fixture
def team(
    upstream: Sandbox,
    engine: str,
    clean_env: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Team]:
    """A gateway on a ledger (SQLite, or a real PostgreSQL the tests start), one user (alice) with a budget, and
    this process set up as her notebook would be: the three variables, plus a private journal and archive (the
    test's own folder)."""
    upstream.reset()
    if engine == "postgres":
        database = request.getfixturevalue("postgres_server").new_database()
    else:
        database = str(tmp_path / "gateway.sqlite3")
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as gateway:
        token = add_user(database, "alice", budget=BUDGET)
        for name, value in gateway.env(token).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("MUSICGEN_JOURNAL", str(tmp_path / "journal.sqlite3"))
        monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
        monkeypatch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
        monkeypatch.setenv("MUSICGEN_POLL_INTERVAL", "0.05")
        monkeypatch.setenv("MUSICGEN_ANALYZE", "off")
        session.shutdown()
        try:
            yield Team(gateway, database, token, tmp_path)
        finally:
            session.shutdown()


def assert_no_upstream_secret(*texts: object) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        for secret in UPSTREAM_SECRETS:
            assert secret not in shown, f"{secret!r} leaked into {shown[:200]!r}"


def assert_no_canary_in_files(folder: Path) -> None:
    """Every file the test made (journal, archive, library, the gateway's ledger) searched for the canary, once
    the session's archiver has kept what it had in hand and the session is shut."""
    client = session.current_client()
    archiver = archiver_of(client) if client is not None else None
    if archiver is not None:
        assert archiver.join(30), "the archiver finished"
    session.shutdown()
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "journal.sqlite3" for p in files)
    for path in files:
        assert CANARY_KEY.encode() not in path.read_bytes(), path


@pytest.fixture
def shell(team: Team) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    names = set(ip.user_ns)
    with capture_output():
        ip.run_line_magic("load_ext", "ipymusicgen")
    ip.run_line_magic("config", "MusicGen.auto_watch = False")
    yield ip
    ip.run_line_magic("unload_ext", "ipymusicgen")
    ip.config.pop("MusicGen", None)
    for name in set(ip.user_ns) - names:
        ip.user_ns.pop(name, None)


# -- the magics ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_the_magics_make_songs_lyrics_extras_and_v2_through_the_gateway(
    team: Team,
    shell: InteractiveShell,
    upstream: Sandbox,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    with capture_output() as out:
        songs = shell.run_cell_magic("musicgen", "--wait --timeout 30", "lo-fi rain on a tin roof\n")
        lyrics = shell.run_line_magic("lyrics", "a song about the first snow")
        song_id = songs[0].id
        asked = shell.run_line_magic("musicgen_wav", song_id)
        wav = shell.run_line_magic("musicgen_wav", f"--yes {song_id}")
        v2 = shell.run_cell_magic("musicgen", "--v2 --wait --timeout 30", "dreamy synth pop\n")
        report = shell.run_line_magic("musicgen_key", "")
    assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
    assert lyrics and lyrics.title is not None
    assert asked is None and "Pay about" in out.stdout, "the paid extra asks first"
    assert wav is not None and (wav.path or wav.value)
    assert [s.state for s in v2] == [TaskState.COMPLETE] * 2
    calls = team.calls()  # each settles from its estimate to its measured cost when that can be told: either
    most = sum(max(c["estimated"], c["measured"] or 0) for c in calls)
    least = sum(min(c["estimated"], c["measured"] if c["measured"] is not None else c["estimated"]) for c in calls)
    assert report.info.key_name == "alice" and BUDGET - most <= report.info.key_music_counts <= BUDGET - least
    assert report.info.email is None and report.info.member_id is None
    assert {c["endpoint"] for c in calls} == {
        "/v1/music/generate",
        "/v1/lyrics",
        "/v1/music/generate-wav",
        "/v2/submit",
    }
    assert all(c["state"] == "done" for c in calls)
    with Journal(team.journal) as journal:  # the client journals the gateway as the real service it fronts
        attempts = {a.id for a in journal.attempts()}
    assert {c["idem_key"] for c in calls} == attempts, "each paid call went with its journal attempt id"
    assert paid_counts(upstream)["/v1/music/generate-wav"] == 1
    logged = capfd.readouterr()
    assert_no_upstream_secret(
        out.stdout, out.stderr, repr(report), report._repr_html_(), caplog.text, logged.out, logged.err
    )
    for value in (songs, v2, lyrics, wav):
        assert_no_upstream_secret(repr(value))
    assert_no_canary_in_files(team.folder)


# -- the song extras take a song's own id ---------------------------------------------------------------------------


def test_a_song_extra_takes_the_song_id_of_the_callers_own_task_and_nobody_elses(team: Team, upstream: Sandbox) -> None:
    """A v1 task's song has an id of its own (its record's `song_id`), which the client sends to the extras:
    the gateway finds it among the caller's own tasks' records; another user asking for it gets "no such song"."""
    session.get_client()  # nothing: the variables alone set the client up
    ids = post(team.gateway.url, "/v1/music/generate", team.token, {"action": "auto", "style": "x"}).json()
    task_ids = ids["data"]["ids"]
    records = session.get_client().wait(task_ids, timeout=30)
    song_id = records[0].song_id
    assert song_id and song_id not in task_ids
    bob = add_user(team.database, "bob")
    foreign = post(team.gateway.url, f"/v1/music/generate-wav?song_id={song_id}", bob, None).json()
    assert foreign["status"] != 200 and song_id in foreign["message"], "bob cannot pay for alice's song"
    wav = post(team.gateway.url, f"/v1/music/generate-wav?song_id={song_id}", team.token, None).json()
    assert wav["status"] == 200, wav
    assert paid_counts(upstream)["/v1/music/generate-wav"] == 2  # bob's went up as an id that does not exist


# -- the studio ---------------------------------------------------------------------------------------------------


def intent(made: Any, **content: Any) -> None:
    """What the browser sends: a custom message to the studio's view."""
    made.view._handle_custom_msg(content, [])


@pytest.mark.slow
def test_the_studio_asks_then_sends_once_through_the_gateway_and_shows_the_users_credits(
    team: Team, upstream: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    import ipymusicgen

    caplog.set_level(logging.DEBUG)
    made = ipymusicgen.studio()
    try:
        assert made.needs_confirm, "a token is a paid key: the studio asks first"
        made.refresh_key()
        intent(made, kind="input", form="song", name="style", value="lo-fi piano")
        assert made.view.panes["song"]["cost"] == f"uses about 3 credits (estimate) · {BUDGET} left"
        intent(made, kind="submit", form="song")
        assert made.view.panes["song"]["confirm"].startswith("Send this request? It uses about 3 credits")
        assert paid_counts(upstream) == {} and team.calls() == []
        intent(made, kind="confirm", form="song")
        pane = made.view.panes["song"]
        assert pane["status"] == "2 songs started" and len(made.watcher.ids) == 2, pane
        songs = made.watcher.wait(timeout=30)
        assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
        settled(team.database)
        intent(made, kind="tab", tab="key")
        intent(made, kind="refresh_key")
        (call,) = team.calls()
        charged = call["estimated"] if call["measured"] is None else call["measured"]  # never below the estimate
        assert made.view.key["credits"] == str(BUDGET - charged), "alice's own credits left"
        assert made.view.key["rows"][0][:2] == ["Key name", "alice"]
        state = json.dumps(made.view.get_state(), default=str) + json.dumps(made.watcher.get_state(), default=str)
        assert_no_upstream_secret(state, repr(made), caplog.text)
    finally:
        made.close()
    assert paid_counts(upstream)["/v1/music/generate"] == 1
    assert call["state"] == "done" and call["user"] == "alice"


# -- a batch ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_batch_with_a_budget_runs_and_runs_again_without_a_second_send(team: Team, upstream: Sandbox) -> None:
    rows = [{"style": f"row {i}", "mv": "MFV2.0"} for i in range(3)]  # 2 credits each
    first = session.get_client().batch(rows, name="team batch", budget=6, concurrency=2, stall_timeout=60)
    assert first.counts()["complete"] == 3
    session.shutdown()  # as a new kernel would: the journal knows the batch, the ledger its sends
    again = session.get_client().batch(rows, name="team batch", budget=6, concurrency=2, stall_timeout=60)
    assert again.counts()["complete"] == 3
    assert paid_counts(upstream)["/v1/music/generate"] == 3, "one upstream send per row"
    calls = team.calls()
    assert len(calls) == 3 and len({c["idem_key"] for c in calls}) == 3 and {c["state"] for c in calls} == {"done"}
    assert_no_canary_in_files(team.folder)


# -- the library and the lab -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_library_keeps_finds_and_measures_the_songs_and_counts_the_users_own_spend(
    team: Team, upstream: Sandbox
) -> None:
    import ipymusicgen

    client = session.get_client()
    made = client.generate(action="auto", style="harbour lights at dusk", mv="MFV3.0")
    songs = client.wait(list(made.ids), timeout=30, archived=True)
    assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
    bob = add_user(team.database, "bob")
    assert post(team.gateway.url, "/v1/music/generate", bob, {"action": "auto", "style": "x"}).status_code == 200

    library = ipymusicgen.library()
    found = library.songs(text="harbour")
    assert {s.id for s in found} == set(made.ids)
    assert all(library.archived_path(i) and library.archived_path(i).is_file() for i in made.ids)
    spend = library.spend().total
    assert spend["calls"] == 1 and spend["credits_estimated"] == 3, "alice's own call; bob's is not hers"

    measures = ipymusicgen.analyze(made.ids[0])
    assert measures.bpm and measures.bpm > 0
    peaks = ipymusicgen.waveform(made.ids[0])
    assert peaks.shape[1] == 2 and abs(peaks).max() > 0.01

    # a blind A/B of the two takes, voted through its widget messages (the listening minimum is tested on its own)
    view = ipymusicgen.compare(made, min_listen_s=0)
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": view.round}, [])
    (vote,) = library.compare_results(blind=True)
    assert {vote["winner"], vote["loser"]} == set(made.ids)
    assert_no_upstream_secret(json.dumps(view.get_state(), default=str), repr(found))
    assert_no_canary_in_files(team.folder)


# -- the agent server ---------------------------------------------------------------------------------------------


class Consent:
    """The user behind the agent's host: says yes to each paid question, and remembers them."""

    def __init__(self) -> None:
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: Any) -> Any:
        from mcp import types

        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"send": True})


@pytest.mark.slow
def test_the_agent_server_pays_with_consent_or_max_credits_through_the_gateway(
    team: Team, upstream: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    import anyio
    from mcp.client import Client

    from ipymusicgen.mcp import AgentDesk, build_server

    caplog.set_level(logging.DEBUG)
    workspace = session.current_workspace()  # what `python -m ipymusicgen mcp` serves, from the same variables
    desk = AgentDesk(workspace.client, database=workspace.db)
    consent = Consent()

    async def tools(*calls: tuple[str, dict[str, Any]], asker: Any = None) -> list[Any]:
        async with Client(build_server(desk), elicitation_callback=asker) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    def data(result: Any) -> dict[str, Any]:
        assert not result.is_error, result.content[0].text
        return json.loads(result.content[0].text)

    (asked,) = anyio.run(lambda: tools(("generate_song", {"style": "sea shanty"}), asker=consent))
    ids = data(asked)["task_ids"]
    assert consent.questions and consent.questions[0].startswith(f"Pay about 3 credits (the key has {BUDGET}")
    capped, v2 = anyio.run(
        lambda: tools(
            ("generate_song", {"style": "polka", "max_credits": 3}),
            ("generate_song_v2", {"prompt": "a waltz", "max_credits": 3}),
        )
    )
    ids += data(capped)["task_ids"]
    ids += data(v2)["task_ids"]
    waited, got, extra, account = anyio.run(
        lambda: tools(
            ("wait_for_songs", {"task_ids": ids, "timeout_s": 30}),
            ("get_songs", {"task_ids": ids}),
            ("make_extra", {"task_id": ids[0], "kind": "wav", "max_credits": 5}),
            ("account", {}),
        )
    )
    assert {s["state"] for s in data(waited)["songs"]} == {"ready"}
    assert [s["id"] for s in data(got)["songs"]] == ids
    assert data(extra)["sent"] is True and data(extra)["path"], data(extra)
    assert {c["endpoint"] for c in team.calls()} == {"/v1/music/generate", "/v2/submit", "/v1/music/generate-wav"}
    assert paid_counts(upstream) == {"/v1/music/generate": 2, "/v2/submit": 1} | {
        k: v for k, v in paid_counts(upstream).items() if k not in ("/v1/music/generate", "/v2/submit")
    }
    shown = [block.text for result in (asked, capped, v2, waited, got, extra, account) for block in result.content if
             getattr(block, "text", None)]  # fmt: skip
    left = data(account)["credits_left"]
    assert BUDGET - 9 - 5 <= left < BUDGET, "alice's own credits left (the upstream account has some 1000)"
    assert_no_upstream_secret(*shown, caplog.text, *consent.questions)
    assert_no_canary_in_files(team.folder)


def test_a_key_info_read_right_after_a_paid_call_measures_it(
    team: Team, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The studio reads the credits again the moment its Send is answered: that reading, the first since the call,
    measures it (before, it took the place of the measurer's baseline and the call stayed unmeasured for good)."""
    monkeypatch.setattr(team.gateway.gateway.measurer, "_quiet", 3600.0)  # the background reading never comes
    client = session.get_client()
    client.key_info()  # a baseline, as the studio's first view reads one
    client.generate(action="auto", style="x", mv="MFV3.0")
    left = client.key_info().key_music_counts
    (call,) = team.calls()
    assert call["measured"] is not None and left == BUDGET - call["measured"]


def test_a_reading_taken_while_a_call_is_in_flight_leaves_the_last_baseline_standing(tmp_path: Path) -> None:
    """One paid call right after another (a lyrics then a WAV, a song then its extra): the first call's reading is
    taken while the second is in flight. It measures nothing, and must not wipe the baseline: the second call's
    own reading then measures it (before, both stayed unmeasured for good)."""
    ledger = open_ledger(str(tmp_path / "ledger.sqlite3"))
    try:
        ledger.add_user("max", "hash-of-max", 20)
        ledger.meter(100)
        first = ledger.reserve("max", "a", "/v1/lyrics", "lyrics", 1).call_id
        ledger.finish(first, "done", 200, b"{}")
        assert ledger.meter(99) == 1, "a reading with no call named measures the one call since the last"
        second = ledger.reserve("max", "b", "/v1/music/generate-wav", "wav", 1).call_id
        assert ledger.meter(99, first) is None, "the second call is in flight: nothing can be told"
        ledger.finish(second, "done", 200, b"{}")
        assert ledger.meter(98, second) == 1
        assert [c["measured"] for c in ledger.calls()] == [1, 1]
    finally:
        ledger.close()


@pytest.mark.slow
def test_the_other_paid_extras_an_extend_a_singer_and_the_task_list_through_the_gateway(
    team: Team, shell: InteractiveShell, upstream: Sandbox
) -> None:
    """The neighbours of the WAV: a singer voice (vibe) by the song's own id, a song in that voice, an extension of
    the song, and the live task list: each through the gateway, each sent upstream once. The sandbox makes no MP4
    (it answers 501): the user hears that refusal as the service gave it, and nothing stays reserved."""
    with capture_output() as out:
        (song, _) = shell.run_line_magic("musicgen", "--wait --timeout 30 a harbour waltz")
        vibe = shell.run_line_magic("musicgen_vibe", f"--yes {song.id}")
        with pytest.raises(UsageError, match="501: MP4 export is not supported in the sandbox"):
            shell.run_line_magic("musicgen_mp4", f"--yes {song.id}")
        shell.user_ns.update(singer=vibe.value, sid=song.song_id)
        sung = shell.run_cell_magic("musicgen", "--singer-id {singer} --style soul --wait --timeout 30", "[Verse]\nla")
        longer = shell.run_cell_magic("musicgen", "--continue-song-id {sid} --continue-at 2 --wait", "[Verse]\nmore")
        table = shell.run_line_magic("musicgen_tasks", " ".join([song.id, sung[0].id, longer[0].id]))
    assert vibe is not None and vibe.value
    assert all(r.state is TaskState.COMPLETE for r in [*sung, *longer])
    assert len(table.rows) == 3 and {row["state"] for row in table.rows} == {"complete"}
    sent = paid_counts(upstream)
    assert (sent["/v1/music/generate-vibe"], sent["/v1/music/generate"], sent["/v1/music/generate-mp4"]) == (1, 3, 1)
    states = {c["endpoint"]: c["state"] for c in team.calls()}
    assert states.pop("/v1/music/generate-mp4") == "refused" and set(states.values()) == {"done"}
    assert len(team.calls()) == 5
    assert_no_upstream_secret(out.stdout, out.stderr, repr(table), repr(vibe))
    assert_no_canary_in_files(team.folder)


@pytest.mark.slow
def test_the_agent_server_process_works_from_the_three_variables_alone(team: Team, upstream: Sandbox) -> None:
    """`python -m ipymusicgen mcp` over stdio, as an agent host starts it with the user's environment: a song paid
    within max_credits, waited for and read back, the account the user's own; the canary nowhere, stderr
    included."""
    import os
    import sys

    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**os.environ, **team.gateway.env(team.token)}  # and this test's own journal and archive folders
    params = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp"], env=env)
    stderr_path = team.folder / "mcp-stderr.txt"

    async def run() -> list[Any]:
        with anyio.fail_after(120), stderr_path.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as mcp:
                await mcp.initialize()
                made = await mcp.call_tool("generate_song", {"style": "a sea shanty", "max_credits": 3})
                assert not made.is_error, made.content[0].text
                ids = json.loads(made.content[0].text)["task_ids"]
                waited = await mcp.call_tool("wait_for_songs", {"task_ids": ids, "timeout_s": 60})
                got = await mcp.call_tool("get_songs", {"task_ids": ids})
                account = await mcp.call_tool("account", {})
                return [made, waited, got, account]

    results = anyio.run(run)
    texts = [block.text for result in results for block in result.content if getattr(block, "text", None)]
    waited, got, account = (json.loads(result.content[0].text) for result in results[1:])
    assert {s["state"] for s in waited["songs"]} == {"ready"} and len(got["songs"]) == 2
    assert BUDGET - 3 <= account["credits_left"] < BUDGET and account["sandbox"] is False
    assert paid_counts(upstream)["/v1/music/generate"] == 1
    (call,) = team.calls()
    assert call["user"] == "alice" and call["state"] == "done"
    assert "agent server" in stderr_path.read_text()
    assert_no_upstream_secret(*texts, stderr_path.read_text())
    assert_no_canary_in_files(team.folder)


@pytest.mark.slow
def test_over_budget_the_magic_and_the_studio_say_whose_budget_and_send_nothing(
    team: Team, shell: InteractiveShell, upstream: Sandbox
) -> None:
    import ipymusicgen

    assert cli("user", "budget", "alice", "2", "--database", team.database)[0] == 0
    with capture_output() as out, pytest.raises(UsageError) as refused:
        shell.run_line_magic("musicgen", "--no-watch a song that costs 3")
    assert "alice's budget" in str(refused.value), str(refused.value) + out.stdout
    made = ipymusicgen.studio()
    try:
        intent(made, kind="input", form="song", name="style", value="lo-fi piano")
        intent(made, kind="submit", form="song")
        intent(made, kind="confirm", form="song")
        pane = made.view.panes["song"]
        assert pane["status"] == "nothing was started" and "alice's budget" in pane["error"], pane
    finally:
        made.close()
    assert paid_counts(upstream) == {} and team.calls() == []


def test_a_song_to_continue_must_be_the_callers_own_as_with_the_extras(team: Team, upstream: Sandbox) -> None:
    """An extend (or concat, upload_extend, a v2 continuation) names a song by id: bob naming alice's is answered
    exactly as bob naming a song that does not exist, and the upstream never continues alice's song for him."""
    client = session.get_client()
    (song, _) = client.wait(list(client.generate(action="auto", style="alice's tune").ids), timeout=30)
    bob = add_user(team.database, "bob")

    def extend(token: str, song_id: str) -> dict[str, Any]:
        body = {"action": "extend", "continue_song_id": song_id, "continue_at": 2, "lyrics": "more"}
        return post(team.gateway.url, "/v1/music/generate", token, body).json()

    def reasons(token: str, ids: list[str]) -> list[str]:
        def failed() -> list[dict[str, Any]]:
            answer = httpx.get(f"{team.gateway.url}/v1/music/tasks", params={"ids": ",".join(ids)},
                               headers={"x-api-key": token}).json()  # fmt: skip
            return [t for t in answer if t.get("fail_reason")]

        wait_until(lambda: len(failed()) == len(ids), "the tasks to fail")
        return [re.sub(r"missing-[0-9a-f]+", "ID", t["fail_reason"]) for t in failed()]

    for asked in (song.song_id, song.id):
        foreign, missing = extend(bob, asked), extend(bob, "no-such-song")
        shape = [(a["status"], a["message"].replace(seen, "ID"), len((a["data"] or {}).get("ids", [])))
                 for a, seen in ((foreign, asked), (missing, "no-such-song"))]  # fmt: skip
        assert shape[0] == shape[1]
        if foreign["status"] == 200:  # the service makes tasks that fail: their reasons tell nothing either
            assert reasons(bob, foreign["data"]["ids"]) == reasons(bob, missing["data"]["ids"])
            assert all(asked not in r for r in reasons(bob, foreign["data"]["ids"]))
    mine = extend(team.token, song.song_id)
    assert mine["status"] == 200
    longer = session.get_client().wait(mine["data"]["ids"], timeout=30)  # `user add` ran main(): a new client
    assert all(r.state is TaskState.COMPLETE for r in longer)

    v2_song = session.get_client().wait(
        session.get_client().submit_v2(prompt="alice v2", is_auto=1, model_version="v4.5"), timeout=30
    )[0]

    def continue_v2(token: str, song_id: str) -> httpx.Response:
        body = {"is_auto": 0, "prompt": "on", "lyrics": "more", "continue_song_id": song_id, "continue_at": 2}
        return post(team.gateway.url, "/v2/submit", token, {**body, "model_version": "v4.5"})

    foreign, missing = continue_v2(bob, v2_song.id), continue_v2(bob, "no-such-song")
    assert foreign.status_code == missing.status_code and foreign.json()["status"] != 200
    assert foreign.text.replace(v2_song.id, "ID") == missing.text.replace("no-such-song", "ID")
    assert continue_v2(team.token, v2_song.id).json()["status"] == 200
