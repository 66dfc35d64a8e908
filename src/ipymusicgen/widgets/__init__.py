"""Jupyter widgets for the music service: the studio, song cards and the task watcher.

Widgets hold no HTTP code (they call a `MusicClient`, the shared one by default) and no validation
rules of their own (they show the request models' problems). The front end (anywidget ES modules in
`static/`) only draws plain-text data and sends intents; Python decides everything.
"""

from __future__ import annotations

from .aliases import GenerateForm, KeyInfoPanel, LyricsForm, V2Form
from .card import TaskCard
from .song_data import song_card
from .studio import Studio, studio
from .watcher import TaskWatcher, watch_unfinished

__all__ = [
    "GenerateForm",
    "KeyInfoPanel",
    "LyricsForm",
    "Studio",
    "TaskCard",
    "TaskWatcher",
    "V2Form",
    "song_card",
    "studio",
    "watch_unfinished",
]
