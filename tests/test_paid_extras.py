"""Paid extras (a song's WAV, MP4, singer voice) are paid for once per (song, kind): journalled and claimed
before they are sent, archived beside the song, and reused by a second press, a second client on the same
journal (another kernel) and the agent server. A keyed sandbox plays the real (paid) service; requests are
counted where they arrive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_mcp_tools import Asker, call, data

from ipymusicgen.archive.extras import UnknownExtraError, held, make_extra
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal

KEY = "k-extras-secret-51c2"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
WAV = "/v1/music/generate-wav"
MP4 = "/v1/music/generate-mp4"


def finished_song(client: MusicClient, service: Sandbox) -> str:
    ids = client.generate(action="auto", style="harbour bells").ids
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    return ids[0]


def test_a_wav_pressed_twice_and_asked_by_a_second_kernel_is_paid_once(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    first = paid_clients()
    song = finished_song(first, service)
    made = make_extra(first, song, "wav")
    assert made.state == "made" and made.sent and made.path is not None and made.path.is_file()
    assert made.path.parent == tmp_path / "archive" and made.path.suffix == ".wav"
    with Library(tmp_path / "journal.sqlite3") as library:  # beside the song, under its name
        mp3 = Path(library.archived_path(song))
        assert made.path.stem == mp3.stem and library.song(song).wav_path == str(made.path)
    again = make_extra(first, song, "wav")
    other = paid_clients()  # another kernel on the same journal
    elsewhere = make_extra(other, song, "wav")
    assert (again.state, again.sent, again.path) == ("reused", False, made.path)
    assert (elsewhere.state, elsewhere.sent, elsewhere.path) == ("reused", False, made.path)
    assert "nothing paid again" in elsewhere.note
    desk = AgentDesk(paid_clients())  # and the agent server, through the SDK's client
    asker = Asker()
    agent = data(call(desk, "make_extra", {"task_id": song, "kind": "wav"}, asker=asker))
    assert agent["state"] == "reused" and agent["path"] == str(made.path) and agent["credits_estimate"] == 0
    assert asker.questions == []  # nothing to pay, nothing to ask
    assert service.request_counts()[WAV] == 1
    attempts = [a for a in Journal(tmp_path / "journal.sqlite3").attempts() if a.endpoint == "generate-wav"]
    assert len(attempts) == 1 and set(attempts[0].payload) == {"song_id"}  # journalled like any paid call
    assert attempts[0].outcome == "submitted"  # answered: not left pending (read as "may be charged" later)


def test_a_wav_whose_answer_was_lost_is_unknown_and_never_resent_unless_forced(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = paid_clients(max_retries=0)
    song = finished_song(client, service)
    service.set_faults(f"server_error:count=1:path={WAV}")
    with pytest.raises(Exception, match=r"(?i)charged|outcome|500"):
        make_extra(client, song, "wav")
    found = held(client, song, "wav")
    assert found is not None and found.state == "unknown"
    with pytest.raises(UnknownExtraError, match=r"nothing was sent again.*--force"):
        make_extra(paid_clients(), song, "wav")
    asker = Asker()  # nor by an agent: it is told, not asked to pay
    said = call(AgentDesk(paid_clients()), "make_extra", {"task_id": song, "kind": "wav"}, asker=asker)
    assert said.is_error and "may have been charged" in said.content[0].text and asker.questions == []
    assert service.request_counts()[WAV] == 1
    forced = make_extra(client, song, "wav", force=True)
    assert forced.state == "made" and service.request_counts()[WAV] == 2


def test_a_refused_extra_costs_nothing_and_may_be_asked_again(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """The sandbox refuses MP4 (501: not done); a refusal is not a charge, so the next press asks again."""
    client = paid_clients()
    song = finished_song(client, service)
    for _ in range(2):
        with pytest.raises(Exception, match="MP4"):
            make_extra(client, song, "mp4")
        found = held(client, song, "mp4")
        assert found is not None and found.state == "rejected"
    assert service.request_counts()[MP4] == 2


def test_a_singer_voice_is_a_value_made_once(paid_clients: Callable[..., MusicClient], service: Sandbox) -> None:
    client = paid_clients()
    song = finished_song(client, service)
    voice = make_extra(client, song, "vibe")
    again = make_extra(paid_clients(), song, "vibe")
    assert voice.value and voice.path is None and again.value == voice.value and again.state == "reused"
    assert service.request_counts()["/v1/music/generate-vibe"] == 1


def test_an_extra_is_refused_without_a_key_and_for_an_unknown_kind(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    from ipymusicgen.errors import MissingKeyError, RequestValidationError

    with pytest.raises(RequestValidationError, match="kind"):
        make_extra(paid_clients(), "t1", "flac")
    with pytest.raises(MissingKeyError):
        make_extra(paid_clients(api_key=None), "t1", "wav")
    found = held(paid_clients(), "t1", "wav")
    assert found is None or found.state == "rejected"  # a refusal before sending claims nothing for good
    assert service.request_counts().get(WAV, 0) == 0


def test_the_agent_asks_first_pays_once_and_a_notebook_then_reuses_it(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = paid_clients()
    song = finished_song(client, service)
    desk = AgentDesk(paid_clients())
    declined = data(call(desk, "make_extra", {"task_id": song, "kind": "wav"}, asker=Asker("decline")))
    assert declined["state"] == "declined" and service.request_counts().get(WAV, 0) == 0
    asker = Asker()
    made = data(call(desk, "make_extra", {"task_id": song, "kind": "wav"}, asker=asker))
    (question,) = asker.questions
    assert question.startswith("Pay about 3 credits (the key has") and "WAV" in question
    assert made["state"] == "made" and made["sent"] and Path(made["path"]).is_file()
    again = data(call(desk, "make_extra", {"task_id": song, "kind": "wav"}, asker=Asker()))
    reused = make_extra(client, song, "wav")  # the notebook's kernel
    assert again["state"] == reused.state == "reused" and str(reused.path) == made["path"]
    assert service.request_counts()[WAV] == 1


def test_the_cards_wav_asks_first_sends_once_and_then_reuses_in_another_watcher(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    from ipymusicgen.widgets import TaskWatcher

    client = paid_clients()
    ids = client.generate(action="auto", style="cards").ids
    watchers = [
        TaskWatcher(ids, client=client, autostart=False),
        TaskWatcher(ids, client=paid_clients(), autostart=False),
    ]
    try:
        service.clock.stages(10)  # type: ignore[attr-defined]
        for watcher in watchers:
            watcher.poll_once()
        first, other = watchers
        song = ids[0]
        assert "wav" in first.card(song).data()["actions"] and "mp4" in first.card(song).data()["actions"]
        first._handle_custom_msg({"kind": "wav", "id": song}, [])
        note = first.card(song).note
        assert note.startswith("Pay about 3 credit(s) for this song's WAV?") and "press WAV again" in note
        assert service.request_counts().get(WAV, 0) == 0
        first._handle_custom_msg({"kind": "wav", "id": song}, [])
        assert "WAV made and kept" in first.card(song).note and service.request_counts()[WAV] == 1
        first._handle_custom_msg({"kind": "wav", "id": song}, [])  # a second press: reused, not asked
        other._handle_custom_msg({"kind": "wav", "id": song}, [])  # another kernel's card: reused, not asked
        for watcher in watchers:
            assert "nothing paid again" in watcher.card(song).note, watcher.card(song).note
        assert service.request_counts()[WAV] == 1
    finally:
        for watcher in watchers:
            watcher.close()


def test_the_magics_ask_first_then_send_once_and_python_reuses(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import ipymusicgen
    from ipymusicgen.workspace import session

    song = finished_song(paid_clients(), service)
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    session.shutdown()
    session.configure(
        api_key=KEY, base_url=service.base_url, v2_base_url=service.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"), poll_interval=0.05,
    )  # fmt: skip
    shell = InteractiveShell.instance()
    try:
        with capture_output() as out:
            shell.run_line_magic("load_ext", "ipymusicgen")
            asked = shell.run_line_magic("musicgen_wav", song)
        assert asked is None and service.request_counts().get(WAV, 0) == 0
        line = out.stdout.strip().splitlines()[-1]
        assert line.startswith("Pay about 3 credit(s) (the key has ") and f"%musicgen_wav --yes {song}" in line
        with capture_output() as out:
            made = shell.run_line_magic("musicgen_wav", f"--yes {song}")
            again = shell.run_line_magic("musicgen_wav", song)  # made before: no ask, no charge
        assert made.state == "made" and made.path.is_file() and again.state == "reused" and again.path == made.path
        assert "nothing paid again" in out.stdout
        assert ipymusicgen.make_extra(song, "wav").path == made.path  # from Python, on the shared client
        assert service.request_counts()[WAV] == 1
        with pytest.raises(Exception, match="Usage: %musicgen_mp4"):
            shell.run_line_magic("musicgen_mp4", "--loud x")
        help_text = shell.find_line_magic("musicgen_wav").__doc__ or ""
        assert "made once" in help_text and "--yes" in help_text  # what `%musicgen_wav?` shows
    finally:
        shell.run_line_magic("unload_ext", "ipymusicgen")
        session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval")))


def test_two_kernels_pressing_at_once_send_one_request(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    import threading

    song = finished_song(paid_clients(), service)
    clients = [paid_clients(), paid_clients()]
    start = threading.Barrier(2)
    results: list[Any] = []

    def press(client: MusicClient) -> None:
        start.wait()
        results.append(make_extra(client, song, "wav"))

    threads = [threading.Thread(target=press, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r.sent for r in results) == [False, True]
    assert {r.state for r in results} <= {"made", "reused", "elsewhere"}
    assert service.request_counts()[WAV] == 1


@pytest.mark.slow  # starts a second Python process (another kernel) on the same journal
def test_another_process_on_the_journal_reuses_the_wav(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    client = paid_clients()
    song = finished_song(client, service)
    made = make_extra(client, song, "wav")
    code = (
        "import json, sys\n"
        "from ipymusicgen.workspace.workspace import build_client\n"
        "from ipymusicgen.archive.extras import make_extra\n"
        "from ipymusicgen.config import Settings\n"
        "base, journal, archive, song = sys.argv[1:]\n"
        f"settings = Settings.from_env().with_changes(api_key={KEY!r}, base_url=base, v2_base_url=base,"
        " journal_path=journal)\n"
        "with build_client(settings, archive=archive) as client:\n"
        "    print(json.dumps(make_extra(client, song, 'wav').as_dict()))\n"
    )
    args = [service.base_url, str(tmp_path / "journal.sqlite3"), str(tmp_path / "archive"), song]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    other = json.loads(done.stdout.strip().splitlines()[-1])
    assert other["state"] == "reused" and other["path"] == str(made.path) and other["sent"] is False
    assert service.request_counts()[WAV] == 1


def test_a_paid_wav_whose_download_failed_is_downloaded_later_without_paying_again(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    from ipymusicgen.errors import DownloadError

    client = paid_clients(max_retries=0)
    song = finished_song(client, service)
    service.set_faults("server_error:count=1:path=/files")
    with pytest.raises(DownloadError, match="nothing is paid again"):
        make_extra(client, song, "wav")
    later = make_extra(paid_clients(), song, "wav")
    assert later.state == "reused" and later.path is not None and later.path.is_file() and not later.sent
    assert service.request_counts()[WAV] == 1


def test_an_exported_song_carries_the_wav_made_for_it(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    import json

    import ipymusicgen

    client = paid_clients()
    song = finished_song(client, service)
    made = make_extra(client, song, "wav")
    (folder,) = ipymusicgen.export(song, tmp_path / "out", journal_path=tmp_path / "journal.sqlite3")
    wavs = list(folder.glob("*.wav"))
    assert len(wavs) == 1 and wavs[0].read_bytes() == made.path.read_bytes()
    sidecar = json.loads((folder / "song.json").read_text())
    assert sidecar["files"]["wav"] == wavs[0].name
