"""`song_card(record, **extra)`: the plain dict every view's song card draws (docs/frontend.md).

Python decides everything a card shows: the state and its words, which URLs are safe (only http(s),
by `safe_html.http_url`), which actions a song offers. The JS only draws the dict with `textContent`,
so a hostile title stays text. Strings are bounded so one odd record cannot bloat the widget state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any

from ..models.schema import TaskRecord, V2Song
from ..models.tasks import SONG_STATES, TaskState
from ..safe_html import http_url

Record = TaskRecord | V2Song
"""A v1 task or a v2 song: what a card shows (the widgets' one definition)."""

STATES = SONG_STATES
"""The card states, in the order a song goes through them."""
STATE_LABELS = MappingProxyType(
    {
        "queued": "Queued",
        "writing": "Writing",
        "preview": "Preview",
        "ready": "Ready",
        "failed": "Failed",
    }
)
ALL_ACTIONS = ("keep", "extend", "concat", "download", "export", "wav", "mp4", "favourite", "copy_id")
TITLE_LIMIT = 200
LYRICS_LIMIT = 20_000
REASON_LIMIT = 500
CHIP_LIMIT = 40
CHIPS_MAX = 8
PEAKS_MAX = 512
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain(text: object, limit: int) -> str:
    """Text as shown: control characters dropped (newlines and tabs kept), cut at `limit` with an ellipsis."""
    if text is None:
        return ""
    value = _CONTROL.sub("", str(text))
    return value if len(value) <= limit else value[: limit - 1] + "…"


def style_chips(style: object) -> list[str]:
    """A style string as up to 8 short chips: split on commas, trimmed, empty and repeated ones dropped."""
    chips: dict[str, None] = {}
    for part in plain(style, 2000).split(","):
        chip = " ".join(part.split())
        if chip and chip.lower() not in {c.lower() for c in chips}:
            chips[plain(chip, CHIP_LIMIT)] = None
    return list(chips)[:CHIPS_MAX]


def card_state(record: Record | None) -> str:
    """The card state: "queued" before the first status, then writing / preview / ready / failed."""
    return "queued" if record is None else record.state.word


def compact_peaks(peaks: Iterable[Sequence[float]] | None) -> list[list[float]]:
    """Waveform peaks as [[min, max], ...] rounded to 3 places, at most 512 pairs (evenly picked); bad pairs dropped."""
    if not peaks:
        return []
    pairs = []
    for pair in peaks:
        try:
            low, high = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(low) and math.isfinite(high):
            pairs.append([round(max(-1.0, min(1.0, low)), 3), round(max(-1.0, min(1.0, high)), 3)])
    if len(pairs) > PEAKS_MAX:
        step = len(pairs) / PEAKS_MAX
        pairs = [pairs[int(i * step)] for i in range(PEAKS_MAX)]
    return pairs


def song_actions(record: Record | None) -> list[str]:
    """What a song offers: copy id always; keep (this take), extend, download, export (a folder of its files, free),
    its WAV and MP4 (paid once, then reused), favourite when ready; concat for ready v1 songs."""
    if record is None or record.state is not TaskState.COMPLETE:
        return ["copy_id"]
    actions = list(ALL_ACTIONS)
    if isinstance(record, V2Song):
        actions.remove("concat")
    return actions


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return round(number, 1) if math.isfinite(number) and number >= 0 else None


def song_card(record: Record | None, **extra: Any) -> dict[str, Any]:
    """The card dict of one song (docs/frontend.md); `extra` sets or overrides keys (id, call, take, peaks, ...).

    A record of None is a task with no status yet ("queued"); pass its `id` in `extra`. Besides the keys of
    docs/frontend.md a card may carry `note`: one line of plain text under the buttons (e.g. "saved to ...").
    Extra keys are cleaned like the record's: URLs kept only if http(s), text bounded, peaks compacted.
    """
    state = card_state(record)
    failed = state == "failed"
    card: dict[str, Any] = {
        "id": record.id if record is not None else "",
        "call": "",
        "take": 1,
        "title": "",
        "style_chips": [],
        "state": state,
        "state_label": STATE_LABELS[state],
        "elapsed_s": None,
        "duration_s": None,
        "audio_url": None,
        "cover_url": None,
        "lyrics": "",
        "fail_reason": "",
        "model": "",
        "peaks": [],
        "favourite": False,
        "archived_path_label": "",
        "archived_path": "",
        "kept": False,
        "note": "",
        "stars": None,
        "measures": [],
        "actions": song_actions(record),
    }
    if record is not None:
        card.update(
            title=record.title or "",
            style_chips=record.style or "",
            duration_s=record.duration_seconds,
            audio_url=None if failed else record.audio_url,
            cover_url=record.cover_url,
            lyrics=record.lyrics or "",
            fail_reason=(getattr(record, "fail_reason", None) or "no reason given") if failed else "",
        )
    card.update(extra)
    if "play_url" not in extra:  # a view that decides nothing more: the player loads the song's URL
        card["play_url"] = card.get("audio_url")
    return clean(card)


def clean(card: dict[str, Any]) -> dict[str, Any]:
    """Bound and type every field of a card dict, whoever filled it (a view's `extra` too)."""
    chips = card.get("style_chips")
    actions = card.get("actions") or ()
    take = card.get("take")
    state = card.get("state") if card.get("state") in STATES else "queued"
    return {
        **card,
        "id": plain(card.get("id"), 200),
        "call": plain(card.get("call"), 200),
        "take": 2 if take == 2 else 1,
        "title": plain(card.get("title"), TITLE_LIMIT),
        "style_chips": style_chips(chips)
        if isinstance(chips, str)
        else [plain(c, CHIP_LIMIT) for c in chips or ()][:CHIPS_MAX],
        "state": state,
        "state_label": plain(card.get("state_label") or STATE_LABELS[state], 120),
        "elapsed_s": _number(card.get("elapsed_s")),
        "duration_s": _number(card.get("duration_s")),
        "audio_url": http_url(card.get("audio_url")),
        "play_url": play_url(card.get("play_url", card.get("audio_url"))),
        "play_source": play_source(card.get("play_source")),
        "cover_url": http_url(card.get("cover_url")),
        "lyrics": plain(card.get("lyrics"), LYRICS_LIMIT),
        "fail_reason": plain(card.get("fail_reason"), REASON_LIMIT),
        "model": plain(card.get("model"), 60),
        "peaks": compact_peaks(card.get("peaks")),
        "favourite": bool(card.get("favourite")),
        "archived_path_label": plain(card.get("archived_path_label"), 300),
        "archived_path": plain(card.get("archived_path"), 1000),
        "kept": bool(card.get("kept")),
        "note": plain(card.get("note"), 500),
        "stars": _stars(card.get("stars")),
        "measures": [plain(m, 40) for m in card.get("measures") or () if m][:MEASURES_MAX],
        "actions": [a for a in ALL_ACTIONS if a in actions],
    }


MEASURES_MAX = 4
_SOURCE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def play_url(value: Any) -> str | None:
    """What a card's `<audio>` loads first: an http(s) URL, or a page path a view made (`/.../files/...`)."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value[:4000] if not _CONTROL.search(value) and " " not in value else None
    return http_url(value)


def play_source(value: Any) -> str:
    """The opaque name the kernel hands a card's bytes under (`card_audio.CardAudio`), or ""."""
    return value if isinstance(value, str) and _SOURCE_NAME.fullmatch(value) else ""


def _stars(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5 else None


def measure_chips(bpm: float | None, key: str | None, lufs: float | None) -> list[str]:
    """What the analysis measured, as card chips: "93 BPM", "A minor", "-14.2 LUFS"."""
    chips = [f"{bpm:.0f} BPM" if bpm else None, key, f"{lufs:.1f} LUFS" if lufs is not None else None]
    return [chip for chip in chips if chip]


def elapsed_text(seconds: float | None) -> str:
    """ "42 s" or "3 min 5 s"; "" for None."""
    if seconds is None:
        return ""
    whole = int(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def duration_text(seconds: float | None) -> str:
    """ "2:05" for a duration; "—" while unknown."""
    if seconds is None:
        return "—"
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def card_summary(card: dict[str, Any]) -> str:
    """One plain-text line of a card dict, for text reprs: title, take, state, duration, audio URL."""
    title = card.get("title") or "untitled"
    take = f" (take {card['take']})" if card.get("call") else ""
    reason = f": {' '.join(card['fail_reason'].split())}" if card.get("fail_reason") else ""  # one line
    return (
        f"{title!r}{take} [{card.get('state_label') or card.get('state')}{reason}] "
        f"{duration_text(card.get('duration_s'))} {card.get('audio_url') or '-'}"
    )
