"""Jupyter widgets for the music service: the studio, song cards and the task watcher.

Widgets hold no HTTP code (they call a `MusicClient`, the shared one by default) and no validation
rules of their own (they show the request models' problems). The front end (anywidget ES modules in
`static/`) only draws plain-text data and sends intents; Python decides everything.
"""

from __future__ import annotations

from .card import TaskCard
from .song_data import song_card
from .studio import Studio
from .ui import UI, studio, watch_unfinished
from .watcher import TaskWatcher

__all__ = [
    "UI",
    "Studio",
    "TaskCard",
    "TaskWatcher",
    "song_card",
    "studio",
    "watch_unfinished",
]
