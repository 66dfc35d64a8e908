"""The composition root: the one place that wires a client to its journal, archiver and batches.

The client layer imports nothing above itself; what it needs from above plugs in here (`ClientWiring`,
installed when the package is imported). Everything that needs "a client with everything attached"
(the session's shared client, magics, widgets, the CLI, an agent server) builds it with `build_client`
or `build_async_client`, so the wiring is never copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .client import wiring
from .client.faces import AsyncMusicClient, MusicClient

if TYPE_CHECKING:
    from .client.core import _Core
    from .config import Settings
    from .storage.journal import Journal


class ClientWiring:
    """What every client gets from the layers above it: the SQLite journal, an archiver, the batch engine."""

    def open_journal(self, settings: Settings) -> Journal:
        from .storage.journal import Journal

        return Journal(settings.journal_path)

    def attach(self, client: _Core, archive: Any) -> None:
        from .archive.archiver import attach
        from .lab.analyst import analyse_after_archive

        if archive is False:
            return
        if isinstance(client, MusicClient):
            archiver = attach(client, archive, downloader=client)  # the client it was given downloads (any thread)
        else:  # an async client belongs to its event loop: the archive's thread downloads with a sync twin
            settings = client.settings
            archiver = attach(
                client, archive, downloader=lambda: MusicClient(settings=settings, journal=False, archive=False)
            )
        if archiver is not None:
            archiver.followers.append(analyse_after_archive)  # each kept song measured (when the extra is there)

    def wait_archived(self, client: _Core, records: list[Any], timeout: float) -> dict[str, Any] | None:
        from .archive.archiver import archiver_of

        archiver = archiver_of(client)
        if archiver is None or archiver.journal_path is None or archiver.directory is None:
            return None
        return archiver.wait_archived(records, timeout)

    def run_batch(self, client: Any, requests: Any, options: dict[str, Any]) -> Any:
        from .batch.engine import run_batch

        return run_batch(client, requests, **options)

    async def run_batch_async(self, client: Any, requests: Any, options: dict[str, Any]) -> Any:
        from .batch.engine import run_batch_async

        return await run_batch_async(client, requests, **options)


wiring.install(ClientWiring())


def build_client(settings: Settings, *, journal: Any = True, archive: Any = True) -> MusicClient:
    """A sync client with everything attached (the journal opens on first paid call, the archive listens)."""
    return MusicClient(settings=settings, journal=journal, archive=archive)


def build_async_client(settings: Settings, *, journal: Any = True, archive: Any = True) -> AsyncMusicClient:
    """An async client with everything attached; async clients belong to one event loop, so each caller gets one."""
    return AsyncMusicClient(settings=settings, journal=journal, archive=archive)
