"""Command line: `python -m ipymusicgen generate "lo-fi rain"` or `python -m ipymusicgen demo`.

Runs against the service configured by MUSICGEN_* variables, or the embedded sandbox with no key.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import session
from .errors import MusicGenError
from .tasks import TaskState


def _notebooks_dir() -> Path:
    """`notebooks/` of the working directory, else of the source checkout this runs from."""
    here = Path.cwd() / "notebooks"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "notebooks"


def _generate(args: argparse.Namespace) -> int:
    client = session.get_client()
    fields = {"action": "auto", "style": args.description}
    if args.mv:
        fields["mv"] = args.mv
    if args.instrumental:
        fields["instrumental"] = 1
    result = client.generate(**fields)
    print(f"submitted: {', '.join(result.ids)} (recorded in {session.get_journal().path})")
    songs = client.wait(result.ids, interval=args.interval, on_update=_print_updates)
    for song in songs:
        if song.state is TaskState.COMPLETE and args.download:
            print(f"saved {client.download(song, args.download)}")
        elif song.state is TaskState.FAILED:
            print(f"{song.id} failed: {song.fail_reason}")
    return 0 if all(s.state is TaskState.COMPLETE for s in songs) else 1


def _print_updates(records: list) -> None:
    for record in records:
        duration = f" {record.duration_seconds:.0f}s" if record.duration_seconds else ""
        print(f"  {record.id}: {record.state.value}{duration} {record.title or ''}".rstrip())


def _demo(args: argparse.Namespace) -> int:
    """Execute the quickstart notebook (sandbox when no key) and save the executed copy."""
    import nbformat
    from nbclient import NotebookClient

    folder = _notebooks_dir()
    source = folder / f"{args.notebook}.ipynb"
    notebook = nbformat.read(source, as_version=4)
    runner = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    runner.execute()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    target = out / source.name
    nbformat.write(notebook, target)
    print(f"executed {source.name}: {len(notebook.cells)} cells, saved to {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ipymusicgen", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser("generate", help="make two songs from a description and wait for them")
    generate.add_argument("description")
    generate.add_argument("--mv", help="model version, e.g. MFV3.0")
    generate.add_argument("--instrumental", action="store_true")
    generate.add_argument("--interval", type=float, default=None, help="seconds between polls")
    generate.add_argument("--download", metavar="DIR", default="songs", help="where to save finished songs")
    generate.set_defaults(run=_generate)
    demo = commands.add_parser("demo", help="execute a demo notebook end to end")
    demo.add_argument("notebook", nargs="?", default="quickstart")
    demo.add_argument("--output", default="artifacts/notebooks")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except MusicGenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        session.shutdown()


if __name__ == "__main__":
    sys.exit(main())
