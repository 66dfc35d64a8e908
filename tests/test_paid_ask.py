"""One rule for asking before paying (`PaidAsk` in `config.py`): every paid control of a studio, driven through the
messages its browser sends, sends at once under `studio(confirm=False)` and asks first under
`studio(confirm=True)`, even on a key that may cost money. A keyed sandbox plays the paid service; requests are
counted where they arrive."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import advance_until_done, wait_until

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import PaidAsk
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.studio import Studio, studio

KEY = "k-paid-ask-secret-7e21"
PAID_SANDBOX = {"keys": {KEY: 100_000}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
GENERATE = "/v1/music/generate"
SUBMIT = "/v2/submit"
LYRICS = "/v1/lyrics"
WAV = "/v1/music/generate-wav"
MP4 = "/v1/music/generate-mp4"
FOREIGN = {"action": "upload", "audio_url": "https://example.com/a.mp3"}
"""A request whose songs the sandbox fails (it fetches no audio from elsewhere)."""


@pytest.fixture
def client(paid_clients: Callable[..., MusicClient]) -> MusicClient:
    """A client of the "real" (paid) service with its own journal and archive, polling often."""
    return paid_clients(min_poll_interval=0.05)


@pytest.fixture
def open_studio(client: MusicClient) -> Iterator[Callable[[bool], Studio]]:
    made: list[Studio] = []

    def opener(confirm: bool) -> Studio:
        made.append(opened := studio(client, confirm=confirm))
        return opened

    yield opener
    for opened in made:
        opened.close()


class Controls:
    """Press a studio's paid controls as its browser does, and see what arrives at the service."""

    def __init__(self, made: Studio, service: Sandbox, confirm: bool) -> None:
        self.made, self.service, self.confirm = made, service, confirm

    def sent(self, path: str) -> int:
        return self.service.request_counts().get(path, 0)

    def press(self, path: str, push: Callable[[], Any], confirm: Callable[[], Any], asked: Callable[[], str]) -> None:
        """`push` the paid control: with confirm off it sends at once (no question); with confirm on it only asks,
        and `confirm` (the shown question's Confirm, or the second press) sends."""
        before = self.sent(path)
        push()
        if not self.confirm:
            assert asked() == ""
            wait_until(lambda: self.sent(path) == before + 1, f"{path} sent without a question")
            return
        question = asked().lower()
        assert "credit" in question or "paid" in question, question
        assert self.sent(path) == before, f"{path} sent before its confirm"
        confirm()
        wait_until(lambda: self.sent(path) == before + 1, f"{path} sent after its confirm")
        assert self.sent(path) == before + 1

    def intent(self, **content: Any) -> None:
        self.made.view._handle_custom_msg(content, [])

    def pane(self, form: str, path: str, **fields: Any) -> None:
        self.intent(kind="tab", tab=form)  # a pane takes intents while its tab is shown
        for name, value in fields.items():
            self.intent(kind="input", form=form, name=name, value=value)
        self.press(
            path,
            lambda: self.intent(kind="submit", form=form),
            lambda: self.intent(kind="confirm", form=form),
            lambda: self.made.view.panes[form]["confirm"],
        )

    def card(self, action: str, task_id: str, path: str) -> None:
        watcher = self.made.watcher

        def push() -> None:
            watcher._handle_custom_msg({"kind": action, "id": task_id}, [])

        self.press(path, push, push, lambda: watcher.card(task_id).note if watcher.paid_ask.asked else "")


def finish(made: Studio, service: Sandbox) -> None:
    """Move the sandbox's clock on until every watched song is finished: a create the sandbox counted as it arrived
    may make its task a moment later, after one move of the clock (then that task would wait on a frozen clock)."""

    def moved_and_done() -> bool:
        service.clock.stages(10)  # type: ignore[attr-defined]
        return made.watcher.done

    wait_until(moved_and_done, "every watched song to finish")


@pytest.mark.parametrize("confirm", [False, True], ids=["confirm-off", "confirm-on"])
def test_every_paid_control_follows_the_studios_confirm_choice(
    open_studio: Callable[[bool], Studio], service: Sandbox, confirm: bool
) -> None:
    made = open_studio(confirm)
    assert made.client.settings.needs_confirm() is True  # the key may cost money: only the choice decides
    controls = Controls(made, service, confirm)

    controls.pane("song", GENERATE, style="harbour bells")  # the Song tab
    controls.pane("v2", SUBMIT, prompt="a slow waltz on a night ferry")  # the v2 tab
    controls.pane("lyrics", LYRICS, prompt="a lighthouse keeper's last night")  # lyrics are paid

    made.batch._shell = SimpleNamespace(user_ns={"songs": [FOREIGN]})  # the Batch tab, rows from a variable
    made.batch.focus("source")
    controls.intent(kind="tab", tab="batch")
    controls.intent(kind="input", form="batch", name="source", value="songs")
    controls.pane("batch", GENERATE)
    wait_until(lambda: made.batch.batch is not None and made.batch.batch.rows[0].ids, "the batch's row sent")
    wait_until(lambda: service.clock.stages(10) or made.batch.batch.done, "the batch to end (its row fails)")  # type: ignore[attr-defined]
    view, failed = made.batch.view, made.batch.batch
    controls.press(  # the Batch tab's "Retry failed rows"
        GENERATE,
        lambda: view._handle_custom_msg({"kind": "retry_failed"}, []),
        lambda: view._handle_custom_msg({"kind": "retry_failed"}, []),
        lambda: view.data.get("note", "") if view.batch is failed else "",
    )

    finish(made, service)
    song = made.song.ids[0]
    for action, path in (("concat", GENERATE), ("wav", WAV), ("mp4", MP4)):  # card actions that pay
        controls.card(action, song, path)

    library, other = made.library, made.song.ids[1]  # the Library tab's cards: the other take's extras
    controls.intent(kind="tab", tab="library")  # opening the tab shows the songs made since
    for kind, path in (("wav", WAV), ("mp4", MP4)):

        def push(kind: str = kind) -> None:
            library._handle_custom_msg({"kind": kind, "id": other}, [])

        controls.press(path, push, push, lambda: library.status if library.paid_ask.asked else "")

    made.watcher._handle_custom_msg({"kind": "extend", "id": song}, [])  # a card's extend fills the Song tab...
    assert made.song.request_values()["continue_song_id"]
    controls.pane("song", GENERATE)  # ...whose send asks as the tab's does

    controls.pane("song", GENERATE, action="upload", audio_url=FOREIGN["audio_url"])  # a call that fails...
    upload = made.song.ids[0]
    finish(made, service)
    controls.card("retry", upload, GENERATE)  # ...and its card's Retry


def test_a_confirm_sends_only_what_was_asked_and_asks_again_when_it_changed() -> None:
    ask = PaidAsk(lambda: True)
    assert ask.confirm("send", {"rows": 2}, lambda _: "again?") is False  # no question shown: nothing sent
    assert ask.press("send", {"rows": 2}, lambda changed: f"changed={changed}") is False
    assert ask.question == "changed=False" and ask.asking("send") and not ask.asking("other")
    assert ask.confirm("send", {"rows": 3}, lambda changed: f"changed={changed}") is False  # the source changed
    assert ask.question == "changed=True"
    assert ask.confirm("send", {"rows": 3}, lambda changed: f"changed={changed}") is True  # what was asked now
    assert ask.asked is None
    assert ask.press("extra", 1, lambda _: None) is True  # nothing to pay now: sent, never asked
    ask.forced = False
    assert ask.press("send", {"rows": 2}, lambda _: "?") is True and ask.asked is None


@pytest.mark.parametrize("confirm", [False, True], ids=["confirm-off", "confirm-on"])
def test_a_grid_view_follows_its_callers_confirm_choice(client: MusicClient, service: Sandbox, confirm: bool) -> None:
    from ipymusicgen.lab.grid import Grid
    from ipymusicgen.widgets.grid import GridView

    view = GridView(Grid(client, {"action": "auto", "mv": "MFV2.0"}, {"style": ["lo-fi", "jazz"]}), confirm=confirm)
    try:
        view.board._handle_custom_msg({"kind": "run"}, [])
        if confirm:
            assert view.grid.batch is None and view.board.data["asking"].startswith("Send 2 rows, about 4 credits")
            assert service.request_counts().get(GENERATE, 0) == 0
            view.board._handle_custom_msg({"kind": "confirm"}, [])
        assert view.grid.batch is not None and not view.asking
        wait_until(lambda: service.request_counts().get(GENERATE, 0) == 2, "the grid's two rows sent")
    finally:
        view.close()
        if view.grid.batch is not None:  # its thread ends before the client's journal closes under it
            view.grid.batch.leave()
            view.grid.batch.wait(timeout=60)


def test_panes_reach_their_studio_only_through_its_public_interface() -> None:
    """`PaneHost` is the whole interface: no pane touches a private name of its studio."""
    import ast
    import inspect

    from ipymusicgen.widgets import batch_pane, pane
    from ipymusicgen.widgets import studio as studio_module

    reached = []
    for module in (pane, batch_pane, studio_module):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "_studio"
            ):
                reached.append(f"{module.__name__}:{node.lineno} _studio.{node.attr}")
    assert reached == []


def test_a_retry_asked_for_one_batch_is_asked_again_for_another(client: MusicClient, service: Sandbox) -> None:
    """The second press sends only the failed rows the question priced: a view now on another batch asks again."""
    from ipymusicgen.batch.drivers import run_batch
    from ipymusicgen.storage.batches import BatchStore
    from ipymusicgen.widgets.batch import BatchView

    store = BatchStore(None)
    first, second = (
        run_batch(
            client, [{**FOREIGN, "audio_url": f"https://example.com/{name}.mp3"}], name=name, wait=False, store=store
        )
        for name in ("one", "two")
    )
    advance_until_done([first, second], service.clock, service)  # type: ignore[attr-defined]
    view = BatchView(first, confirm=True)
    view._handle_custom_msg({"kind": "retry_failed"}, [])
    assert view.data["note"].startswith("Retry 1 failed row(s)?")
    view.update(second)
    sent = service.request_counts().get(GENERATE, 0)
    view._handle_custom_msg({"kind": "retry_failed"}, [])  # not the batch the question priced
    assert view.batch is second and service.request_counts().get(GENERATE, 0) == sent
    assert view.data["note"].startswith("The failed rows changed since they were priced. Retry 1 failed row(s)?")
    view._handle_custom_msg({"kind": "retry_failed"}, [])
    assert view.batch is not second and view.batch.name == "two-retry-1"
    wait_until(lambda: service.request_counts().get(GENERATE, 0) == sent + 1, "the retry sent")
