"""Command lines of the magics: options first, then free text kept exactly as typed.

`shlex` would choke on (or silently eat) the apostrophe in `%musicgen a song about my dog's day`, so
the option prefix is tokenized here and everything after it is handed over verbatim. Options are
declared once (`Option`) and feed both this tokenizer and `@magic_arguments`, so `%%musicgen?`
shows the same options that are parsed.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import re
import shlex
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser, argument

from ..errors import (
    IgnoredFieldsWarning,
    RequestValidationError,
    dashed_option,
    one_line,
    options_meant,
    unknown_option,
)
from ..models.schema import (
    ACTIONS,
    TITLE_MAX,
    V1_SHAPES,
    V2_MODELS,
    V2Request,
    build_generate_request,
    build_v2_request,
    field_descriptions,
)
from .engine_args import engine_request, provider_of, refuse_engine_options
from .interpolate import expand, left_verbatim

_TOKEN = re.compile(r"""(?:"[^"]*"|'[^']*'|\S)+""")
_VALUELESS = frozenset({"store_true", "store_false", "store_const", "count", "help"})
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")
"""What argparse itself reads as a negative number rather than an option."""
FLAG_VALUES = ("0", "1")
"""What a 0/1 spec field's option (`--instrumental`, `--is-auto`) may take after it; alone it means 1."""


@dataclass(frozen=True)
class Option:
    """One command-line option: its spellings and `argparse` keyword arguments."""

    names: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def takes_value(self) -> bool:
        return self.kwargs.get("action") not in _VALUELESS

    @property
    def value_optional(self) -> bool:
        """A 0/1 flag: the next token is its value only when it is 0 or 1, else it is text."""
        return self.kwargs.get("nargs") == "?"


def number(text: str) -> int | float:
    """A finite number of seconds: an int when whole (v2 wants an int), else a float."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"use a number of seconds (got {text!r})") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"use a finite number of seconds (got {text!r})")
    return int(value) if value.is_integer() else value


def seconds(text: str) -> float:
    """A positive, finite number of seconds (a timeout or an interval)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"use a number of seconds (got {text!r})") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"use a positive number of seconds (got {text!r})")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (`--limit`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"use a whole number of at least 1 (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"use a whole number of at least 1 (got {text!r})")
    return value


def flag01(text: str) -> int:
    """A spec 0/1 field's value: `1` or `0` (as the API takes it)."""
    if text.strip() not in FLAG_VALUES:
        raise argparse.ArgumentTypeError(f"use 1 or 0, or the option alone for 1 (got {text!r})")
    return int(text)


def identifier(text: str) -> str:
    """A valid Python name for `-o`."""
    if not text.isidentifier():
        raise ValueError(text)
    return text


def with_options(options: Iterable[Option]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Apply `@argument` for each option, in order, so the help lists them as declared."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__doc__ = inspect.cleandoc(func.__doc__ or "")
        for option in reversed(list(options)):
            func = argument(*option.names, **option.kwargs)(func)
        return func

    return decorate


def _unquote(token: str) -> str:
    try:
        parts = shlex.split(token)
    except ValueError:
        return token
    return parts[0] if len(parts) == 1 else token


def _closed(option: str, value: str) -> str:
    """An option's value as typed; one that opens a quote it never closes is refused (it would eat the text)."""
    if value[:1] in ('"', "'") and _unquote(value) == value:
        raise UsageError(f"{option}: the quote opened in {value!r} is never closed")
    return value


def split_line(line: str, options: Iterable[Option]) -> tuple[list[str], str]:
    """(option tokens, the rest of the line verbatim). Options stop at the first non-option or `--`.

    An `--option` not among `options` is a UsageError naming it and the closest known one: left to argparse or
    taken for text, a typo's value would end the options and the next option would be blamed instead."""
    options = list(options)
    takes_value = {name: o.takes_value for o in options for name in o.names}
    optional = {name for o in options if o.value_optional for name in o.names}
    argv: list[str] = []
    expect_value = False
    maybe_flag_value = False
    for match in _TOKEN.finditer(line):
        token = match.group()
        if maybe_flag_value and _unquote(token) in FLAG_VALUES:
            argv.append(_unquote(token))
            maybe_flag_value = False
            continue
        maybe_flag_value = False
        if expect_value:
            value = _unquote(_closed(argv[-1], token))
            if value.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(value):
                argv[-1] += "=" + value  # argparse would take `-inf` or `-weird` for an option
            else:
                argv.append(value)
            expect_value = False
            continue
        if token == "--":
            return argv, line[match.end() :].strip()
        if dashed_option(token) and options_meant(token.partition("=")[0], takes_value, cutoff=0.8):
            raise UsageError(unknown_option(token.partition("=")[0], takes_value))  # —title, not text (—wistful is)
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d.*", token):
            return argv, line[match.start() :].strip()
        name, _, given = token.partition("=")
        if name.startswith("--") and name != "--" and name not in takes_value:
            raise UsageError(unknown_option(name, (n for n in takes_value if n.startswith("--"))))
        _closed(name, given)
        argv.append(_unquote(token))
        if "=" not in token and name in optional:
            maybe_flag_value = True
        else:
            expect_value = "=" not in token and takes_value.get(name, False)
    return argv, ""


def stray_options(text: str, options: Iterable[Option]) -> list[str]:
    """Known `--options` written after the free text (where they would silently become text)."""
    names = {name for o in options for name in o.names if name.startswith("--")}
    return [token for token in text.split() if token.split("=", 1)[0] in names]


# ---------------------------------------------------------------------------------------------------
# %%musicgen options, and how they become a request.

OUTPUT_OPTIONS = (
    Option(("-o", "--out"), {"type": identifier, "metavar": "NAME", "help": "also store the result in this variable"}),
    Option(("--no-expand",), {"action": "store_true", "help": "do not replace {name} with your variables"}),
)
_FIELD_WORDS = field_descriptions(*V1_SHAPES.values(), V2Request)


def said(field: str, note: str = "") -> str:
    """A request option's help: its model's description (the one vocabulary), then what the magic adds."""
    words = _FIELD_WORDS[field].replace("%", "%%")  # argparse formats help with %
    return f"{words} {note}" if note else words


MUSICGEN_OPTIONS = (
    Option(("-a", "--action"), {"help": said("action", "(default: inferred, see above)")}),
    Option(("--mv",), {"help": said("mv", "(v1; default: %%config MusicGen.default_model)")}),
    Option(("--style",), {"help": said("style")}),
    Option(("--title",), {"help": said("title", f"(at most {TITLE_MAX} characters)")}),
    Option(("--lyrics",), {"help": said("lyrics", "(handy in the line form with {variable})")}),
    Option(("--gender",), {"help": said("gender")}),
    Option(
        ("--instrumental",),
        {"nargs": "?", "const": 1, "type": flag01, "metavar": "0|1", "help": said("instrumental", "(alone: 1)")},
    ),
    Option(("--continue-at",), {"type": number, "metavar": "SECONDS", "help": said("continue_at")}),
    Option(
        ("--continue-song-id",), {"metavar": "ID", "help": said("continue_song_id", "(extend, concat, upload_extend)")}
    ),
    Option(("--audio-url",), {"metavar": "URL", "help": said("audio_url")}),
    Option(("--singer-id",), {"metavar": "ID", "help": said("singer_id", "from generate-vibe")}),
    Option(("--v2",), {"action": "store_true", "help": "use the v2 endpoint (/v2/submit)"}),
    Option(("--model-version",), {"metavar": "MODEL", "help": said("model_version", "(default: default_v2_model)")}),
    Option(
        ("--is-auto",),
        {"nargs": "?", "const": 1, "type": flag01, "metavar": "0|1", "help": said("is_auto", "(v2; alone: 1)")},
    ),
    Option(("--prompt",), {"help": said("prompt", "(v2 custom mode; the cell body is then the lyrics)")}),
    Option(("--provider",), {"metavar": "NAME", "help": "the engine: musicful (default), elevenlabs or lyria"}),
    Option(("--seconds",), {"type": number, "metavar": "SECONDS", "help": "length (elevenlabs 3-600; lyria clip 30)"}),
    Option(("--seed",), {"type": int, "metavar": "N", "help": "elevenlabs with lyrics (a composition plan) only"}),
    Option(("--timestamps",), {"action": "store_true", "help": "elevenlabs: word timestamps with the song"}),
    *OUTPUT_OPTIONS,
    Option(("--wait",), {"action": "store_true", "help": "block until the songs are finished; return them"}),
    Option(("--timeout",), {"type": seconds, "metavar": "SECONDS", "help": "give up waiting after this long"}),
    Option(("--no-watch",), {"action": "store_true", "help": "no watcher: return the task ids at once"}),
    Option(("text",), {"nargs": "*", "help": "line form: the description (or lyrics, as the cell body would be)"}),
)
V1_FIELDS = ("mv", "style", "title", "lyrics", "gender", "instrumental", "continue_at", "continue_song_id")
V1_FIELDS += ("audio_url", "singer_id")
V2_EXTRA_FIELDS = ("title", "instrumental", "continue_at", "continue_song_id")
V2_ONLY = ("is_auto", "model_version", "prompt")
V1_ONLY = ("action", "gender", "audio_url", "singer_id")
_LYRICS_ACTIONS = frozenset({"custom", "extend", "upload_extend", "artist_consistency"})


def _given(args: Any, names: Iterable[str]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def infer_action(fields: Mapping[str, Any], body: str) -> str:
    """The action a person most likely means, from the fields they gave (documented in `%%musicgen?`)."""
    if "singer_id" in fields:
        return "artist_consistency"
    if "audio_url" in fields:
        return "upload_extend" if len(fields) > 1 or body else "upload"
    if "continue_song_id" in fields or "continue_at" in fields:
        return "extend"
    if "title" in fields or "lyrics" in fields or (body and "style" in fields):
        return "custom"
    return "auto"


def _place_body(fields: dict[str, Any], body: str, targets: tuple[str, ...], what: str) -> None:
    """Put the cell body into the first target field the options left empty."""
    if not body:
        return
    for target in targets:
        if target not in fields:
            fields[target] = body
            return
    names = " and ".join(f"--{t.replace('_', '-')}" for t in targets)
    raise UsageError(f"{what} already has {names}; there is nowhere to put the cell text.")


def v1_fields(args: Any, body: str, default_model: str) -> dict[str, Any]:
    """The v1 request fields from options and body: action inferred, body as style or lyrics."""
    fields = _given(args, V1_FIELDS)
    action = args.action or infer_action(fields, body)
    if action not in ACTIONS:
        raise UsageError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    v2_only = [f"--{n.replace('_', '-')}" for n in V2_ONLY if getattr(args, n, None) is not None]
    if v2_only:
        raise UsageError(f"{' and '.join(v2_only)} belong to v2 requests: add --v2")
    if action == "auto":
        _place_body(fields, body, ("style",), "auto")
    elif action in _LYRICS_ACTIONS:
        _place_body(fields, body, ("lyrics", "style"), action)
    elif body:
        raise UsageError(f"the {action} action takes no description or lyrics; remove the text.")
    if default_model and "mv" not in fields and action not in ("concat", "upload"):
        fields["mv"] = default_model
    return {"action": action, **fields}


def v2_fields(args: Any, body: str, default_model: str) -> dict[str, Any]:
    """The v2 request fields: the body is the prompt, or the lyrics when `--prompt` is given.

    Custom mode (is_auto=0) when a prompt option, lyrics, title, instrumental or extension is given.
    """
    v1_only = [f"--{n.replace('_', '-')}" for n in V1_ONLY if getattr(args, n, None) is not None]
    if v1_only:
        raise UsageError(f"{' and '.join(v1_only)} belong to v1 requests: remove --v2 or the option")
    fields = _given(args, (*V2_EXTRA_FIELDS, "lyrics"))
    prompt = args.prompt or args.style
    if prompt:
        fields["prompt"] = prompt
    is_auto = args.is_auto if args.is_auto is not None else int(not fields)
    _place_body(fields, body, ("prompt", "lyrics"), "v2")
    model = args.model_version or args.mv or default_model
    return {"is_auto": is_auto, "model_version": model, **fields}


# ---------------------------------------------------------------------------------------------------
# One %musicgen line (+ body) into a request model: shared by the magic and by batches.


@dataclass
class MusicgenCall:
    """What one `%musicgen` line asks for: the validated request, the parsed options, and notes to show.

    `notes` are the fields left as typed (`{name}` that is not a variable) and what the service will
    ignore (`IgnoredFieldsWarning`), each once; the caller shows them before sending.
    """

    request: Any
    args: Any
    kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def v2(self) -> bool:
        return isinstance(self.request, V2Request)


def musicgen_parser(prog: str = "%musicgen") -> MagicArgumentParser:
    """An argument parser for `MUSICGEN_OPTIONS` whose errors are one-line `UsageError`s."""
    parser = MagicArgumentParser(prog=prog, add_help=False)
    for option in MUSICGEN_OPTIONS:
        parser.add_argument(*option.names, **option.kwargs)
    return parser


@functools.cache
def _default_parser() -> MagicArgumentParser:
    """`%musicgen`'s parser, built once (argparse never changes a parser while parsing)."""
    return musicgen_parser()


def unregister_magics(ipython: Any, kind: type) -> Any:
    """Remove a Magics class's registered instance and the magics it added (on `%unload_ext`); return it."""
    manager = ipython.magics_manager
    for name, magics in list(manager.registry.items()):
        if not isinstance(magics, kind):
            continue
        del manager.registry[name]
        for magic_kind, table in magics.magics.items():
            registered = manager.magics.get(magic_kind, {})
            for magic_name in table:
                if getattr(registered.get(magic_name), "__self__", None) is magics:
                    del registered[magic_name]
        return magics
    return None


def parse_musicgen(
    line: str,
    cell: str | None = None,
    *,
    namespace: Mapping[str, Any] | None = None,
    default_model: str = "",
    default_v2_model: str = "v4.5",
    allow_unknown_models: bool = False,
    parser: argparse.ArgumentParser | None = None,
) -> MusicgenCall:
    """Turn what follows `%musicgen` (and the cell body, if any) into a validated request model.

    `{name}` is expanded from `namespace` unless `--no-expand` is given. Every problem (an unknown
    option or action, a bad number, a field the spec refuses) is a one-line `UsageError` naming it;
    nothing is sent. `default_model` may be a v1 name (used for v1) or a v2 name (used with --v2).
    """
    parser = parser if parser is not None else _default_parser()
    namespace = namespace or {}
    argv, text = split_line(line, MUSICGEN_OPTIONS)
    stray = stray_options(text, MUSICGEN_OPTIONS)
    if stray:
        raise UsageError(f"put options before the text: {' '.join(stray)} came after it")
    kept: list[str] = []
    expanding = "--no-expand" not in argv
    if expanding:
        kept = [f for token in argv for f in left_verbatim(token, namespace)]
        argv = [expand(token, namespace) for token in argv]
        text = expand(text, namespace)
    args = parser.parse_args(argv)
    if cell is None:
        body = text.strip()
    elif text:
        raise UsageError(f"unexpected text on the magic line: {text!r} (quote option values with spaces)")
    else:
        body = (expand(cell, namespace) if expanding else cell).strip()
    name = default_model.strip()
    v1_default, v2_default = ("", name) if name in V2_MODELS else (name, default_v2_model.strip())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IgnoredFieldsWarning)
        try:
            provider = provider_of(args)  # --provider elevenlabs|lyria: a synchronous engine (notebook/engine_args.py)
            if provider != "musicful":
                request = engine_request(args, body, provider)
            elif refuse_engine_options(args, provider) is None and args.v2:
                request = build_v2_request(v2_fields(args, body, v2_default), allow_unknown_models=allow_unknown_models)
            else:
                request = build_generate_request(
                    v1_fields(args, body, v1_default), allow_unknown_models=allow_unknown_models
                )
        except RequestValidationError as exc:
            raise UsageError(one_line(exc)) from None
    notes: list[str] = []
    for item in caught:
        if not issubclass(item.category, IgnoredFieldsWarning):
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        elif str(item.message) not in notes:
            notes.append(str(item.message))
    return MusicgenCall(request, args, kept, notes)
