"""The magics at their edges, in a real InteractiveShell against the sandbox: spec 0/1 values, odd
numbers, unknown actions, one validation per submit, the unknown-outcome list, the load line, and
each song shown once after `--wait`.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.models.tasks import TaskState
from ipymusicgen.notebook.args import parse_musicgen
from ipymusicgen.notebook.display import Songs
from ipymusicgen.notebook.magics import service_line
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace import session

RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval", "allow_unknown_models"))


@pytest.fixture
def ip(sandbox_shell: InteractiveShell) -> InteractiveShell:
    """The shell on the sandbox (as a real service, with its key), with no watcher."""
    sandbox_shell.run_line_magic("config", "MusicGen.auto_watch = False")
    return sandbox_shell


def _payloads() -> list[dict[str, Any]]:
    return [a.payload for a in session.get_journal().attempts()]


# -- 0/1 spec fields take the spec's values ---------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "instrumental", "style"),
    [
        ("--instrumental", 1, "lo-fi beat"),
        ("--instrumental 1", 1, "lo-fi beat"),
        ("--instrumental 0", 0, "lo-fi beat"),
        ("--instrumental=0", 0, "lo-fi beat"),
        ("--instrumental '1'", 1, "lo-fi beat"),
    ],
)
def test_instrumental_takes_0_and_1_and_never_eats_the_text(
    ip: InteractiveShell, options: str, instrumental: int, style: str
) -> None:
    ip.run_line_magic("musicgen", f"--no-watch {options} {style}")
    payload = _payloads()[-1]
    assert payload["instrumental"] == instrumental and payload["style"] == style


@pytest.mark.parametrize(
    ("options", "is_auto"),
    [("--is-auto", 1), ("--is-auto 1", 1), ("--is-auto 0 --title Home", 0), ("--is-auto=0 --title Home", 0)],
)
def test_is_auto_takes_0_and_1(ip: InteractiveShell, options: str, is_auto: int) -> None:
    with capture_output():
        ip.run_line_magic("musicgen", f"--v2 --no-watch {options} a bright city pop song")
    payload = _payloads()[-1]
    assert payload["is_auto"] == is_auto and payload["prompt"] == "a bright city pop song"


def test_a_flag_value_other_than_0_or_1_is_one_line(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"--instrumental.*use 1 or 0") as raised:
        ip.run_line_magic("musicgen", "--no-watch --instrumental=2 lo-fi")
    assert "\n" not in str(raised.value) and _payloads() == []


# -- odd input is one line, and nothing is sent ------------------------------------------------------


def test_unknown_action_is_named_and_the_actions_listed(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("musicgen", "--no-watch --action bogus", "some lyrics")
    message = str(raised.value)
    assert "unknown action 'bogus'" in message and "auto, custom, extend, concat" in message
    assert "takes no description" not in message and _payloads() == []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999", "soon"])
def test_non_finite_continue_at_is_one_line(ip: InteractiveShell, value: str) -> None:
    with pytest.raises(UsageError, match=r"--continue-at.*number of seconds") as raised:
        ip.run_cell_magic("musicgen", f"--no-watch --continue-song-id abc --continue-at {value}", "[Verse]\nla")
    assert "\n" not in str(raised.value) and _payloads() == []


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_bad_wait_timeout_is_one_line(ip: InteractiveShell, value: str) -> None:
    with pytest.raises(UsageError, match=r"--timeout.*positive number of seconds"):
        ip.run_line_magic("musicgen", f"--wait --timeout {value} a tune")
    assert _payloads() == []


@pytest.mark.parametrize("value", ["-1", "0", "float('nan')", "float('inf')"])
def test_bad_poll_interval_or_timeout_setting_is_refused(ip: InteractiveShell, value: str) -> None:
    magics = ip.magics_manager.registry["MusicGen"]
    for name in ("poll_interval", "timeout"):
        with capture_output():
            ip.run_line_magic("config", f"MusicGen.{name} = {value}")
        assert getattr(magics, name) is None, f"{name} = {value} was kept"
    assert session.settings().poll_interval == 0.05


def test_request_validation_error_is_one_line_naming_the_field(ip: InteractiveShell) -> None:
    ip.user_ns["long_title"] = "x" * 100
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("musicgen", "--no-watch --title {long_title} --style pop", "[Verse]\nla la")
    message = str(raised.value)
    assert message.startswith("title: ") and "80" in message and "\n" not in message
    assert _payloads() == []


def test_v2_options_without_v2_and_v1_options_with_v2_are_refused(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"--model-version belong to v2 requests: add --v2"):
        ip.run_line_magic("musicgen", "--no-watch --model-version v4.5 a tune")
    with pytest.raises(UsageError, match=r"--gender belong to v1 requests"):
        ip.run_line_magic("musicgen", "--no-watch --v2 --gender female a tune")
    assert _payloads() == []


# -- validated once, notes once ------------------------------------------------------------------------


def test_a_request_is_validated_once_and_its_notes_show_once(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The magic builds the model and hands the built model to the client: one validation, one note."""
    from ipymusicgen.models import schema as models

    checks: list[list[str]] = []
    original = models._warn_ignored

    def counting(fields: list[str], why: str) -> None:
        # The embedded sandbox validates what it receives with the same models, on its server thread:
        # only the kernel's own (main-thread) validations are the client's.
        if fields and threading.current_thread() is threading.main_thread():
            checks.append(list(fields))
        original(fields, why)

    monkeypatch.setattr(models, "_warn_ignored", counting)
    with capture_output() as out:
        ip.run_line_magic("musicgen", "--v2 --no-watch --is-auto --title Ignored a dreamy synth song")
    notes = [line for line in out.stdout.splitlines() if line.startswith("Note: ")]
    assert len(notes) == 1 and "title" in notes[0], out.stdout
    assert _payloads()[-1]["is_auto"] == 1
    assert len(checks) == 1, f"the request was validated {len(checks)} times"


def test_parse_musicgen_is_reusable_without_a_shell() -> None:
    call = parse_musicgen("--v2 --no-expand {x} a song", namespace={"x": "ignored"})
    assert call.v2 and call.request.prompt == "{x} a song" and call.request.is_auto == 1
    v1 = parse_musicgen('--title "{name}"', "[Verse]\nla", namespace={"name": "Rain"}, default_model="MFV2.0")
    assert (v1.request.action, v1.request.title, v1.request.mv) == ("custom", "Rain", "MFV2.0")
    with pytest.raises(UsageError, match="unknown action"):
        parse_musicgen("--action nope a song")


# -- the unknown-outcome list ---------------------------------------------------------------------------


def test_resume_lists_unknown_attempts_with_title_style_and_time(ip: InteractiveShell, sandbox: Sandbox) -> None:
    sandbox.set_faults([{"kind": "drop", "path": "/v1/music/generate", "after": True}])
    with pytest.raises(UsageError, match="NOT resent"):
        ip.run_cell_magic("musicgen", '--no-watch --title "Lost Song" --style "sea shanty"', "[Verse]\nyo ho")
    sandbox.set_faults([])
    with capture_output() as out:
        ip.run_line_magic("musicgen_resume", "")
    lines = out.stdout.splitlines()
    assert lines[0] == "1 paid request(s) with an unknown outcome:"
    assert "'Lost Song'" in lines[1] and "sea shanty" in lines[1]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", lines[1]), lines[1]
    assert sandbox.api_key not in out.stdout


# -- which service -----------------------------------------------------------------------------------


def test_load_ext_says_which_service_in_one_line_and_never_the_key(ip: InteractiveShell, sandbox: Sandbox) -> None:
    said = ip.user_ns["_load_output"]
    assert said.count("\n") == 1 and sandbox.base_url in said and sandbox.api_key not in said
    assert "sandbox" not in said


def test_service_line_without_a_key_names_the_sandbox_and_hides_url_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    assert "local sandbox" in service_line(session.settings().with_changes(api_key=None))
    hidden = session.settings().with_changes(
        api_key="sk-0123456789abcdefSECRET", base_url="https://user:pw@api.example.com/x?token=abc"
    )
    line = service_line(hidden)
    assert "https://api.example.com/x" in line
    assert not any(secret in line for secret in ("SECRET", "pw", "token", "user"))


# -- each song once ------------------------------------------------------------------------------------


def test_wait_under_a_watcher_shows_each_song_once(ip: InteractiveShell, sandbox: Sandbox) -> None:
    """The watcher plays the songs; the magic's own output is their table without a second player."""
    ip.run_line_magic("config", "MusicGen.auto_watch = True")
    with capture_output() as out:
        ip.run_cell("%musicgen --wait --timeout 120 a tune heard once")
    songs = ip.user_ns["_"]
    assert isinstance(songs, Songs) and [s.state for s in songs] == [TaskState.COMPLETE] * 2
    shown = [str(v) for o in out.outputs for v in o.data.values()] + [out.stdout]
    assert sum(h.count("<audio") for h in shown) == 0, "the result under the watcher has no players of its own"
    assert "2 song(s), playing in the watcher above" in out.stdout
    assert ip.display_formatter.format(songs)[0]["text/html"].count("<audio") == 0
    alone = ip.display_formatter.format(Songs(songs))[0]["text/html"]
    assert alone.count("<audio") == 2, "a list of its own plays them"


def test_songs_list_a_song_once() -> None:
    from ipymusicgen.models.schema import TaskRecord

    record = TaskRecord.model_validate(
        {"id": "t1", "status": 0, "duration": 3000, "title": "One", "audio_url": "https://x/a.mp3"}
    )
    newer = record.model_copy(update={"title": "One (final)"})
    songs = Songs([record, newer])
    html = songs._repr_html_()
    assert html.count("<audio") == 1 and "One (final)" in html and len(songs) == 2


@pytest.mark.slow
def test_load_ext_without_a_key_says_sandbox_once(tmp_path: Path) -> None:
    """A newcomer's first two cells: one line about the sandbox, not the same news twice."""
    import os
    import subprocess
    import sys

    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'ipymusicgen')\n"
        "print('--- key')\n"
        "ip.run_line_magic('musicgen_key', '')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(MUSICGEN_SANDBOX_STAGE_SECONDS="0.1", TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded, used = done.stdout.split("--- key\n")
    assert loaded.count("\n") == 1 and "local sandbox" in loaded
    assert "sandbox" not in used


@pytest.mark.parametrize("value", ["-1", "0", "many"])
def test_task_list_limit_must_be_a_count(ip: InteractiveShell, value: str) -> None:
    with pytest.raises(UsageError, match=r"--limit.*whole number of at least 1"):
        ip.run_line_magic("musicgen_tasks", f"--limit {value}")


@pytest.mark.slow
def test_resume_lists_a_paid_request_left_pending_by_a_killed_kernel(
    ip: InteractiveShell, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Another process began a paid request and was killed (-9) before any answer: it is unknown, not nothing."""
    import signal
    import subprocess
    import sys

    journal = str(tmp_path / "journal.sqlite3")
    code = (
        "import os, signal, sys\n"
        "from ipymusicgen.storage.journal import Journal\n"
        f"j = Journal({journal!r})\n"
        f"j.begin('generate', {sandbox.base_url!r}, {{'action': 'custom', 'title': 'Killed Song', 'style': 'drone'}})\n"
        "print('begun', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and "begun" in done.stdout, done.stderr
    with capture_output() as out:
        ip.run_line_magic("musicgen_resume", "")
    assert "1 paid request(s) with an unknown outcome:" in out.stdout, out.stdout
    assert "'Killed Song'" in out.stdout and "drone" in out.stdout and "Do not resend" in out.stdout
