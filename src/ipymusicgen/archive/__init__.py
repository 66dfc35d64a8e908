"""The archive layer: every finished song kept on disk, tagged (`archiver`) with its waveform peaks (`waveform`),
off the polling thread; each workspace's own (`WorkspaceArchive`: where, which archiver, and its `ArchiveEvents`
that its views subscribe to). Built on the client and the storage layer."""

from typing import Any

from .archiver import Archiver, archive_label, archive_of, archiver_of
from .events import ArchiveEvents
from .workspace_archive import WorkspaceArchive

__all__ = [
    "ArchiveEvents", "Archiver", "WorkspaceArchive", "archive_label", "archive_of", "archive_wav", "archiver_of",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    """`archive_wav` is the paid-once WAV (archiver.archive_wav pays on every call); loaded on first use, so
    `%load_ext` leaves the paid extras' machinery for later (tests/test_load_ext_imports.py)."""
    if name == "archive_wav":
        from .extras import archive_wav

        return archive_wav
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
