"""Collaborators are passed in, never found through a slot a side-effect import fills: a grid is drawn by the view
`ipymusicgen.grid()` gives it, in a fresh process that imported nothing else first."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from jupyter_utils import sandbox_env


def run_fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=180, check=False, env=sandbox_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_grid_is_drawn_by_its_view_with_no_side_effect_import() -> None:
    """`grid()` loads no widgets (a script never showing it stays light); shown, it is drawn as its grid view."""
    said = run_fresh(
        """
        import sys
        import IPython  # a notebook's process: someone may display the grid
        import ipymusicgen
        plan = ipymusicgen.grid({"action": "auto"}, style=["lo-fi", "jazz"], name="fresh")
        assert not [m for m in sys.modules if m.startswith("ipymusicgen.widgets")], "grid() imported the widgets"
        bundle = plan._repr_mimebundle_()
        from ipymusicgen.widgets.grid import GridView
        assert isinstance(plan.view, GridView) and plan.view.grid is plan
        assert "application/vnd.jupyter.widget-view+json" in bundle
        print("drawn")
        """
    )
    assert said == "drawn"


def test_a_grid_made_in_the_lab_without_a_view_shows_its_table() -> None:
    said = run_fresh(
        """
        import ipymusicgen
        from ipymusicgen.lab.grid import Grid
        from ipymusicgen.session import get_client
        plan = Grid(get_client(), {"action": "auto"}, {"style": ["lo-fi", "jazz"]}, name="bare")
        import ipymusicgen.widgets.grid  # loading the widgets installs nothing
        assert plan.view is None and plan._repr_mimebundle_() is None
        print("table")
        """
    )
    assert said == "table"
