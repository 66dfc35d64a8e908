"""`PaidAsk`: the one rule for asking before paying, for every paid control of every view.

A pane's "Make songs", the grid's Run, a card's Concat / Retry / WAV / MP4, a batch's "Retry failed rows" and the
Send of a `%%musicgen_batch` or `%%musicgen_grid` cell all go through it. With a key that may cost money (the
settings' rule, or the caller's own `confirm=` choice, e.g. `studio(confirm=False)`) the first press only asks:
the question says the price, and what was priced is kept as a snapshot. The confirm sends only when what would
be sent now is that snapshot; otherwise nothing is sent and the question is asked again for what stands now.
With confirming off the press sends at once. A call from code is the decision itself and never asks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

Question = Callable[[bool], str | None]
"""What to ask; its argument says the source changed since the last question. None: nothing to pay now."""


@dataclass(frozen=True)
class Asked:
    """A question shown: which control asked, what it priced (as data), and the words shown."""

    key: Hashable
    snapshot: Any
    question: str


class PaidAsk:
    """Ask before paying, once per control, honouring the caller's confirm choice (see the module's docstring)."""

    def __init__(self, needs_confirm: Callable[[], bool]) -> None:
        self._needs_confirm = needs_confirm
        self.asked: Asked | None = None
        self.forced: bool | None = None
        """True/False set by a caller (a view's `confirm_required = ...`): always/never ask; None: the rule."""

    @classmethod
    def of(cls, settings: Any, confirm: bool | None = None) -> PaidAsk:
        """The rule of a client's settings with the caller's choice (`confirm=None`: ask with a real key only)."""
        return cls(lambda: settings.needs_confirm(confirm))

    @property
    def needed(self) -> bool:
        """Whether a paid press asks first now."""
        return self.forced if self.forced is not None else bool(self._needs_confirm())

    @property
    def question(self) -> str:
        """The question standing ("" when none)."""
        return self.asked.question if self.asked is not None else ""

    def asking(self, key: Hashable) -> bool:
        """Whether the standing question is this control's."""
        return self.asked is not None and self.asked.key == key

    def press(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """A paid control was pressed: True to send now; False when its question is shown instead."""
        self.asked = None
        if not self.needed:
            return True
        text = question(False)
        if text is None:  # nothing to pay now (an extra made before): sent, never asked
            return True
        self.asked = Asked(key, snapshot, text)
        return False

    def confirm(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """The confirm of a shown question: True to send `snapshot`, which is what the question priced. A confirm
        with no question of this control standing sends nothing; a changed source is asked again."""
        asked, self.asked = self.asked, None
        if asked is None or asked.key != key:
            return False
        if asked.snapshot != snapshot:
            text = question(True)
            if text is None:  # nothing to pay now after all: sent
                return True
            self.asked = Asked(key, snapshot, text)
            return False
        return True

    def press_again(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """A control whose second press confirms (a card's button, "Retry failed rows"): confirm its standing
        question, else ask it."""
        if self.asking(key):
            return self.confirm(key, snapshot, question)
        return self.press(key, snapshot, question)

    def cancel(self) -> None:
        """Drop the standing question; nothing is sent."""
        self.asked = None


__all__ = ["Asked", "PaidAsk", "Question"]
