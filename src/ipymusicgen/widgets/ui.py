"""The UI factories: how a studio, a lone watcher, a grid's view and a batch's view are built over one workspace.

`app.Workspace` sits below the widgets (tests/test_layers.py), so it cannot build them itself: `UI(workspace)` is
its notebook face, built by whoever draws (the magics, `ipymusicgen.grid()`, `ipymusicgen.watch_unfinished()`)
over the workspace in use, and it passes every collaborator in. A lone watcher is given the studio's opener, so a
card's Extend opens a studio without any module filling a slot when it is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .studio import Studio, extend_studio, studio  # the verb, defined once there
from .watcher import TaskWatcher
from .watcher import watch_unfinished as unfinished_watcher

if TYPE_CHECKING:
    from ..client.faces import MusicClient
    from ..lab.grid import Grid
    from ..workspace.workspace import Workspace
    from .batch import BatchView
    from .grid import GridView


class UI:
    """The views of one workspace (the session's current one unless given; looked up on first need, so building
    a `UI` starts no sandbox). A client given to a method wins over the workspace's shared one."""

    def __init__(self, workspace: Workspace | None = None) -> None:
        self._workspace = workspace

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            from ..workspace.session import current_workspace

            self._workspace = current_workspace()
        return self._workspace

    def _client(self, client: MusicClient | None) -> MusicClient:
        return client if client is not None else self.workspace.client

    def studio(self, client: MusicClient | None = None, *, confirm: bool | None = None) -> Studio:
        """The studio: every tab above its own watcher (whose Extend opens its own panes)."""
        return Studio(self._client(client), confirm=confirm)

    def watcher(
        self,
        ids: Iterable[str] = (),
        *,
        v2_ids: Iterable[Any] = (),
        client: MusicClient | None = None,
        request: Any = None,
        **options: Any,
    ) -> TaskWatcher:
        """A lone watcher (a magic's, a batch's cards): its card's Extend opens a studio that sends into it."""
        return TaskWatcher(
            ids,
            v2_ids=v2_ids,
            client=self._client(client),
            request=request,
            open_extend_studio=extend_studio,
            **options,
        )

    def watch_unfinished(self, client: MusicClient | None = None) -> TaskWatcher:
        """A lone watcher over the journal's unfinished tasks (after a restart), Extend included."""
        return unfinished_watcher(self._client(client), open_extend_studio=extend_studio)

    def grid_view(self, plan: Grid, *, confirm: bool | None = None) -> GridView:
        """A grid's view (what `Grid(view=...)` is given): its library, the workspace's, keeps the votes."""
        from .grid import GridView

        try:
            opened = self.workspace.library()
        except Exception:  # no library to keep votes in: the comparison says so after the vote
            opened = None
        return GridView(plan, library=opened, confirm=confirm)

    def batch_view(self, watcher: TaskWatcher | None = None, *, confirm: bool | None = None) -> BatchView:
        """A batch's progress view above `watcher` (its song cards; none with --no-watch)."""
        from .batch import BatchView

        return BatchView(watcher=watcher, confirm=confirm)


def grid_view(plan: Grid) -> GridView:
    """A grid's view over the session's workspace (the `view=` `ipymusicgen.grid()` and the grid magic give)."""
    return UI().grid_view(plan)


def watch_unfinished(client: MusicClient | None = None) -> TaskWatcher:
    """A watcher over every unfinished task in the journal for the current hosts (after a restart); a card's
    Extend opens a studio."""
    return UI().watch_unfinished(client)


__all__ = ["UI", "grid_view", "studio", "watch_unfinished"]
