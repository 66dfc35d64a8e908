"""Jupyter widgets for the music service: forms, a task watcher, and `studio()` that puts them together.

Forms hold no HTTP code (they call a `MusicClient`, the shared one by default) and no validation rules
of their own (they show the request models' problems). Everything server-supplied is escaped.
"""

from __future__ import annotations

from .card import TaskCard
from .generate import GenerateForm
from .keyinfo import KeyInfoPanel
from .lyrics import LyricsForm
from .studio import Studio, studio
from .v2 import V2Form
from .watcher import TaskWatcher

__all__ = ["GenerateForm", "KeyInfoPanel", "LyricsForm", "Studio", "TaskCard", "TaskWatcher", "V2Form", "studio"]
