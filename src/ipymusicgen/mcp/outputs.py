"""What each tool returns, as types: the SDK publishes them as the tools' `outputSchema` (structured output) and
checks every result against them. Keys an answer may leave out are `NotRequired`; a key added to an answer and
not here yet is kept (`extra="allow"`), never silently dropped from the structured result."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from pydantic import ConfigDict, with_config

OPEN = ConfigDict(extra="allow")


@with_config(OPEN)
class PaidSongOutput(TypedDict):
    """generate_song / generate_song_v2."""

    task_ids: list[str]
    credits_estimate: int
    attempt: str | None
    state: str
    """sent, replayed (the same call made before: nothing paid again), sending (the same call is in flight now:
    ask again for its ids), unknown (its answer was lost: never resent), or declined."""
    note: str
    repeat: NotRequired[bool]
    """True when this answer is the first call's (an idempotency key, or a re-issue within the window)."""


@with_config(OPEN)
class LyricsOutput(TypedDict):
    title: str | None
    text: str | None
    state: str
    note: NotRequired[str]
    service_text: NotRequired[str]


@with_config(OPEN)
class BatchOutput(TypedDict):
    name: str
    state: str
    credits_estimate: int
    note: NotRequired[str]
    line: NotRequired[str]


@with_config(OPEN)
class ExtraOutput(TypedDict):
    """make_extra: a song's WAV, MP4 or singer voice, paid for once."""

    song: str
    kind: str
    state: str
    """made (paid now), reused (made before: nothing paid), elsewhere (being made now), declined."""
    value: str | None
    """The URL the service gave (the singer id for a voice)."""
    path: str | None
    note: str
    sent: bool
    credits_estimate: int


@with_config(OPEN)
class SongsOutput(TypedDict):
    """wait_for_songs / get_songs: each song as plain data, in the order asked."""

    songs: list[dict[str, Any]]
    all_finished: bool
    still_running: list[str]
    note: str
    invalid_ids: NotRequired[list[dict[str, Any]]]
    last_error: NotRequired[str]


@with_config(OPEN)
class SearchOutput(TypedDict):
    songs: list[dict[str, Any]]
    count: int


@with_config(OPEN)
class AccountOutput(TypedDict):
    credits_left: int
    spent_today: dict[str, Any] | None
    server_spent_estimate: int | str
    server_spent_measured: int | str
    server_spends_not_measured: int
    server_spent_counted: int | str
    server_budget: int | str | None
    server_budget_left: int | str | None
    server_budget_unit: str
    """credits, or USD (then every amount above is text in dollars and cents, "4.25")"""
    server_budget_line: str
    """What is left with its unit: "7 credits left of 10", "$4.25 left of $5.00", "no budget"."""
    sandbox: bool


@with_config(OPEN)
class BatchStatusOutput(TypedDict):
    name: str
    running: bool
    ids: list[str]
    line: NotRequired[str]
    rows: NotRequired[int]
    states: NotRequired[dict[str, int]]


@with_config(OPEN)
class UnfinishedOutput(TypedDict):
    running_task_ids: list[str]
    unknown_attempts: list[dict[str, Any]]
    note: str


@with_config(OPEN)
class ConfirmOutput(TypedDict):
    """confirm_quote (the consent card's Confirm): the paid tool's own answer once sent (its fields kept), or a new
    quote (state requoted) when the price changed."""

    state: str
    note: NotRequired[str]
    quote_id: NotRequired[str]
    quote: NotRequired[dict[str, Any]]
