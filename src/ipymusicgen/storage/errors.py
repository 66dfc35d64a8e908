"""What a storage engine's failures are called above `storage/`, so no layer above names SQLite.

Today's engine is SQLite, so these are its exception classes (a `except StorageError` catches exactly what
`except sqlite3.Error` did). A second engine maps its own errors onto the same three names.
"""

from __future__ import annotations

import sqlite3

StorageError = sqlite3.Error
"""Any failure of the database engine (locked, read-only, full, damaged, closed)."""
StorageUnavailableError = sqlite3.OperationalError
"""The file cannot be used now: another process holds its lock, it is read-only, the disk is full."""
StorageClosedError = sqlite3.ProgrammingError
"""The connection is closed already."""

__all__ = ["StorageClosedError", "StorageError", "StorageUnavailableError"]
