"""`%%musicgen_batch` in a real InteractiveShell, the batch view and the studio's Batch form, on the sandbox."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from helpers import wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.batch.drivers import Batch
from ipymusicgen.models.schema import V2Request
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.batch import BatchView
from ipymusicgen.widgets.studio import Studio
from ipymusicgen.workspace import session

RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval", "allow_unknown_models"))
CREATING = ("/v1/music/generate", "/v2/submit")


def creates(sandbox: Sandbox) -> int:
    return sum(sandbox.request_counts().get(path, 0) for path in CREATING)


def unique() -> str:
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def ip(sandbox_shell: InteractiveShell) -> InteractiveShell:
    return sandbox_shell


@pytest.mark.slow
def test_each_line_is_a_musicgen_line_with_variables(ip: InteractiveShell, sandbox: Sandbox) -> None:
    ip.user_ns["mood"] = "rainy"
    name = unique()
    body = '--style "{mood} lo-fi" --title "First" la la la\n\n# a comment line\n--v2 synthwave drive at night\n'
    with capture_output() as out:
        result = ip.run_cell_magic("musicgen_batch", f"--name {name} --no-watch --wait -o made", body)
    assert result is None  # the cell shows the view; the batch is in `made`
    batch = ip.user_ns["made"]
    assert isinstance(batch, Batch) and batch.name == name
    assert [r.state for r in batch.rows] == ["complete", "complete"]
    first, second = (r.request for r in batch.rows)
    assert first.style == "rainy lo-fi" and first.title == "First" and first.lyrics == "la la la"
    assert isinstance(second, V2Request) and second.prompt == "synthwave drive at night"
    assert f"batch {name}: 2/2 done" in out.stdout  # the text-only progress line
    assert creates(sandbox) == 2


def test_a_bad_line_is_one_usage_error_naming_it_and_nothing_is_sent(ip: InteractiveShell, sandbox: Sandbox) -> None:
    body = "calm piano\n--title " + "x" * 81 + " --style pop words\nmore\n"
    with pytest.raises(UsageError, match=r"^line 2: .*title.*80"):
        ip.run_cell_magic("musicgen_batch", f"--name {unique()} --no-watch", body)
    with pytest.raises(UsageError, match=r"line 1: .*--bogus"):
        ip.run_cell_magic("musicgen_batch", "--no-watch", "--bogus x\n")
    with pytest.raises(UsageError, match="no rows"):
        ip.run_cell_magic("musicgen_batch", "--no-watch", "\n# only a comment\n")
    assert creates(sandbox) == 0


@pytest.mark.slow
def test_from_a_dataframe_and_rerun_sends_nothing_twice(ip: InteractiveShell, sandbox: Sandbox) -> None:
    ip.user_ns["frame"] = pd.DataFrame(
        {"style": ["ambient pads", "sea shanty", "drum and bass"], "mv": ["MFV2.0", None, "MFV1.5"]}
    )
    name = unique()
    batch = ip.run_line_magic("musicgen_batch", f"--from frame --name {name} --concurrency 2 --no-watch --wait")
    assert [r.state for r in batch.rows] == ["complete"] * 3 and creates(sandbox) == 3
    assert batch.rows[1].request.mv is None  # a missing cell is a field not given
    again = ip.run_line_magic("musicgen_batch", f"--from frame --name {name} --no-watch --wait")
    assert [r.state for r in again.rows] == ["complete"] * 3 and creates(sandbox) == 3
    with pytest.raises(UsageError, match="--from nothing_here: no variable"):
        ip.run_line_magic("musicgen_batch", "--from nothing_here")
    with pytest.raises(UsageError, match="budget of 1"):
        ip.run_line_magic("musicgen_batch", f"--from frame --name {unique()} --budget 1 --no-watch")
    assert creates(sandbox) == 3


@pytest.mark.slow
def test_the_view_feeds_the_watcher_and_reads_as_text(ip: InteractiveShell, sandbox: Sandbox) -> None:
    ip.user_ns["songs_list"] = [{"style": "<b>bold</b> polka"}, {"style": "waltz"}]
    with capture_output() as out:
        batch = ip.run_line_magic("musicgen_batch", f"--from songs_list --name {unique()} --wait")
    (view,) = views_of(batch)
    assert isinstance(view, BatchView)
    assert view.data["counts"]["complete"] == 2 and view.data["rows"][0]["request"] == "<b>bold</b> polka"
    assert repr(view) == batch.progress_line() and "2/2 done" in out.stdout
    watcher = view.watcher
    assert watcher is not None and sorted(watcher.ids) == sorted(batch.ids)
    assert watcher.batch_line == ""  # the view above says the line (with the ETA): not said twice
    assert out.stdout.count("2/2 done") == 1 and "in flight" in out.stdout  # printed once, at the end
    watcher.close()


def views_of(batch: Batch) -> list[BatchView]:
    return [cb.__self__ for cb in batch._listeners if isinstance(getattr(cb, "__self__", None), BatchView)]


@pytest.mark.slow
def test_the_batch_tab_shows_the_estimate_and_refusals_then_starts(ip: InteractiveShell, sandbox: Sandbox) -> None:
    studio = Studio(session.get_client())
    form = studio.batch
    try:
        form.set_values(lines='--mv MFV3.0 --style "space rock" stars\nlo-fi rain\n')
        # 3 (newest model) + 3 (no model: the dearest), said as an estimate, with the rows counted
        assert form.state()["cost"].startswith("2 rows: uses about 6 credits (estimate)")
        form.set_values(budget="5")
        assert "more than this budget" in form.shown_problems["budget"] and not form.state()["can_submit"]
        assert form.submit() is None and creates(sandbox) == 0
        form.set_values(budget="", lines='--title "<script>x</script>' + "y" * 90 + '" words\n')
        assert form.shown_problems["lines"].startswith("line 1:") and form.state()["cost"] == ""
        form.set_values(lines="lo-fi rain\n", name=unique())
        assert form.state()["can_submit"]
        batch = form.submit()
        assert batch is not None and studio.view.batch_view is form.view and form.state()["has_batch"]
        batch.wait(timeout=20)
        wait_until(lambda: form.view.data.get("counts", {}).get("complete") == 1, "the view caught up")
        assert creates(sandbox) == 1 and "1/1 done" in repr(form)
        ip.user_ns["frame"] = pd.DataFrame({"style": ["a", "b"]})
        studio.select("batch")  # opening the tab lists the notebook's variables again
        assert ["frame", "frame"] in form.fields["source"]["options"]
        form.set_values(source="frame")
        assert not form.fields["lines"]["shown"] and form.state()["cost"].startswith("2 rows")
    finally:
        studio.close()


def test_lines_get_the_notes_of_musicgen_with_their_line_number(ip: InteractiveShell, sandbox: Sandbox) -> None:
    from ipymusicgen.notebook.batch_lines import parse_lines

    with capture_output() as out:
        requests = parse_lines('plain line\n--title "{nope}" --style pop --instrumental 1 hello\n', ip)
    assert "Note (line 2): {nope} left as typed" in out.stdout
    assert "Note (line 2): The service will ignore" in out.stdout
    assert "line 1" not in out.stdout and [r.action for r in requests] == ["auto", "custom"]
    assert creates(sandbox) == 0


def test_an_unclosed_quote_on_the_magic_line_is_one_line(ip: InteractiveShell, sandbox: Sandbox) -> None:
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("musicgen_batch", "--name 'unclosed --no-watch", "--style pop la la")
    assert "closing quotation" in str(raised.value) and "\n" not in str(raised.value)
    assert creates(sandbox) == 0
