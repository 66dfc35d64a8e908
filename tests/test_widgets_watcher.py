"""The task watcher and its cards without a browser: real ipywidgets against the real sandbox.

The sandbox derives every task's state from its clock, so these tests freeze that clock and move it
by hand: each `poll_once()` then sees exactly the stage the test asked for, on any machine speed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import ipywidgets as w
import pytest
from helpers import HOSTILE, WAIT, ManualClock, html_values, wait_until
from IPython.core.interactiveshell import InteractiveShell
from IPython.lib.pretty import pretty
from IPython.utils.capture import capture_output

from ipymusicgen import session
from ipymusicgen.client import MusicClient
from ipymusicgen.errors import WaitTimeoutError
from ipymusicgen.models import TaskRecord, V2Song
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.tasks import TaskState
from ipymusicgen.widgets import GenerateForm, TaskCard, TaskWatcher
from ipymusicgen.widgets.watcher import MAX_BACKOFF, PAGE_SIZE, backoff


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


def assert_escaped(widget: w.Widget) -> None:
    values = "\n".join(html_values(widget))
    assert "&lt;img src=x onerror=alert(1)&gt;" in values
    assert "<img" not in values


def custom_song(client: MusicClient, **fields: object) -> list[str]:
    body = {"action": "custom", "style": "lo-fi piano", "title": "Rain", "lyrics": "[Verse]\nla la", **fields}
    return list(client.generate(**body).ids)


def v2_song(client: MusicClient) -> list[str]:
    return [song.id for song in client.submit_v2(is_auto=1, prompt="calm piano", model_version="v4.5")]


# -- cards and states ----------------------------------------------------------------------------------


def test_one_card_per_task_v1_and_v2(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    v1, v2 = custom_song(client), v2_song(client)
    watcher = watchers(v1, v2_ids=v2, client=client, autostart=False)
    assert watcher.ids == v1 + v2
    assert [card.task_id for card in watcher.children[1].children] == v1 + v2
    assert [watcher.card(i).v2 for i in v1 + v2] == [False, False, True, True]
    assert watcher.add(v1) == []  # already watched: no second card
    assert len(watcher.cards) == 4
    assert all(card.state is None and card.audio_url is None for card in watcher.cards.values())


def test_v1_card_goes_processing_preview_complete(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client, lyrics="[Verse]\nrain on the window")
    watcher = watchers(ids, client=client, autostart=False)
    card = watcher.card(ids[0])
    player = card.audio

    assert len(watcher.poll_once()) == 2
    assert card.state is TaskState.PROCESSING
    assert card.progress.value == 1 and card.audio_url is None
    assert "processing" in card.html and "Rain" in card.html and "lo-fi piano" in card.html
    assert card.lyrics_box.layout.display == "none"
    assert not any(b.layout.display is None for name, b in card.buttons.items() if name != "copy")

    clock.stages(1)
    watcher.poll_once()
    preview = card.record.audio_url
    assert card.state is TaskState.PREVIEW and card.progress.value == 2
    assert preview.startswith(sandbox.base_url) and preview.endswith("-preview.mp3")
    assert card.audio_url == preview
    assert player.autoplay is False and player.loop is False and player.format == "url"
    assert "preview" in card.html

    clock.stages(1)
    watcher.poll_once()
    record = card.record
    assert card.state is TaskState.COMPLETE
    assert card.progress.value == 3 and card.progress.bar_style == "success"
    assert card.audio is player  # the final file replaces the preview in the same player
    assert card.audio_url == record.audio_url != preview
    assert player.autoplay is False and player.loop is False
    assert bytes(card.cover.value).decode() == record.cover_url and card.cover.layout.display is None
    assert "duration 4.0 s" in card.html and "final audio" in card.html
    assert card.lyrics_box.layout.display is None
    assert isinstance(card.lyrics_box, w.Accordion) and "rain on the window" in card.lyrics_box.children[0].value
    assert "complete ·" in card.html  # state with elapsed time
    shown = {name for name, button in card.buttons.items() if button.layout.display is None}
    assert shown == {"extend", "concat", "download", "copy"}
    assert watcher.done and watcher.poll_once() == []


def test_v2_card_completes_and_offers_no_concat(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = v2_song(client)
    watcher = watchers(v2_ids=ids, client=client, autostart=False)
    clock.stages(1)
    watcher.poll_once()
    card = watcher.card(ids[0])
    assert card.state is TaskState.PREVIEW and card.audio_url and card.audio_url.endswith("-preview.mp3")
    clock.stages(1)
    watcher.poll_once()
    assert card.state is TaskState.COMPLETE and card.audio_url == card.record.audio_url
    assert card.audio.autoplay is False and card.audio.loop is False
    assert card.cover.layout.display is None and "duration 4.0 s" in card.html
    assert card.buttons["concat"].layout.display == "none"
    assert card.buttons["extend"].layout.display is None


def test_failed_task_shows_its_reason_escaped(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    sandbox.set_faults([{"kind": "task_fail", "fail_code": 501, "fail_reason": HOSTILE}])
    ids = custom_song(client)
    watcher = watchers(ids, client=client, autostart=False)
    clock.stages(1)
    watcher.poll_once()
    card = watcher.card(ids[0])
    assert card.state is TaskState.FAILED and watcher.done
    assert card.progress.bar_style == "danger"
    assert "failed: &lt;img src=x onerror=alert(1)&gt;" in card.html
    assert_escaped(card)
    assert card.audio_url is None and card.audio.layout.display == "none"
    assert card.buttons["download"].layout.display == "none"
    assert "[failed]" in repr(watcher)


def test_hostile_title_and_lyrics_render_as_text(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client, title=HOSTILE, style=HOSTILE, lyrics=f"[Verse]\n{HOSTILE}")
    watcher = watchers(ids, client=client, autostart=False)
    clock.stages(2)
    watcher.poll_once()
    card = watcher.card(ids[0])
    assert card.record.title == HOSTILE and card.record.lyrics and HOSTILE in card.record.lyrics
    assert_escaped(card)
    assert_escaped(watcher)


BAD_URLS = ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", "file:///etc/passwd", " JAVASCRIPT:x"]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("status", [2, 0])
def test_non_http_urls_never_become_players_or_images(url: str, status: int) -> None:
    card = TaskCard("t1")
    good = "https://cdn.example/t1.mp3"
    card.update(TaskRecord.model_validate({"id": "t1", "status": status, "audio_url": good, "cover_url": good}))
    assert card.audio_url == good  # a good URL is shown, so the next update has something to take away
    record = {"id": "t1", "status": status, "duration": 1000, "audio_url": url, "cover_url": url, "title": "T"}
    card.update(TaskRecord.model_validate(record))
    assert card.audio_url is None and bytes(card.audio.value) == b"" and card.audio.layout.display == "none"
    assert bytes(card.cover.value) == b"" and card.cover.layout.display == "none"
    markup = "\n".join(html_values(card))
    assert "href" not in markup and url.strip() not in markup and "not an http(s) URL" in markup
    assert url not in card.summary()


def test_v2_song_with_bad_urls_is_text_only() -> None:
    card = TaskCard("s1", v2=True)
    song = {"song_id": "s1", "status": "FINISHED", "audio": "javascript:alert(1)", "image": "data:image/png,x"}
    card.update(V2Song.model_validate({**song, "title": HOSTILE, "lyric": HOSTILE, "tags": HOSTILE}))
    assert card.state is TaskState.COMPLETE and card.audio_url is None
    assert card.cover.layout.display == "none"
    assert_escaped(card)


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
            before = sandbox.request_counts().get("/v1/music/tasks", 0)
            watcher.poll_once()
            assert sandbox.request_counts()["/v1/music/tasks"] == before + 1
            assert [u.params["ids"].split(",") for u in asked] == [first + second]
            asked.clear()
            watcher.poll_once()
            assert [u.params["ids"].split(",") for u in asked] == [second]  # finished tasks are not asked again
            assert sandbox.request_counts()["/v1/music/tasks"] == before + 2
        finally:
            watcher.close()


def test_thread_polls_until_all_done_then_stops(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client)
    watcher = watchers(ids, client=client)
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
    watcher = watchers(ids, client=client)
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
    assert thread is not None and not thread.is_alive() and not watcher.running
    watcher.start()
    watcher.add(custom_song(client))
    assert not watcher.running  # a closed watcher never polls again


def test_the_front_end_closing_the_widget_stops_the_thread(client: MusicClient, clock: ManualClock) -> None:
    watcher = TaskWatcher(custom_song(client), client=client)
    thread = watcher._thread
    assert thread is not None and thread.is_alive() and watcher.comm is not None
    watcher.comm.handle_close({})  # what the kernel does when the front end sends comm_close
    assert not thread.is_alive() and not watcher.running and watcher.comm is None
    watcher.start()
    assert not watcher.running


@pytest.mark.parametrize("fault", ["server_error", "rate_limit"])
def test_poll_error_is_shown_in_cards_and_cleared_on_recovery(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher], fault: str
) -> None:
    ids = custom_song(plain_client)
    watcher = watchers(ids, client=plain_client, autostart=False)
    sandbox.set_faults(f"{fault}:count=1:path=/v1/music/tasks")
    assert watcher.poll_once() == []
    code = "500" if fault == "server_error" else "rate limited"
    assert watcher.last_error and code in watcher.last_error
    for card in watcher.cards.values():
        assert "polling:" in card.html and code in card.html and card.state is None
    assert "polling error" in watcher.children[0].value
    clock.stages(1)
    assert len(watcher.poll_once()) == 2
    assert watcher.last_error is None
    assert all("polling:" not in card.html for card in watcher.cards.values())


def test_thread_backs_off_and_recovers(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(plain_client)
    sandbox.set_faults("server_error:count=2:path=/v1/music/tasks")
    watcher = watchers(ids, client=plain_client, interval=0.25)
    card = watcher.card(ids[0])
    wait_until(lambda: "retrying in 0.5 s" in card.html, "the first failure with a doubled wait")
    wait_until(lambda: "retrying in 1 s" in card.html, "the second failure with the wait doubled again")
    assert sandbox.request_counts()["/v1/music/tasks"] == 2 and "500" in card.html
    wait_until(lambda: watcher.last_error is None and card.state is TaskState.PROCESSING, "recovery")
    assert "polling:" not in card.html
    clock.stages(2)
    wait_until(lambda: not watcher.running, "the thread to finish after recovering")
    assert card.state is TaskState.COMPLETE


def test_thread_waits_as_long_as_a_rate_limit_asks(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(plain_client)
    sandbox.set_faults("rate_limit:count=1:path=/v1/music/tasks")
    watcher = watchers(ids, client=plain_client, interval=0.05)
    card = watcher.card(ids[0])
    wait_until(lambda: "retrying in" in card.html, "the rate limit to show in the card")
    assert "rate limited" in card.html and "retrying in 1 s" in card.html  # the Retry-After, not 2 x 0.05 s
    assert sandbox.request_counts()["/v1/music/tasks"] == 1
    wait_until(lambda: watcher.last_error is None and card.state is not None, "recovery after the wait")
    assert "rate limited" not in card.html


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(1.0, n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(5.0, 20) == MAX_BACKOFF
    assert backoff(120.0, 1) == 120.0  # never shorter than the normal interval


def test_wait_timeout_names_the_pending_tasks(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client)
    watcher = watchers(ids, client=client, autostart=False, interval=0.05)
    with pytest.raises(WaitTimeoutError) as caught:
        watcher.wait(timeout=0.3)
    assert sorted(caught.value.pending) == sorted(ids)
    clock.stages(2)
    assert {r.state for r in watcher.wait(timeout=WAIT)} == {TaskState.COMPLETE}


def test_polling_thread_never_prints_or_displays(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    InteractiveShell.instance()  # so capture_output captures display() calls too
    ok, failing = custom_song(plain_client), None
    sandbox.set_faults([{"kind": "task_fail", "fail_reason": "no"}, "server_error:count=1:path=/v1/music/tasks"])
    failing = custom_song(plain_client)
    with capture_output() as captured:
        watcher = watchers(ok + failing, client=plain_client, interval=0.05)
        wait_until(lambda: sandbox.request_counts().get("/v1/music/tasks", 0) >= 2, "an error and a good round")
        clock.stages(2)
        wait_until(lambda: not watcher.running, "the thread to finish")
    assert {card.state for card in watcher.cards.values()} == {TaskState.COMPLETE, TaskState.FAILED}
    assert captured.stdout == "" and captured.stderr == "" and captured.outputs == []


# -- card actions ----------------------------------------------------------------------------------------


@pytest.fixture
def finished(client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]) -> TaskWatcher:
    """A watcher (not polling by itself) whose two songs are complete."""
    watcher = watchers(custom_song(client, title="Rain / Night: 1"), client=client, autostart=False)
    clock.stages(2)
    watcher.poll_once()
    assert watcher.done
    return watcher


def test_extend_opens_a_prefilled_form_that_submits_into_the_watcher(finished: TaskWatcher, sandbox: Sandbox) -> None:
    task_id = finished.ids[0]
    card = finished.card(task_id)
    card.buttons["extend"].click()
    form = card.form
    assert isinstance(form, GenerateForm) and "extend form ready" in card.message
    values = form.values()
    assert values["action"] == "extend" and values["continue_song_id"] == card.record.song_id
    assert values["continue_at"] == 4  # the song's duration in seconds
    assert values["style"] == "lo-fi piano" and values["title"] == "Rain / Night: 1"
    assert form.valid and not form.submit_button.disabled
    form.set_values(continue_at=2.5)
    form.submit_button.click()
    assert form.error == ""
    assert len(finished.ids) == 4 and len(finished.cards) == 4  # the new tasks show at once
    assert sandbox.request_counts()["/v1/music/generate"] == 2


def test_concat_adds_its_tasks(finished: TaskWatcher, sandbox: Sandbox) -> None:
    card = finished.card(finished.ids[1])
    card.buttons["concat"].click()
    new = finished.ids[2:]
    assert len(new) == 2 and all(i in card.message for i in new)
    assert sandbox.request_counts()["/v1/music/generate"] == 2


def test_download_saves_a_file_named_from_the_title(finished: TaskWatcher, tmp_path: Path) -> None:
    finished.download_dir = tmp_path
    card = finished.card(finished.ids[0])
    card.buttons["download"].click()
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == ["Rain Night 1.mp3"]
    assert files[0].read_bytes()[:3] in (b"ID3", b"\xff\xfb") or files[0].read_bytes()[:2] == b"\xff\xf3"
    assert "saved to" in card.message and "Rain Night 1.mp3" in card.message


def test_copy_ids_shows_the_ids_as_text(finished: TaskWatcher) -> None:
    card = finished.card(finished.ids[0])
    assert card.ids_text.layout.display == "none"
    card.buttons["copy"].click()
    assert card.ids_text.layout.display is None
    assert card.ids_text.value == f"{card.record.id}, {card.record.song_id}"


def test_actions_on_an_unfinished_song_are_refused_in_the_card(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    watcher = watchers(custom_song(client, title=HOSTILE), client=client, autostart=False)
    watcher.poll_once()
    card = watcher.card(watcher.ids[0])
    assert card.run_action("download") is None  # not raised
    assert "download failed" in card.message and "processing, not complete" in card.message


def test_closing_the_watcher_closes_every_part_of_its_cards(finished: TaskWatcher) -> None:
    card = finished.card(finished.ids[0])
    card.buttons["extend"].click()
    parts = [card.audio, card.cover, card.lyrics_box, card.lyrics_box.children[0], card.form, card.buttons["copy"]]
    parts += list(card.form.children)
    finished.close()
    assert all(part.comm is None for part in parts)
    assert card.comm is None and finished.comm is None


# -- text for environments without widgets -------------------------------------------------------------


def test_text_repr_is_readable_and_complete(finished: TaskWatcher) -> None:
    text = repr(finished)
    lines = text.splitlines()
    assert lines[0] == "TaskWatcher: 2 tasks (2 complete)"
    assert len(lines) == 3 and all("'Rain / Night: 1' [complete] 4.0 s http://127.0.0.1:" in x for x in lines[1:])
    assert pretty(finished) == text
    shell = InteractiveShell.instance()
    bundle, _meta = shell.display_formatter.format(finished)
    assert bundle["text/plain"] == text  # not cut at 110 characters as ipywidgets does by default
    assert "application/vnd.jupyter.widget-view+json" in bundle
    card = finished.card(finished.ids[0])
    assert (
        shell.display_formatter.format(card)[0]["text/plain"]
        == repr(card)
        == f"TaskCard({card.task_id}: {card.summary()})"
    )


def test_elapsed_time_counts_while_processing_and_stops_when_done(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    watcher = watchers(custom_song(client), client=client, autostart=False)
    card = watcher.card(watcher.ids[0])
    card._started -= 75  # as if submitted 75 s ago
    watcher.poll_once()
    assert re.search(r"processing · 1 min \d+ s", card.html)
    clock.stages(2)
    watcher.poll_once()
    assert re.search(r"complete · 1 min \d+ s", card.html)
    frozen = card.html
    card._finished -= 1  # a finished song's time comes from when it finished, not from now
    card.tick()
    assert card.html != frozen and re.search(r"complete · 1 min \d+ s", card.html)


# -- cheap cards: parts built when first needed ----------------------------------------------------------


def tree(widget: w.Widget) -> list[w.Widget]:
    """A widget and everything it contains (what the front end gets a model for)."""
    found = [widget]
    for child in getattr(widget, "children", ()):
        found += tree(child)
    return found


def kinds(card: TaskCard) -> set[type]:
    return {type(part) for part in tree(card)}


def button_names(card: TaskCard) -> list[str]:
    return [str(part.description) for part in tree(card) if isinstance(part, w.Button)]


def test_a_card_builds_player_cover_lyrics_and_buttons_only_when_needed(
    client: MusicClient, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(client, lyrics="[Verse]\nrain on the window")
    watcher = watchers(ids, client=client, autostart=False)
    card = watcher.card(ids[0])
    lazy = {w.Audio, w.Image, w.Accordion, w.Text}
    assert not kinds(card) & lazy and button_names(card) == ["Copy ids"]
    watcher.poll_once()  # processing: still nothing to play, show or act on
    assert card.state is TaskState.PROCESSING
    assert not kinds(card) & lazy and button_names(card) == ["Copy ids"]

    clock.stages(1)
    watcher.poll_once()  # preview: a player, no buttons yet
    assert card.state is TaskState.PREVIEW
    players = [part for part in tree(card) if isinstance(part, w.Audio)]
    assert len(players) == 1 and players[0] is card.audio and card.audio_url == card.record.audio_url
    assert "ipymusicgen-player" in players[0]._dom_classes
    assert players[0].autoplay is False and players[0].loop is False
    assert button_names(card) == ["Copy ids"]

    clock.stages(1)
    watcher.poll_once()  # complete: cover, lyrics and the song's buttons, in their places
    assert card.state is TaskState.COMPLETE and {w.Audio, w.Image, w.Accordion} <= kinds(card)
    assert [part for part in tree(card) if isinstance(part, w.Audio)] == [players[0]]  # the same player
    assert button_names(card) == ["Extend", "Concat", "Download", "Copy ids"]
    assert card.children[0].children[0] is card.cover and card.children[1] is card.lyrics_box
    assert w.Text not in kinds(card)  # the ids box waits for "Copy ids"
    card.buttons["copy"].click()
    assert card.ids_text in tree(card) and card.ids_text.value == f"{card.record.id}, {card.record.song_id}"
    below = card.children[list(card.children).index(card.ids_text) - 1]
    assert card.buttons["copy"] in below.children  # the ids show right under the buttons


def test_a_failed_card_builds_its_failure_line_but_no_player(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    sandbox.set_faults([{"kind": "task_fail", "fail_reason": "no credits left"}])
    ids = custom_song(client)
    watcher = watchers(ids, client=client, autostart=False)
    card = watcher.card(ids[0])
    assert "failed" not in card.html
    clock.stages(1)
    watcher.poll_once()
    assert card.state is TaskState.FAILED and "failed: no credits left" in card.html
    assert not kinds(card) & {w.Audio, w.Image, w.Accordion, w.Text}
    assert button_names(card) == ["Copy ids"]


# -- paging: cards for the first tasks, every task polled ----------------------------------------------


class PagedWatcher(TaskWatcher):
    """A watcher with a small page, so paging shows with a few real tasks."""

    page_size = 2


def test_a_big_watcher_builds_cards_for_its_first_page_only() -> None:
    ids = [f"t{i}" for i in range(PAGE_SIZE + 3)]
    watcher = TaskWatcher(ids, client=MusicClient(api_key="k", base_url="http://127.0.0.1:9"), autostart=False)
    try:
        assert watcher.ids == ids and list(watcher.cards) == ids[:PAGE_SIZE] and watcher.hidden == 3
        assert [card.task_id for card in watcher.children[1].children] == ids[:PAGE_SIZE]
        more = watcher.children[2]
        assert more.layout.display is None and more.description == "Show 3 more (3 without a card)"
        assert f"cards for the first {PAGE_SIZE}" in watcher.children[0].value
        assert len(repr(watcher).splitlines()) == 1 + len(ids)  # the text lists every task, card or not
    finally:
        watcher.close()


def test_show_more_builds_the_next_page_with_the_latest_records(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock, watchers: Callable[..., TaskWatcher]
) -> None:
    ids = custom_song(plain_client) + custom_song(plain_client) + custom_song(plain_client)
    watcher = watchers(ids, client=plain_client, autostart=False)
    assert isinstance(watcher, TaskWatcher)
    paged = PagedWatcher(ids, client=plain_client, autostart=False)
    try:
        more = paged.children[2]
        assert list(paged.cards) == ids[:2] and more.description == "Show 2 more (4 without a card)"
        clock.stages(2)
        assert len(paged.poll_once()) == 6 and paged.done  # every task is polled, card or not
        assert [r.id for r in paged.records] == ids and "'Rain' [complete]" in repr(paged).splitlines()[-1]
        more.click()
        assert list(paged.cards) == ids[:4] and more.description == "Show 2 more (2 without a card)"
        assert [card.task_id for card in paged.children[1].children] == ids[:4]
        new = paged.card(ids[3])
        assert new.state is TaskState.COMPLETE and new.audio_url == new.record.audio_url  # filled in at once
        last = paged.card(ids[5])  # asking for a card shows the pages up to it
        assert last.state is TaskState.COMPLETE and list(paged.cards) == ids
        assert more.layout.display == "none" and paged.hidden == 0
        assert "cards for the first" not in paged.children[0].value
        with pytest.raises(KeyError):
            paged.card("not-watched")
    finally:
        paged.close()


def test_a_page_shown_during_polling_errors_shows_the_error(
    plain_client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    ids = custom_song(plain_client) + custom_song(plain_client)
    paged = PagedWatcher(ids, client=plain_client, autostart=False)
    try:
        sandbox.set_faults("server_error:count=1:path=/v1/music/tasks")
        assert paged.poll_once() == [] and paged.last_error
        new_cards = paged.show_more()
        assert [card.task_id for card in new_cards] == ids[2:]
        assert all("polling:" in card.html and "500" in card.html for card in new_cards)
        clock.stages(1)
        paged.poll_once()
        assert all("polling:" not in card.html and card.state is TaskState.PREVIEW for card in new_cards)
    finally:
        paged.close()


def test_a_closed_watcher_is_forgotten_by_the_session(client: MusicClient) -> None:
    first = TaskWatcher(client=client, autostart=False)
    second = TaskWatcher(client=client, autostart=False)
    assert first in session._session.watchers and second in session._session.watchers
    first.close()
    assert first not in session._session.watchers and second in session._session.watchers
    first.close()  # closing again (as ipywidgets does when the object is collected) changes nothing
    assert second in session._session.watchers
    second.close()
    assert second not in session._session.watchers


def test_shutdown_closes_every_registered_watcher(client: MusicClient, clock: ManualClock) -> None:
    made = [TaskWatcher(custom_song(client), client=client) for _ in range(3)]
    assert all(watcher.running for watcher in made)
    session.shutdown()  # each close() unregisters while shutdown walks the list: none may be skipped
    assert all(watcher.comm is None and not watcher.running for watcher in made)
    assert not any(watcher in session._session.watchers for watcher in made)
