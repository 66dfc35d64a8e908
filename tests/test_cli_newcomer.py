"""The command line as a newcomer meets it: `generate --help` says where songs go, and the demo can be run again
without piling up copies of its songs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ipymusicgen.__main__ import fresh_downloads, main


def test_generate_help_shows_the_command_and_where_songs_go(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert 'python -m ipymusicgen generate "lo-fi rain"' in said
    assert "(default: songs/)" in said


def test_demo_help_says_each_run_replaces_its_downloads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "magics-tour" in said and "replaces" in said


def test_each_demo_run_downloads_into_a_fresh_folder(tmp_path: Path) -> None:
    old = tmp_path / "downloads"
    old.mkdir()
    (old / "Songs of Lighthouse.mp3").write_bytes(b"ID3 an earlier run")
    (old / "nested").mkdir()
    folder = fresh_downloads(tmp_path)
    assert folder == old and folder.is_dir() and not any(folder.iterdir())


@pytest.mark.slow  # two notebook runs in kernels
def test_running_the_demo_twice_keeps_one_copy_of_each_song(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(MUSICGEN_SANDBOX_STAGE_SECONDS="0.3", MUSICGEN_SANDBOX_SONG_SECONDS="6", XDG_DATA_HOME=str(tmp_path))
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "ipymusicgen", "demo", "--timeout", "300"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, f"run {run}: {done.stdout}{done.stderr}"
    downloads = sorted(p.name for p in (tmp_path / "artifacts" / "demo" / "downloads").iterdir())
    assert len(downloads) == 1 and not re.search(r" \(\d+\)\.mp3$", downloads[0]), downloads
    assert downloads[0] in done.stdout  # the line naming the MP3 names this run's file
