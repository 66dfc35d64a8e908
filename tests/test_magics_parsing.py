"""The pure parts of the magics: interpolation, the command line, action inference, small helpers."""

from __future__ import annotations

import pickle
import time
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.error import UsageError

from ipymusicgen.notebook.args import MUSICGEN_OPTIONS, number, split_line, stray_options, v1_fields, v2_fields
from ipymusicgen.notebook.interpolate import expand, left_verbatim
from ipymusicgen.notebook.magics import Lyrics, Table, mask_key, parse_since, split_ids

NS = {"name": "Rain", "song": SimpleNamespace(ids=["a", "b"]), "items": [10, 20], "n": 3}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{name} falls", "Rain falls"),
        ("{unknown} stays", "{unknown} stays"),
        ("{{name}} escapes", "{name} escapes"),
        ("{song.ids[1]} {items[0]}", "b 10"),
        ("{n:03d} {name!r}", "003 'Rain'"),
        ("{song.missing} {items[9]}", "{song.missing} {items[9]}"),
        ("{} {0} [Verse]", "{} {0} [Verse]"),
        ("a lone } brace {name}", "a lone } brace {name}"),
        ("no braces at all", "no braces at all"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, NS) == expected


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("{name} {song.ids[1]} {{escaped}}", []),
        ("{unknown} and {name}", ["{unknown}"]),
        ("{'x' * 100}", ["{'x' * 100}"]),
        ("{song.missing} {n:03d}", ["{song.missing}"]),
        ("a lone } brace", []),
    ],
)
def test_left_verbatim_names_what_expand_keeps(text: str, kept: list[str]) -> None:
    assert left_verbatim(text, NS) == kept


def test_split_line_keeps_free_text_verbatim() -> None:
    argv, text = split_line('--title "My song" --instrumental --continue-at -5 my dog\'s day', MUSICGEN_OPTIONS)
    assert argv == ["--title", "My song", "--instrumental", "--continue-at", "-5"]
    assert text == "my dog's day"


def test_split_line_double_dash_and_equals() -> None:
    assert split_line("--title='A b' -- --not-an-option", MUSICGEN_OPTIONS) == (["--title=A b"], "--not-an-option")
    assert split_line("", MUSICGEN_OPTIONS) == ([], "")


def test_stray_options_found_after_text() -> None:
    assert stray_options("lo-fi rain --instrumental", MUSICGEN_OPTIONS) == ["--instrumental"]
    assert stray_options("a -- b", MUSICGEN_OPTIONS) == []


def test_number() -> None:
    assert number("30") == 30 and isinstance(number("30"), int)
    assert number("12.5") == 12.5


def _args(**given: Any) -> SimpleNamespace:
    names = [o.names[-1].lstrip("-").replace("-", "_") for o in MUSICGEN_OPTIONS]
    return SimpleNamespace(**{**dict.fromkeys(names), **given})


@pytest.mark.parametrize(
    ("given", "body", "expected"),
    [
        ({}, "lo-fi rain", {"action": "auto", "style": "lo-fi rain"}),
        ({"title": "T"}, "la la", {"action": "custom", "title": "T", "lyrics": "la la"}),
        ({"style": "pop"}, "la la", {"action": "custom", "style": "pop", "lyrics": "la la"}),
        ({"style": "pop"}, "", {"action": "auto", "style": "pop"}),
        ({"lyrics": "la"}, "pop", {"action": "custom", "lyrics": "la", "style": "pop"}),
        ({"continue_song_id": "s1"}, "", {"action": "extend", "continue_song_id": "s1"}),
        ({"action": "concat", "continue_song_id": "s1"}, "", {"action": "concat", "continue_song_id": "s1"}),
        ({"audio_url": "u"}, "", {"action": "upload", "audio_url": "u"}),
        ({"audio_url": "u", "continue_at": 5}, "", {"action": "upload_extend", "audio_url": "u", "continue_at": 5}),
        ({"singer_id": "v"}, "la", {"action": "artist_consistency", "singer_id": "v", "lyrics": "la"}),
    ],
)
def test_v1_fields_infer_action(given: dict[str, Any], body: str, expected: dict[str, Any]) -> None:
    assert v1_fields(_args(**given), body, "") == expected


def test_v1_default_model_only_where_the_shape_has_mv() -> None:
    assert v1_fields(_args(), "x", "MFV1.0")["mv"] == "MFV1.0"
    assert v1_fields(_args(mv="MFV2.0"), "x", "MFV1.0")["mv"] == "MFV2.0"
    assert "mv" not in v1_fields(_args(action="concat", continue_song_id="s"), "", "MFV1.0")


def test_v1_text_with_nowhere_to_go_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="concat action takes no"):
        v1_fields(_args(action="concat", continue_song_id="s"), "words", "")
    with pytest.raises(UsageError, match="nowhere to put"):
        v1_fields(_args(action="auto", style="pop"), "words", "")


@pytest.mark.parametrize(
    ("given", "body", "expected"),
    [
        ({}, "dreamy synth", {"is_auto": 1, "model_version": "v4.5", "prompt": "dreamy synth"}),
        ({"prompt": "pop"}, "la la", {"is_auto": 0, "model_version": "v4.5", "prompt": "pop", "lyrics": "la la"}),
        ({"title": "T"}, "calm", {"is_auto": 0, "model_version": "v4.5", "title": "T", "prompt": "calm"}),
        ({"is_auto": 1, "title": "T"}, "calm", {"is_auto": 1, "model_version": "v4.5", "title": "T", "prompt": "calm"}),
        ({"model_version": "v3.0"}, "x", {"is_auto": 1, "model_version": "v3.0", "prompt": "x"}),
    ],
)
def test_v2_fields(given: dict[str, Any], body: str, expected: dict[str, Any]) -> None:
    assert v2_fields(_args(**given), body, "v4.5") == expected


def test_parse_since() -> None:
    now = time.time()
    assert abs(parse_since("1h") - (now - 3600)) < 5
    assert abs(parse_since("2d") - (now - 2 * 86400)) < 5
    assert parse_since("2025-05-01") < now
    with pytest.raises(UsageError, match="--since"):
        parse_since("yesterday-ish")


def test_split_ids_accepts_pasted_lists() -> None:
    assert split_ids("['a1', 'b2']") == ["a1", "b2"]
    assert split_ids("a1, b2 c3") == ["a1", "b2", "c3"]


def test_lyrics_is_a_str_with_html_and_title() -> None:
    lyrics = Lyrics("[Verse]\n<b>rain</b>", "Rain & Me")
    assert f"{lyrics}" == "[Verse]\n<b>rain</b>" and lyrics.title == "Rain & Me"
    assert "&lt;b&gt;" in lyrics._repr_html_() and "Rain &amp; Me" in lyrics._repr_html_()
    assert lyrics.as_text().startswith("Rain & Me\n\n")
    assert pickle.loads(pickle.dumps(lyrics)).title == "Rain & Me"


def test_table_faces() -> None:
    table = Table([{"id": "a", "audio": "https://x/a.mp3"}], ["record"], caption="1 task")
    assert "a" in repr(table) and len(table) == 1 and list(table) == ["record"]
    assert '<a href="https://x/a.mp3"' in table._repr_html_()
    assert repr(Table([], caption="none")) == "none"


def test_mask_key() -> None:
    assert mask_key("sk-abcdefghijklmnop1234") == "****1234"
    assert mask_key("short") == "****"
    assert mask_key(None) == "(not set)"


# -- a typo is named, with the closest option (issue 42) ----------------------------------------------------


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('--titel "First Snow" --style "indie folk"', "unknown option --titel: did you mean --title?"),
        ("--stlye=lo-fi rain on the roof", "unknown option --stlye: did you mean --style?"),
        ('--style "x" --instrumentl a quiet song', "unknown option --instrumentl: did you mean --instrumental?"),
        ("--contine-at 30 --continue-song-id s1", "unknown option --contine-at: did you mean --continue-at?"),
        ("--qqqqqqqqqq hello", "unknown option --qqqqqqqqqq"),
    ],
)
def test_an_unknown_option_is_named_with_the_closest_known_one(line: str, said: str) -> None:
    from ipymusicgen.notebook.args import parse_musicgen

    with pytest.raises(UsageError) as caught:
        parse_musicgen(line, "The streetlights hum a winter tune")
    assert str(caught.value) == said, "the typo itself is named, not the option after it"


def test_a_typo_in_the_cell_magic_names_it_in_a_real_shell(sandbox_shell: Any) -> None:
    from IPython.utils.capture import capture_output

    with capture_output() as shown:
        sandbox_shell.run_cell('%%musicgen --titel "First Snow" --style "indie folk"\nThe streetlights hum\n')
    said = shown.stdout + shown.stderr
    assert "--titel: did you mean --title?" in said and "came after it" not in said, said


def test_a_typo_in_a_batch_line_names_the_line_and_the_option() -> None:
    from ipymusicgen.notebook.batch_lines import parse_lines

    text = '--style "lo-fi" --title Rain\n\n--stle "sea shanty" --title Waves\n'
    with pytest.raises(UsageError) as caught:
        parse_lines(text, None)
    assert str(caught.value) == "line 3: unknown option --stle: did you mean --style?"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["generate", "lo-fi rain", "--instrumentl"], "unknown option --instrumentl: did you mean --instrumental?"),
        (["generate", "--downlaod=x", "lo-fi"], "unknown option --downlaod: did you mean --download?"),
        (["gateway", "user", "add", "bob", "--budgte", "3"], "unknown option --budgte: did you mean --budget?"),
        (["gateway", "spend", "--bye", "user"], "unknown option --bye: did you mean --by?"),
    ],
)
def test_the_command_line_names_a_typo_and_the_closest_option(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipymusicgen.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and said in capsys.readouterr().err
