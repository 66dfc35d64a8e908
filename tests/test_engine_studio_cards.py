"""The studio and the watcher with many engines (issue 37): a provider picker whose fields follow the provider,
the watcher card's "Composing" with elapsed time while a synchronous engine's call runs in the background, and
the lines of lyrics timed from the engine's word timestamps (what the song card highlights while it plays).
The studio is driven through a real InteractiveShell and its widget state; the studio writes no watcher private."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from ipymusicgen.models.providers import EngineRequest
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets import studio as studio_module
from ipymusicgen.widgets.card import TaskCard, line_times
from ipymusicgen.workspace import session

ENGINE_SETTINGS = ("elevenlabs_base_url", "gemini_base_url", "elevenlabs_api_key", "gemini_api_key")


@pytest.fixture
def engine_shell(sandbox_shell: Any, sandbox: Sandbox) -> Iterator[Any]:
    session.configure(**sandbox.engine_settings())
    yield sandbox_shell
    session.configure(**dict.fromkeys(ENGINE_SETTINGS))


def shown(studio: Any) -> list[str]:
    """The Song tab's fields as the browser draws them (the widget's synced state)."""
    return [f["name"] for f in studio.view.panes["song"]["fields"] if f["shown"]]


def field(studio: Any, name: str) -> dict[str, Any]:
    return next(f for f in studio.view.panes["song"]["fields"] if f["name"] == name)


# -- the provider picker -------------------------------------------------------------------------------


def test_the_song_tabs_fields_follow_the_provider(engine_shell: Any) -> None:
    engine_shell.run_cell("import ipymusicgen\n_s = ipymusicgen.studio()")
    studio = engine_shell.user_ns["_s"]
    assert shown(studio)[0] == "provider" and "mv" in shown(studio) and "seconds" not in shown(studio)
    studio.view._handle_custom_msg({"kind": "input", "form": "song", "name": "provider", "value": "elevenlabs"}, [])
    assert {"model_elevenlabs", "style", "lyrics", "seconds", "seed", "timestamps"} <= set(shown(studio))
    assert "mv" not in shown(studio) and "action" not in shown(studio) and "model_lyria" not in shown(studio)
    studio.view._handle_custom_msg({"kind": "input", "form": "song", "name": "provider", "value": "lyria"}, [])
    assert "model_lyria" in shown(studio) and "seed" not in shown(studio) and "timestamps" not in shown(studio)
    assert "seconds" not in shown(studio)  # a Lyria 3 clip is always 30 s: nothing to choose
    studio.song.set_values(model_lyria="lyria-3-pro-preview")
    assert "seconds" in shown(studio)  # Pro takes a length in its prompt


def test_a_hostile_provider_value_from_the_browser_changes_nothing(engine_shell: Any) -> None:
    engine_shell.run_cell("import ipymusicgen\n_s = ipymusicgen.studio()")
    studio = engine_shell.user_ns["_s"]
    for value in ("\x1b[31mlyria", "udio", ["lyria"], True, None):
        studio.view._handle_custom_msg({"kind": "input", "form": "song", "name": "provider", "value": value}, [])
        assert field(studio, "provider")["value"] == "musicful"


def test_an_engine_request_from_the_studio_is_priced_in_dollars_and_refused_in_one_line(
    engine_shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_DOLLAR_PRICES", raising=False)
    engine_shell.run_cell("import ipymusicgen\n_s = ipymusicgen.studio()")
    studio = engine_shell.user_ns["_s"]
    studio.song.set_values(provider="elevenlabs", style="lo-fi rain", seconds="90")
    assert isinstance(studio.song.request, EngineRequest)
    assert studio.view.panes["song"]["cost"].startswith("costs about $1.50")
    studio.song.set_values(seconds="2")
    assert studio.song.request is None
    assert "600" not in field(studio, "seconds")["problem"] and "3 s or more" in field(studio, "seconds")["problem"]
    studio.song.set_values(seconds="nan")
    assert studio.song.request is None and field(studio, "seconds")["problem"]


def test_the_studio_sends_an_engine_song_into_its_watcher(engine_shell: Any) -> None:
    engine_shell.run_cell("import ipymusicgen\n_s = ipymusicgen.studio(confirm=False)")
    studio = engine_shell.user_ns["_s"]
    studio.song.set_values(provider="lyria", style="folk, banjo")
    [task_id] = studio.song.submit()
    assert task_id.startswith("lyria-") and task_id in studio.watcher.ids
    studio.watcher.client.engine_calls.join(60)
    studio.watcher.poll_once()
    assert studio.watcher.card(task_id).state is not None and studio.watcher.card(task_id).state.finished


def test_the_studio_no_longer_writes_the_watchers_private_form_provider() -> None:
    assert "_form_provider" not in inspect.getsource(studio_module)


# -- the watcher card ----------------------------------------------------------------------------------


def record(**extra: Any) -> TaskRecord:
    return TaskRecord.model_validate({"id": "elevenlabs-" + "a" * 32, "status": 1, **extra})


def test_a_synchronous_engines_song_in_the_background_is_composing_with_elapsed_time() -> None:
    card = TaskCard("elevenlabs-" + "a" * 32)
    card.update(record(provider="elevenlabs"))
    data = card.data()
    assert data["state_label"] == "Composing" and data["elapsed_s"] is not None
    card.update(record(provider="musicful"))
    assert card.data()["state_label"] == "Writing"  # the service's song is written by its task, as before
    card.update(record(provider="elevenlabs", status=0, audio_url="https://x.test/a.mp3"))
    assert card.data()["state_label"] != "Composing"


def test_lines_are_timed_from_the_engines_word_timestamps() -> None:
    words = [("rain", 0, 400), ("on", 400, 600), ("roof", 600, 1000), ("morning", 1500, 2000), ("light", 2000, 2600)]
    assert line_times("rain on roof\n\nmorning light", words) == [[0.0, 1.0], None, [1.5, 2.6]]
    assert line_times("rain on roof", []) == [] and line_times("", words) == []


@pytest.mark.parametrize(
    "hostile",
    [
        [("a", float("nan"), 1)],
        [("a", -5, 1)],
        [("a", 1e30, 2e30)],
        [("a", "0", "<script>")],
        [("a", 10, 5)],
        "not a list",
        [["a", 0]],
    ],
)
def test_hostile_timestamps_time_nothing_past_them(hostile: Any) -> None:
    assert line_times("a b\nc", hostile) == []


def test_the_watcher_card_of_a_real_engine_song_carries_its_line_times(engine_shell: Any) -> None:
    engine_shell.run_cell(
        "import ipymusicgen\n"
        "_c = ipymusicgen.get_client()\n"
        "_ids = _c.generate(provider='elevenlabs', lyrics='one two\\n\\nthree', seconds=8, timestamps=True)\n"
        "_c.wait(_ids, timeout=60, interval=0.05)\n"
        "_w = ipymusicgen.TaskWatcher(list(_ids.ids), client=_c, autostart=False)\n"
    )
    watcher = engine_shell.user_ns["_w"]
    watcher.poll_once()
    [task_id] = engine_shell.user_ns["_ids"].ids
    data = watcher.card(task_id).data()
    assert data["lyrics"] == "one two\n\nthree"
    assert data["line_times"][0][0] == 0 and data["line_times"][1] is None and data["line_times"][2][1] == 8.0


def test_a_dollar_price_of_the_studio_stays_a_decimal_of_cents() -> None:
    from ipymusicgen.models.dollar_prices import estimate
    from ipymusicgen.models.providers import build_engine_request

    assert estimate(build_engine_request(provider="lyria", style="x")) == Decimal("0.04")


@pytest.mark.slow  # the engine's answer comes after a real second
def test_a_real_engine_song_in_flight_is_composing_then_ready(engine_shell: Any, sandbox: Sandbox) -> None:
    from ipymusicgen.widgets import TaskWatcher

    client = session.get_client()
    sandbox.set_faults([{"kind": "slow", "seconds": 1, "path": "/v1/music"}])
    ids = client.generate(provider="elevenlabs", style="lo-fi rain", seconds=5)
    watcher = TaskWatcher(list(ids.ids), client=client, autostart=False)
    try:
        watcher.poll_once()
        [task_id] = ids.ids
        assert watcher.card(task_id).data()["state_label"] == "Composing"  # its one call is still out
        assert client.engine_calls.join(30)
        watcher.poll_once()
        data = watcher.card(task_id).data()
        assert data["state"] == "ready" and data["state_label"] == "Ready"
    finally:
        watcher.close()
        sandbox.set_faults("")
