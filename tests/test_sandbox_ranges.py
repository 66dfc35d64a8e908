"""The sandbox's file route answers byte ranges as CDNs do, so a browser can seek in the audio."""

from __future__ import annotations

import httpx
import pytest
from helpers import ManualClock

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox.files import byte_range


@pytest.fixture
def song_url(client: MusicClient, clock: ManualClock) -> str:
    ids = list(client.generate(action="custom", style="piano", title="Range", lyrics="[Verse]\nla").ids)
    clock.stages(2)
    record = client.tasks(ids)[0]
    assert record.audio_url
    return record.audio_url


def test_whole_file_says_it_accepts_ranges(song_url: str) -> None:
    answer = httpx.get(song_url)
    assert answer.status_code == 200 and answer.headers["accept-ranges"] == "bytes"
    assert int(answer.headers["content-length"]) == len(answer.content) > 1000


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [("bytes=0-99", 0, 99), ("bytes=100-", 100, None), ("bytes=-50", -50, None), ("bytes=10-999999999", 10, None)],
)
def test_a_range_gets_206_with_exactly_those_bytes(song_url: str, header: str, first: int, last: int | None) -> None:
    whole = httpx.get(song_url).content
    size = len(whole)
    answer = httpx.get(song_url, headers={"Range": header})
    start = first if first >= 0 else size + first
    end = size - 1 if last is None else last
    assert answer.status_code == 206
    assert answer.content == whole[start : end + 1]
    assert answer.headers["content-range"] == f"bytes {start}-{end}/{size}"
    assert answer.headers["accept-ranges"] == "bytes"
    assert int(answer.headers["content-length"]) == end - start + 1


def test_a_range_past_the_end_is_416_with_the_size(song_url: str) -> None:
    size = len(httpx.get(song_url).content)
    answer = httpx.get(song_url, headers={"Range": f"bytes={size}-"})
    assert answer.status_code == 416 and answer.headers["content-range"] == f"bytes */{size}"


@pytest.mark.parametrize("header", ["bytes=0-1,5-9", "bytes=abc", "items=0-1", "bytes=9-3", "bytes=-"])
def test_ranges_it_does_not_honour_get_the_whole_file(song_url: str, header: str) -> None:
    whole = httpx.get(song_url).content
    answer = httpx.get(song_url, headers={"Range": header})
    assert answer.status_code == 200 and answer.content == whole


def test_head_and_covers_answer_ranges_too(song_url: str) -> None:
    head = httpx.head(song_url)
    assert head.status_code == 200 and head.headers["accept-ranges"] == "bytes" and head.content == b""
    cover = httpx.get(song_url.replace(".mp3", ".svg"), headers={"Range": "bytes=0-4"})
    whole_cover = httpx.get(song_url.replace(".mp3", ".svg")).content
    assert cover.status_code == 206 and cover.content == whole_cover[:5]


def test_byte_range_parser_edges() -> None:
    assert byte_range(None, 10) is None
    assert byte_range("bytes=0-0", 10) == (0, 0)
    assert byte_range("bytes=-0", 10) is False
    assert byte_range("bytes=-20", 10) == (0, 9)
    assert byte_range("bytes=0-", 0) is False
