"""What a view offers now: every intent from the page must name something the view shows at that moment.

docs/frontend.md promises that a view refuses what it did not offer. A forged message (or one from a page that is
behind) may name a song the view never showed, or one that left it (another page, a search with no match), a
button its card does not have, or a control the view does not draw now (Confirm with no question asked, Retry
with no failed rows). So each view says what its page holds, read from the very data it sent the page
(`Offers`: pairs of intent and target), and its message handler asks `allows(offers, kind, target)` before
anything else: an intent that is not there does nothing (the view may say so in one line, `REFUSED`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Offers = set[tuple[str, str]]
"""(intent kind, target): the target is a card's id, or "" for a control of the view's own (search, Run)."""

REFUSED = "That is not on this view now (another page, a search, or a button it does not show); nothing was done."


def controls(*kinds: str) -> Offers:
    """The view's own controls drawn now (no card named)."""
    return {(kind, "") for kind in kinds}


def card_offers(
    cards: Iterable[Mapping[str, Any]], more: Callable[[Mapping[str, Any]], Iterable[str]] | None = None
) -> Offers:
    """What the drawn cards' buttons send: one button per entry of a card's `actions` (the card kit draws them),
    and what the view draws on a card besides (`more(card)`: the library's Keep and Lineage, the watcher's Retry)."""
    found: Offers = set()
    for card in cards:
        card_id = card.get("id")
        if not isinstance(card_id, str) or not card_id:
            continue
        found.update((kind, card_id) for kind in card.get("actions") or ())
        if more is not None:
            found.update((kind, card_id) for kind in more(card))
    return found


def allows(offers: Offers, kind: Any, target: Any = "") -> bool:
    """Whether the view shows what the intent names (a kind and target of another type never is)."""
    return isinstance(kind, str) and isinstance(target, str) and (kind, target) in offers


def target_of(content: Mapping[str, Any]) -> Any:
    """The card an intent names (its `id`), or "" when it names none (what the view's own controls send)."""
    return content.get("id", "")
