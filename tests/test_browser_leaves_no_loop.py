"""A browser test leaves no event loop behind: the next module of the same worker can `asyncio.run` (the agent
server's tests do). A started sync Playwright sets its loop as running on the main thread until it stops."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_module_after_a_browser_module_can_run_an_event_loop(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
        from tests.conftest import _chromium, browser  # noqa: F401  (the suite's own fixtures)
        """)
    )
    (tmp_path / "test_1_page.py").write_text(
        "def test_page(browser):\n    page = browser.new_page()\n    page.set_content('<p>hi</p>')\n"
        "    assert page.text_content('p') == 'hi'\n"
    )
    (tmp_path / "test_2_loop.py").write_text(
        "import asyncio\n\nasync def one():\n    return 1\n\ndef test_loop():\n    assert asyncio.run(one()) == 1\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
