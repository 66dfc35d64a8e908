"""Plain-text output of widgets, for front ends that cannot render them (terminals, nbconvert, email)."""

from __future__ import annotations

from typing import Any


class TextRepr:
    """Mixin for a widget class with a readable multi-line `__repr__`.

    ipywidgets puts `repr(widget)` cut at 110 characters into the `text/plain` of its display bundle,
    and IPython prefers that bundle to `_repr_pretty_`: a watcher with a few cards would lose all but
    its first line. This keeps the whole text in both places.
    """

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle: dict[str, Any] | None = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if bundle is not None:
            bundle["text/plain"] = repr(self)
        return bundle

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
