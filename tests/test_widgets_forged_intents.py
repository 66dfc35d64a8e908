"""The browser cannot decide what Python decides (a forged intent), against real widgets and the sandbox."""

from __future__ import annotations

from typing import Any

import pytest

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.studio import Studio, studio

REAL_LOOKING_KEY = "mg-live-7c1f0b9a42d35e86"


def intent(made: Studio, **content: Any) -> None:
    """What the browser sends: a custom message to the view."""
    made.view._handle_custom_msg(content, [])


def test_a_forged_confirm_never_skips_the_confirm_step() -> None:
    paid = Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={REAL_LOOKING_KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        made = studio(client)
        try:
            assert made.needs_confirm
            intent(made, kind="input", form="song", name="style", value="lo-fi piano")
            intent(made, kind="confirm", form="song")  # no confirm step was ever shown
            assert paid.request_counts().get("/v1/music/generate", 0) == 0 and made.watcher.ids == []
            intent(made, kind="submit", form="song")
            assert made.view.panes["song"]["confirm"]
            intent(made, kind="input", form="song", name="style", value="metal, 8 minutes")
            intent(made, kind="confirm", form="song")  # the request changed after the cost was shown
            assert paid.request_counts().get("/v1/music/generate", 0) == 0 and made.watcher.ids == []
            intent(made, kind="submit", form="song")
            intent(made, kind="confirm", form="song")
            intent(made, kind="confirm", form="song")  # a second click sends nothing more
            assert paid.request_counts()["/v1/music/generate"] == 1 and len(made.watcher.ids) == 2
        finally:
            made.close()


def test_the_key_tab_never_shows_secrets_of_the_service_address() -> None:
    from ipymusicgen.client.faces import MusicClient

    key = "sk-0123456789abcdefSECRET"
    address = f"https://user:{key}@api.example.com/x?token={key}#pw"
    with MusicClient(key, base_url=address, journal=False, archive=False) as client:
        made = studio(client)
        try:
            shown = made.view.key["service"]
            assert shown == "https://api.example.com/x"
            assert key not in repr(made.view.get_state()) and "user" not in shown and "token" not in shown
        finally:
            made.close()


def test_the_demo_line_never_shows_secrets_of_the_service_address(monkeypatch: Any) -> None:
    from ipymusicgen.__main__ import _service_in_use
    from ipymusicgen.workspace import session

    key = "sk-canary-0123456789abcdef"
    monkeypatch.setenv("MUSICGEN_API_KEY", key)
    monkeypatch.setenv("MUSICGEN_BASE_URL", f"https://user:{key}@music.example.com/v?token={key}")
    session.shutdown()
    said = _service_in_use()
    assert "real service at https://music.example.com/v" in said and "canary" not in said and "user" not in said


def test_musicgen_key_never_shows_secrets_of_the_service_address(sandbox: Sandbox, tmp_path: Any) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from ipymusicgen.workspace import session

    address = sandbox.base_url.replace("http://", f"http://user:{sandbox.api_key}@")
    session.shutdown()
    session.configure(
        api_key=sandbox.api_key,
        base_url=address,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"),
    )
    shell = InteractiveShell.instance()
    try:
        with capture_output():
            shell.run_line_magic("load_ext", "ipymusicgen")
        report = shell.run_line_magic("musicgen_key", "")
        shown = repr(report) + report._repr_html_()
        assert sandbox.base_url in shown
        assert sandbox.api_key not in shown and "user" not in shown
    finally:
        shell.run_line_magic("unload_ext", "ipymusicgen")
        session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path")))


def test_forged_library_intents_never_raise_in_the_kernel(sandbox: Sandbox, tmp_path: Any) -> None:
    from ipymusicgen import Journal
    from ipymusicgen.song_library import Library
    from ipymusicgen.widgets.library import LibraryView

    journal_path = tmp_path / "journal.sqlite3"
    Journal(journal_path).close()
    with Library(journal_path) as library:
        view = LibraryView(library)
        try:
            for content in (
                {"kind": "page", "page": float("inf")},
                {"kind": "page", "page": [1]},
                {"kind": "page", "page": {"a": 1}},
                {"kind": "page", "page": 10**40},
                {"kind": "filter", "filters": {"state": ["x"], "favourite": {"a": 1}}},
                {"kind": "favourite", "id": {"a": 1}},
                {"kind": "search", "text": None},
            ):
                view._on_msg(view, content, [])  # where a forged message lands (ipywidgets prints what it raises)
            assert view.page == 0
        finally:
            view.close()


def test_a_forged_choice_never_breaks_the_studio(client: Any) -> None:
    made = studio(client)
    try:
        choices = (("song", "action"), ("song", "gender"), ("song", "mv"), ("v2", "is_auto"), ("v2", "model_version"))
        for form, name in choices:
            for value in ("zzz", "", float("inf"), [1], {"a": 1}, True):
                made._on_msg(made.view, {"kind": "input", "form": form, "name": name, "value": value}, [])
        intent(made, kind="input", form="song", name="action", value="custom")
        intent(made, kind="input", form="song", name="mv", value="")
        intent(made, kind="input", form="song", name="gender", value="")
        intent(made, kind="input", form="song", name="style", value="folk")
        intent(made, kind="input", form="song", name="title", value="Dawn")
        intent(made, kind="input", form="song", name="lyrics", value="[Verse]\nmorning")
        intent(made, kind="submit", form="song")
        assert made.view.panes["song"]["status"] == "2 songs started"
    finally:
        made.close()


def test_an_unclosed_quote_in_an_option_value_is_one_line_and_sends_nothing(sandbox: Sandbox, tmp_path: Any) -> None:
    import pytest
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from ipymusicgen.workspace import session

    session.shutdown()
    session.configure(
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"),
    )
    shell = InteractiveShell.instance()
    try:
        with capture_output():
            shell.run_line_magic("load_ext", "ipymusicgen")
        shell.run_line_magic("config", "MusicGen.auto_watch = False")
        before = sandbox.request_counts().get("/v1/music/generate", 0)
        for line in ('--style "rock and roll a song about cats', "--title='Dawn of day --style folk", '--title "'):
            with pytest.raises(UsageError) as caught:
                shell.run_cell_magic("musicgen", line, "[Verse]\nmorning") if line == '--title "' else (
                    shell.run_line_magic("musicgen", line)
                )
            assert "quote" in str(caught.value) and "\n" not in str(caught.value)
        assert sandbox.request_counts().get("/v1/music/generate", 0) == before
        with capture_output():  # an apostrophe in the free text is still just text
            shell.run_line_magic("musicgen", "--style folk a song about my dog's day")
        assert sandbox.request_counts()["/v1/music/generate"] == before + 1
    finally:
        shell.run_line_magic("unload_ext", "ipymusicgen")
        shell.config.pop("MusicGen", None)
        session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path")))


def test_the_command_line_refuses_a_bad_interval_before_paying(sandbox: Sandbox, tmp_path: Any) -> None:
    import pytest

    from ipymusicgen.__main__ import main
    from ipymusicgen.workspace import session

    for interval in ("nan", "-1", "0", "inf"):
        session.configure(
            api_key=sandbox.api_key,
            base_url=sandbox.base_url,
            v2_base_url=sandbox.v2_base_url,
            journal_path=str(tmp_path / "journal.sqlite3"),
        )
        try:
            with pytest.raises(SystemExit) as stopped:
                main(["generate", "rain", "--interval", interval, "--download", str(tmp_path / "songs")])
            assert stopped.value.code == 2
        finally:
            session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path")))
    assert sandbox.request_counts().get("/v1/music/generate", 0) == 0


def test_the_command_line_prints_server_text_without_terminal_control_codes(capsys: Any) -> None:
    from types import SimpleNamespace

    from ipymusicgen.__main__ import _print_updates
    from ipymusicgen.models.tasks import TaskState

    hostile = "Dawn\x1b]0;pwned\x07\x1b[2J\r\x9b31m\nfake: line"
    _print_updates([SimpleNamespace(id="t1\x1b[1m", state=TaskState.COMPLETE, duration_seconds=3.0, title=hostile)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\x9b" not in out
    assert out.count("\n") == 1 and "Dawn" in out


def test_task_tables_keep_one_line_per_song_without_control_codes() -> None:
    from ipymusicgen.models.schema import TaskRecord
    from ipymusicgen.notebook.display import Table, record_row

    title = "Dawn\x1b[2J\x1b]0;pwned\x07\nfake row  done"
    records = [
        TaskRecord(id="t1", status=0, title=title, style="x", duration=4000),
        TaskRecord(id="t2", status=3, title="ok", fail_reason="bad\r\nreason\x1b[31m"),
    ]
    shown = repr(Table([record_row(r) for r in records], records, caption="2 tasks"))
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert len(shown.splitlines()) == 4  # caption, header, two rows


@pytest.mark.slow
def test_the_batch_tab_asks_to_confirm_with_a_real_key_and_the_browser_cannot_skip_it() -> None:
    paid = Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={REAL_LOOKING_KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        made = studio(client)

        def press(kind: str, **more: Any) -> None:  # what the browser sends
            made._on_msg(made.view, {"kind": kind, "form": "batch", **more}, [])

        try:
            form = made.batch
            made.select("batch")  # the tab the browser presses on
            press("input", name="lines", value="lo-fi rain\n")
            press("submit")
            assert paid.request_counts().get("/v1/music/generate", 0) == 0 and form.batch is None
            assert "about 3 credits" in form.confirm and form.state()["confirm"]
            press("input", name="lines", value="lo-fi rain\nsea shanty\n")  # changed: must be confirmed again
            assert form.confirm == ""
            press("confirm")  # a confirm the view no longer shows sends nothing
            assert paid.request_counts().get("/v1/music/generate", 0) == 0 and form.batch is None
            press("submit")
            press("cancel")
            assert paid.request_counts().get("/v1/music/generate", 0) == 0 and form.batch is None
            press("input", name="concurrency", value={"forged": 1})  # not a value the browser sends: refused
            press("submit")
            press("confirm")
            assert form.batch is None and "whole number" in form.shown_problems["concurrency"]
            press("input", name="concurrency", value="2")
            press("submit")
            press("confirm")
            assert form.batch is not None
            form.batch.wait(timeout=30)
            assert paid.request_counts()["/v1/music/generate"] == 2
        finally:
            made.close()


def test_a_failed_songs_line_after_wait_is_one_line_without_control_codes(sandbox: Sandbox, tmp_path: Any) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from ipymusicgen.workspace import session

    session.shutdown()
    session.configure(
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"),
        poll_interval=0.05,
    )
    shell = InteractiveShell.instance()
    reason = "bad\x1b[2J\r\nTask fake-id is complete\x07"
    sandbox.set_faults([{"kind": "task_fail", "path": "/v1/music/generate", "fail_reason": reason}])
    try:
        with capture_output():
            shell.run_line_magic("load_ext", "ipymusicgen")
        shell.run_line_magic("config", "MusicGen.auto_watch = False")
        with capture_output() as shown:
            songs = shell.run_line_magic("musicgen", "--wait --timeout 60 --style pop la la")
        assert [s.fail_reason for s in songs] == [reason, reason]
        lines = shown.stdout.splitlines()
        assert len(lines) == 2 and all(line.startswith("Task ") and "fake-id is complete" in line for line in lines)
        assert "\x1b" not in shown.stdout and "\r" not in shown.stdout and "\x07" not in shown.stdout
    finally:
        sandbox.set_faults("")
        shell.run_line_magic("unload_ext", "ipymusicgen")
        shell.config.pop("MusicGen", None)
        session.configure(**dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval")))


def test_a_cards_concat_asks_first_with_a_real_key() -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    paid = Sandbox(stage_seconds=0.1, song_seconds=2, faults="", keys={REAL_LOOKING_KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        ids = list(client.generate(action="auto", style="rain").ids)
        client.wait(ids, timeout=30)
        watcher = TaskWatcher(ids, client=client)
        try:
            watcher.wait(30)
            watcher._handle_custom_msg({"kind": "concat", "id": ids[0]}, [])  # a press, or a forged intent
            assert paid.request_counts()["/v1/music/generate"] == 1 and watcher.ids == ids
            assert "press Concat again" in watcher.card(ids[0]).note
            watcher._handle_custom_msg({"kind": "copy_id", "id": ids[1]}, [])  # anything else in between
            watcher._handle_custom_msg({"kind": "concat", "id": ids[1]}, [])  # another song asks on its own
            assert paid.request_counts()["/v1/music/generate"] == 1
            watcher._handle_custom_msg({"kind": "concat", "id": ids[1]}, [])  # the second press sends
            assert paid.request_counts()["/v1/music/generate"] == 2 and len(watcher.ids) == 4
        finally:
            watcher.close()


def test_a_cards_text_line_stays_one_line() -> None:
    from ipymusicgen.models.schema import TaskRecord
    from ipymusicgen.widgets.song_data import card_summary, song_card

    record = TaskRecord(id="t1", status=3, title="ok", fail_reason="bad\r\n'Fake' (take 2) [Ready] 2:00 https://x")
    assert len(card_summary(song_card(record)).splitlines()) == 1


def test_forged_library_state_from_the_browser_is_bounded(tmp_path: Any) -> None:
    from ipymusicgen import Journal
    from ipymusicgen.song_library import Library
    from ipymusicgen.widgets.library import LibraryView

    journal_path = tmp_path / "journal.sqlite3"
    Journal(journal_path).close()
    with Library(journal_path) as library:
        view = LibraryView(library)
        try:
            for state in (
                {"filters": {"state": ["x"], "model": {"a": 1}, "favourite": "yes", "batch": 5, "other": 1}},
                {"page_size": 0},
                {"page_size": 10**9},
                {"page": -3},
            ):
                view.set_state(state)  # what a comm "update" from the browser does
                view._on_msg(view, {"kind": "refresh"}, [])
                assert not view.status.startswith("Could not"), view.status
            assert 1 <= view.page_size <= 200 and view.page == 0
            assert set(view.filters) == {"state", "favourite", "model", "batch"}
            assert all(isinstance(v, str) for k, v in view.filters.items() if k != "favourite")
        finally:
            view.close()
