"""Two workspaces on two journal files in one process share nothing of the archive or the analysis: a song made in
one is announced only to its own views, kept in its own folder and measured by its own analyst, and closing one
stops its archiver and its analyst while the other goes on working (issue 38)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ipymusicgen.lab.analyst as analyst_module
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import Workspace

pytestmark = pytest.mark.slow  # songs made on a uvicorn sandbox and archived on worker threads (about 1 s each)


@dataclass
class Heard:
    """A view's ear: every archive word its workspace's events bring (held strongly by the test)."""

    words: list[tuple[str, Path | None, str | None]]

    def __call__(self, task_id: str, path: Path | None, peaks: Any, error: str | None) -> None:
        self.words.append((task_id, path, error))

    @property
    def ids(self) -> set[str]:
        return {task_id for task_id, _, _ in self.words}


@pytest.fixture
def open_workspace(sandbox: Sandbox, tmp_path: Path) -> Iterator[Callable[[str], Workspace]]:
    """Workspaces of the test's own, each on a journal file in its own folder under tmp_path, their clients on the
    module's sandbox as the embedded sandbox (so each archives into a throwaway folder of its own); closed after."""
    made: list[Workspace] = []
    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        poll_interval=0.05,
        embedded_sandbox=True,
        **sandbox.engine_settings(),
    )

    def open_one(name: str) -> Workspace:
        folder = tmp_path / name
        folder.mkdir()
        made.append(workspace := Workspace(settings, journal_path=folder / "journal.sqlite3"))
        return workspace

    yield open_one
    for workspace in made:
        workspace.close()


def make_songs(workspace: Workspace, style: str) -> list[str]:
    """Songs made and archived in `workspace` (every archive word already given when this returns)."""
    client = workspace.client
    ids = list(client.generate(action="auto", style=style).ids)
    client.wait(ids, timeout=60, archived=True)
    archiver = archiver_of(client)
    assert archiver is not None and archiver.join(60)
    return ids


def test_a_song_is_announced_only_to_the_views_of_the_workspace_that_made_it(
    open_workspace: Callable[[str], Workspace],
) -> None:
    first, second = open_workspace("first"), open_workspace("second")
    heard_first, heard_second = Heard([]), Heard([])
    first.archive.events.subscribe(heard_first)
    second.archive.events.subscribe(heard_second)
    made_first = make_songs(first, "harbour, first")
    made_second = make_songs(second, "harbour, second")
    assert heard_first.ids == set(made_first)
    assert heard_second.ids == set(made_second)
    assert all(path is not None and error is None for _, path, error in heard_first.words + heard_second.words)


def test_each_workspace_keeps_its_sandbox_songs_in_a_folder_of_its_own(
    open_workspace: Callable[[str], Workspace],
) -> None:
    first, second = open_workspace("first"), open_workspace("second")
    made_first = make_songs(first, "folder, first")
    made_second = make_songs(second, "folder, second")
    kept_first = {first.songs.archived_path(task_id) for task_id in made_first}
    kept_second = {second.songs.archived_path(task_id) for task_id in made_second}
    (folder_first,) = {path.parent for path in kept_first if path is not None}
    (folder_second,) = {path.parent for path in kept_second if path is not None}
    assert folder_first != folder_second
    assert sorted(p.name[-14:] for p in folder_first.glob("*.mp3")) == sorted(f"[{i[:8]}].mp3" for i in made_first)


def test_closing_one_workspace_stops_its_archiver_and_leaves_the_other_working(
    open_workspace: Callable[[str], Workspace],
) -> None:
    first, second = open_workspace("first"), open_workspace("second")
    heard_second = Heard([])
    second.archive.events.subscribe(heard_second)
    made_first = make_songs(first, "closing, first")
    make_songs(second, "closing, second")
    first_archiver = archiver_of(first.client)
    records = first.client.tasks(made_first)
    (folder_first,) = {first.songs.archived_path(task_id).parent for task_id in made_first}  # type: ignore[union-attr]

    first.close()

    assert first_archiver is not None
    assert first_archiver.wait_archived(records, 5) == dict.fromkeys(made_first)  # nothing more is taken
    assert not folder_first.exists()  # its throwaway folder went with it
    made_later = make_songs(second, "closing, second again")
    assert set(made_later) <= heard_second.ids
    for task_id in made_later:
        kept = second.songs.archived_path(task_id)
        assert kept is not None and kept.is_file()


@dataclass
class FakeMeasures:
    bpm: float

    def as_dict(self) -> dict[str, Any]:
        return {"bpm": self.bpm}


def test_closing_one_workspace_stops_its_analyst_and_leaves_the_others_measuring(
    open_workspace: Callable[[str], Workspace], monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[Path] = []

    def measure(path: Path) -> FakeMeasures:
        measured.append(Path(path))
        return FakeMeasures(97.0)

    monkeypatch.setenv("MUSICGEN_ANALYZE", "on")
    monkeypatch.setattr(analyst_module, "available", lambda: True)
    monkeypatch.setattr(analyst_module, "analyze_file", measure)
    first, second = open_workspace("first"), open_workspace("second")
    made_first = make_songs(first, "measured, first")
    made_second = make_songs(second, "measured, second")
    assert first.analysts.join(30) and second.analysts.join(30)
    assert {second.songs.song(task_id).bpm for task_id in made_second} == {97.0}
    first_analysts = first.analysts
    kept_first = first.songs.archived_path(made_first[0])
    assert kept_first is not None
    before = len(measured)

    first.close()

    first_analysts.after_archive(first.path, made_first[0], kept_first)  # a straggler: not measured any more
    made_later = make_songs(second, "measured, second again")
    assert second.analysts.join(30)
    assert {second.songs.song(task_id).bpm for task_id in made_later} == {97.0}
    assert len(measured) - before == len(made_later)
