"""Stopping a sandbox: prompt (no waiting on uvicorn's 0.1 s ticks), yet graceful (an answer under way is
delivered whole) and complete (ports closed, thread gone), with a client still holding a keep-alive connection."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

from ipymusicgen.sandbox import Sandbox


def _port_refuses(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except OSError:
        return True
    return False


def test_a_stop_is_prompt_even_with_a_keep_alive_connection_open() -> None:
    """uvicorn looks at `should_exit` every 0.1 s and then sleeps a fixed 0.1 s in its shutdown: every stop took
    0.1-0.2 s (0.17-0.22 s measured; over a whole suite, hundreds of sandboxes). The fastest of three stops must
    beat that floor."""
    took = []
    for _ in range(3):
        sandbox = Sandbox(stage_seconds=0.05, song_seconds=2, faults="").start()
        with httpx.Client() as http:
            assert http.get(f"{sandbox.base_url}/v1/music/tasks", params={"ids": "none"}).status_code in {200, 401}
            started = time.perf_counter()
            sandbox.stop()  # the client's connection is still open (keep-alive)
            took.append(time.perf_counter() - started)
        assert not sandbox.running and all(
            _port_refuses(url) for url in (sandbox.base_url, sandbox.v2_base_url, sandbox.engines_base_url)
        )
        thread = f"ipymusicgen-sandbox-{urlsplit(sandbox.base_url).port}"
        assert not any(t.name == thread for t in threading.enumerate())
    assert min(took) < 0.1, took


def test_an_answer_under_way_when_the_stop_comes_is_delivered_whole() -> None:
    """A slow answer (a `slow` fault of 0.4 s) in flight when `stop()` is called still arrives, complete; the
    stop waits for it (within uvicorn's graceful second) rather than cutting it off."""
    sandbox = Sandbox(stage_seconds=0.05, song_seconds=2, faults="slow:seconds=0.4:path=/v1/get_api_key_info").start()
    answers: list[httpx.Response] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            answers.append(httpx.get(f"{sandbox.base_url}/v1/get_api_key_info", headers=sandbox_auth(sandbox)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    deadline = time.monotonic() + 30
    while sandbox.request_counts().get("/v1/get_api_key_info", 0) < 1:  # the request has reached the server
        assert time.monotonic() < deadline, "the request never arrived"
        time.sleep(0.01)
    sandbox.stop()
    asking.join(30)
    assert errors == [] and len(answers) == 1, errors
    assert answers[0].status_code == 200 and answers[0].json()
    assert not sandbox.running and _port_refuses(sandbox.base_url)


def sandbox_auth(sandbox: Sandbox) -> dict[str, str]:
    return {"X-API-Key": sandbox.api_key}
