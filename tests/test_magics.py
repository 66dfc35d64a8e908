"""The magics in a real InteractiveShell, without a service: loading, config, login, help, local errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.notebook.magics import MusicGen, load_ipython_extension
from ipymusicgen.workspace import session

SECRET = "sk-test-secret-key-0123456789"
UNREACHABLE = "http://127.0.0.1:9"
SETTING_NAMES = ("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval", "timeout")


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A key and a host that is never contacted: anything reaching HTTP would fail to connect."""
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    session.configure(api_key=SECRET, base_url=UNREACHABLE, v2_base_url=UNREACHABLE, journal_path=str(tmp_path / "j"))
    yield
    session.shutdown()
    session.configure(**dict.fromkeys((*SETTING_NAMES, "allow_unknown_models")))


@pytest.fixture
def ip(offline: None) -> Iterator[InteractiveShell]:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    yield shell
    shell.run_line_magic("unload_ext", "ipymusicgen")
    shell.config.pop("MusicGen", None)  # %config settings outlive the extension; the next test starts clean


def _instances(shell: InteractiveShell) -> list[MusicGen]:
    return [c for c in shell.configurables if isinstance(c, MusicGen)]


def test_load_twice_is_harmless(ip: InteractiveShell) -> None:
    first = ip.magics_manager.registry["MusicGen"]
    ip.run_line_magic("load_ext", "ipymusicgen")
    load_ipython_extension(ip)
    assert ip.magics_manager.registry["MusicGen"] is first
    assert _instances(ip) == [first]
    assert ip.find_cell_magic("musicgen").__self__ is first


def test_unload_removes_every_magic(ip: InteractiveShell) -> None:
    names = (
        "musicgen",
        "lyrics",
        "musicgen_key",
        "musicgen_tasks",
        "musicgen_resume",
        "musicgen_login",
        "musicgen_batch",
        "musicgen_library",
    )
    assert all(ip.find_line_magic(n) for n in names)
    ip.run_line_magic("unload_ext", "ipymusicgen")
    try:
        assert not any(ip.find_line_magic(n) for n in names)
        assert not any(ip.find_cell_magic(n) for n in ("musicgen", "lyrics", "musicgen_batch"))
        assert {"MusicGen", "BatchMagics", "LibraryMagics"}.isdisjoint(ip.magics_manager.registry)
        assert not _instances(ip)
    finally:
        ip.run_line_magic("load_ext", "ipymusicgen")
    assert ip.find_cell_magic("musicgen") is not None


def test_config_goes_to_the_session(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "MusicGen.timeout = 12.5")
    ip.run_line_magic("config", "MusicGen.poll_interval = 0.5")
    ip.run_line_magic("config", "MusicGen.base_url = 'http://127.0.0.1:8'")
    current = session.settings()
    assert (current.timeout, current.poll_interval, current.base_url) == (12.5, 0.5, "http://127.0.0.1:8")
    ip.run_line_magic("config", "MusicGen.base_url = ''")
    assert session.settings().base_url == "https://api.musicful.ai"


def test_help_lists_options_and_defaults(ip: InteractiveShell) -> None:
    doc = ip.find_cell_magic("musicgen").__doc__
    for text in ("--continue-song-id", "--v2", "--is-auto", "-o NAME", "artist_consistency", "default_model"):
        assert text in doc
    with capture_output() as out:
        ip.run_cell("%%musicgen?")
    assert "--singer-id" in out.stdout


def test_bound_error_names_the_field_before_sending(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"title: at most 80 characters \(got 95\)"):
        ip.run_cell_magic("musicgen", f"--title {'x' * 95}", "la la")
    with pytest.raises(UsageError, match="gender: must be one of"):
        ip.run_line_magic("musicgen", "--gender robot calm piano")
    with pytest.raises(UsageError, match="unknown model 'MFV9'"):
        ip.run_line_magic("musicgen", "--mv MFV9 calm piano")
    with pytest.raises(UsageError, match="prompt: at most 180"):
        ip.run_line_magic("musicgen", f"--v2 {'word ' * 40}")


def test_usage_errors_print_one_line(ip: InteractiveShell) -> None:
    with capture_output() as out:
        result = ip.run_cell(f"%musicgen --title {'y' * 81} --style pop")
    assert isinstance(result.error_in_exec, UsageError)
    assert "title: at most 80" in out.stderr and "Traceback" not in out.stderr + out.stdout


def test_options_after_text_are_refused(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="options before the text"):
        ip.run_line_magic("musicgen", "lo-fi rain --instrumental")
    with pytest.raises(UsageError, match="unexpected text"):
        ip.run_cell_magic("musicgen", "--title My Song", "la la")


def test_login_asks_without_echo(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return "  sk-from-getpass-abcdef123456  "

    monkeypatch.setattr("getpass.getpass", fake_getpass)
    with capture_output() as out:
        ip.run_cell("%musicgen_login")
    assert asked and session.settings().key_value() == "sk-from-getpass-abcdef123456"
    assert "sk-from-getpass" not in out.stdout + out.stderr
    assert not any("sk-from-getpass" in line for line in ip.user_ns["In"])


def test_login_refuses_a_typed_key_and_empty_input(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="do not type the key"):
        ip.run_line_magic("musicgen_login", "sk-typed")
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "")
    with pytest.raises(UsageError, match="no key entered"):
        ip.run_line_magic("musicgen_login", "")
    assert session.settings().key_value() == SECRET
