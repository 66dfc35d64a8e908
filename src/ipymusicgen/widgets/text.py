"""Plain-text output of widgets, for front ends that cannot render them (terminals, nbconvert, email)."""

from __future__ import annotations

from typing import Any


class TextRepr:
    """Mixin for a widget class with a readable multi-line `__repr__`.

    ipywidgets puts `repr(widget)` cut at 110 characters into the `text/plain` of its display bundle,
    and IPython prefers that bundle to `_repr_pretty_`: a watcher with a few cards would lose all but
    its first line. This keeps the whole text in both places.
    """

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The parent's bundle (a dict, or anywidget's (data, metadata) pair) with the whole text."""
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            data["text/plain"] = repr(self)
        return bundle

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
