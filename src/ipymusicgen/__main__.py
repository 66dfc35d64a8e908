"""Command line: `python -m ipymusicgen generate "lo-fi rain"` or `python -m ipymusicgen demo`.

Runs against the service configured by MUSICGEN_* variables, or the embedded sandbox with no key.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .client.waiting import archive_notes
from .errors import MusicGenError, dashed_option, options_meant, unknown_option
from .models.tasks import TaskState
from .safe_html import public_address
from .workspace import session
from .workspace.workspace import Workspace


def notebook_source(name: str) -> Path:
    """A demo notebook: shipped in the package (wheel), else in the source checkout, else in ./notebooks."""
    file_name = name if name.endswith(".ipynb") else f"{name}.ipynb"
    here = Path(__file__).resolve().parent
    folders = (here / "notebooks", here.parents[1] / "notebooks", Path.cwd() / "notebooks")
    for folder in folders:
        if (folder / file_name).is_file():
            return folder / file_name
    known = ", ".join(sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.ipynb")}))
    raise SystemExit(f"error: no demo notebook {file_name!r} (try: {known})")


def _seconds(text: str) -> float:
    """A poll interval: a finite number of seconds above 0, checked before anything is paid for."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"use a finite number of seconds above 0 (got {text!r})")
    return value


def _workspace(args: argparse.Namespace) -> Workspace:
    """The workspace `main` was given, else the session's current one."""
    return args.workspace if args.workspace is not None else session.current_workspace()


def _generate(args: argparse.Namespace) -> int:
    workspace = _workspace(args)
    client = workspace.client
    fields = {"action": "auto", "style": args.description}
    if args.mv:
        fields["mv"] = args.mv
    if args.instrumental:
        fields["instrumental"] = 1
    result = client.generate(**fields)
    print(f"submitted: {_shown(', '.join(result.ids))} (recorded in {workspace.journal.path})")
    started = time.monotonic()
    songs = client.wait(result.ids, interval=args.interval, on_update=_print_updates)
    for note in archive_notes(client, songs, None, started):  # the archive lands a moment after: waited for
        print(_shown(note))
    for song in songs:
        if song.state is TaskState.COMPLETE and args.download:
            print(f"saved {client.download(song, args.download)}")
        elif song.state is TaskState.FAILED:
            print(f"{_shown(song.id)} failed: {_shown(song.fail_reason)}")
    return 0 if all(s.state is TaskState.COMPLETE for s in songs) else 1


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def _shown(text: object) -> str:
    """Server text on one terminal line: control characters (escape sequences, line breaks) become a space."""
    return _CONTROL.sub(" ", str(text or ""))


def _print_updates(records: list) -> None:
    for record in records:
        duration = f" {record.duration_seconds:.0f}s" if record.duration_seconds else ""
        print(f"  {_shown(record.id)}: {record.state.value}{duration} {_shown(record.title)}".rstrip())


QUIET_FDS = ("--IPKernelApp.capture_fd_output=False",)
"""The kernel's own file descriptors 1 and 2 stay kernel.log (not a pipe into the notebook that dies with the
kernel), so a crash's dump and its shutdown's noise land there; cells' output reaches the notebook as always."""


SOCKET_PATH_MAX = 100
"""Bytes a kernel's ipc socket path may take: a Unix socket's path holds 107 on Linux (103 on macOS)."""


def _socket_folder() -> str:
    """Where the demo kernel's ipc sockets go: the temp folder, or /tmp where that folder's path is too long for a
    socket (a long TMPDIR failed with ZMQError 'File name too long')."""
    base = tempfile.gettempdir()
    return base if len(base) + 40 <= SOCKET_PATH_MAX or not os.path.isdir("/tmp") else "/tmp"


def _kernel_manager(folder: Path) -> Any:
    """A kernel of *this* interpreter, whatever kernelspecs are (or are not) installed.

    A plain `pip install .` in a venv that is not activated may find no `python3` kernelspec, or one
    that starts whichever `python` is first on PATH; a spec written here runs `sys.executable`. The manager is
    the asynchronous one nbclient is made for: with the blocking one, a wait for a cell's reply held the event loop,
    so a dead kernel went unnoticed until the cell's timeout and SIGTERM's handler never ran.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec_dir = folder / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        # -X faulthandler: a crash in native code leaves its last words (the Python stack) in kernel.log
        "argv": [
            sys.executable,
            "-X",
            "faulthandler",
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            *QUIET_FDS,
        ],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)
    # Local sockets in the private folder: nothing listens on TCP, and ipykernel has nothing to warn about.
    return AsyncKernelManager(
        kernel_name="python3", kernel_spec_manager=specs, transport="ipc", ip=str(folder / "kernel")
    )


def _where_to_open(notebook: Path) -> str:
    """The command that opens the executed notebook in JupyterLab (installing it first if needed); as root it
    needs --allow-root, without which JupyterLab exits at once."""
    jupyter = Path(sys.executable).with_name("jupyter")
    root = " --allow-root" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
    lab = f"{shlex.quote(str(jupyter))} lab{root} {shlex.quote(str(notebook))}"
    if importlib.util.find_spec("jupyterlab") is not None and jupyter.exists():
        return lab
    return f"{shlex.quote(sys.executable)} -m pip install jupyterlab && {lab}"


def _service_in_use() -> str:
    current = session.settings()
    if not current.has_key:
        return "the local sandbox (no MUSICGEN_API_KEY set: free, nothing was sent anywhere)"
    return f"the real service at {public_address(current.base_url)} (your MUSICGEN_API_KEY; songs cost credits)"


def fresh_downloads(out: Path) -> Path:
    """The demo's `<output>/<demo>/downloads/`, emptied: each run keeps its own songs, so a second run leaves one
    `Songs of Lighthouse.mp3`, not a `(2)` beside the first (the folder is this demo's own: another demo's run
    never touches it)."""
    downloads = out / "downloads"
    shutil.rmtree(downloads, ignore_errors=True)
    downloads.mkdir(parents=True, exist_ok=True)
    return downloads


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
"""Terminal escape sequences (colours, titles): a traceback's colours are noise in a pipe or a log."""


def plain(text: object) -> str:
    """Kernel text on one line with no escape codes (a coloured traceback's last line, a crash's last words)."""
    return _shown(_ESCAPES.sub("", str(text or ""))).strip()


class DemoStopped(Exception):
    """SIGTERM or SIGINT came while the demo ran: the kernel is shut down and the demo ends."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


async def _execute(runner: Any, out: Path, log: Any, at: list[int]) -> None:
    """Run every cell; `at` gets each cell's index as it starts. SIGTERM/SIGINT cancel the run (DemoStopped): nbclient
    would only shut the kernel down and wait on, so its handlers are replaced once the kernel has started."""
    task = asyncio.current_task()
    stopped: list[int] = []

    def stop(signum: int) -> None:
        stopped.append(signum)
        if task is not None:
            task.cancel()

    def take_signals(**_: Any) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or no signals here
                loop.add_signal_handler(signum, stop, signum)

    runner.on_notebook_start = take_signals
    runner.on_cell_execute = lambda cell_index, **_: at.append(cell_index)
    try:  # the kernel's own stdout and stderr (a crash's last words, its shutdown's noise) go to kernel.log
        await runner.async_execute(cwd=str(out), stdout=log, stderr=log)
    except BaseException:
        if stopped:
            raise DemoStopped(stopped[0]) from None
        raise


async def _run_notebook(
    runner: Any, kernel: Any, out: Path, log: Any, at: list[int]
) -> tuple[BaseException | None, str]:
    """Execute, then always shut the kernel down: (the error that ended the run or None, why the kernel died)."""
    from nbclient.exceptions import CellControlSignal, DeadKernelError

    try:
        await _execute(runner, out, log, at)
        return None, ""
    except DeadKernelError as exc:  # how its process ended is known only until it is cleaned up
        return exc, _kernel_death(kernel, Path(log.name))
    except (CellControlSignal, DemoStopped) as exc:  # a cell's error or timeout, a signal
        return exc, ""
    finally:
        if kernel.has_kernel:  # a kernel manager passed in is ours to shut down, not nbclient's
            with contextlib.suppress(Exception):
                await kernel.shutdown_kernel(now=True)


def _kernel_death(kernel: Any, log_path: Path) -> str:
    """Why the kernel died: how its process ended, and its last words in kernel.log."""
    process = getattr(getattr(kernel, "provisioner", None), "process", None)
    code = process.poll() if process is not None else None
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        how = f"killed by {name}" + (" (a crash in native code)" if name in ("SIGSEGV", "SIGBUS", "SIGABRT") else "")
    else:
        how = f"exited with code {code}" if code is not None else "stopped answering"
    text = log_path.read_text(errors="replace")[-65536:] if log_path.exists() else ""  # a stack dump is long
    words = [plain(line) for line in text.splitlines()]
    fatal = [w for w in words if w.startswith("Fatal Python error")]  # faulthandler's first line says what
    last = fatal[:1] or [w for w in words if w][-3:]
    return how + (f"; its last words (in {log_path}): {' | '.join(last)}" if last else "")


_PACKAGE_OF = MappingProxyType(
    {
        "sklearn": "scikit-learn",
        "yaml": "pyyaml",
        "cv2": "opencv-python",
        "PIL": "pillow",
        "bs4": "beautifulsoup4",
    }
)
"""Import names that are not their package's (`pip install sklearn` or `yaml` does not install them)."""


def _installs(module: str) -> str:
    """What `pip install` needs for a missing module: the package's extra that has it (its whole pinned set, e.g.
    filelock beside librosa), else the package that provides it."""
    from importlib.metadata import PackageNotFoundError, requires

    top = module.split(".")[0]
    try:
        needs = requires("ipymusicgen") or []
    except PackageNotFoundError:
        needs = []
    for need in needs:
        extra = re.search(r"extra == ['\"]([\w-]+)['\"]", need)
        name = re.match(r"[\w.-]+", need)
        if extra and extra[1] != "dev" and name and name[0].lower().replace("-", "_") == top.lower():
            return shlex.quote(f"ipymusicgen[{extra[1]}]")
    return _PACKAGE_OF.get(top, top)


def _failure(failed: BaseException, cell: int | None, death: str) -> str:
    """The one line that says what ended the run and what to do, with no escape codes."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    where = f"cell {cell + 1}" if cell is not None else "a cell"
    if isinstance(failed, DemoStopped):
        return f"stopped by {failed} while running {where}; the kernel was shut down"
    if isinstance(failed, DeadKernelError):
        return f"the kernel died while running {where} ({death or 'stopped answering'})"
    if isinstance(failed, CellTimeoutError):
        return f"{where} took longer than --timeout; the kernel was stopped"
    ename, evalue = plain(getattr(failed, "ename", "")), plain(getattr(failed, "evalue", ""))
    said = f"{ename}: {evalue}" if ename else (plain(str(failed).strip().splitlines()[-1:]) or type(failed).__name__)
    missing = re.fullmatch(r"ModuleNotFoundError: No module named '([\w.]+)'", said)
    if missing:
        said += f"; install it into this Python: {shlex.quote(sys.executable)} -m pip install {_installs(missing[1])}"
    return f"{where} failed ({said})"


def _demo(args: argparse.Namespace) -> int:
    """Execute a demo notebook (on the sandbox when no key is set) and say where everything went.

    It runs in the demo's own folder, `<output>/<demo>/`, so the songs it downloads land in its `downloads/`
    (never in the source tree, never in another demo's folder); the executed copy is saved there too, even when a
    cell fails, and the kernel's own output in `kernel.log`.
    """
    import nbformat
    from nbclient import NotebookClient

    source = notebook_source(args.notebook)
    out = Path(args.output).resolve() / source.stem
    out.mkdir(parents=True, exist_ok=True)
    target = out / source.name
    downloads = fresh_downloads(out)
    log_path = out / "kernel.log"
    notebook = nbformat.read(source, as_version=4)
    print(f"Running {source.name} (every cell, as in a fresh kernel) ...", flush=True)
    at: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="ipymusicgen-kernel-", dir=_socket_folder()) as kernels,
        log_path.open("wb") as log,
    ):
        kernel = _kernel_manager(Path(kernels))
        runner = NotebookClient(
            notebook,
            timeout=args.timeout,
            km=kernel,
            store_widget_state=True,
            resources={"metadata": {"path": str(out)}},
        )
        try:
            failed, death = asyncio.run(_run_notebook(runner, kernel, out, log, at))
        finally:
            nbformat.write(notebook, target)
        problem = _failure(failed, at[-1] if at else None, death) if failed is not None else ""
    songs = sorted(downloads.glob("*.mp3")) if downloads.is_dir() else []  # the folder is this run's alone
    print()
    print(f"Service:   {_service_in_use()}")
    print(f"Notebook:  {target} ({len(notebook.cells)} cells, executed{', with an error' if failed else ''})")
    for song in songs:
        print(f"MP3:       {song} ({song.stat().st_size:,} bytes)")
    if not songs:
        print(f"MP3:       none saved in {downloads}")
    print(f"Open it:   {_where_to_open(target)}")
    if failed is not None:
        print(f"error: {problem}; the executed notebook shows where.", file=sys.stderr)
        return 128 + failed.signum if isinstance(failed, DemoStopped) else 1
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from .mcp import serve

    serve(
        http=args.http,
        host=args.host,
        port=args.port,
        budget=args.budget,
        budget_usd=args.budget_usd,
        allow_hosts=args.allow_host,
        workspace=args.workspace,
    )
    return 0


def _refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str], tokens: list[str]
) -> None:
    """Exit 2 naming what was not understood, with the closest option of the command typed (`--instrumentl`:
    did you mean `--instrumental`?), not argparse's bare list of leftovers. An option typed with a typographic
    dash (`—instrumental`) is refused too, even where argparse took it for the description (a paid call)."""
    leaf = parser
    while True:  # down the subcommands given (gateway -> user -> add)
        chosen = [
            action.choices[getattr(args, action.dest)]
            for action in leaf._actions
            if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices
        ]
        if not chosen:
            break
        leaf = chosen[0]
    options = [name for action in leaf._actions for name in action.option_strings if name.startswith("--")]
    dashed = [token.split("=", 1)[0] for token in tokens if dashed_option(token)]
    typed = next((token for token in dashed if options_meant(token, options, cutoff=0.8)), None)
    if typed is None:
        typed = next((token.split("=", 1)[0] for token in extra if token.startswith("-")), None)
    if typed is None and extra and dashed:
        typed = dashed[0]  # `generate —title x hi`: the dash is what went wrong, not `x hi`
    if typed is None and not extra:
        return
    said = unknown_option(typed, options) if typed is not None else f"unrecognized arguments: {' '.join(extra)}"
    leaf.error(said if type(leaf) is not argparse.ArgumentParser else f"{said} (see {leaf.prog} --help)")


def _sandbox(args: argparse.Namespace) -> int:
    """`python -m ipymusicgen sandbox [options]`: the local sandbox of every provider, as `python -m
    ipymusicgen.sandbox` runs it (its base URLs and demo keys printed, `--help` for its options)."""
    from .sandbox.__main__ import main as serve

    return serve(args.options)


def main(argv: list[str] | None = None, *, workspace: Workspace | None = None) -> int:
    """The command line; `workspace`: the journal file and client to use (default: the session's current one)."""
    from .gateway.cli import add_gateway_parser, port_arg
    from .models.dollar_prices import budget_option, usd_option

    parser = argparse.ArgumentParser(prog="ipymusicgen", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser(
        "generate",
        help="make two songs from a description and wait for them",
        description="Make two songs from a description, wait for them and save them: "
        'python -m ipymusicgen generate "lo-fi rain". Without MUSICGEN_API_KEY it runs on the local sandbox.',
    )
    generate.add_argument("description", help='what the song is, e.g. "lo-fi rain" (the style of an auto song)')
    generate.add_argument("--mv", help="model version, e.g. MFV3.0")
    generate.add_argument("--instrumental", action="store_true")
    generate.add_argument("--interval", type=_seconds, default=None, help="seconds between polls")
    generate.add_argument(
        "--download", metavar="DIR", default="songs", help="folder for the finished songs (default: songs/)"
    )
    generate.set_defaults(run=_generate)
    demo = commands.add_parser(
        "demo",
        help="execute a demo notebook end to end",
        description="Execute a demo notebook in a fresh kernel: python -m ipymusicgen demo magics-tour",
    )
    demo.add_argument(
        "notebook",
        nargs="?",
        default="quickstart",
        help="quickstart (default), magics-tour, widgets-studio, python-api, batch, library",
    )
    demo.add_argument(
        "--output",
        default="artifacts/demo",
        help="the demos' folder (default: artifacts/demo): each demo writes into its own <output>/<demo>/ (the "
        "executed notebook, downloads/, kernel.log); each run replaces that demo's downloads/ only",
    )
    demo.add_argument("--timeout", type=float, default=600, help="seconds a cell may take (default 600)")
    demo.set_defaults(run=_demo)
    agent = commands.add_parser("mcp", help="serve the tools to an agent (MCP): stdio, or --http")
    agent.add_argument(
        "--http",
        action="store_true",
        help="streamable HTTP instead of stdio (bearer token: MUSICGEN_MCP_TOKEN, or one printed at start)",
    )
    agent.add_argument("--host", default="127.0.0.1", help="address to listen on with --http (default 127.0.0.1)")
    agent.add_argument("--port", type=port_arg, default=8000, help="port with --http (default 8000)")
    agent.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="with --http: a Host name clients may use besides loopback and the bind address (repeatable)",
    )
    agent.add_argument(
        "--budget",
        type=budget_option,
        default=None,
        help="most this server may spend in its lifetime: whole credits (30), or US dollars across providers ('$5')",
    )
    agent.add_argument(
        "--budget-usd", type=usd_option, default=None, metavar="DOLLARS", help="the budget in US dollars (as '$5')"
    )
    agent.set_defaults(run=_mcp)
    local = commands.add_parser("sandbox", add_help=False, help="run the local sandbox of every provider (--help)")
    local.set_defaults(run=_sandbox)
    add_gateway_parser(commands)
    args, extra = parser.parse_known_args(argv)
    if args.command == "sandbox":  # its options are the sandbox's own (python -m ipymusicgen.sandbox)
        args.options = extra
    else:
        _refuse_unknown(parser, args, extra, list(sys.argv[1:] if argv is None else argv))
    args.workspace = workspace
    try:
        return args.run(args)
    except MusicGenError as exc:
        print(f"error: {_shown(exc)}", file=sys.stderr)
        return 2
    finally:
        session.shutdown()


if __name__ == "__main__":
    sys.exit(main())
