"""scripts/setup on a busy machine: apt's lock held by someone else is waited out, not fatal.

A stand-in `apt-get` on PATH answers as Debian's does while another process holds the lock, then
succeeds; the script's own apt function (sourced, so nothing is installed) must retry, pass the
bounded lock timeout, and give up with the real output after its tries.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs scripts/setup

ROOT = Path(__file__).resolve().parent.parent
LOCKED = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)"


def _fake_apt(folder: Path, failures: int) -> Path:
    """An apt-get that fails with the lock message `failures` times, then succeeds; it logs its arguments."""
    calls = folder / "calls"
    script = folder / "apt-get"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        f"n=$(wc -l < {calls})\n"
        f'if [ "$n" -le {failures} ]; then echo "{LOCKED}" >&2; exit 100; fi\n'
        'echo "ok"\n'
    )
    script.chmod(0o755)
    return calls


def _apt_get(tmp_path: Path, failures: int, tries: int = 5) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = _fake_apt(tmp_path, failures)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        "APT_TRIES": str(tries),
        "APT_RETRY_SLEEP": "0",
        "APT_LOCK_WAIT": "7",
    }
    done = subprocess.run(
        ["bash", "-c", 'source scripts/setup && SUDO="" && apt_install chromium'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_a_busy_apt_is_waited_for_and_retried(tmp_path: Path) -> None:
    done, calls = _apt_get(tmp_path, failures=2)
    assert done.returncode == 0, done.stderr
    assert "apt is busy" in done.stderr
    assert len(calls) == 4, calls  # update twice locked, then update and install
    assert all("DPkg::Lock::Timeout=7" in call for call in calls)
    assert calls[-2].endswith("update -qq") and calls[-1].endswith("install -y -qq chromium")


def test_apt_gives_up_after_its_tries_with_the_real_message(tmp_path: Path) -> None:
    done, calls = _apt_get(tmp_path, failures=99, tries=3)
    assert done.returncode != 0 and len(calls) == 3
    assert "failed 3 times" in done.stderr and "Could not get lock" in done.stderr


def test_sourcing_the_script_installs_nothing(tmp_path: Path) -> None:
    done, calls = _apt_get(tmp_path, failures=0)
    assert done.returncode == 0 and len(calls) == 2, "only the two calls the test asked for"


@pytest.mark.parametrize(("says", "ready"), [("12", False), ("garbage", False), ("18", True), ("20", True)])
def test_an_old_node_is_refused_in_one_clear_line_before_npm(tmp_path: Path, says: str, ready: bool) -> None:
    """The consent card's browser test bundles the official MCP Apps host with npm and esbuild (Node.js 18+): an
    older node (Ubuntu 22.04's apt gives 12) must stop setup saying so, not fail obscurely inside npm."""
    node = tmp_path / "node"
    node.write_text(f'#!/usr/bin/env bash\nif [ "$1" = "-p" ]; then echo "{says}"; else echo "v{says}.0.0"; fi\n')
    node.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", "source scripts/setup && node_ready"],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode == 0) == ready, done.stderr
    assert ("too old" in done.stderr and "18 or newer" in done.stderr) != ready
