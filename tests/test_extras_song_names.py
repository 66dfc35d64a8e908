"""One song, one price, whatever it is called: a paid extra (WAV, MP4, singer voice) is claimed for the song, not for
the name typed. A v1 song has two names (its task id and the service's `song_id`, shown in the library, in an
export's song.json and taken by the service's `?song_id=`); ids are text around which spacing means nothing, and a
case variant of an id is taken as the same song (an id's case is never a second song: paying twice for one is the
risk). Every name form, from Python, the magics and the agent server, and two callers racing with different names,
pays once. A keyed sandbox plays the paid service; requests are counted where they arrive."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from test_mcp_tools import Asker, call, data

from ipymusicgen.archive.extras import held, make_extra
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

KEY = "k-song-names-93fe"
PAID_SANDBOX = {"keys": {KEY: 200}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
WAV = "/v1/music/generate-wav"
VIBE = "/v1/music/generate-vibe"


def finished_song(client: MusicClient, service: Sandbox, style: str = "tin whistle reel") -> tuple[str, str]:
    """(task id, service song id) of a finished, archived v1 song: two different names of one song."""
    ids = client.generate(action="auto", style=style).ids
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        song_id = library.song(ids[0]).song_id
    assert song_id and song_id != ids[0]
    return ids[0], song_id


def variants(name: str) -> list[str]:
    """Other spellings of one id the caller may type: spacing around it, another case."""
    return [f"  {name}\t", name.upper(), f"\n{name.title()} "]


def test_a_wav_made_under_the_song_id_is_reused_under_every_other_name(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = paid_clients()
    task_id, song_id = finished_song(client, service)
    made = make_extra(client, song_id, "wav")  # named as the library and song.json show it
    assert made.state == "made" and made.sent and made.song == task_id and made.path is not None
    for name in [task_id, song_id, *variants(task_id), *variants(song_id)]:
        again = make_extra(paid_clients(), name, "wav")  # another kernel on the journal, each name
        assert (again.state, again.sent, again.path, again.song) == ("reused", False, made.path, task_id), name
        assert "already made" in again.note and "nothing paid again" in again.note, again.note
        found = held(client, name, "wav")
        assert found is not None and found.state == "made" and found.song == task_id, name
    assert service.request_counts()[WAV] == 1


def test_a_voice_first_asked_by_an_upper_case_name_is_made_for_the_song_and_reused_by_its_task_id(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """The upper-case song id is sent to the service as the song's own id (the sandbox knows only that spelling)."""
    client = paid_clients()
    task_id, song_id = finished_song(client, service, "kazoo march")
    voice = make_extra(client, f" {song_id.upper()} ", "vibe")
    assert voice.state == "made" and voice.value and voice.song == task_id
    again = make_extra(paid_clients(), task_id, "vibe")
    assert again.state == "reused" and again.value == voice.value and not again.sent
    assert service.request_counts()[VIBE] == 1


def test_two_callers_racing_with_different_names_send_one_request(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    task_id, song_id = finished_song(paid_clients(), service, "racing banjo")
    names = [task_id, song_id.upper(), f" {song_id} ", task_id.upper()]
    start = threading.Barrier(len(names))
    results: list[Any] = []
    errors: list[BaseException] = []

    def press(client: MusicClient, name: str) -> None:
        start.wait()
        try:
            results.append(make_extra(client, name, "wav"))
        except BaseException as exc:  # said by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=press, args=(paid_clients(), name)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(results) == len(names)
    assert sorted(r.sent for r in results) == [False] * (len(names) - 1) + [True]
    assert {r.song for r in results} == {task_id}
    assert service.request_counts()[WAV] == 1


def test_the_agent_is_not_asked_again_for_a_wav_made_under_another_name(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = paid_clients()
    task_id, song_id = finished_song(client, service, "agent polka")
    made = make_extra(client, task_id, "wav")  # a notebook made it under the task id
    desk = AgentDesk(paid_clients())
    for name in (song_id, f"{task_id.upper()} "):
        asker = Asker()
        result = call(desk, "make_extra", {"task_id": name, "kind": "wav"}, asker=asker)
        answer = data(result)
        assert asker.questions == [], asker.questions  # nothing to pay: never asked
        assert answer["state"] == "reused" and answer["sent"] is False and answer["credits_estimate"] == 0
        assert answer["song"] == task_id and answer["path"] == str(made.path)
        assert "already made" in answer["note"]
        assert result.structured_content is not None and result.structured_content["state"] == "reused"
        assert "already made" in result.structured_content["note"]
    assert service.request_counts()[WAV] == 1


def test_the_agent_pays_once_under_the_song_id_and_python_reuses_it_by_the_task_id(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = paid_clients()
    task_id, song_id = finished_song(client, service, "agent first")
    asker = Asker()
    made = data(call(AgentDesk(paid_clients()), "make_extra", {"task_id": song_id, "kind": "wav"}, asker=asker))
    assert len(asker.questions) == 1 and made["state"] == "made" and made["song"] == task_id
    assert task_id in asker.questions[0]  # the question names the song as the journal knows it
    again = make_extra(client, task_id.upper(), "wav")
    assert again.state == "reused" and str(again.path) == made["path"]
    assert service.request_counts()[WAV] == 1


@pytest.fixture
def magic_shell(
    service: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:  # an InteractiveShell on the session configured like `paid_clients` (same journal, archive)
    from IPython.core.interactiveshell import InteractiveShell

    from ipymusicgen.workspace import session

    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    session.shutdown()
    session.configure(
        api_key=KEY, base_url=service.base_url, v2_base_url=service.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"), poll_interval=0.05,
    )  # fmt: skip
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "ipymusicgen")
        session.shutdown()
        session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval")))


def test_the_magic_says_already_made_for_every_name_and_asks_nothing(
    paid_clients: Callable[..., MusicClient], service: Sandbox, magic_shell: Any
) -> None:
    from IPython.utils.capture import capture_output

    client = paid_clients()
    task_id, song_id = finished_song(client, service, "magic jig")
    made = make_extra(client, task_id, "wav")
    for name in (song_id, f"'  {song_id.upper()}  '", task_id.title()):
        with capture_output() as out:
            result = magic_shell.run_line_magic("musicgen_wav", name)  # no --yes: a real key would ask
        assert result is not None and result.state == "reused" and result.path == made.path, out.stdout
        assert "Pay about" not in out.stdout and "already made" in out.stdout, out.stdout
    with capture_output() as out:  # an extra not made yet, named by the song id: asked, nothing sent
        asked = magic_shell.run_line_magic("musicgen_vibe", song_id.upper())
    assert asked is None and "Pay about" in out.stdout and service.request_counts().get(VIBE, 0) == 0
    with capture_output() as out:
        voice = magic_shell.run_line_magic("musicgen_vibe", f"--yes {song_id.upper()}")
        again = magic_shell.run_line_magic("musicgen_vibe", task_id)
    assert voice.state == "made" and again.state == "reused" and again.value == voice.value
    assert service.request_counts()[WAV] == 1 and service.request_counts()[VIBE] == 1


def test_a_name_no_song_carries_is_kept_as_typed_and_an_ambiguous_case_is_refused(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """An id the journal does not know is sent as typed (the service refuses it: nothing charged); two songs whose
    ids differ only in case are never merged by a third spelling: that name is refused, nothing sent."""
    from ipymusicgen.errors import RequestValidationError

    client = paid_clients()
    with pytest.raises(Exception, match=r"(?i)not found"):
        make_extra(client, "no-such-song-4b1", "wav")
    found = held(client, "no-such-song-4b1", "wav")
    assert found is not None and found.state == "rejected" and found.song == "no-such-song-4b1"
    with closing(sqlite3.connect(Path(client.journal.path))) as db, db:  # type: ignore[union-attr]
        for task in ("Twin-Case-1", "twin-case-1"):  # two songs another tool recorded, told apart only by case
            db.execute("INSERT INTO tasks (id, host, state, created_at, updated_at) VALUES (?, 'h', 'complete', 0, 0)",
                       (task,))  # fmt: skip
    with pytest.raises(RequestValidationError, match="more than one song"):
        make_extra(client, "TWIN-CASE-1", "wav")
    assert service.request_counts().get(WAV, 0) == 1  # only the unknown name's refused request


def test_clients_without_a_journal_learn_the_songs_names_from_the_service(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """No journal to read the names from (journal=False: extras kept in a file of the process): the service's task
    query (free) says which song a name is, so the song id after the task id pays nothing again."""
    from ipymusicgen.workspace.workspace import build_client

    task_id, song_id = finished_song(paid_clients(), service, "no journal waltz")
    settings = paid_clients().settings
    clients = [build_client(settings, journal=False, archive=False) for _ in range(2)]
    try:
        voice = make_extra(clients[0], task_id, "vibe")
        again = make_extra(clients[1], song_id, "vibe")
    finally:
        for client in clients:
            client.close()
    assert voice.state == "made" and (again.state, again.value, again.song) == ("reused", voice.value, task_id)
    assert service.request_counts()[VIBE] == 1


def test_a_wav_is_kept_when_the_archivers_store_closes_during_its_download(
    paid_clients: Callable[..., MusicClient], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archiver's worker closes its library store when it goes idle, which may be while a WAV downloads: the
    WAV is still kept and recorded (it failed now and then with 'Cannot operate on a closed database')."""
    from ipymusicgen.archive.archiver import archiver_of

    client = paid_clients()
    task_id, _ = finished_song(client, service, "idle worker")
    archiver = archiver_of(client)
    assert archiver is not None and archiver.store is not None
    download = client.download

    def download_then_close(*args: Any, **kwargs: Any) -> Path:
        got = download(*args, **kwargs)
        archiver.close()  # as the worker's idle exit closes its store
        return got

    monkeypatch.setattr(client, "download", download_then_close)
    made = make_extra(client, task_id, "wav")
    assert made.state == "made" and made.path is not None and made.path.is_file()
    with Library(client.journal.path) as library:  # type: ignore[union-attr]
        assert library.song(task_id).wav_path == str(made.path)


def test_the_archive_wav_helper_is_the_same_paid_once_wav_under_any_name(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """`ipymusicgen.archive.archive_wav(id, client=...)` (docs/library.md) sent a new paid WAV request on every call;
    it is the song's one WAV now, whatever the song is called."""
    import ipymusicgen.archive

    client = paid_clients()
    task_id, song_id = finished_song(client, service, "helper hornpipe")
    first = ipymusicgen.archive.archive_wav(song_id, client=client)
    again = ipymusicgen.archive.archive_wav(task_id.upper(), client=paid_clients())
    made = make_extra(client, task_id, "wav")
    assert first == again == made.path and first.is_file() and made.state == "reused"
    assert service.request_counts()[WAV] == 1
    from ipymusicgen.workspace.workspace import build_client

    with build_client(client.settings, archive=False) as unarchived, pytest.raises(RuntimeError, match="not archive"):
        ipymusicgen.archive.archive_wav(task_id, client=unarchived)
    assert service.request_counts()[WAV] == 1  # refused before anything is sent


def test_the_agent_and_a_notebook_racing_under_two_names_send_one_request(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    task_id, song_id = finished_song(paid_clients(), service, "race reel")
    desk, notebook = AgentDesk(paid_clients()), paid_clients()
    start = threading.Barrier(2)
    answers: dict[str, Any] = {}

    def agent() -> None:
        start.wait()
        answers["agent"] = data(call(desk, "make_extra", {"task_id": song_id.upper(), "kind": "wav"}, asker=Asker()))

    def kernel() -> None:
        start.wait()
        answers["kernel"] = make_extra(notebook, f" {task_id} ", "wav").as_dict()

    threads = [threading.Thread(target=agent), threading.Thread(target=kernel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert set(answers) == {"agent", "kernel"}, answers
    assert sorted(a["sent"] for a in answers.values()) == [False, True]
    assert {a["song"] for a in answers.values()} == {task_id}
    assert service.request_counts()[WAV] == 1
