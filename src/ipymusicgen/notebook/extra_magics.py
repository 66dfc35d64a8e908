"""`%musicgen_wav ID`, `%musicgen_mp4 ID`, `%musicgen_vibe ID`: a song's paid extras, made once (`archive.extras`).

With a key that may cost money the first run only says the price and the credits left (in that order) and sends
nothing; `--yes` sends. An extra made before (here, in another kernel, by an agent, under the song's task id or
its song id in any case) is reused at once and said to be already made: nothing is asked, nothing paid.
Registered by `%load_ext ipymusicgen`.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from ..errors import MusicGenError
from ..workspace import session
from .args import unregister_magics

if TYPE_CHECKING:
    from ..archive.extras import ExtraResult

USAGE = "%musicgen_{kind} [--yes] [--force] TASK_ID"


def parse_extra_line(line: str, kind: str) -> tuple[str, bool, bool]:
    """(task id, yes, force) from the magic's line; anything else is refused with the usage."""
    usage = USAGE.format(kind=kind)
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc}. Usage: {usage}") from None
    flags = {w for w in words if w.startswith("-")}
    ids = [w for w in words if not w.startswith("-")]
    unknown = flags - {"--yes", "-y", "--force"}
    if unknown:
        raise UsageError(f"Unknown option {sorted(unknown)[0]}. Usage: {usage}")
    if len(ids) != 1:
        raise UsageError(f"Give one task id. Usage: {usage}")
    return ids[0], bool(flags & {"--yes", "-y"}), "--force" in flags


def run_extra(line: str, kind: str) -> ExtraResult | None:
    """Ask first (a real key, not made yet) or make/reuse the extra; one line says what happened."""
    from ..archive.extras import KINDS, extra_price, held, make_extra  # at first use: %load_ext stays light

    task_id, yes, force = parse_extra_line(line, kind)
    label = KINDS[kind].label
    try:
        client = session.get_client()
        found = held(client, task_id, kind)
        made_before = found is not None and found.state == "made"

        def question(_changed: bool) -> str | None:
            if made_before:  # reused: nothing to pay, nothing asked
                return None
            left = client.key_info().key_music_counts
            return (
                f"Pay about {extra_price(kind)} credit(s) (the key has {left} credits left) for the {label} of "
                f"{task_id}? Nothing was sent. Run `%musicgen_{kind} --yes {task_id}` to send; it is made once and "
                "kept beside the song."
            )

        from ..config import PaidAsk  # the one ask-before-paying rule, as the card's WAV/MP4 buttons

        ask = PaidAsk.of(client.settings, False if yes else None)
        if not ask.press("extra", (task_id, kind), question):
            print(ask.question)
            return None
        result = make_extra(client, task_id, kind, force=force)
    except MusicGenError as exc:
        raise UsageError(str(exc)) from None
    where = result.path or result.value or ""
    print(f"{result.note}: {where}" if where else result.note)
    return result


@magics_class
class ExtraMagics(Magics):
    """The paid extras' magics; kept apart from the generation magics (magics.py)."""

    @line_magic("musicgen_wav")
    def musicgen_wav(self, line: str = "") -> Any:
        """A finished song's WAV, made once and kept beside its MP3: %musicgen_wav [--yes] [--force] TASK_ID

        With a key that may cost money, the first run says the price and sends nothing; --yes sends. A WAV made
        before (in any kernel, or by an agent; TASK_ID may be the song's song id too) is reused: nothing is paid
        again. --force asks again for one whose first request may have been charged without an answer. Returns the
        result (.path, .value, .state)."""
        return run_extra(line, "wav")

    @line_magic("musicgen_mp4")
    def musicgen_mp4(self, line: str = "") -> Any:
        """A finished song's MP4 video, made once and kept beside its MP3: %musicgen_mp4 [--yes] [--force] TASK_ID

        With a key that may cost money, the first run says the price and sends nothing; --yes sends. An MP4 made
        before (in any kernel, or by an agent) is reused: nothing is paid again."""
        return run_extra(line, "mp4")

    @line_magic("musicgen_vibe")
    def musicgen_vibe(self, line: str = "") -> Any:
        """A singer voice made from a finished song, once: %musicgen_vibe [--yes] [--force] TASK_ID

        Its .value is the singer id for `%musicgen --singer-id ID` (artist_consistency). With a key that may cost
        money, the first run says the price and sends nothing; --yes sends. Made before: reused, nothing paid."""
        return run_extra(line, "vibe")


def register(ipython: Any) -> None:
    """Register the extras' magics once (called by magics.load_ipython_extension)."""
    if "musicgen_wav" not in ipython.magics_manager.magics.get("line", {}):
        ipython.register_magics(ExtraMagics(shell=ipython))


def unregister(ipython: Any) -> None:
    """Remove the extras' magics (called by magics.unload_ipython_extension)."""
    unregister_magics(ipython, ExtraMagics)
