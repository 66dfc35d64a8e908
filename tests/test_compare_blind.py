"""Blind means blind: before the vote (or the ABX answer) nothing the page receives tells the players apart by
anything but sound; a pick names its round; a vote on a journal another kernel holds is said, never raised.

"What the page receives" is read off the wire: the widget's state as opened, then every update and custom
message it sends (audio bytes included), captured at its comm, against real songs of the sandbox."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
import time
import wave
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import ManualClock, advance_until_done, wait_until
from mutagen.id3 import ID3, TIT2, TXXX

from ipymusicgen.archive.waveform import waveform
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library, LibrarySong
from ipymusicgen.storage import journal_file as db
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.compare import CompareView
from ipymusicgen.widgets.song_data import song_card

TITLE = "Harbour Lights"
STYLE = "harbour waltz"
ANSWER_S = 60.0
"""How long a test waits for the kernel's answer to an audio request (it comes from a thread)."""


class Wire:
    """Everything the widget sends the page: its state as opened, then each update and custom message with its
    buffers, captured at the widget's comm."""

    def __init__(self, view: CompareView) -> None:
        self.view = view
        self.sent: list[tuple[dict[str, Any], list[bytes]]] = [({"state": view.get_state()}, [])]
        self.arrived = threading.Condition()
        view.comm.send = self._send  # type: ignore[method-assign]

    def _send(self, data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
        with self.arrived:
            self.sent.append((data, [bytes(b) for b in buffers or ()]))
            self.arrived.notify_all()

    def ask(self, source: str) -> tuple[dict[str, Any], bytes | None]:
        """What the page gets when a player starts: it asks for its source's bytes as an intent."""
        start = len(self.sent)
        self.view._handle_custom_msg({"kind": "audio", "source": source}, [])
        return self.answer(source, start)

    def answer(self, source: str, start: int = 0) -> tuple[dict[str, Any], bytes | None]:
        """The first answer for `source` sent since message `start`, waited for (it comes from a thread)."""

        def answer() -> tuple[dict[str, Any], bytes | None] | None:
            for data, buffers in self.sent[start:]:
                content = data.get("content") if data.get("method") == "custom" else None
                if content and content.get("kind") == "audio" and content.get("source") == source:
                    return content, buffers[0] if buffers else None
            return None

        with self.arrived:
            assert self.arrived.wait_for(lambda: answer() is not None, timeout=ANSWER_S), f"no answer for {source}"
            found = answer()
        assert found is not None
        return found

    def text(self) -> str:
        """All of it as text: the JSON of every message, and every buffer read as Latin-1 (tags are text)."""
        parts = [json.dumps(data, default=str) for data, _ in self.sent]
        parts += [buffer.decode("latin-1") for _, buffers in self.sent for buffer in buffers]
        return "\n".join(parts)


def frames(wav: bytes) -> tuple[int, int, bytes]:
    with wave.open(io.BytesIO(wav)) as read:
        return read.getnchannels(), read.getframerate(), read.readframes(read.getnframes())


@pytest.fixture
def made(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """Two takes of one call, each archived as the archiver keeps them: a tagged file, its peaks in the library."""
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="custom", style=STYLE, title=TITLE, lyrics="la").ids)
        records = client.wait(ids)
        files = [client.download(record, tmp_path / "songs") for record in records]
    with Library(path) as library:
        for task_id, file in zip(ids, files, strict=True):
            tags = ID3()
            tags.add(TIT2(encoding=3, text=TITLE))
            tags.add(TXXX(encoding=3, desc="ipymusicgen:task_id", text=task_id))
            tags.save(file)
            library.store.archived(task_id, file, file.stat().st_size, waveform(file, 200))
    yield path, ids


@pytest.fixture
def library(made: tuple[Path, list[str]]) -> Iterator[Library]:
    with Library(made[0]) as opened:
        yield opened


def songs_of(library: Library, ids: list[str]) -> list[LibrarySong]:
    return [library.song(task_id) for task_id in ids]


def secrets_of(songs: list[LibrarySong]) -> list[str]:
    """What would name a song on the page: ids, title, style, its URL's host and path, its file's name."""
    found = [TITLE, STYLE]
    for song in songs:
        url = urlsplit(song.audio_url or "")
        found += [song.id, url.netloc, url.path, Path(song.archive_path or "").name]
    return [s for s in found if s]


def test_ab_before_the_vote_the_page_gets_nothing_but_sound(library: Library, made: tuple[Path, list[str]]) -> None:
    songs = songs_of(library, made[1])
    assert all(s.peaks and s.archive_path for s in songs)  # each has its own waveform and a tagged file
    view = CompareView(songs, library=library, seed=1, min_listen_s=0)
    wire = Wire(view)
    players = view.data["players"]
    assert [p["label"] for p in players] == ["A", "B"] and all(set(p) == {"label", "source"} for p in players)
    heard = {p["label"]: wire.ask(p["source"]) for p in players}
    for content, payload in heard.values():
        assert "error" not in content and content["type"] == "audio/wav" and payload is not None
        assert content["size"] == len(payload) and frames(payload)[2]  # sound, as a WAV
    cards = [song_card(None, id=s.id, audio_url=s.audio_url, peaks=s.peaks) for s in songs]
    card_sources = {c["audio_url"] for c in cards} | {s.archive_path for s in songs}
    sources = {p["source"] for p in players}
    assert len(sources) == 2 and sources.isdisjoint(card_sources)
    shown = wire.text()
    for secret in secrets_of(songs):
        assert secret not in shown, secret
    for song in songs:  # no waveform of either song (the same neutral drawing for both, drawn by the page)
        assert json.dumps(view.data).find(json.dumps(song_card(None, peaks=song.peaks)["peaks"])[1:40]) == -1
    assert "peaks" not in json.dumps(view.data)
    for file in (Path(s.archive_path or "") for s in songs):  # not the file's bytes either (a card may fetch them)
        assert all(payload != file.read_bytes() for _, payload in heard.values())
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": view.data["round"]}, [])
    assert view.data["revealed"] and {p["title"] for p in view.data["players"]} == {TITLE}
    assert all(p["peaks"] for p in view.data["players"])  # after the vote the waveforms are the songs' own
    view.close()


def test_abx_before_the_answer_nothing_matches_x_to_its_twin(library: Library, made: tuple[Path, list[str]]) -> None:
    songs = songs_of(library, made[1])
    twins = set()
    for seed in range(8):
        view = CompareView(songs, library=library, mode="abx", seed=seed)
        wire = Wire(view)
        twins.add(view.x)
        players = {p["label"]: p for p in view.data["players"]}
        assert list(players) == ["A", "B", "X"] and len({p["source"] for p in players.values()}) == 3
        assert "peaks" not in json.dumps(view.data) and '"x"' not in json.dumps(view.data)
        payloads = {label: wire.ask(p["source"])[1] for label, p in players.items()}
        assert len(set(payloads.values())) == 3  # not the same bytes for X and its twin
        assert view.x is not None
        channels, rate, x_frames = frames(payloads["X"] or b"")
        twin_channels, twin_rate, twin_frames = frames(payloads[view.x] or b"")
        assert (channels, rate, len(x_frames)) == (twin_channels, twin_rate, len(twin_frames))
        import numpy as np

        difference = np.frombuffer(x_frames, "<i2").astype(int) - np.frombuffer(twin_frames, "<i2").astype(int)
        assert np.abs(difference).max() <= 2  # the same sound: they differ below hearing (a dither of 1 LSB)
        view.close()
    assert twins == {"A", "B"}


def test_audio_is_capped_at_the_download_cap_and_said(
    library: Library, made: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_MAX_DOWNLOAD_MB", "0.01")  # 10 KB: less than a 4-second song
    view = CompareView(songs_of(library, made[1]), library=library, seed=1)
    wire = Wire(view)
    content, payload = wire.ask(view.data["players"][0]["source"])
    assert payload is None and "limit" in content["error"] and "MUSICGEN_MAX_DOWNLOAD_MB" in content["error"]
    view.close()


def test_a_song_not_archived_plays_from_its_url_through_the_kernel(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="custom", style=STYLE, title=TITLE, lyrics="la").ids)
        client.wait(ids)
    with Library(path) as library:
        songs = songs_of(library, ids)
        assert not any(s.archive_path for s in songs)
        view = CompareView(songs, library=library, seed=0)
        wire = Wire(view)
        content, payload = wire.ask(view.data["players"][1]["source"])
        assert payload is not None and frames(payload)[2] and content["size"] == len(payload)
        unknown, nothing = wire.ask("not-a-source")  # a forged or stale name is answered with a reason, no bytes
        assert nothing is None and "earlier" in unknown["error"]
        for secret in secrets_of(songs):
            assert secret not in wire.text(), secret
        view.close()


def test_a_pick_names_its_round_and_a_stale_or_missing_one_is_ignored_and_said(
    library: Library, made: tuple[Path, list[str]]
) -> None:
    songs = songs_of(library, made[1])
    view = CompareView(songs, library=library, seed=1, min_listen_s=0)
    wire = Wire(view)
    first = view.data["round"]
    old_source = view.data["players"][0]["source"]
    view.load(list(reversed(songs)), seed=2)  # pair 2 is loaded while pair 1's click is on its way
    second = view.data["round"]
    assert second != first and isinstance(second, str) and len(second) >= 16
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": first}, [])
    assert view.result is None and list(library.compare_results()) == []
    assert "earlier pair" in view.data["note"] and view.data["revealed"] is False
    view._handle_custom_msg({"kind": "pick", "label": "A"}, [])  # no round at all: a page from before
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": ["not", "a", "round"]}, [])
    assert view.result is None and list(library.compare_results()) == []
    content, payload = wire.ask(old_source)  # pair 1's players no longer answer either
    assert payload is None and "earlier" in content["error"]
    view._handle_custom_msg({"kind": "pick", "label": "B", "round": second}, [])
    assert view.result is not None and view.result["recorded"] and len(library.compare_results()) == 1
    assert "earlier pair" not in view.data["note"]
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": second}, [])  # once only
    assert len(library.compare_results()) == 1
    abx = CompareView(songs, library=library, mode="abx", seed=3)  # ABX answers name their round too
    abx._handle_custom_msg({"kind": "pick", "label": "A", "round": first}, [])
    assert abx.result is None and "earlier pair" in abx.data["note"]
    view.close()
    abx.close()


def test_a_vote_while_another_kernel_holds_the_journal_is_said_and_the_pair_kept(
    made: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = made
    monkeypatch.setattr(db, "DEFAULT_BUSY_TIMEOUT", 30.0)  # a journal wait long enough to tell from a button's
    with Library(path) as library:
        view = CompareView(songs_of(library, ids), library=library, seed=4, min_listen_s=0)
        pick = {"kind": "pick", "label": "B", "round": view.data["round"]}
        holder = sqlite3.connect(path, isolation_level=None)  # another kernel, in the middle of a write
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        try:
            view._on_msg(view, pick, [])  # never raises out of the handler (ipywidgets would only print it)
        finally:
            waited = time.monotonic() - started
            holder.execute("ROLLBACK")
            holder.close()
        assert waited < 15.0  # not the journal's 30 s wait
        assert view.result is None and view.data["revealed"] is False  # the pair is kept, still blind
        assert "not saved" in view.data["note"] and "again" in view.data["note"]
        assert all(set(p) == {"label", "source"} for p in view.data["players"])
        view._handle_custom_msg(pick, [])  # the lock is gone: the same choice again is kept
        assert view.result is not None and view.result["recorded"] and len(library.compare_results()) == 1
        assert "kept in the library" in view.data["note"]
        view.close()


def test_a_vote_on_a_closed_library_is_said_not_raised(library: Library, made: tuple[Path, list[str]]) -> None:
    view = CompareView(songs_of(library, made[1]), library=library, seed=4, min_listen_s=0)
    library.close()  # the notebook closed it meanwhile
    view._on_msg(view, {"kind": "pick", "label": "A", "round": view.data["round"]}, [])  # raises nothing
    assert view.result is None and "not saved" in view.data["note"]
    view.close()


def test_a_library_button_while_another_kernel_holds_the_journal_is_said_not_raised(
    made: tuple[Path, list[str]], short_locks: float
) -> None:
    """The same class as the vote: the library view's favourite and keep buttons write to the journal too."""
    from ipymusicgen.widgets.library import LibraryView

    path, ids = made
    with Library(path) as library:  # opened after short_locks: the held lock is waited for 0.5 s
        view = LibraryView(library=library)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            for kind in ("favourite", "keep"):
                view._on_msg(view, {"kind": kind, "id": ids[0]}, [])  # never raises out of the handler
                assert "not saved" in view.status and "again" in view.status.lower()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        view._handle_custom_msg({"kind": "favourite", "id": ids[0]}, [])
        assert library.song(ids[0]).favourite
        view.close()


def test_every_player_of_a_round_has_one_format_and_one_length_so_neither_names_a_song(
    library: Library, made: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """A player's length, rate and channels are on the page (the audio's duration, the WAV's header), and a length
    on each song's card: two songs that differ in them would name themselves, and X would match its twin. Each
    round's players share one rate, one channel count and one length (the longer song's, never cut)."""
    import miniaudio

    ids = made[1]
    original = Path(library.song(ids[1]).archive_path or "")
    decoded = miniaudio.decode(original.read_bytes(), nchannels=2, sample_rate=48_000)
    other = tmp_path / "other.wav"
    with wave.open(str(other), "wb") as writer:  # take 2: 2.5 s of 48 kHz stereo; take 1: the sandbox's MP3
        writer.setnchannels(2)
        writer.setsampwidth(2)
        writer.setframerate(48_000)
        writer.writeframes(decoded.samples.tobytes()[: 2 * 2 * int(2.5 * 48_000)])
    library.store.archived(ids[1], other, other.stat().st_size, waveform(other, 200))
    songs = songs_of(library, ids)
    for mode in ("ab", "abx"):
        view = CompareView(songs, library=library, mode=mode, seed=1)
        wire = Wire(view)
        shapes = set()
        for player in view.data["players"]:
            channels, rate, sound = frames(wire.ask(player["source"])[1] or b"")
            shapes.add((channels, rate, round(len(sound) / (2 * channels * rate), 3)))
        assert len(shapes) == 1, shapes  # one rate, one channel count, one length for all
        (channels, rate, seconds) = shapes.pop()
        assert (channels, rate) == (2, 48_000) and seconds >= 4.0  # the richer format, none cut short
        view.close()


def test_the_channel_hands_a_plain_source_as_it_is_for_a_card_player(
    library: Library, made: tuple[Path, list[str]]
) -> None:
    """The mechanism the playback issue reuses: a song the page cannot fetch is offered by name, its bytes as
    they are with their media type; asked twice while on the way, it is read and sent once."""
    from ipymusicgen.widgets.audio_channel import AudioSource

    song = library.song(made[1][0])
    view = CompareView(library=library)
    wire = Wire(view)
    name = view.channel.offer(AudioSource(path=song.archive_path, url=song.audio_url))
    assert song.id not in name and name != view.channel.offer(AudioSource(path=song.archive_path))
    with view.channel._reading:  # the first answer is still being prepared when the second press comes
        view._handle_custom_msg({"kind": "audio", "source": name}, [])
        view._handle_custom_msg({"kind": "audio", "source": name}, [])
    content, payload = wire.answer(name)
    assert payload == Path(song.archive_path or "").read_bytes() and content["type"] == "audio/mpeg"
    for thread in threading.enumerate():  # every read under way has answered (a second one would have, too)
        if thread.name == "ipymusicgen-audio":
            thread.join(ANSWER_S)
    view.channel.clear()
    view._handle_custom_msg({"kind": "audio", "source": 42}, [])  # a forged request: answered, never raised
    answers = [d for d, _ in wire.sent if d.get("method") == "custom" and d["content"].get("source") == name]
    assert len(answers) == 1
    view.close()


def test_the_grids_blind_compare_names_no_card_and_a_pick_for_its_last_pair_is_ignored(
    sandbox: Sandbox, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grid draws every song's card (id, URL, waveform) on the same page as its comparison, and loads one
    pair after another into the same comparison."""
    import uuid

    monkeypatch.setenv("MUSICGEN_MIN_LISTEN_S", "0")  # a vote counts at once (the minimum is tested on its own)
    from ipymusicgen.lab.grid import Grid
    from ipymusicgen.widgets.grid import GridView

    path = tmp_path / "journal.sqlite3"
    with Library(path) as library, sandbox.client(journal=Journal(path)) as client:
        grid = Grid(client, {"action": "auto"}, {"style": ["lo-fi", "jazz"]}, name=f"g{uuid.uuid4().hex[:8]}")
        view = GridView(grid, library=library)
        view.run()
        batch = grid.batch
        assert batch is not None
        advance_until_done(batch, clock, sandbox)
        wait_until(lambda: not view.board.data["running"], "the board drawn after the last round")
        cards = [song for row in view.board.data["rows"] for cell in row["cells"] for song in cell["songs"]]
        assert len(cards) == 4 and all(card["audio_url"] for card in cards)
        for task_id in (cards[0]["id"], cards[3]["id"]):
            view.pick(task_id)
        comparison = view.compare(seed=1)
        assert comparison is not None
        wire = Wire(comparison)
        first_round = comparison.round
        for player in comparison.data["players"]:
            content, payload = wire.ask(player["source"])
            assert payload is not None, content
        shown = wire.text()
        for card in cards:
            assert card["id"] not in shown and urlsplit(card["audio_url"]).path not in shown
        assert {p["source"] for p in comparison.data["players"]}.isdisjoint({c["audio_url"] for c in cards})
        assert "peaks" not in json.dumps(comparison.data)
        view.pick(cards[0]["id"])
        view.pick(cards[1]["id"])
        assert view.compare(seed=2) is comparison and comparison.round != first_round  # the next pair, same view
        comparison._handle_custom_msg({"kind": "pick", "label": "A", "round": first_round}, [])  # meant for pair 1
        assert comparison.result is None and list(library.compare_results()) == []
        assert "earlier pair" in comparison.data["note"]
        comparison._handle_custom_msg({"kind": "pick", "label": "A", "round": comparison.round}, [])
        (vote,) = library.compare_results()
        assert {vote["winner"], vote["loser"]} == {cards[3]["id"], cards[1]["id"]}
        view.close()


# -- issue 41: four choices, and a page's vote counts only after each side played the minimum (kernel clock) -----


class Listener:
    """A page playing the view's players, on a clock the test moves: it reports as the real page does (about four
    times a second while playing), and the view counts on that same clock."""

    def __init__(self, view: CompareView, clock: ManualClock) -> None:
        self.view, self.clock = view, clock
        self.at = 0.0

    def report(self, source: str, playing: bool, at: float | None = None, forged: dict[str, Any] | None = None) -> None:
        message = {"kind": "listen", "round": self.view.round, "source": source, "playing": playing}
        message["at"] = self.at if at is None else at
        self.view._handle_custom_msg(message | (forged or {}), [])

    def play(self, label: str, seconds: float, step: float = 0.25) -> None:
        source = next(p["source"] for p in self.view.data["players"] if p["label"] == label)
        self.report(source, True)
        for _ in range(round(seconds / step)):
            self.clock.advance(step)
            self.at += step
            self.report(source, True)
        self.report(source, False)

    def vote(self, label: str) -> None:
        self.view._handle_custom_msg({"kind": "pick", "label": label, "round": self.view.round}, [])


def listened(wire: Wire) -> list[dict[str, float]]:
    """The seconds left the kernel told the page, in order."""
    return [
        data["content"]["left"]
        for data, _ in wire.sent
        if data.get("method") == "custom" and data["content"].get("kind") == "listened"
    ]


def test_a_page_vote_counts_only_after_each_side_played_the_minimum(
    library: Library, made: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_MIN_LISTEN_S", raising=False)
    clock = ManualClock(0.1)
    view = CompareView(songs_of(library, made[1]), library=library, seed=1, clock=clock)
    assert view.min_listen_s == 5.0  # the default
    wire = Wire(view)
    for player in view.data["players"]:
        wire.ask(player["source"])  # the kernel hands each player its sound
    page = Listener(view, clock)
    assert view.data["listen"] == {"need": {"A": 5.0, "B": 5.0}, "left": {"A": 5.0, "B": 5.0}}
    page.vote("A")
    assert view.result is None and list(library.compare_results()) == []
    assert "Not counted yet" in view.data["note"] and "A 5 s more, B 5 s more" in view.data["note"]
    page.play("A", 3.0)
    page.play("B", 5.0)
    assert listened(wire)[-1] == {"A": 2.0, "B": 0.0}  # the buttons say what is left
    page.vote("tie")
    assert view.result is None and "A 2 s more" in view.data["note"] and "B " not in view.data["note"].split("(")[1]
    page.play("A", 1.75)
    page.vote("both_bad")
    assert view.result is None and listened(wire)[-1] == {"A": 0.3, "B": 0.0}
    page.play("A", 0.25)
    page.vote("tie")
    assert view.result is not None and view.result["outcome"] == "tie"
    [vote] = library.compare_results()
    assert vote["outcome"] == "tie" and vote["blind"] is True
    assert "tie" in view.data["note"] and "listen" not in view.data
    view.close()


def test_forged_play_reports_buy_no_listening_time(library: Library, made: tuple[Path, list[str]]) -> None:
    clock = ManualClock(0.1)
    view = CompareView(songs_of(library, made[1]), library=library, seed=1, clock=clock, min_listen_s=5)
    wire = Wire(view)
    a, b = (p["source"] for p in view.data["players"])
    page = Listener(view, clock)
    page.report(b, True, 0.0)  # B's sound was never asked for: playing it earns nothing
    clock.advance(0.5)
    page.report(b, True, 0.5)
    assert view.listening.heard == {"A": 0.0, "B": 0.0}
    wire.ask(a)
    for i in range(1, 200):  # many reports at one instant, each claiming a second more: time did not pass
        page.report(a, True, float(i))
    assert view.listening.heard["A"] == 0.0
    for i in range(1, 5):  # the position leaps a minute a report: a quarter second passed, a quarter is counted
        clock.advance(0.25)
        page.report(a, True, 200.0 + 60 * i)
    assert view.listening.heard["A"] == pytest.approx(1.0)
    clock.advance(60)  # a page silent for a minute, then "still playing": one report's worth
    page.report(a, True, 600.0)
    assert view.listening.heard["A"] == pytest.approx(2.0)
    page.report(a, False, 600.0)
    clock.advance(10)  # paused: nothing
    page.report(a, False, 610.0)
    page.report(a, True, 610.0)
    clock.advance(0.25)  # played, but the position went back (a loop, or a lie): nothing
    page.report(a, True, 1.0)
    assert view.listening.heard["A"] == pytest.approx(2.0)
    wire.ask(b)
    for _ in range(8):  # A and B "both playing" in one stretch: together they get the time that passed, no more
        clock.advance(0.25)
        page.report(a, True, page.at + 100)
        page.report(b, True, page.at + 200)
        page.at += 300
    assert sum(view.listening.heard.values()) - 2.0 <= 2.0 + 1e-9
    before = dict(view.listening.heard)
    for hostile in (
        {"at": float("nan")}, {"at": float("inf")}, {"at": -1.0}, {"at": True}, {"at": "3"}, {"playing": "yes"},
        {"source": "not-a-source"}, {"source": ["a"]}, {"round": "an-earlier-round"}, {"round": None},
    ):  # fmt: skip
        clock.advance(0.25)
        page.report(a, True, page.at + 0.25, hostile)
    clock.advance(0.25)
    assert view.listening.heard == before and view.data["note"] == ""  # ignored, and nothing said
    page.vote("A")  # still short: refused in Python, whatever the page shows
    assert view.result is None and list(library.compare_results()) == []
    view.close()


def test_a_take_shorter_than_the_minimum_needs_only_its_length_and_zero_needs_nothing(
    library: Library, made: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    songs = songs_of(library, made[1])
    timed = [replace(song, duration_s=seconds) for song, seconds in zip(songs, (3.2, 7.5), strict=True)]
    view = CompareView(timed, library=library, seed=1, min_listen_s=30)
    assert view.listening.need == {"A": 3.2, "B": 3.2}  # the shorter one's length, for both: one figure, blind
    view.close()
    view = CompareView(timed, library=library, seed=1, min_listen_s=2)
    assert view.listening.need == {"A": 2.0, "B": 2.0}
    view.close()
    monkeypatch.setenv("MUSICGEN_MIN_LISTEN_S", "0")
    quick = CompareView(songs, library=library, seed=1)
    assert quick.min_listen_s == 0.0 and quick.listening.ready()
    quick._handle_custom_msg({"kind": "pick", "label": "both_bad", "round": quick.round}, [])
    assert quick.result is not None and [v["outcome"] for v in library.compare_results()] == ["both_bad"]
    quick.close()
    for bad in (-1, float("nan"), float("inf"), True, "5", 3600):
        with pytest.raises(ValueError, match="min_listen_s"):
            CompareView(songs, library=library, min_listen_s=bad)  # type: ignore[arg-type]


def test_the_min_listen_setting_comes_from_the_environment_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipymusicgen.config import Settings

    monkeypatch.delenv("MUSICGEN_MIN_LISTEN_S", raising=False)
    assert Settings.from_env().min_listen_s == 5.0
    for text, seconds in (("2.5", 2.5), ("0", 0.0), (" 12 ", 12.0)):
        monkeypatch.setenv("MUSICGEN_MIN_LISTEN_S", text)
        assert Settings.from_env().min_listen_s == seconds
    for text in ("-1", "soon", "nan", "inf"):
        monkeypatch.setenv("MUSICGEN_MIN_LISTEN_S", text)
        with pytest.raises(ValueError, match="MUSICGEN_MIN_LISTEN_S"):
            Settings.from_env()


def test_an_ab_vote_takes_four_choices_and_abx_two(library: Library, made: tuple[Path, list[str]]) -> None:
    songs = songs_of(library, made[1])
    for label, outcome in (("A", "a"), ("B", "b"), ("tie", "tie"), ("both_bad", "both_bad")):
        view = CompareView(songs, library=library, seed=4, min_listen_s=0)
        first, second = (take.id for take in view.order)
        view._handle_custom_msg({"kind": "pick", "label": label, "round": view.round}, [])
        assert view.result is not None and view.result["outcome"] == outcome
        assert (view.result["a"], view.result["b"]) == (first, second)
        view.close()
    stored = [(v["winner"], v["outcome"]) for v in library.compare_results()]
    assert [outcome for _, outcome in stored] == ["win", "win", "tie", "both_bad"]
    assert stored[0][0] == first and stored[1][0] == second  # "B" keeps B as the winner
    abx = CompareView(songs, library=library, mode="abx", seed=3, min_listen_s=0)
    abx._handle_custom_msg({"kind": "pick", "label": "tie", "round": abx.round}, [])
    assert abx.result is None
    with pytest.raises(ValueError, match="pick A or B"):
        abx.pick("both_bad")
    for hostile in ("a", "TIE", "draw", "", None, ["A"]):
        view = CompareView(songs, library=library, seed=4, min_listen_s=0)
        view._handle_custom_msg({"kind": "pick", "label": hostile, "round": view.round}, [])
        assert view.result is None
        view.close()
    assert len(library.compare_results()) == 4
    abx.close()
