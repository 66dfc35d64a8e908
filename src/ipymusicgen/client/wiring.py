"""Where the features above the client plug into it, so the client imports nothing above itself.

A client journals paid work, hands finished songs to an archive and runs batches, but the journal
(storage), the archive and the batch engine live in higher layers. A `Workspace` (`ipymusicgen.workspace`) passes its
own `Wiring` to each client it builds (`MusicClient(wiring=...)`); a client made by hand gets the default the
session module (`ipymusicgen.workspace.session`) installs here when it is imported: the one slot filled at import.
The client asks it when it is made (`attach`), when it first needs its journal (`open_journal`) and in `batch()`;
the batch engine asks it where the client's batch rows live (`batch_store`) and what runs on a key share (`keys`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..batch import Batch
    from ..config import Settings
    from .core import _Core
    from .flows import Journal


class Wiring(Protocol):
    def open_journal(self, settings: Settings) -> Journal:
        """The durable journal of these settings, opened for a client that closes it with itself."""
        ...

    def attach(self, client: _Core, archive: Any) -> None:
        """Give a new client what listens to it (its archiver, unless `archive` is False)."""
        ...

    def wait_archived(self, client: _Core, records: list[Any], timeout: float) -> dict[str, Any] | None:
        """Wait (bounded) until the complete songs of `records` are archived or failed to be: each id's file or
        None; None when this client archives nothing."""
        ...

    def run_batch(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch: ...

    async def run_batch_async(self, client: Any, requests: Any, options: dict[str, Any]) -> Batch: ...

    def database_at(self, path: Any) -> Any:
        """The `Database` of the file at `path` (the workspace's own for its file), owned by the wiring: where paid
        extras are kept (`db.extras`)."""
        ...

    def batch_store(self, client: Any) -> Any:
        """The batch store of the client's journal file (owned by the wiring's workspace), or an in-memory one."""
        ...

    @property
    def keys(self) -> Any:
        """What the batches of this wiring's clients share on a key (`batch.key_activity.KeyActivity`)."""
        ...


_installed: list[Wiring] = []
"""The default wiring: the one slot the session module fills at import (the package's allowed hook)."""


def install(wiring: Wiring) -> None:
    """Called once by the composition root; a later call replaces the wiring (tests, embedders)."""
    _installed[:] = [wiring]


def installed() -> Wiring:
    if not _installed:
        raise RuntimeError("ipymusicgen's client is not wired: import ipymusicgen (its session module sets this up).")
    return _installed[0]
