"""`%musicgen_library [text]`: the library view in a notebook (registered by `%load_ext ipymusicgen`)."""

from __future__ import annotations

import re
import shlex
from types import MappingProxyType
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .args import unregister_magics

USAGE = (
    "%musicgen_library [words to search] [--favourites] [--state ready|failed|preview|writing] "
    "[--model NAME] [--batch NAME] [--page-size N]"
)
_VALUED = MappingProxyType({"--state": "state", "--model": "model", "--batch": "batch", "--page-size": "page_size"})


def parse_library_line(line: str) -> tuple[str, dict[str, Any]]:
    """(search text, options) from the magic's line; unknown `--options` are refused with the usage."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        try:  # an apostrophe after a letter is part of the words searched for: don't, singin' in the rain
            words = shlex.split(re.sub(r"(?<=\w)'", "\\\\'", line))
        except ValueError:
            raise UsageError(f"{exc}. Usage: {USAGE}") from exc
    text, options = [], {}
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--favourites", "--favorites", "-f"):
            options["favourite"] = True
        elif word in _VALUED:
            if i + 1 >= len(words):
                raise UsageError(f"{word} needs a value. Usage: {USAGE}")
            options[_VALUED[word]] = words[i + 1]
            i += 1
        elif word.startswith("--"):
            raise UsageError(f"Unknown option {word}. Usage: {USAGE}")
        else:
            text.append(word)
        i += 1
    if "page_size" in options:
        try:
            options["page_size"] = int(options["page_size"])
        except ValueError as exc:
            raise UsageError(f"--page-size needs a whole number. Usage: {USAGE}") from exc
    return " ".join(text), options


@magics_class
class LibraryMagics(Magics):
    """The library magic; kept apart from the generation magics (magics.py)."""

    @line_magic("musicgen_library")
    def musicgen_library(self, line: str = "") -> Any:
        """Open your song library, searched for the words given: %musicgen_library rain --favourites"""
        from ..widgets.library import LibraryView

        text, options = parse_library_line(line)
        page_size = options.pop("page_size", None)
        view = LibraryView(text=text, **({"page_size": page_size} if page_size else {}))
        if options:
            view.set_filters(**options)
        return view


def register(ipython: Any) -> None:
    """Register the library magic once (called by magics.load_ipython_extension)."""
    if "musicgen_library" not in ipython.magics_manager.magics.get("line", {}):
        ipython.register_magics(LibraryMagics(shell=ipython))


def unregister(ipython: Any) -> None:
    """Remove the library magic (called by magics.unload_ipython_extension)."""
    unregister_magics(ipython, LibraryMagics)
