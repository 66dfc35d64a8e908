"""The analysis worker's watchdog: the reader's `stop()` and the timer's firing are decided under one lock, so a
worker that answered in time is never killed by a timer that fires late (it would land on the next request)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from helpers import wait_until

from ipymusicgen.lab.analysis_worker import _Watchdog

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def process() -> Iterator[subprocess.Popen[str]]:
    started = subprocess.Popen(SLEEPER, text=True)
    yield started
    started.kill()
    started.wait()


def test_a_timer_firing_after_the_answer_was_taken_kills_nothing(process: subprocess.Popen[str]) -> None:
    watchdog = _Watchdog(process)
    watchdog.arm(3600)
    assert watchdog.stop() is False
    watchdog._fire()  # the timer's thread, already running when stop() cancelled it
    assert process.poll() is None and not watchdog.fired


def test_a_silent_worker_is_killed_and_a_fired_watchdog_is_not_rearmed(process: subprocess.Popen[str]) -> None:
    watchdog = _Watchdog(process)
    watchdog.arm(0.01)
    wait_until(lambda: process.poll() is not None, "the silent worker killed")
    watchdog.arm(3600)  # a "compiling" line read too late changes nothing
    assert watchdog.stop() is True


def test_rearming_restarts_the_countdown(process: subprocess.Popen[str]) -> None:
    watchdog = _Watchdog(process)
    watchdog.arm(3600)
    watchdog.arm(3600)  # the first timer is cancelled, not left to fire
    assert watchdog.stop() is False and process.poll() is None
