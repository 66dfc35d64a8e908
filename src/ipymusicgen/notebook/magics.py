"""The notebook command surface: `%%musicgen`, `%lyrics`, `%musicgen_key`, `%musicgen_tasks` and friends.

The magics only translate cells into requests: they build models with `models.build_*` and call the
one shared client (`session.get_client()`); validation, HTTP and the journal live there. User mistakes
and service refusals become one-line `UsageError`s, because a traceback wall helps nobody in a cell.
"""

from __future__ import annotations

import getpass
import math
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import magic_arguments
from IPython.display import display
from traitlets import Bool, Float, TraitError, Unicode, observe, validate

from ..client.waiting import archive_notes
from ..errors import CreateOutcomeUnknownError, IgnoredFieldsWarning, MusicGenError, RequestValidationError
from ..models.providers import EngineRequest
from ..models.tasks import TaskState
from ..safe_html import public_address
from ..workspace import session
from .args import (
    MUSICGEN_OPTIONS,
    OUTPUT_OPTIONS,
    MusicgenCall,
    Option,
    one_line,
    parse_musicgen,
    positive_int,
    split_line,
    stray_options,
    unregister_magics,
    with_options,
)
from .display import (  # the result types live in display.py; these names stay importable from here
    KeyReport,
    Lyrics,
    Songs,
    Table,
    entry_row,
    mask_key,
    record_row,
)
from .display import text as one_line_text
from .interpolate import expand, left_verbatim

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..client.faces import MusicClient, Record
    from ..config import Settings
    from ..models.schema import V2Song
    from ..widgets import TaskWatcher

__all__ = [
    "KeyReport",
    "Lyrics",
    "MusicGen",
    "Songs",
    "Table",
    "entry_row",
    "load_ipython_extension",
    "mask_key",
    "parse_since",
    "record_row",
    "service_line",
    "split_ids",
    "unload_ipython_extension",
]

CONFIG_NAME = "MusicGen"
SETTINGS_TRAITS = ("base_url", "v2_base_url", "poll_interval", "timeout", "allow_unknown_models")
"""Traits that are `Settings` fields: a change goes straight to `session.configure`."""

LYRICS_OPTIONS = (*OUTPUT_OPTIONS, Option(("prompt",), {"nargs": "*", "help": "what the lyrics should be about"}))
TASKS_OPTIONS = (
    Option(("--state",), {"choices": [s.value for s in TaskState], "help": "only tasks in this state"}),
    Option(("--since",), {"metavar": "WHEN", "help": "only tasks started since: 30m, 1h, 2d, 1w or an ISO date"}),
    Option(("--text",), {"help": "only tasks whose title, style or id contains this"}),
    Option(("--limit",), {"type": positive_int, "default": 20, "help": "at most this many rows (default 20)"}),
    Option(("--v2",), {"action": "store_true", "help": "query the given ids as v2 songs"}),
    *OUTPUT_OPTIONS,
    Option(("ids",), {"nargs": "*", "help": "task ids for a live query (instead of the journal)"}),
)
_UNITS = MappingProxyType({"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800})
_ID_SEPARATORS = re.compile(r"[\s,\[\]()'\"]+")
UNKNOWN_ADVICE = (
    "These paid requests may or may not have reached the service (no answer came back). Do not resend "
    "them blindly: a resend can charge twice. Check %musicgen_key (have the credits gone down?) and "
    "%musicgen_tasks for songs you did not expect, then decide."
)


# ---------------------------------------------------------------------------------------------------
# Small helpers.


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Turn library errors into one-line `UsageError`s (the messages already say what to do)."""
    try:
        yield
    except CreateOutcomeUnknownError as exc:
        raise UsageError(f"{one_line(exc)} (%musicgen_resume lists such requests.)") from None
    except RequestValidationError as exc:  # names each field: "title: at most 80 characters (got 95)"
        raise UsageError(one_line(exc)) from None
    except MusicGenError as exc:
        raise UsageError(one_line(exc)) from None


@contextmanager
def ignored_fields_notes() -> Iterator[None]:
    """Show `IgnoredFieldsWarning`s once each as a short note; pass other warnings on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    seen: set[str] = set()
    for item in caught:
        message = str(item.message)
        if not issubclass(item.category, IgnoredFieldsWarning):
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        elif message not in seen:
            seen.add(message)
            print(f"Note: {message}")


def show_notes(call: MusicgenCall) -> None:
    """The notes of a parsed line, once each, before anything is sent."""
    if call.kept:
        note = "only {name} and {name.attr} of your variables are replaced"
        print(f"Note: {', '.join(call.kept)} left as typed: {note}.")
    for message in call.notes:
        print(f"Note: {message}")


def parse_since(text: str) -> float:
    """`30m`, `1h`, `2d`, `1w` ago, or an ISO date/time (local time when naive), as a timestamp."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if match:
        return time.time() - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(f"--since {text!r}: use 30m, 1h, 2d, 1w or an ISO date like 2025-05-01") from None


def split_ids(text: str) -> list[str]:
    """Ids from `a b`, `a,b` or a pasted list like `['a', 'b']`."""
    return [part for part in _ID_SEPARATORS.split(text) if part]


# ---------------------------------------------------------------------------------------------------
# The magics.


@magics_class
class MusicGen(Magics):
    """Magics for the music service. Settings: `%config MusicGen` lists them."""

    base_url = Unicode("", help="v1 service address (empty: MUSICGEN_BASE_URL or the default)").tag(config=True)
    v2_base_url = Unicode("", help="v2 service address (empty: MUSICGEN_V2_BASE_URL or the default)").tag(config=True)
    default_model = Unicode(
        "", help="model for new songs: a v1 name (MFV2.0) for v1, a v2 name (v4.5) for --v2; empty = service default"
    ).tag(config=True)
    default_v2_model = Unicode("v4.5", help="v2 model_version when neither --model-version nor a v2 default_model").tag(
        config=True
    )
    poll_interval = Float(None, allow_none=True, help="seconds between task queries (empty: 5)").tag(config=True)
    timeout = Float(None, allow_none=True, help="HTTP timeout in seconds (empty: 30)").tag(config=True)
    auto_watch = Bool(True, help="show a live task watcher under each %%musicgen").tag(config=True)
    allow_unknown_models = Bool(False, help="let model names outside the known tables through").tag(config=True)
    archive_dir = Unicode(
        "", help="where finished songs are archived (empty: MUSICGEN_ARCHIVE or the user data dir; off: none)"
    ).tag(config=True)

    @observe("archive_dir")
    def _push_archive_dir(self, change: Mapping[str, Any]) -> None:
        from ..workspace.session import set_archive_dir  # the session's workspaces and hand-made clients

        value = str(change["new"] or "").strip()
        set_archive_dir(False if value.lower() in {"off", "false", "0", "no"} else (value or None))

    @validate("poll_interval", "timeout")
    def _positive_seconds(self, proposal: Mapping[str, Any]) -> float | None:
        """A NaN, infinite, zero or negative interval would hang or spin the watcher: refuse it here."""
        value = proposal["value"]
        if value is not None and (not math.isfinite(value) or value <= 0):
            name = proposal["trait"].name
            raise TraitError(f"MusicGen.{name}: use a positive number of seconds (got {value!r}); nothing changed")
        return value

    @observe(*SETTINGS_TRAITS)
    def _push_setting(self, change: Mapping[str, Any]) -> None:
        """`%config MusicGen.x = v` changes the shared client; an empty value falls back to the environment."""
        value = change["new"]
        session.configure(**{change["name"]: value if isinstance(value, bool) else (value or None)})

    # -- helpers -----------------------------------------------------------------------------------------

    @property
    def user_ns(self) -> dict[str, Any]:
        return self.shell.user_ns if self.shell is not None else {}

    def _parse(self, magic: Any, line: str, options: Iterable[Option]) -> tuple[Any, str]:
        """(parsed options, free text). `{name}` is expanded in both unless `--no-expand` is given."""
        argv, text = split_line(line, options)
        stray = stray_options(text, options)
        if stray:
            raise UsageError(f"put options before the text: {' '.join(stray)} came after it")
        if "--no-expand" not in argv:
            kept = [field for token in argv for field in left_verbatim(token, self.user_ns)]
            if kept:
                note = "only {name} and {name.attr} of your variables are replaced"
                print(f"Note: {', '.join(kept)} left as typed: {note}.")
            argv = [expand(token, self.user_ns) for token in argv]
            text = expand(text, self.user_ns)
        return magic.parser.parse_args(argv), text

    def _body(self, args: Any, text: str, cell: str | None) -> str:
        if cell is None:
            return text.strip()
        if text:
            raise UsageError(f"unexpected text on the magic line: {text!r} (quote option values with spaces)")
        return (cell if args.no_expand else expand(cell, self.user_ns)).strip()

    def _store(self, args: Any, value: Any) -> Any:
        if getattr(args, "out", None):
            self.user_ns[args.out] = value
        return value

    def parse_line(self, line: str, cell: str | None = None, parser: Any = None) -> MusicgenCall:
        """One `%musicgen` line (+ body) as a validated request, with this kernel's variables and defaults.

        For other magics (batches) that take the same lines; problems are one-line `UsageError`s.
        """
        return parse_musicgen(
            line,
            cell,
            namespace=self.user_ns,
            default_model=self.default_model,
            default_v2_model=self.default_v2_model,
            allow_unknown_models=session.settings().allow_unknown_models,
            parser=parser,
        )

    # -- %%musicgen ----------------------------------------------------------------------------------------

    @no_var_expand
    @line_cell_magic
    @magic_arguments()
    @with_options(MUSICGEN_OPTIONS)
    def musicgen(self, line: str, cell: str | None = None) -> Any:
        """Make songs. The cell body is the description, or the lyrics (see below).

        %%musicgen [options]          cell body = description (auto) or lyrics
        %musicgen [options] TEXT      line form: TEXT plays the role of the cell body

        Which action (v1), unless --action says so:
          --singer-id                          -> artist_consistency (body = lyrics)
          --audio-url alone                    -> upload
          --audio-url with anything else       -> upload_extend (body = lyrics)
          --continue-song-id / --continue-at   -> extend (body = lyrics); concat needs --action concat
          --title or --lyrics, or body + --style -> custom (body = lyrics; with --lyrics, body = style)
          otherwise                            -> auto (body = description, sent as style)

        v2 (--v2): description mode (is_auto=1, body = prompt) unless --prompt/--style, --lyrics,
        --title, --instrumental or --continue-* is given: then custom mode (is_auto=0); the body is the
        prompt, or the lyrics when --prompt is given.

        Models: --mv / --model-version, else %config MusicGen.default_model (empty: service default).
        {name} in the body and options is replaced by your variable (unknown names stay; {{ gives {).

        Returns the task ids at once (v1: GenerateResult, v2: list of song ids) and shows a live
        watcher (%config MusicGen.auto_watch); --wait blocks and returns the finished songs.
        Examples:
          %musicgen lo-fi beat with rain, calm
          %%musicgen --title "Rain" --style "indie folk"
          {lyrics}
        """
        call = self.parse_line(line, cell, parser=self.musicgen.parser)
        show_notes(call)
        args = call.args
        with friendly_errors():
            client = session.get_client()
            ids, songs, immediate = self._submit(client, call)
            value = self._follow(client, args, ids, songs, immediate, call.request)
        return self._store(args, value)

    def _submit(self, client: MusicClient, call: MusicgenCall) -> tuple[list[str], list[V2Song], Any]:
        """Send the request built (and validated, once) by `parse_line`: (v1 ids, v2 songs, result).

        v2 songs are kept whole: their titles and lyrics seed the watcher and the wait, because the v2
        query answers them blank.
        """
        with warnings.catch_warnings():  # its notes were shown once already
            warnings.simplefilter("ignore", IgnoredFieldsWarning)
            if call.v2:
                songs = client.submit_v2(call.request)
                return [], songs, [song.id for song in songs]
            if isinstance(call.request, EngineRequest):  # --provider elevenlabs|lyria: runs in the background
                result = client.generate(**call.request.model_dump(exclude_none=True))
                return list(result.ids), [], result
            result = client.generate(call.request)
        return list(result.ids), [], result

    def _follow(
        self, client: MusicClient, args: Any, ids: list[str], songs: list[V2Song], immediate: Any, request: Any
    ) -> Any:
        """Show a watcher (unless turned off) and, with --wait, block until every song is finished."""
        watcher = self._watch(client, ids, songs, request) if self.auto_watch and not args.no_watch else None
        if not args.wait:
            return immediate
        timeout = args.timeout if args.timeout is not None else client.settings.wait_timeout
        started = time.monotonic()
        records = list(watcher.wait(timeout)) if watcher is not None else client.wait([*ids, *songs], timeout=timeout)
        failed = [r for r in records if r.state is TaskState.FAILED]
        for record in failed:
            print(f"Task {one_line_text(record.id)} failed: {one_line_text(record.fail_reason) or 'no reason given'}")
        for note in archive_notes(client, records, timeout, started):  # so waveform(id) in the next cell finds it
            print(one_line_text(note))
        return Songs(records, shown_above=watcher is not None)  # the watcher plays them: no second player

    def _watch(self, client: MusicClient, ids: list[str], songs: list[V2Song], request: Any) -> TaskWatcher:
        from ..widgets.ui import UI

        # registers itself for shutdown(); knowing the request, a failed call offers Retry; its Extend opens a studio
        if isinstance(request, EngineRequest):  # a card's Retry would send the service's request: none for engines
            request = None
        watcher = UI().watcher(ids, v2_ids=songs, client=client, request=request)
        shown = display(watcher, display_id=True)
        if shown is not None:  # its text, saved with the notebook, is rewritten once the songs are finished
            watcher.when_done(lambda: shown.update(watcher))
        return watcher

    # -- %lyrics ---------------------------------------------------------------------------------------------

    @no_var_expand
    @line_cell_magic
    @magic_arguments()
    @with_options(LYRICS_OPTIONS)
    def lyrics(self, line: str, cell: str | None = None) -> Lyrics:
        """Write lyrics from a prompt; returns them (a str with a .title) so `lyrics = %lyrics ...` works.

        %lyrics a song about the first snow
        %%lyrics            (long prompt in the cell)
        Use them in a song with {lyrics}:  %%musicgen --title "{lyrics.title}" --style pop  /  {lyrics}
        """
        args, text = self._parse(self.lyrics, line, LYRICS_OPTIONS)
        cell_text = "" if cell is None or args.no_expand else expand(cell, self.user_ns)
        prompt = "\n".join(part for part in (text.strip(), cell_text.strip()) if part)
        if not prompt:
            raise UsageError("give a prompt: %lyrics a song about ...")
        with friendly_errors():
            result = session.get_client().lyrics(prompt)
        return self._store(args, Lyrics(result.text, result.title))

    # -- key, tasks, resume, login, ui -------------------------------------------------------------------

    @line_magic
    def musicgen_key(self, line: str = "") -> KeyReport:
        """What the API key in use may still do (credits left, name, dates); the key stays masked."""
        with friendly_errors():
            client = session.get_client()
            info = client.key_info()
        host = public_address(client.settings.base_url) + (" (local sandbox)" if session.in_sandbox() else "")
        return KeyReport(info, mask_key(client.settings.key_value()), host)

    @no_var_expand
    @line_magic
    @magic_arguments()
    @with_options(TASKS_OPTIONS)
    def musicgen_tasks(self, line: str = "") -> Table:
        """Recent tasks from the journal (filters below), or a live query of the given ids.

        %musicgen_tasks --state complete --since 2d
        %musicgen_tasks {songs.ids}
        """
        args, text = self._parse(self.musicgen_tasks, line, TASKS_OPTIONS)
        ids = split_ids(text)
        with friendly_errors():
            table = self._live_tasks(ids, args.v2) if ids else self._history(args)
        return self._store(args, table)

    def _history(self, args: Any) -> Table:
        since = parse_since(args.since) if args.since else None
        entries = session.get_journal().history(state=args.state, since=since, text=args.text, limit=args.limit)
        caption = f"{len(entries)} task(s) from the journal" if entries else "No tasks in the journal match."
        return Table([entry_row(e) for e in entries], entries, caption)

    def _live_tasks(self, ids: list[str], all_v2: bool) -> Table:
        client = session.get_client()
        v2 = set(ids) if all_v2 else self._known_v2(ids)
        records: list[Record] = list(client.tasks([i for i in ids if i not in v2])) if set(ids) - v2 else []
        records += [client.query_v2(i) for i in ids if i in v2]
        return Table([record_row(r) for r in records], records, f"{len(records)} task(s), live")

    @staticmethod
    def _known_v2(ids: list[str]) -> set[str]:
        """Ids the journal knows as v2 songs (they are queried one by one on the v2 host)."""
        journal = session.get_journal()
        return {i for i in ids if any(e.id == i and e.version == 2 for e in journal.history(text=i, limit=20))}

    @line_magic
    def musicgen_resume(self, line: str = "") -> TaskWatcher | None:
        """Watch unfinished tasks again (after a restart), and list paid requests with an unknown outcome."""
        with friendly_errors():
            found = session.get_client().unfinished()  # the journal's, for the hosts in use
            if found.unknown:
                print(f"{len(found.unknown)} paid request(s) with an unknown outcome:")
                for attempt in found.unknown:
                    print(f"  {attempt.describe()}")
                print(UNKNOWN_ADVICE)
            if not found.ids:
                print("No unfinished tasks to resume.")
                return None
            from ..widgets.ui import UI

            return UI().watch_unfinished()

    @line_magic
    def musicgen_login(self, line: str = "") -> None:
        """Ask for the API key without echoing it; it is kept in memory for this kernel only."""
        if line.strip():
            raise UsageError(
                "do not type the key into the notebook: run %musicgen_login alone and paste it at the prompt."
            )
        key = getpass.getpass("Music service API key (hidden): ").strip()
        if not key:
            raise UsageError("no key entered; nothing changed.")
        session.set_api_key(key)
        print("Key set for this kernel only (not saved in the notebook). %musicgen_key shows what it may do.")

    @line_magic
    def musicgen_ui(self, line: str = "") -> None:
        """Open the studio: forms for every action, lyrics, key info and the task list."""
        from ..widgets.ui import UI

        display(UI().studio())


# ---------------------------------------------------------------------------------------------------
# Extension entry points.


def service_line(settings: Settings | None = None) -> str:
    """One line saying which service the magics will use: the sandbox, or the real host (never the key)."""
    current = settings or session.settings()
    if not current.has_key:
        return (
            "ipymusicgen: no API key set, so songs come from a local sandbox on this machine (free, nothing is "
            "sent anywhere); set MUSICGEN_API_KEY or run %musicgen_login for the real service."
        )
    where = public_address(current.base_url)
    v2 = public_address(current.v2_base_url)
    hosts = where if v2 == where else f"{where} (v2: {v2})"
    return f"ipymusicgen: using the music service at {hosts} with your API key; songs there cost credits."


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register the magics once and say which service they will use; loading again is a no-op."""
    if isinstance(ipython.magics_manager.registry.get(CONFIG_NAME), MusicGen):
        return
    ipython.register_magics(MusicGen(shell=ipython))
    from .library_magics import register as register_library  # %musicgen_library (library_magics.py)

    register_library(ipython)
    from .batch_magics import register as register_batch  # %%musicgen_batch (batch_magics.py)

    register_batch(ipython)
    from .extra_magics import register as register_extras  # %musicgen_wav / _mp4 / _vibe (extra_magics.py)

    register_extras(ipython)
    print(service_line())
    session.mark_notice_shown()  # this line said it: the sandbox need not say it again when it starts


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Stop watchers, client and sandbox, and remove the magics and their config section."""
    session.shutdown()
    from .library_magics import unregister as unregister_library

    unregister_library(ipython)
    from .batch_magics import unregister as unregister_batch

    unregister_batch(ipython)
    from .extra_magics import unregister as unregister_extras

    unregister_extras(ipython)
    magics = unregister_magics(ipython, MusicGen)
    if magics is None:
        return
    if magics in ipython.configurables:
        ipython.configurables.remove(magics)
