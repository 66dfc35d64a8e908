"""The archive layer: every finished song kept on disk, tagged (`archiver`, `tags`, `paths`) with its
waveform peaks (`waveform`), off the polling thread. Built on the client and the storage layer."""

from typing import Any

from .archiver import Archiver, add_archive_listener, archive_label, set_archive_dir

__all__ = ["Archiver", "add_archive_listener", "archive_label", "archive_wav", "set_archive_dir"]


def __getattr__(name: str) -> Any:
    """`archive_wav` is the paid-once WAV (archiver.archive_wav pays on every call); loaded on first use, so
    `%load_ext` leaves the paid extras' machinery for later (tests/test_load_ext_imports.py)."""
    if name == "archive_wav":
        from .extras import archive_wav

        return archive_wav
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
