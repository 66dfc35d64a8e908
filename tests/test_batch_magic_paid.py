"""`%%musicgen_batch` with a key that may cost money (a sandbox given its own key plays a paid service) follows
`%%musicgen_grid`'s rule through the one `PaidAsk`: the cell shows its rows and cost and sends nothing until Send
and Confirm in its view, unless it gives --budget or --yes."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from test_grid_magic_paid import KEY, creates

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.batch import BatchView

PAID_SANDBOX = {"keys": {KEY: 1000}, "stage_seconds": 0.05, "song_seconds": 2}
"""The paid kernel's service (`conftest.paid_sandbox` under `conftest.paid_shell`): the grid cell's key."""
LINES = '--style "lo-fi" --mv MFV2.0 rain on the window\n--style "folk" --mv MFV2.0 dawn\n'


def test_a_paid_batch_cell_shows_its_rows_and_cost_and_sends_only_after_send_and_confirm(
    paid_shell: InteractiveShell, paid_sandbox: Sandbox
) -> None:
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_batch", "--name paid-rows -o made --wait", LINES)
    assert creates(paid_sandbox) == 0
    assert "Not sent: 2 rows, about 4 credits (estimate). Press Send in the batch's view" in shown.stdout
    assert "--budget N or --yes" in shown.stdout and "made" not in paid_shell.user_ns
    view = paid_shell.user_ns["_batch_view"]
    assert isinstance(view, BatchView) and view.batch is None and view.data["can_send"]
    assert [row["state"] for row in view.data["rows"]] == ["not sent", "not sent"]
    view._handle_custom_msg({"kind": "confirm"}, [])  # no question was shown: a forged confirm sends nothing
    assert creates(paid_sandbox) == 0 and view.batch is None
    view._handle_custom_msg({"kind": "send"}, [])  # Send asks first, as every paid control does
    assert creates(paid_sandbox) == 0 and view.data["asking"].startswith("Send 2 rows, about 4 credits")
    view._handle_custom_msg({"kind": "cancel"}, [])
    assert not view.data["asking"] and view.data["can_send"] and view.batch is None
    view._handle_custom_msg({"kind": "send"}, [])
    view._handle_custom_msg({"kind": "confirm"}, [])
    assert view.batch is not None and view.batch.name == "paid-rows"
    view.batch.wait(60)
    assert creates(paid_sandbox) == 2 and view.batch.counts()["complete"] == 2
    view._handle_custom_msg({"kind": "confirm"}, [])  # a second click sends nothing more
    assert creates(paid_sandbox) == 2


@pytest.mark.parametrize("option", ["--budget 10", "--yes"])
def test_a_paid_batch_cell_with_a_budget_or_yes_sends_at_once(
    paid_shell: InteractiveShell, paid_sandbox: Sandbox, option: str
) -> None:
    with capture_output() as shown:
        paid_shell.run_cell_magic("musicgen_batch", f"{option} --wait --no-watch -o made", LINES)
    batch = paid_shell.user_ns["made"]
    assert "Not sent" not in shown.stdout and batch.done and creates(paid_sandbox) == 2
    assert batch.budget == (10 if "budget" in option else None)


def test_a_paid_batch_cell_refuses_a_bad_row_before_any_plan(
    paid_shell: InteractiveShell, paid_sandbox: Sandbox
) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="3"), capture_output():
        paid_shell.run_cell_magic("musicgen_batch", "", LINES + "--mv NOPE9 x\n")
    assert creates(paid_sandbox) == 0


def test_the_line_form_from_a_variable_asks_the_same_way(paid_shell: InteractiveShell, paid_sandbox: Sandbox) -> None:
    paid_shell.user_ns["songs"] = [{"style": "waltz", "mv": "MFV2.0"}]
    with capture_output() as shown:
        paid_shell.run_line_magic("musicgen_batch", "--from songs --no-watch")
    assert "Not sent: 1 row, about 2 credits (estimate)" in shown.stdout and creates(paid_sandbox) == 0
    view = paid_shell.user_ns["_batch_view"]
    view.send_planned()  # from code the call is the decision
    assert view.batch is not None
    view.batch.wait(60)
    assert creates(paid_sandbox) == 1
