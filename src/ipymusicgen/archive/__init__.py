"""The archive layer: every finished song kept on disk, tagged (`archiver`, `tags`, `paths`) with its
waveform peaks (`waveform`), off the polling thread. Built on the client and the storage layer."""

from .archiver import Archiver, add_archive_listener, archive_label, set_archive_dir
from .extras import archive_wav  # the paid-once WAV (archiver.archive_wav pays on every call)

__all__ = ["Archiver", "add_archive_listener", "archive_label", "archive_wav", "set_archive_dir"]
