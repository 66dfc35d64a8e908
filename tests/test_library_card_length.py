"""Issue 41, adherence of length: `%%musicgen --provider elevenlabs --seconds 12` asks for a length; the library
knows it (`LibrarySong.asked_seconds`, read from the journalled request), and `analyze()` and the library card put
it beside the length measured ("asked 12 s, measured 12 s ✓"; a song that came out shorter: ✗). A journal row
whose asked length is no length (a string, a flag, NaN, negative, beyond a day) asks nothing. Through a real
InteractiveShell on the sandbox's ElevenLabs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from signals import sine, write_wav

from ipymusicgen.lab import analysis_worker
from ipymusicgen.lab.adherence import asked_of, compare, summary
from ipymusicgen.lab.analysis import analyze_file
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.songs import request_seconds
from ipymusicgen.workspace import session

FORGE = (
    "UPDATE attempts SET payload = json_set(payload, '$.seconds', json(?))"
    " WHERE id = (SELECT attempt_id FROM tasks WHERE id = ?)"
)
ENGINE_SETTINGS = ("elevenlabs_base_url", "gemini_base_url", "elevenlabs_api_key", "gemini_api_key")


@pytest.mark.parametrize(
    ("payload", "seconds"),
    [
        ({"provider": "elevenlabs", "seconds": 90}, 90.0),
        ({"provider": "elevenlabs", "seconds": 37.5}, 37.5),
        ({"provider": "elevenlabs", "seconds": None}, None),  # the engine decides the length
        ({"style": "lo-fi"}, None),  # the service's request names none
        ({"seconds": "90"}, None),
        ({"seconds": True}, None),
        ({"seconds": 0}, None),
        ({"seconds": -30}, None),
        ({"seconds": 1e308}, None),
        ({"seconds": [90]}, None),
    ],
)
def test_the_length_a_journalled_request_asked(payload: dict[str, object], seconds: float | None) -> None:
    assert request_seconds(json.dumps(payload)) == seconds


@pytest.mark.parametrize("text", ['{"seconds": NaN}', '{"seconds": Infinity}', "[90]", "not json", "", None, '"90"'])
def test_a_damaged_request_asks_no_length(text: str | None) -> None:
    assert request_seconds(text) is None


def test_a_length_is_shown_to_a_tenth_of_a_second_and_missed_beyond_five_percent() -> None:
    asked = asked_of(["sad piano"], seconds=90)
    assert summary(compare(asked, {"duration_s": 87.31234})) == "asked 90 s, measured 87.3 s ✓"
    assert summary(compare(asked, {"duration_s": 84.9})) == "asked 90 s, measured 84.9 s ✗"
    assert summary(compare(asked, {"duration_s": math.nan})) == "asked 90 s, measured nothing"


@pytest.fixture
def engine_shell(sandbox_shell: InteractiveShell, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """The sandbox shell with its engines on the same sandbox; songs measured in process (the worker gives the
    same `analyze_file`'s) and no background analysis racing the test's own."""
    monkeypatch.setenv("MUSICGEN_ANALYZE", "off")
    monkeypatch.setattr(analysis_worker, "measure", lambda path, **_: analyze_file(path))
    session.configure(**sandbox.engine_settings())
    yield sandbox_shell
    session.configure(**dict.fromkeys(ENGINE_SETTINGS))


def _run(shell: InteractiveShell, code: str) -> object:
    result = shell.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def _length_lines(shell: InteractiveShell, task_id: str) -> list[str]:
    _run(shell, "from ipymusicgen.widgets.library import LibraryView\nview = LibraryView()")
    cards = {card["id"]: card for card in shell.user_ns["view"].get_state()["cards"]}
    _run(shell, "view.close()")
    return [line["text"] for line in cards[task_id]["lab_lines"] if line["text"].startswith("asked ")]


@pytest.mark.slow  # librosa on a 12 s song, twice
def test_the_card_and_analyze_show_the_length_asked_beside_the_length_measured(
    engine_shell: InteractiveShell, tmp_path: Path
) -> None:
    shell = engine_shell
    songs = shell.run_cell_magic("musicgen", '--provider elevenlabs --seconds 12 --style "sad piano" --wait --no-watch',
                                 "rain on the roof\nsoft and slow")  # fmt: skip
    [song] = list(songs)
    shell.user_ns["task_id"] = song.id
    _run(shell, "import ipymusicgen\nipymusicgen.get_client().wait([task_id], archived=True)")
    assert _run(shell, "ipymusicgen.library().song(task_id).asked_seconds") == 12.0
    assert _length_lines(shell, song.id) == []  # not measured yet: nothing claimed

    first = _run(shell, "ipymusicgen.analyze(task_id)")
    assert first.asked == {"seconds": 12.0}
    assert first.adherence["seconds"]["met"] is True and abs(first.duration_s - 12) < 0.6
    assert _length_lines(shell, song.id) == [f"asked 12 s, measured {round(first.duration_s, 1):g} s ✓"]
    assert "asked 12 s, measured" in str(first)

    archived = Path(_run(shell, "str(ipymusicgen.library().song(task_id).archive_path)"))
    write_wav(archived, sine(440.0, 9.0, -20.0))  # the song the engine gave came out 9 s long
    shorter = _run(shell, "ipymusicgen.analyze(task_id)")
    assert abs(shorter.duration_s - 9) < 0.1 and shorter.adherence["seconds"]["met"] is False
    assert _length_lines(shell, song.id) == ["asked 12 s, measured 9 s ✗"]


@pytest.mark.slow  # librosa on a 12 s song
def test_a_forged_length_in_the_journal_asks_nothing(engine_shell: InteractiveShell) -> None:
    shell = engine_shell
    [song] = list(shell.run_line_magic("musicgen", "--provider elevenlabs --seconds 12 --wait --no-watch lo-fi"))
    shell.user_ns["task_id"] = song.id
    _run(shell, "import ipymusicgen\nipymusicgen.get_client().wait([task_id], archived=True)\n"
                "ipymusicgen.analyze(task_id)")  # fmt: skip
    for forged in ('"12"', "true", "-12", "1e308", '"<b>12</b>"'):
        shell.user_ns["forged"] = forged
        shell.user_ns["FORGE"] = FORGE
        payload = _run(shell, "db = ipymusicgen.library().store.db\nwith db:\n    db.execute(FORGE, (forged, task_id))"
                              "\ndb.execute('SELECT payload FROM attempts, tasks WHERE tasks.id = ? AND "
                              "attempts.id = tasks.attempt_id', (task_id,)).fetchone()[0]")  # fmt: skip
        assert json.loads(payload)["seconds"] == json.loads(forged)
        assert _run(shell, "ipymusicgen.library().song(task_id).asked_seconds") is None, forged
        assert _run(shell, "ipymusicgen.analyze(task_id).asked") is None, forged
        assert _length_lines(shell, song.id) == [], forged
