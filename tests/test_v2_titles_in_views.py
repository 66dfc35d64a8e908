"""Songs started from the studio's v2 tab keep their submit answer's title and lyrics on the cards.

The real v2 query answers `"title": ""` and `"lyric": ""` (observed-behaviour.md) and so does the sandbox:
a watcher that only knew the ids would show untitled songs for ever. The studio hands the watcher the
submitted songs themselves, which seed the cards before polling starts.
"""

from __future__ import annotations

from helpers import WAIT, ManualClock

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets import TaskWatcher
from ipymusicgen.widgets.studio import studio

LYRICS = "[Verse]\nsalt on the window\n[Chorus]\nharbour lights"


def test_studio_v2_cards_keep_the_title_after_the_blank_queries(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock
) -> None:
    made = studio(client)
    try:
        made.v2.set_values(is_auto=0, prompt="sea shanty", title="Harbour Lights", lyrics=LYRICS)
        made.v2.submit()
        ids = made.v2.ids
        assert len(ids) == 2 and made.watcher.ids == ids
        clock.stages(2)
        records = made.watcher.wait(timeout=WAIT)
        assert sandbox.request_counts().get("/v2/query", 0) >= 2  # the blank answers were really read
        assert [r.state.value for r in records] == ["complete", "complete"]
        for task_id in ids:
            card = made.watcher.card(task_id).data()
            assert card["state"] == "ready" and card["title"] == "Harbour Lights"
            assert card["lyrics"] == LYRICS
    finally:
        made.close()


def test_a_watcher_given_songs_draws_them_before_any_poll(client: MusicClient) -> None:
    songs = client.submit_v2(is_auto=0, model_version="v4.5", prompt="dusk", title="Dusk Road", lyrics=LYRICS)
    watcher = TaskWatcher(client=client, autostart=False)
    try:
        assert watcher.add(songs, v2=True) == [s.id for s in songs]
        assert [watcher.card(s.id).data()["title"] for s in songs] == ["Dusk Road", "Dusk Road"]
        watcher.poll_once()  # the query's blank title merges under what the submit answer said
        assert [watcher.card(s.id).data()["title"] for s in songs] == ["Dusk Road", "Dusk Road"]
    finally:
        watcher.close()
