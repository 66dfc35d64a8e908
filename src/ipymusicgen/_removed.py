"""Names an unreleased version had and this one dropped: each says, in one line, what replaced it.

The package was never released, so old import paths are not kept as shims; reaching for one (as an attribute,
`import ipymusicgen.journal` or `from ipymusicgen.widgets import GenerateForm`) raises an error naming the new home.
"""

from __future__ import annotations

import sys
from typing import Any

_CLIENT = ("AsyncMusicClient", "MusicClient", "Resumed")
_CLIENT_FACES = ("DOUBTFUL_STATUS", "IDS_QUERY_BUDGET", "RETRYABLE_STATUS", "Endpoint", "Journal", "Record",
                 "TaskJournal", "UpdateCallback", "backoff_delay", "chunk_ids", "is_transient")  # fmt: skip
_FORMS = {"GenerateForm": "song", "V2Form": "v2", "LyricsForm": "lyrics", "KeyInfoPanel": "key_info"}

REMOVED: dict[str, str] = {
    "ipymusicgen.journal": "use ipymusicgen.Journal (or ipymusicgen.storage.journal)",
    "ipymusicgen.costs": "use ipymusicgen.models.costs",
    "ipymusicgen.tasks": "use ipymusicgen.models.tasks",
    "ipymusicgen.library": "ipymusicgen.library is the function library(); the Library class is in "
    "ipymusicgen.song_library",
    **{f"ipymusicgen.client.{name}": f"use ipymusicgen.{name}" for name in _CLIENT},
    **{f"ipymusicgen.client.{name}": f"use ipymusicgen.client.faces.{name}" for name in _CLIENT_FACES},
    **{
        f"ipymusicgen.widgets.{name}": f"use ipymusicgen.studio().{pane} (prefill it with .set_values(...))"
        for name, pane in _FORMS.items()
    },
}
"""Dotted old name -> what to use instead."""


def removed_message(dotted: str) -> str | None:
    said = REMOVED.get(dotted)
    if said is None:
        return None
    return said if said.startswith(dotted) else f"{dotted} was removed: {said}"


def missing(module: str, name: str) -> AttributeError:
    """A module `__getattr__`'s error: the one-line replacement for a removed name, else Python's own words."""
    said = removed_message(f"{module}.{name}")
    return AttributeError(
        said or f"module {module!r} has no attribute {name!r}", name=name, obj=sys.modules.get(module)
    )


class _RemovedFinder:
    """Makes `import ipymusicgen.journal` and `from ipymusicgen.widgets import GenerateForm` say what replaced them
    (an import statement turns a module `__getattr__`'s message into a generic one; this runs first). A meta path
    finder needs only `find_spec`: not deriving from `importlib.abc.MetaPathFinder` keeps importlib.resources out of
    `%load_ext` (figure 3)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        said = removed_message(fullname)
        if said is not None:
            raise ImportError(said, name=fullname)
        return None


def install_finder() -> None:
    if not any(isinstance(finder, _RemovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RemovedFinder())
