"""What a watcher sends its views (figure 5 counts the bytes): a card's `play_url` goes on the wire only when it
is not the card's `audio_url` (the page plays `audio_url` when a card has no `play_url`), and a view that merges
the snapshot and every diff as watcher.js does ends up playing exactly the source the card's data names, through
every change (a new preview URL, the archived file served by Jupyter, the file gone, no URL at all)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.widgets.card_audio import FilesApi
from ipymusicgen.widgets.watcher import TaskWatcher


class Page:
    """A view as watcher.js keeps it: the snapshot's cards, each diff merged over them (`{...old, ...fields}`)."""

    def __init__(self) -> None:
        self.cards: dict[str, dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any], buffers: Any = None) -> None:
        message = json.loads(json.dumps(message))  # what crosses the wire
        self.messages.append(message)
        if message["kind"] == "snapshot":
            self.cards = {card["id"]: card for group in message["groups"] for card in group}
        elif message["kind"] == "diff":
            for task_id, fields in message["cards"].items():
                if task_id in self.cards:
                    self.cards[task_id] = {**self.cards[task_id], **fields}

    def plays(self, task_id: str) -> str | None:
        """The URL the card's player loads first (common.js `imsCardSrc`, before any failure)."""
        data = self.cards[task_id]
        return data["play_url"] if "play_url" in data else data.get("audio_url")


def record(task_id: str, status: int, url: str | None) -> TaskRecord:
    return TaskRecord(id=task_id, status=status, title="Rain", style="lo-fi", audio_url=url, duration=-1)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[TaskWatcher, Page]]:
    settings = Settings(api_key="test-key", base_url="http://127.0.0.1:9")
    with MusicClient(settings=settings, journal=False, archive=False) as client:
        watcher = TaskWatcher(["t1", "t2"], client=client, autostart=False)
        watcher.card_audio.apis = [FilesApi(tmp_path)]  # a Jupyter server serving tmp_path
        page = Page()
        watcher.send = page.send  # type: ignore[method-assign]
        try:
            watcher._on_msg(watcher, {"kind": "hello"}, [])
            yield watcher, page
        finally:
            watcher.close()


def assert_page_plays_what_the_cards_say(watcher: TaskWatcher, page: Page) -> None:
    for task_id in watcher.ids:
        assert page.plays(task_id) == watcher.card(task_id).data()["play_url"]
        assert page.cards[task_id].get("play_source", "") == watcher.card(task_id).data()["play_source"]


def test_a_card_playing_its_audio_url_is_sent_without_a_play_url(watched: tuple[TaskWatcher, Page]) -> None:
    watcher, page = watched
    url = "http://127.0.0.1:9/files/t1-preview.mp3"
    watcher.show([record("t1", 2, url), record("t2", 1, None)])
    (diff,) = [m for m in page.messages if m["kind"] == "diff"]
    assert diff["cards"]["t1"]["audio_url"] == url and diff["cards"]["t1"]["play_source"]
    assert "play_url" not in diff["cards"]["t1"]  # the same URL twice is not sent twice
    assert watcher.card("t1").data()["play_url"] == url
    assert_page_plays_what_the_cards_say(watcher, page)

    watcher._on_msg(watcher, {"kind": "hello"}, [])  # a view drawn again gets the same, in a snapshot
    snapshot = page.messages[-1]
    assert snapshot["kind"] == "snapshot"
    assert all("play_url" not in card for group in snapshot["groups"] for card in group)
    assert_page_plays_what_the_cards_say(watcher, page)


def test_the_page_plays_the_cards_source_through_every_change(
    watched: tuple[TaskWatcher, Page], tmp_path: Path
) -> None:
    watcher, page = watched
    steps: list[Any] = [
        lambda: watcher.show([record("t1", 2, "http://127.0.0.1:9/files/t1-preview.mp3")]),
        lambda: watcher.show([record("t1", 0, "http://127.0.0.1:9/files/t1.mp3")]),  # the final replaces it
    ]
    song = tmp_path / "t1.mp3"
    song.write_bytes(b"ID3 not really audio")
    steps += [
        lambda: watcher.annotate("t1", archived_path=str(song)),  # archived under the server's root: files/ URL
        lambda: watcher.show([record("t2", 2, "http://127.0.0.1:9/files/t2-preview.mp3")]),
        lambda: watcher.annotate("t1", archived_path=""),  # the file's word withdrawn: the service's URL again
        lambda: watcher.show([record("t1", 0, "http://127.0.0.1:9/files/t1-again.mp3")]),
        lambda: watcher.annotate("t2", archived_path=str(song)),
        lambda: watcher.show([record("t2", 0, "javascript:alert(1)")]),  # no http(s) URL: the file's files/ URL
        lambda: watcher.annotate("t2", archived_path=""),  # no URL at all
        lambda: watcher.show([record("t2", 0, "http://127.0.0.1:9/files/t2.mp3")]),
    ]
    seen = set()
    for step in steps:
        step()
        assert_page_plays_what_the_cards_say(watcher, page)
        seen |= {watcher.card(t).data()["play_url"] for t in watcher.ids}
    assert "/files/t1.mp3" in seen and None in seen  # the steps did reach a files/ URL and no URL
