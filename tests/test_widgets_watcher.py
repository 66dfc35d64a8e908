"""The task watcher without a browser: the real anywidget model against the real sandbox.

What the browser would receive is recorded at the comm (every message the widget publishes), so the
tests see exactly the snapshots and diffs a front end gets. The sandbox derives every task's state
from its clock, frozen here and moved by hand: each `poll_once()` sees exactly the stage asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import comm
import httpx
import ipywidgets as w
import pytest
from helpers import HOSTILE, WAIT, ManualClock, wait_until
from IPython.core.interactiveshell import InteractiveShell
from IPython.lib.pretty import pretty
from IPython.utils.capture import capture_output

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.errors import MusicGenError, WaitTimeoutError
from ipymusicgen.models.schema import TaskRecord, V2Song
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets import TaskCard, TaskWatcher, song_card
from ipymusicgen.widgets._static import STATIC, css, esm
from ipymusicgen.widgets.studio import SongPane, Studio, extend_studio
from ipymusicgen.widgets.watcher import MAX_BACKOFF, backoff
from ipymusicgen.workspace import session


class Wire:
    """Every message the kernel publishes on widget comms (what front ends would receive)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []

    def custom(self, widget: w.Widget) -> list[dict[str, Any]]:
        """The custom messages (snapshots and diffs) sent by one widget."""
        return [
            data["content"]
            for comm_id, data in self.messages
            if comm_id == widget.model_id and data.get("method") == "custom"
        ]

    def updates(self, widget: w.Widget) -> list[dict[str, Any]]:
        """Trait updates of one widget (the watcher should send none while polling)."""
        mine = [data for comm_id, data in self.messages if comm_id == widget.model_id]
        return [data for data in mine if data.get("method") == "update"]

    def clear(self) -> None:
        self.messages.clear()


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    recorded = Wire()

    def publish_msg(self: comm.DummyComm, msg_type: str, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if msg_type == "comm_msg" and isinstance(data, dict):
            recorded.messages.append((self.comm_id, data))

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish_msg)
    return recorded


@pytest.fixture
def watchers() -> Iterator[Callable[..., TaskWatcher]]:
    """Make watchers that are closed (threads stopped) at the end of the test, whatever happens."""
    made: list[TaskWatcher] = []

    def make(*args: object, **kwargs: object) -> TaskWatcher:
        watcher = TaskWatcher(*args, **kwargs)  # type: ignore[arg-type]
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.close()


@pytest.fixture
def plain_client(sandbox: Sandbox) -> Iterator[MusicClient]:
    """A client that does not retry, so one injected fault is one failed polling round."""
    with sandbox.client(max_retries=0, timeout=10) as music_client:
        yield music_client


def custom_song(client: MusicClient, **fields: object) -> list[str]:
    body = {"action": "custom", "style": "lo-fi piano", "title": "Rain", "lyrics": "[Verse]\nla la", **fields}
    return list(client.generate(**body).ids)


def v2_song(client: MusicClient) -> list[str]:
    return [song.id for song in client.submit_v2(is_auto=1, prompt="calm piano", model_version="v4.5")]


def hello(watcher: TaskWatcher, wire: Wire) -> dict[str, Any]:
    """What a new view does first: ask for a snapshot; returns it."""
    wire.clear()
    watcher._handle_custom_msg({"kind": "hello"}, [])
    (snapshot,) = wire.custom(watcher)
    assert snapshot["kind"] == "snapshot"
    return snapshot


def cards_of(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return [card for group in snapshot["groups"] for card in group]


# -- one model, snapshots and diffs -----------------------------------------------------------------------


def test_one_widget_model_whatever_the_number_of_tasks(client: MusicClient) -> None:
    before = set(w.widget._instances)
    watcher = TaskWatcher([f"task-{i}" for i in range(1000)], client=client, autostart=False)
    try:
        new = set(w.widget._instances) - before
        assert len(new) <= 3  # the watcher and its layout: no model per card
        assert len(watcher.cards) == 1000 and watcher.pages == 50  # 500 calls of two, 10 calls a page
        assert len(watcher.visible_ids) == 20
    finally:
        watcher.close()


def test_snapshot_shows_the_takes_of_a_call_side_by_side_newest_first(
    client: MusicClient, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    first, second = custom_song(client), custom_song(client, title="Snow")
    watcher = watchers(first, client=client, autostart=False)
    watcher.add(second)
    v2 = v2_song(client)
    watcher.add(v2, v2=True)
    snapshot = hello(watcher, wire)
    groups = [[card["id"] for card in group] for group in snapshot["groups"]]
    assert groups == [v2, second, first]  # newest call first; the takes of one call together
    for group in snapshot["groups"]:
        assert [card["take"] for card in group] == [1, 2][: len(group)]
        assert len({card["call"] for card in group}) == 1
    assert all(card["state"] == "queued" and card["actions"] == ["copy_id"] for card in cards_of(snapshot))
    assert snapshot["header"]["title"] == "6 songs" and snapshot["header"]["counts"] == "0 ready · 6 running"
    assert watcher.card(v2[0]).v2 and not watcher.card(first[0]).v2
    assert watcher.add(first) == []  # already watched: nothing new


def test_each_round_sends_one_diff_with_only_what_changed(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client, lyrics="[Verse]\nrain on the window")
    watcher = watchers(ids, client=client, autostart=False)
    hello(watcher, wire)
    wire.clear()

    assert len(watcher.poll_once()) == 2
    (diff,) = wire.custom(watcher)  # one message for the round
    assert diff["kind"] == "diff" and set(diff["cards"]) == set(ids)
    for fields in diff["cards"].values():
        assert fields["state"] == "writing" and fields["title"] == "Rain"
        assert fields["style_chips"] == ["lo-fi piano"]
        assert "lyrics" not in fields and "audio_url" not in fields and "id" not in fields  # unchanged: not sent

    wire.clear()
    clock.stages(1)
    watcher.poll_once()
    (diff,) = wire.custom(watcher)
    fields = diff["cards"][ids[0]]
    playing = {"play_url", "play_source"}  # where its player reads now (card_audio): the preview's URL
    assert set(fields) <= {"state", "state_label", "audio_url", "lyrics", "elapsed_s", "duration_s", *playing}
    assert fields["state"] == "preview" and fields["audio_url"].endswith("-preview.mp3")
    assert fields["audio_url"].startswith(sandbox.base_url)

    wire.clear()
    clock.stages(1)
    watcher.poll_once()
    (diff,) = wire.custom(watcher)
    fields = diff["cards"][ids[0]]
    assert fields["state"] == "ready" and fields["duration_s"] == 4.0
    assert fields["audio_url"] == watcher.card(ids[0]).record.audio_url and fields["cover_url"]
    assert fields["actions"] == ["keep", "extend", "concat", "download", "export", "wav", "mp4", "favourite", "copy_id"]
    assert diff["header"]["counts"] == "2 ready"
    assert watcher.done

    wire.clear()
    assert watcher.poll_once() == []
    assert wire.custom(watcher) == [] and wire.updates(watcher) == []  # nothing changed: nothing sent
    revs = [m["rev"] for m in wire.custom(watcher)]
    assert revs == sorted(revs)


def test_diffs_carry_only_cards_on_the_visible_page(
    client: MusicClient, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    newer = []  # page 1: the 10 calls added last (finished, so the sandbox's running limit is not hit)
    for _ in range(10):
        newer.append(custom_song(client))
        clock.stages(2)
    old = custom_song(client)  # added first, so it ends up on page 2; still running
    watcher = watchers(old, client=client, autostart=False)
    for ids in newer:
        watcher.add(ids)
    assert watcher.pages == 2 and set(old).isdisjoint(watcher.visible_ids)
    hello(watcher, wire)
    wire.clear()
    watcher.poll_once()  # the old call moves to writing, the newer ones to ready
    (diff,) = wire.custom(watcher)
    assert set(diff["cards"]) == {i for ids in newer for i in ids}  # the hidden page's changes stay home
    assert diff["header"]["counts"] == "20 ready · 2 running" and diff["header"]["page_label"] == "Page 1 of 2"

    wire.clear()
    watcher._handle_custom_msg({"kind": "page", "page": 1}, [])
    (snapshot,) = wire.custom(watcher)
    assert [card["id"] for card in cards_of(snapshot)] == old
    assert [card["state"] for card in cards_of(snapshot)] == ["writing", "writing"]
    assert watcher.page == 1 and snapshot["header"]["page"] == 1

    for bad in (99, -5, "1", True, None):
        watcher._handle_custom_msg({"kind": "page", "page": bad}, [])
    assert watcher.page in (0, 1)  # clamped or ignored, never out of range
    watcher._handle_custom_msg("not a dict", [])
    watcher._handle_custom_msg({"kind": "no such thing"}, [])


def test_new_calls_on_the_page_send_a_fresh_snapshot(
    client: MusicClient, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    watcher = watchers(custom_song(client), client=client, autostart=False)
    hello(watcher, wire)
    wire.clear()
    more = custom_song(client)
    watcher.add(more)
    (message,) = wire.custom(watcher)
    assert message["kind"] == "snapshot" and [c["id"] for c in message["groups"][0]] == more


# -- intents from the cards ---------------------------------------------------------------------------------


@pytest.fixture
def finished(client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]) -> TaskWatcher:
    """A watcher (not polling by itself) whose two songs are complete."""
    watcher = watchers(custom_song(client, title="Rain / Night: 1"), client=client, autostart=False)
    clock.stages(2)
    watcher.poll_once()
    assert watcher.done
    return watcher


def press(watcher: TaskWatcher, wire: Wire, kind: str, task_id: str) -> dict[str, Any]:
    """A card button as the browser sends it; returns the note the card now shows (from the diff)."""
    wire.clear()
    watcher._handle_custom_msg({"kind": kind, "id": task_id}, [])
    fields: dict[str, Any] = {}
    for diff in wire.custom(watcher):  # usually one; a loaded machine may see the watcher's own tick besides
        fields.update((diff.get("cards") or {}).get(task_id) or {})
    return fields


def test_download_intent_saves_a_file_named_from_the_title(finished: TaskWatcher, wire: Wire, tmp_path: Path) -> None:
    hello(finished, wire)
    finished.download_dir = tmp_path
    fields = press(finished, wire, "download", finished.ids[0])
    assert [f.name for f in tmp_path.iterdir()] == ["Rain Night 1.mp3"]
    assert fields["note"].startswith("Saved to ") and "Rain Night 1.mp3" in fields["note"]


def test_concat_intent_adds_its_tasks(finished: TaskWatcher, wire: Wire, sandbox: Sandbox) -> None:
    hello(finished, wire)
    wire.clear()
    finished._handle_custom_msg({"kind": "concat", "id": finished.ids[1]}, [])
    assert len(finished.ids) == 4 and sandbox.request_counts()["/v1/music/generate"] == 2
    (snapshot,) = [m for m in wire.custom(finished) if m["kind"] == "snapshot"]  # the new call joins the page
    assert [c["id"] for c in snapshot["groups"][0]] == finished.ids[2:]
    assert "Joining started: 2 new song(s)" in finished.card(finished.ids[1]).note


def test_copy_id_and_favourite_intents(finished: TaskWatcher, wire: Wire) -> None:
    hello(finished, wire)
    task_id = finished.ids[0]
    record = finished.card(task_id).record
    assert press(finished, wire, "copy_id", task_id)["note"] == f"Id: {task_id}, {record.song_id}"
    told: list[tuple[str, bool]] = []
    finished.on_favourite = lambda i, on: told.append((i, on))
    fields = press(finished, wire, "favourite", task_id)
    assert fields["favourite"] is True and told == [(task_id, True)]
    assert press(finished, wire, "favourite", task_id)["favourite"] is False


def test_keep_marks_one_take_of_the_call_and_tells_the_library(finished: TaskWatcher, wire: Wire) -> None:
    hello(finished, wire)
    first, second = finished.ids
    told: list[str] = []
    finished.on_keep = told.append
    wire.clear()
    finished._handle_custom_msg({"kind": "keep", "id": second}, [])
    (diff,) = wire.custom(finished)
    assert diff["cards"][second]["kept"] is True and not finished.card(first).kept
    assert diff["cards"][second]["note"] == "This take is the one to keep: kept in the library." and told == [second]
    wire.clear()
    finished._handle_custom_msg({"kind": "keep", "id": first}, [])  # changing one's mind moves the mark
    (diff,) = wire.custom(finished)
    assert diff["cards"][first]["kept"] is True and diff["cards"][second]["kept"] is False  # both cards redrawn
    assert told == [second, first]


def test_keep_without_a_library_that_has_the_song_holds_for_the_session(finished: TaskWatcher, wire: Wire) -> None:
    hello(finished, wire)
    fields = press(finished, wire, "keep", finished.ids[0])  # the free sandbox's songs are not in the library
    assert fields["kept"] is True and "for this session (the song is not in the library)" in fields["note"]


def test_extend_intent_prefills_a_form_that_submits_into_the_watcher(
    finished: TaskWatcher, wire: Wire, sandbox: Sandbox
) -> None:
    finished.open_extend_studio = extend_studio  # what the magics and `widgets.ui.UI` give a lone watcher
    hello(finished, wire)
    task_id = finished.ids[0]
    fields = press(finished, wire, "extend", task_id)
    assert "Extend form ready" in fields["note"]
    form = finished.extend_form
    assert isinstance(form, SongPane) and isinstance(finished.extend_studio, Studio)
    assert form.studio.watcher is finished and form.studio.tab == "song"  # one form model: the studio's panes
    values = form.values()
    assert values["action"] == "extend" and values["continue_song_id"] == finished.card(task_id).record.song_id
    assert values["continue_at"] == 4 and values["style"] == "lo-fi piano" and values["title"] == "Rain / Night: 1"
    form.set_values(continue_at=2.5)
    form.submit()
    assert len(finished.ids) == 4 and sandbox.request_counts()["/v1/music/generate"] == 2
    assert finished.extend(task_id) is form  # the next extend reuses that studio
    form.studio.close()
    assert not finished._closed  # the studio did not make the watcher, so it leaves it running


def test_actions_on_an_unfinished_or_unknown_song_are_refused_in_the_card(
    client: MusicClient, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    watcher = watchers(custom_song(client, title=HOSTILE), client=client, autostart=False)
    watcher.poll_once()
    hello(watcher, wire)
    fields = press(watcher, wire, "download", watcher.ids[0])  # not raised; its card shows no Download yet
    assert "nothing was done" in fields["note"]
    with pytest.raises(MusicGenError, match="processing, not complete"):  # from code, said why
        watcher.download(watcher.ids[0])
    watcher._handle_custom_msg({"kind": "keep", "id": watcher.ids[0]}, [])  # a take still cooking: no Keep shown
    assert "nothing was done" in watcher.card(watcher.ids[0]).note and not watcher.card(watcher.ids[0]).kept
    wire.clear()
    watcher._handle_custom_msg({"kind": "download", "id": "not-watched"}, [])
    watcher._handle_custom_msg({"kind": "download", "id": ["x"]}, [])
    assert wire.custom(watcher) == []


# -- everything is plain text; no key anywhere ------------------------------------------------------------


def test_hostile_text_stays_plain_text_in_the_data(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    sandbox.set_faults([{"kind": "task_fail", "fail_code": 501, "fail_reason": HOSTILE}])
    failing = custom_song(client)
    hostile = custom_song(client, title=HOSTILE, style=f"{HOSTILE}, rock", lyrics=f"[Verse]\n{HOSTILE}")
    watcher = watchers(failing + hostile, client=client, autostart=False)
    clock.stages(2)
    watcher.poll_once()
    cards = {card["id"]: card for card in cards_of(hello(watcher, wire))}
    bad = cards[hostile[0]]
    assert bad["title"] == HOSTILE and bad["style_chips"] == [HOSTILE, "rock"] and HOSTILE in bad["lyrics"]
    failed = cards[failing[0]]
    assert failed["state"] == "failed" and failed["fail_reason"] == HOSTILE
    assert failed["audio_url"] is None and failed["actions"] == ["copy_id"]
    assert "&lt;" not in json.dumps(cards)  # not escaped twice: the browser sets it as text
    assert "[Failed: <img" in repr(watcher)


BAD_URLS = ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", "file:///etc/passwd", " JAVASCRIPT:x"]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("status", [2, 0])
def test_non_http_urls_never_reach_the_browser(url: str, status: int) -> None:
    card = TaskCard("t1")
    good = "https://cdn.example/t1.mp3"
    card.update(TaskRecord.model_validate({"id": "t1", "status": status, "audio_url": good, "cover_url": good}))
    assert card.audio_url == good and card.data()["cover_url"] == good
    card.update(TaskRecord.model_validate({"id": "t1", "status": status, "audio_url": url, "cover_url": url}))
    data = card.data()
    assert data["audio_url"] is None and data["cover_url"] is None and url.strip() not in json.dumps(data)
    v2 = TaskCard("s1", v2=True)
    v2.update(V2Song(song_id="s1", status="FINISHED", audio=url, image=url, title=HOSTILE))
    assert v2.audio_url is None and v2.data()["cover_url"] is None and "concat" not in v2.data()["actions"]


def test_no_key_in_widget_state_messages_or_repr(
    finished: TaskWatcher, wire: Wire, sandbox: Sandbox, tmp_path: Path
) -> None:
    key = finished.client.settings.api_key.get_secret_value()
    assert key and len(key) > 6
    hello(finished, wire)
    finished.download_dir = tmp_path
    press(finished, wire, "download", finished.ids[0])
    finished.batch_line = "batch: 3 of 10"
    text = json.dumps([finished.get_state(), [m for _id, m in wire.messages], repr(finished)], default=str)
    assert key not in text


# -- polling: batching, the thread, errors --------------------------------------------------------------


def test_one_batched_query_per_round_for_the_unfinished(sandbox: Sandbox, clock: ManualClock) -> None:
    asked: list[httpx.URL] = []
    hooks = {"request": [lambda request: asked.append(request.url)]}
    with sandbox.client(max_retries=0, http_client=httpx.Client(event_hooks=hooks)) as client:
        first = custom_song(client)
        clock.stages(2)  # the first call's songs are done by the first round; the second's are not
        second = custom_song(client)
        watcher = TaskWatcher(first, client=client, autostart=False)
        try:
            watcher.add(second)
            asked.clear()
            watcher.poll_once()
            assert [u.params["ids"].split(",") for u in asked] == [first + second]
            asked.clear()
            watcher.poll_once()
            assert [u.params["ids"].split(",") for u in asked] == [second]  # finished tasks are not asked again
        finally:
            watcher.close()


def test_thread_polls_until_all_done_then_stops(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client)
    watcher = watchers(ids, client=client, interval=0.05)
    assert watcher.running
    clock.stages(2)
    wait_until(lambda: not watcher.running, "the thread to stop once every task is done")
    assert watcher.done and all(card.state is TaskState.COMPLETE for card in watcher.cards.values())
    more = custom_song(client)
    watcher.add(more)  # new work starts polling again
    assert watcher.running
    clock.stages(2)
    records = watcher.wait(timeout=WAIT)
    assert [r.id for r in records] == ids + more
    wait_until(lambda: not watcher.running, "the thread to stop again")


def test_stop_start_and_close_end_the_thread(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client)
    watcher = watchers(ids, client=client, interval=0.05)
    wait_until(lambda: sandbox.request_counts().get("/v1/music/tasks", 0) >= 2, "two polling rounds")
    thread = watcher._thread
    assert thread is not None
    watcher.stop()
    assert not watcher.running and not thread.is_alive()
    assert watcher.card(ids[0]).state is TaskState.PROCESSING  # cards stay as they were
    watcher.start()
    assert watcher.running
    thread = watcher._thread
    watcher.close()
    assert thread is not None and not watcher.running
    wait_until(lambda: not thread.is_alive(), "the thread to end after close()")
    watcher.start()
    watcher.add(custom_song(client))
    assert not watcher.running  # a closed watcher never polls again


def test_the_front_end_closing_the_widget_stops_the_thread(client: MusicClient, clock: ManualClock) -> None:
    watcher = TaskWatcher(custom_song(client), client=client)
    thread = watcher._thread
    assert thread is not None and thread.is_alive() and watcher.comm is not None
    watcher.comm.handle_close({})  # what the kernel does when the front end sends comm_close
    assert not watcher.running and watcher.comm is None
    wait_until(lambda: not thread.is_alive(), "the thread to end")
    watcher.start()
    assert not watcher.running


@pytest.mark.parametrize("fault", ["server_error", "rate_limit"])
def test_poll_error_is_shown_in_the_header_and_cleared_on_recovery(
    plain_client: MusicClient,
    sandbox: Sandbox,
    clock: ManualClock,
    wire: Wire,
    watchers: Callable[..., TaskWatcher],
    fault: str,
) -> None:
    ids = custom_song(plain_client)
    watcher = watchers(ids, client=plain_client, autostart=False)
    hello(watcher, wire)
    sandbox.set_faults(f"{fault}:count=1:path=/v1/music/tasks")
    wire.clear()
    assert watcher.poll_once() == []
    code = "500" if fault == "server_error" else "rate limited"
    assert watcher.last_error and code in watcher.last_error
    (diff,) = wire.custom(watcher)
    error = diff["header"]["error"]
    assert diff["cards"] == {} and error.startswith("Polling failed:") and code in error
    clock.stages(1)
    wire.clear()
    assert len(watcher.poll_once()) == 2
    assert watcher.last_error is None and wire.custom(watcher)[0]["header"]["error"] == ""


@pytest.mark.slow
def test_thread_backs_off_and_recovers(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(plain_client)
    sandbox.set_faults("server_error:count=2:path=/v1/music/tasks")
    watcher = watchers(ids, client=plain_client, interval=0.25)
    wait_until(lambda: "retrying in 0.5 s" in watcher.header()["error"], "the first failure with a doubled wait")
    wait_until(lambda: "retrying in 1 s" in watcher.header()["error"], "the second failure, the wait doubled again")
    assert sandbox.request_counts()["/v1/music/tasks"] == 2
    wait_until(lambda: watcher.last_error is None and watcher.card(ids[0]).state is not None, "recovery")
    assert watcher.header()["error"] == ""
    clock.stages(2)
    wait_until(lambda: not watcher.running, "the thread to finish after recovering")
    assert watcher.card(ids[0]).state is TaskState.COMPLETE


@pytest.mark.slow
def test_thread_waits_as_long_as_a_rate_limit_asks(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(plain_client)
    sandbox.set_faults("rate_limit:count=1:path=/v1/music/tasks")
    watcher = watchers(ids, client=plain_client, interval=0.05)
    wait_until(lambda: "retrying in" in watcher.header()["error"], "the rate limit to show in the header")
    assert "rate limited" in watcher.header()["error"] and "retrying in 1 s" in watcher.header()["error"]
    assert sandbox.request_counts()["/v1/music/tasks"] == 1  # the Retry-After, not 2 x 0.05 s
    wait_until(lambda: watcher.last_error is None and watcher.card(ids[0]).state is not None, "recovery")


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(1.0, n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(5.0, 20) == MAX_BACKOFF
    assert backoff(120.0, 1) == 120.0  # never shorter than the normal interval


def test_wait_uses_the_clients_wait_and_names_the_pending_tasks(
    client: MusicClient, clock: ManualClock, wire: Wire, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client)
    watcher = watchers(ids, client=client, interval=0.05)
    hello(watcher, wire)
    with pytest.raises(WaitTimeoutError) as caught:
        watcher.wait(timeout=0.3)
    assert sorted(caught.value.pending) == sorted(ids)
    assert watcher.running  # the thread paused for the wait and goes on after it
    watcher.stop()
    clock.stages(2)
    wire.clear()
    assert {r.state for r in watcher.wait(timeout=WAIT)} == {TaskState.COMPLETE}
    assert wire.custom(watcher)[-1]["cards"][ids[0]]["state"] == "ready"  # the wait's records are drawn too
    assert not watcher.running


def test_polling_thread_never_prints_or_displays(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    InteractiveShell.instance()  # so capture_output captures display() calls too
    ok = custom_song(plain_client)
    sandbox.set_faults([{"kind": "task_fail", "fail_reason": "no"}, "server_error:count=1:path=/v1/music/tasks"])
    failing = custom_song(plain_client)
    with capture_output() as captured:
        watcher = watchers(ok + failing, client=plain_client, interval=0.05)
        wait_until(lambda: sandbox.request_counts().get("/v1/music/tasks", 0) >= 2, "an error and a good round")
        clock.stages(2)
        wait_until(lambda: not watcher.running, "the thread to finish")
    assert {card.state for card in watcher.cards.values()} == {TaskState.COMPLETE, TaskState.FAILED}
    assert captured.stdout == "" and captured.stderr == "" and captured.outputs == []


def test_elapsed_time_counts_while_running_and_stops_when_done(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    watcher = watchers(custom_song(client), client=client, autostart=False)
    card = watcher.card(watcher.ids[0])
    card.started -= 75  # as if submitted 75 s ago
    watcher.poll_once()
    assert card.data()["elapsed_s"] >= 75 and card.data()["state"] == "writing"
    clock.stages(2)
    watcher.poll_once()
    frozen = card.data()["elapsed_s"]
    card.started -= 0  # time passing no longer counts once finished
    assert card.data()["elapsed_s"] == frozen and card.data()["state_label"] == "Ready"


# -- text, registration, structure ------------------------------------------------------------------------


def test_text_repr_is_readable_and_complete(finished: TaskWatcher) -> None:
    text = repr(finished)
    lines = text.splitlines()
    assert lines[0] == "TaskWatcher: 2 songs (2 ready)"
    assert len(lines) == 3
    assert lines[1].startswith("  'Rain / Night: 1' (take 1) [Ready] 0:04 http://127.0.0.1:")
    assert lines[2].startswith("  'Rain / Night: 1' (take 2) [Ready]")
    assert pretty(finished) == text
    shell = InteractiveShell.instance()
    bundle, _meta = shell.display_formatter.format(finished)
    assert bundle["text/plain"] == text  # not cut at 110 characters as ipywidgets does by default
    assert "application/vnd.jupyter.widget-view+json" in bundle
    card = finished.card(finished.ids[0])
    assert repr(card) == f"TaskCard({card.task_id}: {card.summary()})"


def test_a_closed_watcher_is_forgotten_by_the_session(client: MusicClient) -> None:
    first = TaskWatcher(client=client, autostart=False)
    second = TaskWatcher(client=client, autostart=False)
    assert first in session.watchers() and second in session.watchers()
    first.close()
    assert first not in session.watchers() and second in session.watchers()
    first.close()  # closing again (as ipywidgets does when the object is collected) changes nothing
    second.close()
    assert second not in session.watchers()


def test_shutdown_closes_every_registered_watcher(client: MusicClient, clock: ManualClock) -> None:
    made = [TaskWatcher(custom_song(client), client=client) for _ in range(3)]
    assert all(watcher.running for watcher in made)
    session.shutdown()  # each close() unregisters while shutdown walks the list: none may be skipped
    assert all(watcher.comm is None and not watcher.running for watcher in made)
    assert not any(watcher in session.watchers() for watcher in made)


def test_the_session_does_not_import_the_ui() -> None:
    code = (
        "import sys, ipymusicgen.workspace.session;"
        " print(any(m.startswith('ipymusicgen.widgets') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    import ipymusicgen

    assert ipymusicgen.watch_unfinished.__module__ == "ipymusicgen.widgets.ui"  # the one whose Extend opens a studio


def test_front_end_files_join_common_and_view_and_never_use_inner_html() -> None:
    module = esm("watcher")
    assert module.index("function renderSongCard") < module.index("export default")
    assert module.count("export default") == 1 and "export " not in (STATIC / "common.js").read_text()
    assert ".ipymusicgen-song" in css("watcher") and ".ims-watcher-head" in css("watcher")
    for name in ("common.js", "watcher.js"):
        source = (STATIC / name).read_text()
        assert "innerHTML" not in source and "insertAdjacentHTML" not in source and "eval(" not in source


def test_song_card_data_is_bounded_and_typed() -> None:
    record = TaskRecord(id="a", status=0, title="x" * 5000, style="pop, Pop, , rock", duration=125_000, lyric="la")
    data = song_card(record, call="c", take=2, peaks=[[-2.0, 0.5]] * 2000 + [["bad"]], elapsed_s=float("nan"))
    assert len(data["title"]) == 200 and data["title"].endswith("…")
    assert data["style_chips"] == ["pop", "rock"] and data["take"] == 2 and data["duration_s"] == 125.0
    assert len(data["peaks"]) == 512 and data["peaks"][0] == [-1.0, 0.5] and data["elapsed_s"] is None
    queued = song_card(None, id="q\x00", take=7)
    assert queued["state"] == "queued" and queued["id"] == "q" and queued["take"] == 1


def test_annotate_adds_peaks_and_the_archived_file_to_a_card(
    finished: TaskWatcher, wire: Wire, clock: ManualClock
) -> None:
    hello(finished, wire)
    wire.clear()
    task_id = finished.ids[1]
    finished.annotate(task_id, peaks=[[-0.25, 0.5]] * 3, archived_path_label="Music/Rain.mp3", api_key="x", favourite=1)
    (diff,) = wire.custom(finished)
    fields = diff["cards"][task_id]
    assert fields["peaks"] == [[-0.25, 0.5]] * 3 and fields["archived_path_label"] == "Music/Rain.mp3"
    assert fields["favourite"] is True and "api_key" not in fields
    wire.clear()
    finished.annotate("not-watched", peaks=[[0, 1]])
    finished.annotate(task_id, peaks=[[-0.25, 0.5]] * 3)  # nothing new: nothing sent
    assert wire.custom(finished) == []


def test_a_card_runs_its_actions_through_its_watcher(finished: TaskWatcher, tmp_path: Path) -> None:
    finished.download_dir = tmp_path
    card = finished.card(finished.ids[0])
    saved = card.run_action("download")
    assert isinstance(saved, Path) and saved.is_file() and "Saved to" in card.message
    assert card.run_action("no such action") is None and card.message.startswith("No such action failed")
    loose = TaskCard("loose")
    assert loose.run_action("download") is None and "not attached" in loose.message


@pytest.mark.slow
def test_close_returns_promptly_while_a_request_hangs(clock: ManualClock) -> None:
    """A service that never answers: close() still returns within its bound, and the thread sends nothing after."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    port = listener.getsockname()[1]
    with MusicClient("k-hanging", base_url=f"http://127.0.0.1:{port}", max_retries=0, timeout=900) as client:
        watcher = TaskWatcher(["t1", "t2"], client=client, interval=0.05)
        wait_until(lambda: bool(accepted), "the poll request to reach the silent server")
        thread = watcher._thread
        watcher.close()  # bounded by CLOSE_JOIN, not by the request timeout (longer than the test timeout)
        assert not watcher.running and watcher.comm is None and thread is not None
        for conn in accepted:
            conn.close()  # the request fails now; the thread ends without touching the closed widget
        wait_until(lambda: not thread.is_alive(), "the thread to end once its request does")
    listener.close()
