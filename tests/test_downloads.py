"""Safe file names from untrusted titles, no overwrites, and atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipymusicgen.client.downloads import AtomicFile, safe_filename, suffix_for, unique_path

HOSTILE = {
    "traversal": "../../etc/passwd",
    "absolute": "/etc/passwd",
    "mixed-separators": "a/b\\c",
    "windows-traversal": "..\\..\\Windows\\System32\\drivers",
    "control-chars": "bad\x00name\x07with\nnew\rlines\x1b[31m\x7f",
    "reserved-con": "CON",
    "reserved-lower": "nul",
    "reserved-com": "COM1",
    "reserved-lpt": "lpt9",
    "reserved-with-extension": "CON.txt",
    "reserved-padded": " aux ",
    "empty": "",
    "none": None,
    "dots": "...",
    "dot": ".",
    "dotdot": "..",
    "hidden": ".bashrc",
    "spaces": "    ",
    "windows-forbidden": '<>:"|?*',
    "very-long": "x" * 10_000,
    "very-long-multibyte": "é" * 500,
    "very-long-emoji": "🎵" * 200,
    "cjk-80": "歌" * 80,
    "fullwidth-solidus": "a／b＼c",
    "trailing-dots": "song...",
    "tilde": "~/.ssh/authorized_keys",
}


def assert_single_safe_component(name: str, suffix: str) -> None:
    assert name.endswith(suffix)
    assert name not in ("", ".", "..")
    assert Path(name).name == name
    assert "/" not in name and "\\" not in name
    assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in name)
    assert not name.startswith(".")
    assert not name.startswith(" ")
    stem = name[: -len(suffix)]
    assert stem and not stem.endswith((" ", "."))
    assert stem.split(".")[0].strip().upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT9"}
    assert len(name.encode("utf-8")) <= 255  # a file system's limit on one name


@pytest.mark.parametrize("title", HOSTILE.values(), ids=list(HOSTILE))
def test_safe_filename_gives_a_single_safe_component(title, tmp_path):
    name = safe_filename(title, ".mp3")
    assert_single_safe_component(name, ".mp3")
    target = tmp_path / name
    target.write_bytes(b"x")  # the name is usable as is
    assert target.resolve().parent == tmp_path.resolve()
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("title", ["", None, "...", "CON", "  ", "\x00\x01"])
def test_safe_filename_uses_the_fallback_when_nothing_is_left(title):
    assert safe_filename(title, ".mp3", "task-123") == "task-123.mp3"
    assert safe_filename(title, ".wav") == "song.wav"


@pytest.mark.parametrize("fallback", ["../evil", "a/b", "...", ""])
def test_safe_filename_sanitises_the_fallback_too(fallback):
    assert_single_safe_component(safe_filename("", ".mp3", fallback), ".mp3")


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("My Song", "My Song.mp3"),
        ("Rain & Thunder (live)", "Rain & Thunder (live).mp3"),
        ("  spaced   out  ", "spaced out.mp3"),
        ("Café del Mar", "Café del Mar.mp3"),
        ("AC/DC tribute", "AC DC tribute.mp3"),
        ("v1.5 mix", "v1.5 mix.mp3"),
        ("Console", "Console.mp3"),  # only the exact reserved names are replaced
    ],
)
def test_safe_filename_keeps_ordinary_titles_readable(title, expected):
    assert safe_filename(title, ".mp3") == expected


def test_safe_filename_truncates_long_titles():
    name = safe_filename("x" * 10_000, ".mp3")
    assert name.startswith("x" * 100)
    assert len(name) <= 200


@pytest.mark.parametrize(
    ("url", "content_type", "suffix"),
    [
        ("https://x/a", "audio/mpeg", ".mp3"),
        ("https://x/a", "audio/mpeg; charset=binary", ".mp3"),
        ("https://x/a", "audio/wav", ".wav"),
        ("https://x/a", "video/mp4", ".mp4"),
        ("https://x/a.wav?sig=abc", "application/octet-stream", ".wav"),
        ("https://x/a.FLAC", None, ".flac"),
        ("https://x/a.exe", None, ".mp3"),
        ("https://x/a.sh", "text/x-shellscript", ".mp3"),
        ("https://x/a", None, ".mp3"),
    ],
)
def test_suffix_for(url, content_type, suffix):
    assert suffix_for(url, content_type) == suffix


def test_unique_path_never_overwrites(tmp_path):
    first = unique_path(tmp_path, "song.mp3")
    assert first == tmp_path / "song.mp3"
    first.write_bytes(b"1")
    second = unique_path(tmp_path, "song.mp3")
    assert second == tmp_path / "song (2).mp3"
    second.write_bytes(b"2")
    third = unique_path(tmp_path, "song.mp3")
    assert third == tmp_path / "song (3).mp3"
    assert first.read_bytes() == b"1" and second.read_bytes() == b"2"


def test_unique_path_free_name_untouched(tmp_path):
    (tmp_path / "other.mp3").write_bytes(b"")
    assert unique_path(tmp_path, "song.mp3") == tmp_path / "song.mp3"


def test_atomic_file_commit(tmp_path):
    with AtomicFile(tmp_path) as target:
        assert target.temp_path.parent == tmp_path
        assert target.temp_path.name.startswith(".")  # hidden while incomplete
        target.write(b"abc")
        target.write(b"def")
        assert not (tmp_path / "song.mp3").exists()  # nothing visible before commit
        path = target.commit("song.mp3")
    assert path == tmp_path / "song.mp3"
    assert path.read_bytes() == b"abcdef"
    assert [p.name for p in tmp_path.iterdir()] == ["song.mp3"]


def test_atomic_file_commit_does_not_overwrite(tmp_path):
    (tmp_path / "song.mp3").write_bytes(b"old")
    with AtomicFile(tmp_path) as target:
        target.write(b"new")
        path = target.commit("song.mp3")
    assert path.name == "song (2).mp3" and path.read_bytes() == b"new"
    assert (tmp_path / "song.mp3").read_bytes() == b"old"


def test_atomic_file_discard(tmp_path):
    target = AtomicFile(tmp_path)
    target.write(b"half")
    assert target.temp_path.exists()
    target.discard()
    assert list(tmp_path.iterdir()) == []
    target.discard()  # twice is harmless


def test_atomic_file_exception_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), AtomicFile(tmp_path) as target:
        target.write(b"half a song")
        raise RuntimeError("stream broke")
    assert list(tmp_path.iterdir()) == []


def test_atomic_file_without_commit_leaves_nothing(tmp_path):
    with AtomicFile(tmp_path) as target:
        target.write(b"never committed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_file_creates_the_directory(tmp_path):
    directory = tmp_path / "a" / "b"
    with AtomicFile(directory) as target:
        target.write(b"x")
        path = target.commit("x.mp3")
    assert path.parent == directory and path.read_bytes() == b"x"
