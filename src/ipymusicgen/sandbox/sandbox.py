"""`Sandbox`: both fake hosts served by uvicorn on 127.0.0.1, in one background daemon thread.

A notebook or a test gets a working service (with a demo key) in a fraction of a second, and a
stop that is quick and complete (uvicorn's `should_exit`, sockets closed, thread joined), so many
sandboxes in one process leak nothing. FastAPI, uvicorn and numpy are imported only by `start()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from ..client.faces import AsyncMusicClient, MusicClient
from ..config import DEMO_KEY, Settings
from .faults import ENV_FAULTS, FaultPlan
from .state import DEFAULT_MAX_RUNNING, SandboxState, checked_settings

if TYPE_CHECKING:
    import uvicorn

ENV_ENVELOPE_TASKS = "MUSICGEN_SANDBOX_ENVELOPE_TASKS"
HOST = "127.0.0.1"
START_TIMEOUT = 10.0


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # proto set: asyncio turns Nagle off
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def _drop_capable_protocol() -> type:
    """uvicorn's h11 protocol, telling the app how to hang up on the current connection.

    A `drop` fault must close the connection without any response; an ASGI app cannot do that
    (uvicorn answers 500 when an app fails before responding), so the protocol puts a closer in
    `scope["extensions"]`.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from .middleware import DROP_EXTENSION

    class DropCapableH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            inner = self.app

            async def app(scope: Any, receive: Any, send: Any) -> None:
                scope.setdefault("extensions", {})[DROP_EXTENSION] = self.transport.close
                await inner(scope, receive, send)

            self.app = app

    return DropCapableH11Protocol


STOP_POLL_SECONDS = 0.005
"""How often a stopping server looks whether its connections and tasks are done (uvicorn's own loop: 0.1 s)."""


def _prompt_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn's server that stops as soon as it is asked: `wake()` ends its main loop at once (uvicorn looks at
    `should_exit` on a 0.1 s tick), and its shutdown takes uvicorn's steps (stop accepting, shut each connection
    down, wait for them and their tasks within `timeout_graceful_shutdown`, then cancel) polling every 5 ms
    rather than after a fixed 0.1 s sleep and on a 0.1 s tick. Each sandbox stop took about 0.2 s of ticks."""
    import uvicorn

    class PromptServer(uvicorn.Server):
        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self._woken: asyncio.Event | None = None
            self._loop: asyncio.AbstractEventLoop | None = None

        def wake(self) -> None:
            """Ask the server to exit now (from any thread)."""
            self.should_exit = True
            loop, woken = self._loop, self._woken
            if loop is not None and woken is not None:
                with contextlib.suppress(RuntimeError):  # the loop already ended
                    loop.call_soon_threadsafe(woken.set)

        async def main_loop(self) -> None:
            self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 1) % 864000
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), 0.1)  # uvicorn's tick, cut short by wake()
                should_exit = await self.on_tick(counter)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            for server in self.servers:
                server.close()
            for sock in sockets or []:
                sock.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            try:
                await asyncio.wait_for(self._drained(), timeout=self.config.timeout_graceful_shutdown)
            except asyncio.TimeoutError:
                for task in self.server_state.tasks:
                    task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
            if not self.force_exit:
                await self.lifespan.shutdown()

        async def _drained(self) -> None:
            await asyncio.sleep(STOP_POLL_SECONDS)  # closed connections leave on the loop's next turns
            while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
                await asyncio.sleep(STOP_POLL_SECONDS)
            for server in self.servers:
                await server.wait_closed()

    return PromptServer(config)


class Sandbox:
    """A local stand-in for the music service: both hosts, a demo key, real MP3s, optional faults.

    >>> with Sandbox(stage_seconds=0.5) as sandbox:
    ...     client = sandbox.client()
    ...     ids = client.generate(action="auto", style="lo-fi").ids
    """

    def __init__(
        self,
        *,
        stage_seconds: float = 3.0,
        song_seconds: float = 30.0,
        keys: Mapping[str, int] | None = None,
        seed: int = 0,
        faults: Any = None,
        port: int = 0,
        v2_port: int = 0,
        engines_port: int = 0,
        envelope_tasks: bool | None = None,
        max_running: int = DEFAULT_MAX_RUNNING,
        call_costs: Mapping[str, int] | None = None,
    ) -> None:
        keys = dict(keys) if keys is not None else {DEMO_KEY: 100}
        checked_settings({"stage_seconds": stage_seconds, "song_seconds": song_seconds})  # ValueError names it
        if faults is None:
            faults = os.environ.get(ENV_FAULTS) or None
        if envelope_tasks is None:
            envelope_tasks = os.environ.get(ENV_ENVELOPE_TASKS, "").strip().lower() in {"1", "true", "yes", "on"}
        plan = faults if isinstance(faults, FaultPlan) else FaultPlan.from_spec(faults, seed=seed)
        self.state = SandboxState(
            keys=keys,
            stage_seconds=stage_seconds,
            song_seconds=song_seconds,
            seed=seed,
            faults=plan,
            envelope_tasks=envelope_tasks,
            max_running=max_running,
            call_costs=call_costs,
        )
        self.api_key = DEMO_KEY if DEMO_KEY in keys or not keys else next(iter(keys))
        self._ports = (port, v2_port, engines_port)
        self._servers: list[Any] = []  # uvicorn servers that stop when asked (`_prompt_server`)
        self._sockets: list[socket.socket] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.base_url = ""
        self.v2_base_url = ""
        self.engines_base_url = ""
        """The host of ElevenLabs Music's and the Gemini API's (Lyria) paths, side by side."""

    def __repr__(self) -> str:
        state = "serving" if self.running else "stopped"
        return f"Sandbox({state}, base_url={self.base_url!r}, v2_base_url={self.v2_base_url!r})"

    # -- life ----------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Sandbox:
        """Bind both ports, serve in a daemon thread, and return once both hosts accept requests."""
        if self.running:
            return self
        import uvicorn

        from .engine_routes import create_engines_app
        from .routes import create_apps

        self._error = None
        self._sockets = [_bind(port) for port in self._ports]
        ports = [sock.getsockname()[1] for sock in self._sockets]
        self.base_url, self.v2_base_url, self.engines_base_url = (f"http://{HOST}:{port}" for port in ports)
        self.state.files_base = self.base_url
        protocol = _drop_capable_protocol()
        self._servers = [
            _prompt_server(
                uvicorn.Config(
                    app,
                    http=protocol,
                    ws="none",
                    lifespan="off",
                    log_config=None,
                    log_level="warning",
                    access_log=False,
                    timeout_graceful_shutdown=1,
                )
            )
            for app in (*create_apps(self.state), create_engines_app(self.state))
        ]
        self._thread = threading.Thread(target=self._serve, name=f"ipymusicgen-sandbox-{ports[0]}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not all(server.started for server in self._servers):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                error = self._error
                self.stop()
                raise RuntimeError(f"The sandbox did not start: {error or 'timed out'}") from error
            time.sleep(0.005)
        return self

    def _serve(self) -> None:
        async def both() -> None:
            await asyncio.gather(
                *(server.serve(sockets=[sock]) for server, sock in zip(self._servers, self._sockets, strict=True))
            )

        try:
            asyncio.run(both())
        except BaseException as exc:  # reported by start(); a daemon thread has no one else to tell
            self._error = exc

    def stop(self, timeout: float = 5.0) -> None:
        """Ask both servers to exit, wait for the thread, close the sockets. Safe to call twice."""
        for server in self._servers:
            server.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                for server in self._servers:
                    server.force_exit = True
                self._thread.join(timeout)
        for sock in self._sockets:
            sock.close()
        self._thread = None
        self._servers = []
        self._sockets = []

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------------------

    def _client_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not self.running:
            raise RuntimeError("Start the sandbox first (sandbox.start() or `with Sandbox() as sandbox:`).")
        kwargs.setdefault("api_key", self.api_key)
        kwargs.setdefault("journal", False)  # the embedded sandbox stays out of the user's journal (by identity)
        kwargs.setdefault("base_url", self.base_url)
        kwargs.setdefault("v2_base_url", self.v2_base_url)
        if "settings" not in kwargs:
            interval = max(0.05, min(self.state.stage_seconds / 4, 2.0))
            kwargs["settings"] = Settings.from_env().with_changes(poll_interval=interval)
        # its songs stay out of the user's journal and archive, whatever key this sandbox was given
        kwargs["settings"] = kwargs["settings"].with_changes(
            embedded_sandbox=True, **self.engine_settings(kwargs["api_key"])
        )
        return kwargs

    def engine_settings(self, key: str | None = None) -> dict[str, Any]:
        """Settings that make every synchronous engine this sandbox, with its key (the demo key by default)."""
        secret = SecretStr(key or self.api_key)
        url = self.engines_base_url
        return {
            "elevenlabs_base_url": url,
            "gemini_base_url": url,
            "elevenlabs_api_key": secret,
            "gemini_api_key": secret,
        }

    def client(self, **kwargs: Any) -> MusicClient:
        """A `MusicClient` for this sandbox (its URLs and demo key); kwargs go to the client."""
        api_key = self._client_kwargs(kwargs).pop("api_key")
        return MusicClient(api_key, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncMusicClient:
        api_key = self._client_kwargs(kwargs).pop("api_key")
        return AsyncMusicClient(api_key, **kwargs)

    def env(self) -> dict[str, str]:
        """Environment variables that point any client (or another process) at this sandbox: every provider's
        base URL and key (the engines' keys under their own ecosystems' names)."""
        from ..engines import elevenlabs, lyria

        return {
            "MUSICGEN_BASE_URL": self.base_url,
            "MUSICGEN_V2_BASE_URL": self.v2_base_url,
            "MUSICGEN_API_KEY": self.api_key,
            elevenlabs.ENV_BASE_URL: self.engines_base_url,
            elevenlabs.ENV_KEY: self.api_key,
            lyria.ENV_BASE_URL: self.engines_base_url,
            lyria.ENV_KEY: self.api_key,
        }

    # -- controls ------------------------------------------------------------------------------------

    def set_faults(self, spec: Any) -> None:
        """Replace the fault plan: a compact string, a list of rule dicts, or a `FaultPlan`."""
        self.state.faults.replace_rules(spec)

    def clear_faults(self) -> None:
        self.state.faults.replace_rules([])

    def reset(self) -> None:
        """Forget tasks and counts; restore credits, settings and the starting faults."""
        self.state.reset()

    @property
    def envelope_tasks(self) -> bool:
        """Whether `/v1/music/tasks` answers in the envelope (True) or as a bare array (False)."""
        return self.state.envelope_tasks

    @envelope_tasks.setter
    def envelope_tasks(self, value: bool) -> None:
        self.state.envelope_tasks = bool(value)

    def request_counts(self) -> dict[str, int]:
        """Requests received per path (faulted ones included; admin ones not)."""
        return self.state.counts()

    def credits(self, key: str | None = None) -> int:
        """Music counts left on a key (the demo key by default)."""
        return self.state.credits(key or self.api_key)
