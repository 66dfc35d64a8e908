"""The magics end to end: a real InteractiveShell, the shared session, and the local sandbox."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.models.schema import GenerateResult, TaskRecord, V2Song
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.notebook.magics import Songs
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace import session

RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval", "allow_unknown_models"))


def _point_session_at(sandbox: Sandbox, journal: Path, api_key: str | None = None) -> None:
    session.shutdown()
    session.configure(
        api_key=api_key or sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(journal),
        poll_interval=0.05,
    )


@pytest.fixture
def ip(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """A shell with the extension loaded, its session pointed at the sandbox; watchers off unless asked."""
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    _point_session_at(sandbox, tmp_path / "journal.sqlite3")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    shell.run_line_magic("config", "MusicGen.auto_watch = False")
    yield shell
    shell.run_line_magic("unload_ext", "ipymusicgen")
    shell.config.pop("MusicGen", None)  # %config settings outlive the extension; the next test starts clean
    for name in ("lyrics", "songs", "x", "made", "sid", "url", "singer"):
        shell.user_ns.pop(name, None)
    session.configure(**RESET)


def _last_payload() -> dict[str, Any]:
    return session.get_journal().attempts()[-1].payload


def _finished_song(ip: InteractiveShell) -> TaskRecord:
    """A complete v1 song, made through the magic with --wait."""
    records = ip.run_line_magic("musicgen", "--wait --timeout 20 a short test tune")
    assert [r.state for r in records] == [TaskState.COMPLETE, TaskState.COMPLETE]
    return records[0]


# -- every action ------------------------------------------------------------------------------------


def test_auto_from_the_cell_body(ip: InteractiveShell) -> None:
    result = ip.run_cell_magic("musicgen", "--no-watch", "lo-fi beat with rain\n")
    assert isinstance(result, GenerateResult) and len(result.ids) == 2
    assert _last_payload() == {"action": "auto", "style": "lo-fi beat with rain", "instrumental": 0}


def test_custom_when_title_or_style_comes_with_lyrics(ip: InteractiveShell) -> None:
    ip.run_cell_magic("musicgen", '--title "Rain on me" --style "indie folk" --gender female', "[Verse]\nla la")
    payload = _last_payload()
    assert payload["action"] == "custom" and payload["lyrics"] == "[Verse]\nla la"
    assert (payload["title"], payload["style"], payload["gender"]) == ("Rain on me", "indie folk", "female")


def test_wait_returns_complete_tasks(ip: InteractiveShell) -> None:
    song = _finished_song(ip)
    assert song.audio_url and song.duration_seconds


@pytest.mark.slow
def test_extend_concat_upload_and_upload_extend(ip: InteractiveShell) -> None:
    song = _finished_song(ip)
    ip.user_ns.update(sid=song.song_id or song.id, url=song.audio_url)
    extended = ip.run_cell_magic("musicgen", "--continue-song-id {sid} --continue-at 2 --wait", "[Verse]\nmore")
    assert _last_payload()["action"] == "extend" and _last_payload()["continue_at"] == 2
    assert all(r.state is TaskState.COMPLETE for r in extended)

    ip.user_ns["sid"] = extended[0].song_id or extended[0].id
    ip.run_line_magic("musicgen", "--action concat --continue-song-id {sid} --no-watch")
    assert _last_payload() == {"action": "concat", "continue_song_id": ip.user_ns["sid"]}

    uploaded = ip.run_line_magic("musicgen", "--audio-url {url} --wait")
    assert _last_payload() == {"action": "upload", "audio_url": song.audio_url}
    assert all(r.state is TaskState.COMPLETE for r in uploaded)

    ip.run_cell_magic("musicgen", "--audio-url {url} --continue-at 1 --no-watch", "[Chorus]\nagain")
    payload = _last_payload()
    assert payload["action"] == "upload_extend" and payload["lyrics"] == "[Chorus]\nagain"


@pytest.mark.slow
def test_artist_consistency_with_a_singer_from_generate_vibe(ip: InteractiveShell) -> None:
    song = _finished_song(ip)
    ip.user_ns["singer"] = session.get_client().generate_vibe(song.song_id or song.id)
    records = ip.run_cell_magic("musicgen", "--singer-id {singer} --style soul --wait", "[Verse]\nmy voice")
    assert _last_payload()["action"] == "artist_consistency" and _last_payload()["singer_id"] == ip.user_ns["singer"]
    assert all(r.state is TaskState.COMPLETE for r in records)


@pytest.mark.slow
def test_v2_description_and_custom_modes(ip: InteractiveShell) -> None:
    ids = ip.run_cell_magic("musicgen", "--v2 --no-watch", "dreamy synth pop")
    assert isinstance(ids, list) and len(ids) == 2 and all(isinstance(i, str) for i in ids)
    # description mode: only what the service applies is sent (spec rule 1), no defaults of the custom fields
    assert _last_payload() == {"is_auto": 1, "model_version": "v4.5", "prompt": "dreamy synth pop"}
    songs = ip.run_cell_magic("musicgen", '--v2 --prompt "folk" --title Home --model-version v4.0 --wait', "la la")
    assert all(isinstance(s, V2Song) and s.state is TaskState.COMPLETE for s in songs)
    assert [(s.title, s.lyrics) for s in songs] == [("Home", "la la")] * 2  # the v2 query answers them blank
    payload = _last_payload()
    assert (payload["is_auto"], payload["prompt"], payload["lyrics"], payload["model_version"]) == (
        0,
        "folk",
        "la la",
        "v4.0",
    )


def test_ignored_fields_are_a_short_note(ip: InteractiveShell) -> None:
    with capture_output() as out:
        ip.run_cell_magic("musicgen", "--v2 --is-auto --title Ignored --no-watch", "ambient")
    assert out.stdout.count("Note: The service will ignore title") == 1


# -- lyrics, interpolation, variables, config ---------------------------------------------------------


def test_lyrics_feed_musicgen_through_interpolation(ip: InteractiveShell) -> None:
    result = ip.run_cell("lyrics = %lyrics a song about the first snow")
    assert result.success
    lyrics = ip.user_ns["lyrics"]
    assert isinstance(lyrics, str) and lyrics.strip() and lyrics.title
    with capture_output() as out:
        ip.run_cell("%lyrics a song about the sea")
    shown = ip.user_ns["_"]  # what the cell displayed, through the display hook
    assert isinstance(shown, str) and shown.strip() and shown.strip().splitlines()[0] in out.stdout
    html = ip.display_formatter.format(shown)[0]["text/html"]
    assert shown.title and shown.title in html
    ip.run_cell_magic("musicgen", '--title "{lyrics.title}" --style pop --no-watch', "{lyrics}\n{unknown_name}")
    payload = _last_payload()
    assert payload["title"] == lyrics.title and payload["lyrics"] == f"{lyrics}\n{{unknown_name}}"


def test_long_prompt_in_the_lyrics_cell(ip: InteractiveShell) -> None:
    lyrics = ip.run_cell_magic("lyrics", "-o lyrics", "a long prompt\nabout autumn leaves")
    assert ip.user_ns["lyrics"] == lyrics and lyrics.strip()


def test_no_expand_keeps_braces(ip: InteractiveShell) -> None:
    ip.user_ns["x"] = "EXPANDED"
    ip.run_cell_magic("musicgen", "--no-expand --title {x} --no-watch", "{x} lyrics")
    assert _last_payload()["title"] == "{x}" and _last_payload()["lyrics"] == "{x} lyrics"


def test_an_option_field_left_as_typed_is_pointed_out(ip: InteractiveShell) -> None:
    ip.user_ns["x"] = "Known"
    with capture_output() as out:
        ip.run_line_magic("musicgen", "--title \"{x} {'y' * 3}\" --style pop --no-watch [Verse] {unknown}")
    assert _last_payload()["title"] == "Known {'y' * 3}"
    assert "{'y' * 3} left as typed" in out.stdout and "{x}" not in out.stdout and "{unknown}" not in out.stdout
    with capture_output() as out:
        ip.run_line_magic("musicgen", "--title {x} --style pop --no-watch fine")
    assert "left as typed" not in out.stdout


def test_result_goes_into_a_variable(ip: InteractiveShell) -> None:
    ip.run_cell_magic("musicgen", "-o songs --no-watch", "calm piano")
    assert isinstance(ip.user_ns["songs"], GenerateResult)
    assert ip.run_cell("x = %musicgen --no-watch calm strings").success
    assert isinstance(ip.user_ns["x"], GenerateResult) and ip.user_ns["x"].ids != ip.user_ns["songs"].ids


def test_default_model_from_config(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "MusicGen.default_model = 'MFV1.0'")
    ip.run_line_magic("musicgen", "--no-watch calm piano")
    assert _last_payload()["mv"] == "MFV1.0"
    ip.run_line_magic("musicgen", "--mv MFV2.0 --no-watch calm piano")
    assert _last_payload()["mv"] == "MFV2.0"
    ip.run_line_magic("config", "MusicGen.default_model = 'v3.5'")
    ip.run_line_magic("musicgen", "--v2 --no-watch calm piano")
    assert _last_payload()["model_version"] == "v3.5"


@pytest.mark.slow
def test_auto_watch_shows_a_watcher(ip: InteractiveShell) -> None:
    from ipymusicgen.widgets import TaskWatcher

    ip.run_line_magic("config", "MusicGen.auto_watch = True")
    with capture_output() as out:
        result = ip.run_line_magic("musicgen", "a watched song")
    assert isinstance(result, GenerateResult) and out.outputs
    watchers = [w for w in session.watchers() if isinstance(w, TaskWatcher)]
    assert watchers and watchers[-1].ids == result.ids
    records = ip.run_line_magic("musicgen", "--wait --timeout 20 a watched and awaited song")
    assert [r.state for r in records] == [TaskState.COMPLETE] * 2
    songs = ip.run_cell_magic("musicgen", "--v2 --prompt folk --title Home --wait --timeout 20", "la la")
    watched = [w for w in session.watchers() if isinstance(w, TaskWatcher)][-1]
    assert [s.title for s in songs] == ["Home", "Home"]  # seeded from the submit answer, not the blank query
    assert [watched.card(s.id).data()["title"] for s in songs] == ["Home", "Home"]


# -- errors -------------------------------------------------------------------------------------------


def test_server_422_shows_loc_and_msg(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "MusicGen.allow_unknown_models = True")
    with pytest.raises(UsageError, match=r"refused the request: .*mv: .*unknown model"):
        ip.run_line_magic("musicgen", "--mv MFV9.9 --no-watch calm piano")


def test_wrong_key_says_how_to_set_it(ip: InteractiveShell, sandbox: Sandbox, tmp_path: Path) -> None:
    _point_session_at(sandbox, tmp_path / "j2.sqlite3", api_key="sk-wrong-key-0000000000")
    for magic, line in (("musicgen", "--no-watch calm"), ("musicgen_key", ""), ("lyrics", "rain")):
        with pytest.raises(UsageError, match="MUSICGEN_API_KEY") as caught:
            ip.run_line_magic(magic, line)
        assert "sk-wrong-key" not in str(caught.value)


def test_no_credits_says_so(ip: InteractiveShell, tmp_path: Path) -> None:
    with Sandbox(stage_seconds=0.2, song_seconds=4, keys={"sk-broke-key-1234567890": 1}) as broke:
        _point_session_at(broke, tmp_path / "j3.sqlite3")
        with pytest.raises(UsageError, match="no credits left"):
            ip.run_line_magic("musicgen", "--no-watch calm piano")
        session.shutdown()


def test_lost_answer_is_not_resent_and_resume_explains(ip: InteractiveShell, sandbox: Sandbox) -> None:
    sandbox.set_faults([{"kind": "drop", "path": "/v1/music/generate", "after": True}])
    with pytest.raises(UsageError, match="NOT resent"):
        ip.run_line_magic("musicgen", "--no-watch a song whose answer is lost")
    assert sandbox.request_counts().get("/v1/music/generate") == 1
    with capture_output() as out:
        watcher = ip.run_line_magic("musicgen_resume", "")
    assert watcher is None
    assert "1 paid request(s) with an unknown outcome" in out.stdout and "Do not resend" in out.stdout
    assert "(a song whose answer is lost)" in out.stdout, "the request's style, to recognise it"


# -- key, tasks, resume -------------------------------------------------------------------------------


def test_key_info_never_shows_the_key(ip: InteractiveShell, sandbox: Sandbox) -> None:
    with capture_output() as out:
        ip.run_cell("%musicgen_key")
        key_report = ip.user_ns["_"]
        ip.run_cell("%musicgen --no-watch calm")
        ip.run_cell("%musicgen_tasks")
        tasks_table = ip.user_ns["_"]
    html = ip.display_formatter.format(key_report)[0]["text/html"]
    assert "credits left" in html and f"{sandbox.credits() + 2:,} credits (key_music_counts)" in html
    assert "music count" not in html, "one word for them: credits"
    rendered = [v for shown in (key_report, tasks_table) for v in ip.display_formatter.format(shown)[0].values()]
    texts = [out.stdout, out.stderr, *map(str, rendered)] + [str(v) for o in out.outputs for v in o.data.values()]
    assert not any(sandbox.api_key in text for text in texts)
    report = ip.run_line_magic("musicgen_key", "")
    assert report.info.key_music_counts == sandbox.credits() and sandbox.api_key not in repr(report)


def test_tasks_from_journal_and_live(ip: InteractiveShell) -> None:
    ip.run_line_magic("musicgen", "-o songs --no-watch rainy jazz")
    ip.run_cell_magic("musicgen", "--v2 -o made --no-watch", "sunny ska")
    table = ip.run_line_magic("musicgen_tasks", "--since 1h --limit 10")
    assert len(table) == 4 and {row["state"] for row in table.rows} == {"processing"}
    assert len(ip.run_line_magic("musicgen_tasks", "--text jazz")) == 2
    assert len(ip.run_line_magic("musicgen_tasks", "--state complete")) == 0
    live = ip.run_line_magic("musicgen_tasks", "{songs.ids} {made}")
    assert [row["id"] for row in live.rows] == [*ip.user_ns["songs"].ids, *ip.user_ns["made"]]
    with pytest.raises(UsageError, match="--since"):
        ip.run_line_magic("musicgen_tasks", "--since someday")


def test_resume_watches_unfinished_tasks(ip: InteractiveShell) -> None:
    result = ip.run_line_magic("musicgen", "--no-watch a song to resume")
    watcher = ip.run_line_magic("musicgen_resume", "")
    assert watcher is not None and set(result.ids) <= set(watcher.ids)
    assert {r.state for r in watcher.wait(20)} == {TaskState.COMPLETE}
    with capture_output() as out:
        assert ip.run_line_magic("musicgen_resume", "") is None
    assert "No unfinished tasks" in out.stdout


def test_wait_returns_songs_that_show_as_a_table_with_players(ip: InteractiveShell, sandbox: Sandbox) -> None:
    songs = ip.run_line_magic("musicgen", "--wait --timeout 20 a tune to listen to")
    assert isinstance(songs, list) and len(songs) == 2
    text = repr(songs)
    assert len(text.splitlines()) == 4 and all(s.id in text for s in songs)  # caption, header, one row each
    assert not any(s.lyrics and s.lyrics.splitlines()[1] in text for s in songs)
    html = ip.display_formatter.format(songs)[0]["text/html"]
    players = re.findall(r"<audio[^>]*>", html)
    assert len(players) == 2 and all(sandbox.base_url in p for p in players)
    assert not any("autoplay" in p or "loop" in p for p in players)


def test_song_table_plays_only_web_urls_and_escapes_titles() -> None:
    hostile = TaskRecord.model_validate(
        {"id": "t1", "status": 0, "duration": 1000, "title": "<script>x</script>", "audio_url": "javascript:alert(1)"}
    )
    html = Songs([hostile])._repr_html_()
    assert "<audio" not in html and "<a " not in html and "<script>" not in html and "&lt;script&gt;" in html


def test_the_shown_watcher_is_redrawn_once_its_songs_are_finished(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook saved later reads true: the display's text is rewritten from "Writing" to "2 ready"."""
    from IPython.display import DisplayHandle

    updates: list[str] = []
    monkeypatch.setattr(DisplayHandle, "update", lambda self, obj, **kw: updates.append(repr(obj)))
    ip.run_line_magic("config", "MusicGen.auto_watch = True")
    with capture_output() as shown:
        ip.run_line_magic("musicgen", "--wait --timeout 20 -o made a short test tune")
    assert "2 running" in "".join(o.data.get("text/plain", "") for o in shown.outputs)  # as first shown
    assert len(updates) == 1 and "(2 ready)" in updates[0]  # then rewritten once, finished
