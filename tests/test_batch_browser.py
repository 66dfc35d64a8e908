"""The batch progress view's front end (common.js + batch.js) in a real Chromium, fed a real batch's data.

No Jupyter: the ES module is loaded in a blank page with a stand-in for anywidget's `model` (get / on /
off), and the `data` a real `BatchView` holds after a batch on the sandbox is handed to it, then changed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_utils import blank_page, mount
from helpers import HOSTILE
from playwright.sync_api import Browser, Page

from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.widgets.batch import BatchView

pytestmark = pytest.mark.slow  # a real Chromium


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with blank_page(browser) as blank:
        yield blank


def test_rows_and_progress_are_drawn_as_text(page: Page, client: MusicClient) -> None:
    view = BatchView()
    foreign = {"action": "upload", "audio_url": "https://example.com/a.mp3"}  # its songs fail
    batch = run_batch(client, [{"style": HOSTILE}, {"style": "waltz"}, foreign], store=BatchStore(None))
    view.follow(batch)
    mount(page, "batch", view.data)
    root = page.locator(".ipymusicgen-batch")
    assert root.locator(".ims-batch-row").count() == 3
    assert root.locator(".ims-batch-row td").nth(2).text_content() == HOSTILE  # shown as text...
    assert page.locator("img").count() == 0  # ...never as markup
    assert root.locator(".ims-batch-row[data-state='failed']").count() == 1
    assert "2/3 done" in (root.locator(".ims-batch-line").text_content() or "")
    bar = root.locator("[role=progressbar]")
    assert bar.get_attribute("aria-valuenow") == "2" and bar.get_attribute("aria-valuemax") == "3"
    assert root.locator(".ims-batch-complete").count() == 1 and root.locator(".ims-batch-failed").count() == 1
    changed = {**view.data, "rows": view.data["rows"][:1], "more": "... 2 more rows"}
    page.evaluate("(next) => window.change(next)", changed)
    assert root.locator(".ims-batch-row").count() == 1
    assert root.locator(".ims-batch-more").text_content() == "... 2 more rows"
    assert root.locator("button.ims-batch-stop").count() == 0  # a finished batch has nothing to stop...
    finished = root.locator(".ims-batch-finished")
    assert "1 of 3 rows failed" in (finished.text_content() or "") and finished.get_attribute("data-failed") == "true"
    finished.locator("button.ims-batch-retry").click()  # ...but its failed rows can be sent again
    assert page.evaluate("() => window.sent") == [{"kind": "retry_failed"}]
    page.evaluate("() => { window.sent.length = 0; }")
    page.evaluate("(next) => window.change(next)", {**view.data, "can_stop": True})
    stop = root.locator("button.ims-batch-stop")
    assert stop.get_attribute("aria-label") and stop.get_attribute("title")
    stop.click()
    assert page.evaluate("() => window.sent") == [{"kind": "stop"}]
    page.evaluate("() => window.cleanup()")


def test_patches_change_only_what_they_say_and_a_missed_one_asks_for_the_whole(page: Page, client: MusicClient) -> None:
    """batch.js applies the kernel's versioned patches to the data it has (the widget sends its rows whole once)."""
    import copy

    import comm

    view = BatchView()
    sent: list[dict] = []

    def publish_msg(self: comm.DummyComm, msg_type: str, data: object = None, *args: object, **kwargs: object) -> None:
        if msg_type == "comm_msg" and isinstance(data, dict) and self.comm_id == view.comm.comm_id:
            sent.append(copy.deepcopy(data))

    original = comm.DummyComm.publish_msg
    comm.DummyComm.publish_msg = publish_msg  # type: ignore[method-assign]
    try:
        batch = run_batch(client, [{"style": "waltz"}, {"style": "polka"}], store=BatchStore(None), wait=False)
        view.follow(batch)
        first = copy.deepcopy(view.data)
        mount(page, "batch", first)
        batch.wait(120)
        view.update(batch)
        view._note("the last word")
    finally:
        comm.DummyComm.publish_msg = original  # type: ignore[method-assign]
    patches = [d["content"] for d in sent if d.get("method") == "custom" and d["content"]["version"] > first["version"]]
    assert patches
    for patch in patches:
        page.evaluate("(message) => window.deliver(message)", patch)
    root = page.locator(".ipymusicgen-batch")
    assert root.locator(".ims-batch-row[data-state='complete']").count() == 2
    assert "2/2 done" in (root.locator(".ims-batch-line").text_content() or "")
    assert root.locator(".ims-batch-note").text_content() == "the last word"
    page.evaluate("(message) => window.deliver(message)", {**patches[-1], "version": patches[-1]["version"] + 3})
    assert page.evaluate("() => window.sent") == [{"kind": "resync"}]


def test_a_planned_batch_offers_send_then_its_question_with_confirm_and_cancel(page: Page, client: MusicClient) -> None:
    """A `%%musicgen_batch` cell on a paid key shows its rows unsent: Send, then the question PaidAsk asked."""
    from ipymusicgen.batch.drivers import validate_rows
    from ipymusicgen.widgets.batch import PricedBatch

    rows = validate_rows([{"style": HOSTILE, "mv": "MFV2.0"}, {"style": "waltz", "mv": "MFV2.0"}])
    view = BatchView(confirm=True)
    view.plan(PricedBatch(tuple(rows), 4, None, "planned", 2), client, lambda: None)  # type: ignore[arg-type,return-value]
    mount(page, "batch", view.data)
    root = page.locator(".ipymusicgen-batch")
    assert "Not sent: 2 rows, about 4 credits" in (root.locator(".ims-batch-line").text_content() or "")
    assert root.locator(".ims-batch-row[data-state='not sent']").count() == 2 and page.locator("img").count() == 0
    root.locator("button.ims-batch-send").click()
    assert page.evaluate("() => window.sent") == [{"kind": "send"}]
    view.send_planned(confirmed=False)  # what the kernel does with that intent: it asks
    page.evaluate("(next) => window.change(next)", view.data)
    assert (root.locator(".ims-batch-question").text_content() or "").startswith("Send 2 rows, about 4 credits")
    assert root.locator("button.ims-batch-send").count() == 0
    assert root.locator("button.ims-primary").all_inner_texts() == ["Confirm"]
    root.locator("button.ims-batch-cancel").click()
    root.locator("button.ims-batch-confirm").click()
    assert page.evaluate("() => window.sent.slice(1)") == [{"kind": "cancel"}, {"kind": "confirm"}]
    page.evaluate("() => window.cleanup()")
