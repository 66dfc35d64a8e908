"""The notebook command surface: `%%musicgen`, `%lyrics`, `%musicgen_key`, `%musicgen_tasks` and friends.

The magics only translate cells into requests: they build models with `models.build_*` and call the
one shared client (`session.get_client()`); validation, HTTP and the journal live there. User mistakes
and service refusals become one-line `UsageError`s, because a traceback wall helps nobody in a cell.
"""

from __future__ import annotations

import getpass
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import magic_arguments
from IPython.display import display
from traitlets import Bool, Float, Unicode, observe

from . import session
from .errors import CreateOutcomeUnknownError, IgnoredFieldsWarning, MusicGenError
from .interpolate import expand, left_verbatim
from .magic_args import (
    MUSICGEN_OPTIONS,
    OUTPUT_OPTIONS,
    Option,
    split_line,
    stray_options,
    v1_fields,
    v2_fields,
    with_options,
)
from .models import V2_MODELS, KeyInfo, build_generate_request, build_v2_request
from .safe_html import esc, http_url, link
from .tasks import TaskState

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .client import MusicClient, Record
    from .journal import JournalEntry
    from .widgets import TaskWatcher

CONFIG_NAME = "MusicGen"
SETTINGS_TRAITS = ("base_url", "v2_base_url", "poll_interval", "timeout", "allow_unknown_models")
"""Traits that are `Settings` fields: a change goes straight to `session.configure`."""

LYRICS_OPTIONS = (*OUTPUT_OPTIONS, Option(("prompt",), {"nargs": "*", "help": "what the lyrics should be about"}))
TASKS_OPTIONS = (
    Option(("--state",), {"choices": [s.value for s in TaskState], "help": "only tasks in this state"}),
    Option(("--since",), {"metavar": "WHEN", "help": "only tasks started since: 30m, 1h, 2d, 1w or an ISO date"}),
    Option(("--text",), {"help": "only tasks whose title, style or id contains this"}),
    Option(("--limit",), {"type": int, "default": 20, "help": "at most this many rows (default 20)"}),
    Option(("--v2",), {"action": "store_true", "help": "query the given ids as v2 songs"}),
    *OUTPUT_OPTIONS,
    Option(("ids",), {"nargs": "*", "help": "task ids for a live query (instead of the journal)"}),
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_ID_SEPARATORS = re.compile(r"[\s,\[\]()'\"]+")
UNKNOWN_ADVICE = (
    "These paid requests may or may not have reached the service (no answer came back). Do not resend "
    "them blindly: a resend can charge twice. Check %musicgen_key (has the music count gone down?) and "
    "%musicgen_tasks for songs you did not expect, then decide."
)


# ---------------------------------------------------------------------------------------------------
# What the magics return: plain values that also display nicely.


class Lyrics(str):
    """Lyrics text with its title: a `str`, so `{lyrics}` and `lyrics.splitlines()` just work."""

    title: str | None

    def __new__(cls, text: str, title: str | None = None) -> Lyrics:
        obj = super().__new__(cls, text)
        obj.title = title
        return obj

    def __getnewargs__(self) -> tuple[str, str | None]:  # type: ignore[override]
        return str(self), self.title

    def as_text(self) -> str:
        return f"{self.title}\n\n{self}" if self.title else str(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.as_text())

    def _repr_html_(self) -> str:
        title = f"<h4>{esc(self.title)}</h4>" if self.title else ""
        body = esc(str(self))
        return f'<div class="ipymusicgen-lyrics">{title}<pre style="white-space: pre-wrap">{body}</pre></div>'


class Table:
    """Rows of text with an HTML face and an aligned plain-text face."""

    def __init__(self, rows: list[dict[str, str]], items: Sequence[Any] = (), caption: str = "") -> None:
        self.rows = rows
        self.items = list(items)
        self.caption = caption

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def _columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []

    def __repr__(self) -> str:
        if not self.rows:
            return self.caption or "(nothing)"
        columns = self._columns()
        widths = {c: max(len(c), *(len(r.get(c, "")) for r in self.rows)) for c in columns}
        lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
        lines += ["  ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in self.rows]
        return "\n".join(([self.caption] if self.caption else []) + lines)

    def _repr_html_(self) -> str:
        caption = f"<caption>{esc(self.caption)}</caption>" if self.caption else ""
        if not self.rows:
            return f"<p>{esc(self.caption or '(nothing)')}</p>"
        head = "".join(f"<th>{esc(c)}</th>" for c in self._columns())
        body = "".join(
            "<tr>" + "".join(f"<td>{self._cell_html(c, r.get(c, ''))}</td>" for c in self._columns()) + "</tr>"
            for r in self.rows
        )
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def _cell_html(self, column: str, value: str) -> str:
        """Escaped text; a URL column's absolute http(s) URL becomes a link."""
        return link(value) if column in URL_COLUMNS else esc(value)


URL_COLUMNS = frozenset({"audio"})
"""Columns whose values come from URL fields; any other column is text, even if it looks like a URL."""


class Songs(list):  # type: ignore[type-arg]
    """Finished songs from `--wait`: a plain list of records that shows as a table with players."""

    def _table(self) -> Table:
        return _SongTable([record_row(r) for r in self], self, f"{len(self)} song(s)")

    def __repr__(self) -> str:
        return repr(self._table())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        return self._table()._repr_html_()


class _SongTable(Table):
    def _cell_html(self, column: str, value: str) -> str:
        """The audio column as a player (no autoplay, no loop), for http(s) URLs only."""
        url = http_url(value) if column in URL_COLUMNS else None
        if url is not None:
            return f'<audio controls preload="none" src="{esc(url)}"></audio>'
        return super()._cell_html(column, value)


class KeyReport(Table):
    """Key info as a two-column table; `.info` is the `KeyInfo` (its key is a masked `SecretStr`)."""

    def __init__(self, info: KeyInfo, masked_key: str, host: str) -> None:
        self.info = info
        fields = {
            "key name": info.key_name,
            "music counts left": info.key_music_counts,
            "key status": info.key_status,
            "e-mail": info.email,
            "member id": info.member_id,
            "created": _when(info.key_created_at),
            "updated": _when(info.key_updated_at),
            "last used": _when(info.key_recently_used_at),
            "key": masked_key,
            "service": host,
        }
        rows = [{"field": k, "value": _text(v)} for k, v in fields.items()]
        super().__init__(rows, [info], caption="API key")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _when(value: datetime | float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value)
    return value.strftime("%Y-%m-%d %H:%M")


def mask_key(key: str | None) -> str:
    """Enough of a key to tell two apart, never enough to use it."""
    if not key:
        return "(not set)"
    return "****" + key[-4:] if len(key) >= 16 else "****"


# ---------------------------------------------------------------------------------------------------
# Small helpers.


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Turn library errors into one-line `UsageError`s (the messages already say what to do)."""
    try:
        yield
    except CreateOutcomeUnknownError as exc:
        raise UsageError(f"{exc} (%musicgen_resume lists such requests.)") from None
    except MusicGenError as exc:
        raise UsageError(str(exc)) from None


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


def _duration(record: Record) -> str:
    seconds = record.duration_seconds
    return f"{seconds:.0f}s" if seconds is not None else ""


def record_row(record: Record) -> dict[str, str]:
    return {
        "id": record.id,
        "v": str(record.version),
        "state": record.state.value,
        "title": _text(record.title),
        "length": _duration(record),
        "audio": _text(record.audio_url) if record.state is TaskState.COMPLETE else "",
        "problem": _text(record.fail_reason),
    }


def entry_row(entry: JournalEntry) -> dict[str, str]:
    return {
        "id": entry.id,
        "v": str(entry.version),
        "state": entry.state,
        "started": _when(entry.created_at),
        "title": _text(entry.title),
        "style": _text(entry.style)[:60],
        "audio": _text(entry.audio_url) if entry.state == TaskState.COMPLETE.value else "",
        "saved to": _text(entry.downloaded_path),
    }


def _summary(payload: Mapping[str, Any]) -> str:
    parts = [f"{k}={str(payload[k])[:40]!r}" for k in ("action", "title", "style", "prompt") if payload.get(k)]
    return ", ".join(parts) or "(no fields)"


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

    def _models(self) -> tuple[str, str]:
        """(v1 default mv, v2 default model_version) from `default_model` / `default_v2_model`."""
        name = self.default_model.strip()
        if name in V2_MODELS:
            return "", name
        return name, self.default_v2_model.strip()

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
        args, text = self._parse(self.musicgen, line, MUSICGEN_OPTIONS)
        body = self._body(args, text, cell)
        with friendly_errors():
            client = session.get_client()
            with ignored_fields_notes():
                ids, v2_ids, immediate = self._submit(client, args, body)
            value = self._follow(client, args, ids, v2_ids, immediate)
        return self._store(args, value)

    def _submit(self, client: MusicClient, args: Any, body: str) -> tuple[list[str], list[str], Any]:
        """Build the request (all checks are the model's) and send it: (v1 ids, v2 ids, result)."""
        allow = client.settings.allow_unknown_models
        v1_default, v2_default = self._models()
        if args.v2:
            request = build_v2_request(v2_fields(args, body, v2_default), allow_unknown_models=allow)
            song_ids = [song.id for song in client.submit_v2(request)]
            return [], song_ids, song_ids
        model = build_generate_request(v1_fields(args, body, v1_default), allow_unknown_models=allow)
        result = client.generate(model)
        return list(result.ids), [], result

    def _follow(self, client: MusicClient, args: Any, ids: list[str], v2_ids: list[str], immediate: Any) -> Any:
        """Show a watcher (unless turned off) and, with --wait, block until every song is finished."""
        watcher = self._watch(client, ids, v2_ids) if self.auto_watch and not args.no_watch else None
        if not args.wait:
            return immediate
        timeout = args.timeout if args.timeout is not None else client.settings.wait_timeout
        if watcher is not None:
            records = list(watcher.wait(timeout))
        else:
            records = client.wait(ids, v2_ids=v2_ids, timeout=timeout)
        failed = [r for r in records if r.state is TaskState.FAILED]
        for record in failed:
            print(f"Task {record.id} failed: {record.fail_reason or 'no reason given'}")
        return Songs(records)

    def _watch(self, client: MusicClient, ids: list[str], v2_ids: list[str]) -> TaskWatcher:
        from .widgets import TaskWatcher

        watcher = TaskWatcher(ids, v2_ids=v2_ids, client=client)  # registers itself for shutdown()
        display(watcher)
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
        """What the API key in use may still do (music counts left, name, dates); the key stays masked."""
        with friendly_errors():
            client = session.get_client()
            info = client.key_info()
        host = client.settings.base_url + (" (local sandbox)" if session.in_sandbox() else "")
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
            journal = session.get_journal()
            unknown = journal.attempts(outcome="unknown")
            if unknown:
                print(f"{len(unknown)} request(s) with an unknown outcome:")
                for attempt in unknown:
                    print(f"  {_when(attempt.created_at)}  {attempt.endpoint}  {_summary(attempt.payload)}")
                print(UNKNOWN_ADVICE)
            if not session.get_client().unfinished().ids:  # the journal's unfinished tasks for these hosts
                print("No unfinished tasks to resume.")
                return None
            from .widgets import watch_unfinished

            return watch_unfinished()

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
        from .widgets import studio

        display(studio())


# ---------------------------------------------------------------------------------------------------
# Extension entry points.


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register the magics once; loading again is a no-op."""
    if isinstance(ipython.magics_manager.registry.get(CONFIG_NAME), MusicGen):
        return
    ipython.register_magics(MusicGen(shell=ipython))


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Stop watchers, client and sandbox, and remove the magics and their config section."""
    session.shutdown()
    magics = ipython.magics_manager.registry.pop(CONFIG_NAME, None)
    if not isinstance(magics, MusicGen):
        return
    for kind, table in magics.magics.items():
        registered = ipython.magics_manager.magics.get(kind, {})
        for name in table:
            if getattr(registered.get(name), "__self__", None) is magics:
                del registered[name]
    if magics in ipython.configurables:
        ipython.configurables.remove(magics)
