"""Typos the first round missed (issue 42 item 3): an option typed with a typographic dash (—title, as editors
and chat tools turn `--` into) and a shortened option are named with the options they could mean, in the magics,
batch lines and the command line, never blamed on the option after them or matched to an unrelated one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError


@pytest.mark.parametrize(
    ("line", "named", "meant"),
    [
        ('—title "First Snow" --style "indie folk"', "—title", "--title"),
        ("–style lo-fi --title Rain", "–style", "--style"),
        ("--style=x —instrumental calm sea", "—instrumental", "--instrumental"),
        ("--inst a quiet song", "--inst", "--instrumental"),
        ("--ti Rain --style x", "--ti", "--title or --timeout or --timestamps"),
    ],
)
def test_a_dashed_or_shortened_option_is_named_with_what_it_could_mean(line: str, named: str, meant: str) -> None:
    from ipymusicgen.notebook.args import parse_musicgen

    with pytest.raises(UsageError) as caught:
        parse_musicgen(line, "The streetlights hum a winter tune")
    said = str(caught.value)
    assert f"unknown option {named}" in said and "came after it" not in said, said
    for option in meant.split(" or "):
        assert option in said, said


def test_a_text_that_starts_with_a_dash_and_a_word_is_still_text() -> None:
    from ipymusicgen.notebook.args import parse_musicgen

    call = parse_musicgen("--style calm —wistful, slow", None)
    assert "wistful" in str(call)


def test_a_dashed_option_in_a_batch_line_names_the_line_and_the_option() -> None:
    from ipymusicgen.notebook.batch_lines import parse_lines

    with pytest.raises(UsageError) as caught:
        parse_lines('--style "lo-fi" --title Rain\n—title Waves --style "sea shanty"\n', None)
    said = str(caught.value)
    assert said.startswith("line 2: unknown option —title") and "--title" in said, said


@pytest.mark.parametrize(
    ("argv", "named", "meant"),
    [
        (["generate", "—instrumental", "lo-fi rain"], "—instrumental", "--instrumental"),
        (["generate", "—instrumental"], "—instrumental", "--instrumental"),
        (["gateway", "user", "add", "ada", "—budget", "5"], "—budget", "--budget"),
        (["generate", "—title", "Rain", "lo-fi"], "—title", "two hyphens"),
        (["generate", "--titel=Rain", "lo-fi"], "--titel", "see ipymusicgen generate --help"),
    ],
)
def test_the_command_line_names_an_option_typed_with_a_typographic_dash(
    argv: list[str],
    named: str,
    meant: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ipymusicgen.__main__ import main

    monkeypatch.chdir(tmp_path)  # were it taken for a description, the songs land here, not in the checkout
    monkeypatch.setenv("HOME", str(tmp_path))

    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"unknown option {named}" in err and meant in err, err
    said = err.strip().splitlines()[-1]
    assert "--interval" not in said, "generate has no --title; --interval is not what --titel meant"


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        ("%%musicgen_batch --concurency 2\n--style a\n", "unknown option --concurency: did you mean --concurrency?"),
        ("%%musicgen_batch —budget 5\n--style a\n", "unknown option —budget"),
        ("%%musicgen_grid --bugdet 5\nstyle: [a, b]\n", "unknown option --bugdet: did you mean --budget?"),
    ],
)
def test_the_batch_and_grid_magic_lines_name_a_typo(cell: str, said: str, sandbox_shell: Any) -> None:
    from IPython.utils.capture import capture_output

    with capture_output() as shown:
        sandbox_shell.run_cell(cell)
    out = shown.stdout + shown.stderr
    assert said in out and "unrecognized arguments" not in out, out
