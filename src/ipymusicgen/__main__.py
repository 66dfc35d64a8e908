"""Command line: `python -m ipymusicgen generate "lo-fi rain"` or `python -m ipymusicgen demo`.

Runs against the service configured by MUSICGEN_* variables, or the embedded sandbox with no key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import session
from .app import Workspace
from .client.waiting import archive_notes
from .errors import MusicGenError, unknown_option
from .models.tasks import TaskState
from .safe_html import public_address


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


def _kernel_manager(folder: Path) -> Any:
    """A kernel of *this* interpreter, whatever kernelspecs are (or are not) installed.

    A plain `pip install .` in a venv that is not activated may find no `python3` kernelspec, or one
    that starts whichever `python` is first on PATH; a spec written here runs `sys.executable`.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = folder / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)
    # Local sockets in the private folder: nothing listens on TCP, and ipykernel has nothing to warn about.
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs, transport="ipc", ip=str(folder / "kernel"))


def _where_to_open(notebook: Path) -> str:
    """The command that opens the executed notebook in JupyterLab (installing it first if needed)."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if importlib.util.find_spec("jupyterlab") is not None and jupyter.exists():
        return f"{shlex.quote(str(jupyter))} lab {shlex.quote(str(notebook))}"
    pip = f"{shlex.quote(sys.executable)} -m pip install jupyterlab"
    return f"{pip} && {shlex.quote(str(jupyter))} lab {shlex.quote(str(notebook))}"


def _service_in_use() -> str:
    current = session.settings()
    if not current.has_key:
        return "the local sandbox (no MUSICGEN_API_KEY set: free, nothing was sent anywhere)"
    return f"the real service at {public_address(current.base_url)} (your MUSICGEN_API_KEY; songs cost credits)"


def fresh_downloads(out: Path) -> Path:
    """The demo's `<output>/downloads/`, emptied: each run keeps its own songs, so a second run leaves one
    `Songs of Lighthouse.mp3`, not a `(2)` beside the first (the folder is the demo's own)."""
    downloads = out / "downloads"
    shutil.rmtree(downloads, ignore_errors=True)
    downloads.mkdir(parents=True, exist_ok=True)
    return downloads


def _demo(args: argparse.Namespace) -> int:
    """Execute a demo notebook (on the sandbox when no key is set) and say where everything went.

    It runs in the output folder, so the songs it downloads land in `<output>/downloads/`, never in
    the source tree; the executed copy is saved there too, even when a cell fails.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    source = notebook_source(args.notebook)
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / source.name
    downloads = fresh_downloads(out)
    notebook = nbformat.read(source, as_version=4)
    print(f"Running {source.name} (every cell, as in a fresh kernel) ...", flush=True)
    failed: BaseException | None = None
    with tempfile.TemporaryDirectory(prefix="ipymusicgen-kernel-") as kernels:
        kernel = _kernel_manager(Path(kernels))
        runner = NotebookClient(
            notebook,
            timeout=args.timeout,
            km=kernel,
            store_widget_state=True,
            resources={"metadata": {"path": str(out)}},
        )
        try:
            runner.execute(cwd=str(out))
        except CellExecutionError as exc:
            failed = exc
        finally:
            nbformat.write(notebook, target)
            if kernel.has_kernel:  # a kernel manager passed in is ours to shut down, not nbclient's
                kernel.shutdown_kernel()
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
        first_line = str(failed).strip().splitlines()[-1] if str(failed).strip() else type(failed).__name__
        print(f"error: a cell failed ({first_line}); the executed notebook shows where.", file=sys.stderr)
        return 1
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from .mcp import serve

    serve(
        http=args.http,
        host=args.host,
        port=args.port,
        budget=args.budget,
        allow_hosts=args.allow_host,
        workspace=args.workspace,
    )
    return 0


def _refuse_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Exit 2 naming what was not understood, with the closest option of the command typed (`--instrumentl`:
    did you mean `--instrumental`?), not argparse's bare list of leftovers."""
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
    typed = next((token.split("=", 1)[0] for token in extra if token.startswith("-")), None)
    said = unknown_option(typed, options) if typed is not None else f"unrecognized arguments: {' '.join(extra)}"
    leaf.error(said if type(leaf) is not argparse.ArgumentParser else f"{said} (see {leaf.prog} --help)")


def _sandbox(args: argparse.Namespace) -> int:
    """`python -m ipymusicgen sandbox [options]`: the local sandbox of every provider, as `python -m
    ipymusicgen.sandbox` runs it (its base URLs and demo keys printed, `--help` for its options)."""
    from .sandbox.__main__ import main as serve

    return serve(args.options)


def main(argv: list[str] | None = None, *, workspace: Workspace | None = None) -> int:
    """The command line; `workspace`: the journal file and client to use (default: the session's current one)."""
    from .gateway.cli import add_gateway_parser, credits_arg, port_arg

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
        help="the demo's own folder for the executed notebook and downloads/ (default: artifacts/demo); "
        "each run replaces downloads/",
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
    agent.add_argument("--budget", type=credits_arg, default=None, help="credits this server may spend in its lifetime")
    agent.set_defaults(run=_mcp)
    local = commands.add_parser("sandbox", add_help=False, help="run the local sandbox of every provider (--help)")
    local.set_defaults(run=_sandbox)
    add_gateway_parser(commands)
    args, extra = parser.parse_known_args(argv)
    if args.command == "sandbox":  # its options are the sandbox's own (python -m ipymusicgen.sandbox)
        args.options = extra
    elif extra:
        _refuse_unknown(parser, args, extra)
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
