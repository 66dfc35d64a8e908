"""Shared fixtures: a running local sandbox of the music service and a client pointed at it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import ManualClock

from ipymusicgen import Journal, MusicClient
from ipymusicgen.sandbox import Sandbox

if TYPE_CHECKING:
    from hostile_server import Handler, HostileServer
    from IPython.core.interactiveshell import InteractiveShell
    from notebook_runs import NotebookRuns
    from playwright.sync_api import Browser

    from ipymusicgen.workspace.workspace import Workspace


NUMBA_SLOTS = 32


def _own_numba_cache() -> object | None:
    """Give this test process a numba cache no other running process uses (librosa compiles into it).

    Two processes compiling into, or loading from, one numba cache at once is a known numba race that ends in
    SIGSEGV (CI saw it: both workers and a benchmark child compiling into librosa's in-tree cache on a fresh
    machine). Each process takes the first free slot under the user's cache, holds that slot's lock until it
    exits, and its children inherit the slot; slots persist, so a second run finds them compiled."""
    from filelock import FileLock, Timeout

    from ipymusicgen.lab.numba_cache import default_cache_dir

    root = default_cache_dir().parent / "tests-numba"  # beside the worker's own cache
    root.mkdir(parents=True, exist_ok=True)
    for slot in range(NUMBA_SLOTS):
        lock = FileLock(str(root / f"slot-{slot}.taken"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue
        os.environ["NUMBA_CACHE_DIR"] = str(root / f"slot-{slot}")
        return lock
    return None  # every slot busy: numba's own cache, as before


_NUMBA_SLOT = _own_numba_cache()

MEMORY_TEMP = Path("/dev/shm")
MEMORY_TEMP_FREE = 4 << 30
"""The tests' folders go to memory when it has this much room (a container's default 64 MB /dev/shm does not)."""


def _temp_in_memory() -> None:
    """Put pytest's numbered temp folders (`tmp_path`: journals, archives, servers' homes) on tmpfs when there is one
    with room: on a disk mounted with `discard`, as here, each unlink took 3.5 ms and a new journal 55 ms against
    22 ms in memory. Numbered folders as ever, so two runs at once never meet; a `--basetemp` or a root the caller
    set wins."""
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not MEMORY_TEMP.is_dir() or not os.access(MEMORY_TEMP, os.W_OK):
        return
    stats = os.statvfs(MEMORY_TEMP)
    if stats.f_bavail * stats.f_frsize >= MEMORY_TEMP_FREE:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP)  # pytest's own name for its temp root


_temp_in_memory()


SLOW_FIXTURES = frozenset({"browser", "kernel", "lab", "notebook_server", "notebook_runs"})
"""Fixtures that start a browser or a kernel: a test that asks for one is slow wherever it lives."""


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks (its own hook of this name)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `slow` every test that asks for a browser or a kernel; a whole slow module says so itself
    (`pytestmark = pytest.mark.slow`), and what `slow` means is said once, in pyproject's markers.

    A test that uses a module-scoped fixture of its own module (a Jupyter or marimo server, a built wheel, a
    benchmark run) joins its module's `xdist_group`: on `-n 2` the module's tests then run on one worker, so
    that fixture starts once per run rather than once on each worker that got one of them."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if _uses_a_module_fixture_of_its_own(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"module:{item.nodeid.split('::')[0]}"))


def _uses_a_module_fixture_of_its_own(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::")[0]
    for definitions in info.name2fixturedefs.values() if info is not None else ():
        last = definitions[-1]
        if last.scope == "module" and last.baseid == module:
            return True
    return False


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MUSICGEN_* setting of the machine running the tests (a key, a host, a journal) leaks into a test."""
    for name in list(os.environ):
        if name.startswith("MUSICGEN_"):
            monkeypatch.delenv(name)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    """A fresh journal file of the test's own."""
    opened = Journal(tmp_path / "journal.sqlite3")
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def sandbox_server() -> Iterator[Sandbox]:
    """One sandbox per test module (starting one costs a little); fast stages (a song is done in 0.1 s: a test that
    needs a stage to hold still freezes the clock with `clock`), 4-second songs."""
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="") as server:
        yield server


@pytest.fixture
def sandbox(sandbox_server: Sandbox) -> Iterator[Sandbox]:
    """The module's sandbox, reset: no tasks or counts, full credits, no faults, bare task arrays."""
    sandbox_server.reset()
    yield sandbox_server
    sandbox_server.reset()


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookRuns]:
    """Every demo notebook, executed once per test run with the canary key on a keyed sandbox (see notebook_runs)."""
    from notebook_runs import CANARY, NotebookRuns

    with Sandbox(stage_seconds=0.3, song_seconds=4, keys={CANARY: 100_000}, faults="") as service:
        assert service.api_key == CANARY
        yield NotebookRuns(service, tmp_path_factory.mktemp("notebooks"))


@pytest.fixture
def hostile_server() -> Iterator[Callable[[Handler], HostileServer]]:
    """Start hostile HTTP servers on 127.0.0.1 that answer as the test's handler says (`hostile_server.py`);
    each is stopped after the test."""
    from hostile_server import HostileServer

    started: list[HostileServer] = []

    def start(handler: Handler) -> HostileServer:
        server = HostileServer(handler).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def short_locks(monkeypatch: pytest.MonkeyPatch) -> float:
    """A journal lock held by "another kernel" is waited for 0.5 s, not 10: the same path, taken sooner."""
    from ipymusicgen.storage import journal_file as db

    monkeypatch.setattr(db, "DEFAULT_BUSY_TIMEOUT", 0.5)
    return 0.5


@pytest.fixture
def client(sandbox: Sandbox) -> Iterator[MusicClient]:
    """A `MusicClient` for the sandbox, with a short timeout and the default read retries."""
    with sandbox.client(max_retries=2, timeout=10) as music_client:
        yield music_client


@pytest.fixture
def clock(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """Freeze the sandbox's clock: task stages then move only when the test says (`clock.stages()`)."""
    manual = ManualClock(sandbox.state.stage_seconds)
    monkeypatch.setattr(sandbox.state, "clock", manual)
    return manual


@pytest.fixture(scope="module")
def paid_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox playing the paid service, one per module: its only key is the module's own, so its clients
    journal as for the real service. The module says everything that differs in `PAID_SANDBOX`, e.g.
    `{"keys": {KEY: 100}, "song_seconds": 2}` (stages of 0.05 s and no faults unless it says otherwise)."""
    options = getattr(request.module, "PAID_SANDBOX", None)
    if options is None:
        pytest.fail(f"{request.module.__name__} asks for paid_sandbox but sets no PAID_SANDBOX (its key, its credits)")
    with Sandbox(**{"stage_seconds": 0.05, "faults": "", **options}) as server:
        yield server


@pytest.fixture
def service(paid_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """The module's paid sandbox, reset before and after, its songs' stages moved only by the test
    (`service.clock.stages()`)."""
    paid_sandbox.reset()
    manual = ManualClock(paid_sandbox.state.stage_seconds)
    monkeypatch.setattr(paid_sandbox.state, "clock", manual)
    paid_sandbox.clock = manual  # type: ignore[attr-defined]
    yield paid_sandbox
    paid_sandbox.reset()


@pytest.fixture
def paid_clients(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., MusicClient]]:
    """Clients of the module's paid sandbox (`service`, its key), each a kernel of its own on one journal file and
    one archive under the test's folder, polling fast; `paid_clients(**changes)` changes their settings."""
    from ipymusicgen.config import Settings
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory(**changes: Any) -> MusicClient:
        settings = Settings.from_env().with_changes(
            **{
                "api_key": service.api_key,
                "base_url": service.base_url,
                "v2_base_url": service.v2_base_url,
                "journal_path": tmp_path / "journal.sqlite3",
                "poll_interval": 0.05,
                **changes,
            }
        )
        made.append(client := build_client(settings, archive=tmp_path / "archive"))
        return client

    yield factory
    for client in made:
        client.close()


@pytest.fixture
def workspace(sandbox: Sandbox, tmp_path: Path) -> Iterator[Workspace]:
    """A `Workspace` of the test's own: its journal file in the test's folder, its client on the module's sandbox
    (its demo key, so songs are archived in the workspace's throwaway folder; fast polls); closed after the test
    (its batches, client, archivers, file and that folder)."""
    from ipymusicgen.config import Settings
    from ipymusicgen.workspace.workspace import Workspace

    settings = Settings.from_env().with_changes(
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=tmp_path / "journal.sqlite3",
        poll_interval=0.05,
        **sandbox.engine_settings(),
    )
    opened = Workspace(settings)
    yield opened
    opened.close()


@pytest.fixture
def sandbox_shell(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """A real IPython shell with the extension loaded, its session pointed at the module's sandbox (with the
    sandbox's key, a private journal and fast polling); everything undone afterwards, so tests never meet."""
    yield from _shell_on(sandbox, tmp_path, monkeypatch)


@pytest.fixture
def paid_shell(paid_sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """`sandbox_shell` on the module's paid sandbox (reset, its clock running): its key may cost money, so every
    paid step asks first."""
    paid_sandbox.reset()
    yield from _shell_on(paid_sandbox, tmp_path, monkeypatch)


def _shell_on(server: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from ipymusicgen.archive.archiver import archiver_of
    from ipymusicgen.workspace import session

    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    session.reset()
    session.configure(
        api_key=server.api_key,
        base_url=server.base_url,
        v2_base_url=server.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"),
        poll_interval=0.05,
    )
    shell = InteractiveShell.instance()
    names = set(shell.user_ns)
    with capture_output() as loaded:
        shell.run_line_magic("load_ext", "ipymusicgen")
    shell.user_ns["_load_output"] = loaded.stdout
    yield shell
    # let the session's archiver finish the songs it has in hand first: a download cut off by the client's close
    # hangs until its read timeout, holding the sandbox folder's lock that the next test's archiver waits on
    if (client := session.current_client()) is not None and (archiver := archiver_of(client)) is not None:
        archiver.join(30)
    shell.run_line_magic("unload_ext", "ipymusicgen")
    shell.config.pop("MusicGen", None)  # %config settings outlive the extension; the next test starts clean
    for name in set(shell.user_ns) - names:
        shell.user_ns.pop(name, None)
    session.reset()  # watchers, client, workspace and file closed; its settings forgotten


@pytest.fixture(autouse=True, scope="session")
def _private_user_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Clients journal to the user data directory by default; tests (and their kernels) get a private one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
        # keyed sandboxes on 127.0.0.1 play real services in many tests: poll them fast (the floor's own tests
        # set it back); kernels and notebooks the tests start inherit it
        patch.setenv("MUSICGEN_MIN_POLL_INTERVAL", "0.01")
        patch.setenv("MUSICGEN_ANALYZE", "off")  # archived songs are measured only where a test turns it on
        yield


class _Chromium:
    """One Chromium per test module, launched when a test first asks for a browser, and closed with the module.
    Not one per process: a started sync Playwright leaves its event loop set as running on the main thread, so
    every later `asyncio.run`/`anyio.run` of that worker (the agent server's tests) failed "cannot be called from
    a running event loop" once a browser module had run before it in random order."""

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self._browser: Browser | None = None

    def get(self) -> Browser:
        if self._browser is None or not self._browser.is_connected():  # a crashed one is replaced
            from benchmarks._browser import chromium  # the launch figure 12 uses too

            self.close()
            self._stack = ExitStack()
            self._browser = self._stack.enter_context(chromium())
        return self._browser

    def close(self) -> None:
        stack, self._stack, self._browser = self._stack, None, None
        if stack is not None:
            stack.close()


@pytest.fixture(scope="module")
def _chromium() -> Iterator[_Chromium]:
    shared = _Chromium()
    yield shared
    shared.close()


@pytest.fixture
def browser(_chromium: _Chromium) -> Iterator[Browser]:
    """Debian's Chromium, shared by the tests of this module (Playwright is imported only when one asks); what
    a test opened in it (its contexts, and the pages `browser.new_page()` made) is closed after it, so the next
    test starts with none."""
    shared = _chromium.get()
    before = set(shared.contexts)
    yield shared
    if shared.is_connected():
        for context in [c for c in shared.contexts if c not in before]:
            context.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection loaded (the package, the test modules, their libraries) out of the garbage collector's
    reach: a full collection in a test process then walks only what tests made since. A test's `gc.collect()` took
    0.3-0.6 s in a process that had collected the whole suite (the many-threads collection test: 16.5 s), and the
    collector's own full passes cost as much, all through the run."""
    import gc

    gc.collect()
    gc.freeze()
