"""`python -m ipymusicgen.sandbox`: serve both fake hosts in the foreground until Ctrl+C.

For trying the client, the magics or another program against the service without a key or credits.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
from collections.abc import Sequence

from ..config import DEMO_KEY
from .faults import ENV_FAULTS, FAULT_KINDS, parse_faults


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ipymusicgen.sandbox",
        description="Run a local simulator of the music service (v1 and v2 hosts) with a demo key.",
    )
    parser.add_argument("--port", type=int, default=0, help="port of the v1 host (default: a free one)")
    parser.add_argument("--v2-port", type=int, default=0, help="port of the v2 host (default: a free one)")
    parser.add_argument("--stage-seconds", type=float, default=3.0, help="seconds per stage: processing, preview")
    parser.add_argument("--song-seconds", type=float, default=30.0, help="length of each generated song")
    parser.add_argument(
        "--faults",
        default=None,
        help=f"faults to inject, e.g. 'rate_limit:count=2:path=/v1/music/tasks,server_error:rate=0.1' "
        f"(kinds: {', '.join(FAULT_KINDS)}; default: ${ENV_FAULTS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for ids and random faults")
    parser.add_argument(
        "--envelope-tasks", action="store_true", default=None, help="answer task queries in the JSON envelope"
    )
    parser.add_argument("--credits", type=int, default=100, help=f"music counts of the demo key {DEMO_KEY!r}")
    parser.add_argument(
        "--max-running", type=int, default=5, help="generation calls a key may run at once (then 429, Retry-After)"
    )
    return parser


def main(argv: Sequence[str] | None = None, *, stop: threading.Event | None = None) -> int:
    """Start, print where it is and how to use it, and serve until interrupted (or `stop` is set)."""
    args = build_parser().parse_args(argv)
    try:
        parse_faults(args.faults)
    except ValueError as exc:
        print(f"error: --faults: {exc}", file=sys.stderr)
        return 2
    from .sandbox import Sandbox

    sandbox = Sandbox(
        stage_seconds=args.stage_seconds,
        song_seconds=args.song_seconds,
        keys={DEMO_KEY: args.credits},
        seed=args.seed,
        faults=args.faults,
        port=args.port,
        v2_port=args.v2_port,
        envelope_tasks=args.envelope_tasks,
        max_running=args.max_running,
    )
    try:
        sandbox.start()
    except (OSError, RuntimeError) as exc:
        print(f"error: could not start the sandbox: {exc}", file=sys.stderr)
        return 1
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in sandbox.env().items())
    print(
        f"ipymusicgen sandbox running\n"
        f"  v1 base URL: {sandbox.base_url}\n"
        f"  v2 base URL: {sandbox.v2_base_url}\n"
        f"  ElevenLabs and Gemini (Lyria) base URL: {sandbox.engines_base_url}\n"
        f"  API key:     {sandbox.api_key}\n"
        f"  faults:      {sandbox.state.faults.describe() or 'none'}\n"
        f"Point a client at it:\n"
        f"  export {exports}\n"
        f"  python -c 'import ipymusicgen; print(ipymusicgen.MusicClient().key_info())'\n"
        f"Stats: {sandbox.base_url}/_sandbox/stats    Press Ctrl+C to stop.",
        flush=True,
    )
    waiter = stop or threading.Event()
    try:
        while sandbox.running and not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        sandbox.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
