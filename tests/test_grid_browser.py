"""The grid board (common.js + grid.js) in a real Chromium, fed a real grid's data after a run on the sandbox:
rows × columns with each cell's estimate, the songs' players in their cells, one primary button, picks and
"Compare blind" sent as intents, a paid run's question with Confirm/Cancel, and server text kept as text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from browser_utils import DARK, blank_page, low_contrast, mount, shot
from helpers import HOSTILE
from playwright.sync_api import Browser, Page

from ipymusicgen.lab.grid import Grid
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.grid import GridView

pytestmark = pytest.mark.slow  # a real Chromium


@pytest.fixture
def view(sandbox: Sandbox) -> Iterator[GridView]:
    with sandbox.client() as client:
        axes = {"style": ["lo-fi", HOSTILE], "mv": ["MFV2.0", "MFV3.0"]}
        grid = Grid(client, {"action": "auto"}, axes, name=f"g{uuid.uuid4().hex[:8]}")
        yield GridView(grid)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with blank_page(browser, viewport={"width": 1000, "height": 900}) as blank:
        yield blank


def test_the_plan_then_the_run_drawn_cell_by_cell(page: Page, view: GridView) -> None:
    mount(page, "grid", view.board.data, width="960px")
    root = page.locator(".ipymusicgen-grid")
    assert [t.inner_text() for t in root.locator("thead th").all()][1:] == ["MFV2.0", "MFV3.0"]
    assert [t.inner_text() for t in root.locator("tbody th").all()] == ["lo-fi", HOSTILE]  # text, never markup
    assert page.locator("img[src=x]").count() == 0
    metas = [m.inner_text() for m in root.locator(".ims-grid-meta").all()]
    assert metas == ["~2 credits (estimate) · not run", "~3 credits (estimate) · not run"] * 2
    assert root.locator(".ims-grid-total").inner_text() == "4 rows, about 10 credits in all (estimate)"
    assert root.locator("button.ims-primary:visible").count() == 1  # one primary button: Run
    root.locator("button.ims-grid-run").click()
    assert page.evaluate("() => window.sent") == [{"kind": "run"}]
    shot(page, "grid-plan", root)

    view.run()
    view.grid.batch.wait(120)
    view._draw()
    page.evaluate("(next) => window.change(next)", view.board.data)
    players = root.locator(".ims-grid-cell .ipymusicgen-song audio[src^='http://127.0.0.1']")
    assert players.count() == 8  # two takes in each of the four cells
    assert root.locator(".ims-grid-cell .ims-cover:visible").count() == 0  # compact: no covers, lyrics, buttons
    assert [t.text_content() for t in root.locator(".ims-take").all()] == ["Take 1", "Take 2"] * 4
    # no dead flat line: the kernel has no peaks for these songs, so each card reads its own file
    page.wait_for_function("() => document.querySelectorAll('[data-peaks=browser]').length === 8", timeout=60_000)
    assert root.locator(".ims-shimmer").count() == 0
    timed = view.board.data
    songs = timed["rows"][0]["cells"][0]["songs"]
    songs[0]["elapsed_s"], songs[1]["elapsed_s"] = 0.4, 42.0  # seen already finished; seen cooking for 42 s
    page.evaluate("(next) => window.change(next)", timed)
    badges = root.locator(".ims-grid-cell").first.locator(".ims-badge")
    assert badges.all_text_contents() == ["Ready", "Ready · made in 42 s"]  # no time claimed it did not see
    assert root.locator("button.ims-grid-run").is_disabled()
    picks = root.locator("button.ims-grid-pick")
    page.evaluate("() => { window.sent.length = 0; }")
    picks.nth(0).click()
    picks.nth(5).click()
    ids = [c["songs"][i]["id"] for c, i in ((view.board.data["rows"][0]["cells"][0], 0),
                                             (view.board.data["rows"][1]["cells"][0], 1))]  # fmt: skip
    assert page.evaluate("() => window.sent") == [{"kind": "pick", "id": ids[0]}, {"kind": "pick", "id": ids[1]}]
    for task_id in ids:
        view.pick(task_id)
    page.evaluate("(next) => window.change(next)", view.board.data)
    assert root.locator("button[aria-pressed=true]").count() == 2
    assert root.locator(".ims-grid-picks").inner_text() == "2 songs picked"
    compare = root.locator("button.ims-grid-compare")
    assert compare.is_enabled() and "ims-primary" in (compare.get_attribute("class") or "")
    compare.click()
    assert page.evaluate("() => window.sent.at(-1)") == {"kind": "compare"}
    assert low_contrast(page, ".ipymusicgen-grid") == []
    shot(page, "grid-run-picked", root)
    page.evaluate(DARK)
    assert low_contrast(page, ".ipymusicgen-grid") == []  # JupyterLab's dark theme: every text at least 4.5:1
    shot(page, "grid-run-picked-dark", root)


def test_a_paid_run_shows_its_question_with_confirm_and_cancel_only(page: Page, view: GridView) -> None:
    view.confirm_required = True
    view.run(confirmed=False)
    mount(page, "grid", view.board.data, width="960px")
    root = page.locator(".ipymusicgen-grid")
    question = root.locator(".ims-grid-question")
    assert question.inner_text().startswith("Send 4 rows, about 10 credits (estimate)")
    assert root.locator("button.ims-grid-run").is_hidden()
    assert root.locator("button.ims-primary:visible").all_inner_texts() == ["Confirm"]
    root.locator("button.ims-grid-cancel").click()
    root.locator("button.ims-grid-confirm").click()
    assert page.evaluate("() => window.sent") == [{"kind": "cancel"}, {"kind": "confirm"}]


def test_a_finished_song_whose_file_cannot_be_read_says_it_has_no_waveform(page: Page, view: GridView) -> None:
    view.run()
    view.grid.batch.wait(120)
    view._draw()
    data = view.board.data
    for row in data["rows"]:
        for cell in row["cells"]:
            for song in cell["songs"]:
                song["audio_url"] = "http://127.0.0.1:9/gone.mp3"  # nothing listens there: the read fails
    mount(page, "grid", data, width="960px")
    waves = page.locator(".ipymusicgen-waveform")
    page.wait_for_function("() => document.querySelectorAll('[data-peaks=none]').length === 8", timeout=60_000)
    assert page.locator(".ims-shimmer").count() == 0  # no endless shimmer either
    assert "No waveform" in (waves.first.get_attribute("title") or "")


def test_the_patches_a_run_sends_draw_the_same_board_as_the_whole_board(
    page: Page, browser: Browser, view: GridView, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grid.js applies the kernel's versioned patches: the board they make is the board drawn from the whole data."""
    import copy

    import comm
    from helpers import wait_until

    sent: list[dict] = []
    board_id = view.board.comm.comm_id

    def publish_msg(self: comm.DummyComm, msg_type: str, data: object = None, *args: object, **kwargs: object) -> None:
        if msg_type == "comm_msg" and isinstance(data, dict) and self.comm_id == board_id:
            sent.append(copy.deepcopy(data))

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish_msg)
    mount(page, "grid", view.board.data, width="960px")
    view.run()
    view.grid.batch.wait(120)
    wait_until(lambda: not view.board.data["running"], "the last round drawn")
    assert not [d for d in sent if d.get("method") == "update" and "data" in d.get("state", {})]  # never whole
    patches = [d["content"] for d in sent if d.get("method") == "custom"]
    assert patches and [p["version"] for p in patches] == list(range(2, len(patches) + 2))
    for patch in patches:
        page.evaluate("(message) => window.deliver(message)", patch)

    def drawn(on: Page) -> dict[str, object]:
        root = on.locator(".ipymusicgen-grid")
        return {
            "metas": root.locator(".ims-grid-meta").all_inner_texts(),
            "players": [a.get_attribute("src") for a in root.locator(".ims-grid-cell audio").all()],
            "takes": root.locator(".ims-take").all_text_contents(),
            "status": root.locator(".ims-grid-status").inner_text(),
            "run": root.locator("button.ims-grid-run").is_disabled(),
        }

    patched = drawn(page)
    assert len(patched["players"]) == 8 and patched["metas"][0].endswith("complete")  # type: ignore[arg-type]
    with blank_page(browser, viewport={"width": 1000, "height": 900}) as fresh:
        mount(fresh, "grid", view.board.data, width="960px")
        assert drawn(fresh) == patched
    page.evaluate("() => { window.sent.length = 0; }")
    page.evaluate("(message) => window.deliver(message)", {**patches[-1], "version": patches[-1]["version"] + 5})
    assert page.evaluate("() => window.sent") == [{"kind": "resync"}]  # a missed patch: ask for the whole board
