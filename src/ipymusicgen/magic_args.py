"""Command lines of the magics: options first, then free text kept exactly as typed.

`shlex` would choke on (or silently eat) the apostrophe in `%musicgen a song about my dog's day`, so
the option prefix is tokenized here and everything after it is handed over verbatim. Options are
declared once (`Option`) and feed both this tokenizer and `@magic_arguments`, so `%%musicgen?`
shows the same options that are parsed.
"""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from .models import ACTIONS

_TOKEN = re.compile(r"""(?:"[^"]*"|'[^']*'|\S)+""")
_VALUELESS = frozenset({"store_true", "store_false", "store_const", "count", "help"})


@dataclass(frozen=True)
class Option:
    """One command-line option: its spellings and `argparse` keyword arguments."""

    names: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def takes_value(self) -> bool:
        return self.kwargs.get("action") not in _VALUELESS


def number(text: str) -> int | float:
    """An int when the text is whole (v2 wants an int), else a float."""
    value = float(text)
    return int(value) if value.is_integer() else value


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


def split_line(line: str, options: Iterable[Option]) -> tuple[list[str], str]:
    """(option tokens, the rest of the line verbatim). Options stop at the first non-option or `--`."""
    takes_value = {name: o.takes_value for o in options for name in o.names}
    argv: list[str] = []
    expect_value = False
    for match in _TOKEN.finditer(line):
        token = match.group()
        if expect_value:
            argv.append(_unquote(token))
            expect_value = False
            continue
        if token == "--":
            return argv, line[match.end() :].strip()
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d.*", token):
            return argv, line[match.start() :].strip()
        name = token.split("=", 1)[0]
        argv.append(_unquote(token))
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
MUSICGEN_OPTIONS = (
    Option(("-a", "--action"), {"help": f"one of {', '.join(ACTIONS)} (default: inferred, see above)"}),
    Option(("--mv",), {"help": "v1 model, e.g. MFV2.0 (default: %%config MusicGen.default_model)"}),
    Option(("--style",), {"help": "style / description of the music"}),
    Option(("--title",), {"help": "song title (at most 80 characters)"}),
    Option(("--lyrics",), {"help": "lyrics (handy in the line form with {variable})"}),
    Option(("--gender",), {"help": "singer voice: male or female"}),
    Option(("--instrumental",), {"action": "store_const", "const": 1, "help": "pure music, no vocals"}),
    Option(("--continue-at",), {"type": number, "metavar": "SECONDS", "help": "where an extension starts"}),
    Option(("--continue-song-id",), {"metavar": "ID", "help": "song to extend (extend, concat, upload_extend)"}),
    Option(("--audio-url",), {"metavar": "URL", "help": "audio to upload (upload, upload_extend)"}),
    Option(("--singer-id",), {"metavar": "ID", "help": "voice from generate-vibe (artist_consistency)"}),
    Option(("--v2",), {"action": "store_true", "help": "use the v2 endpoint (/v2/submit)"}),
    Option(("--model-version",), {"metavar": "MODEL", "help": "v2 model, e.g. v4.5 (default: default_v2_model)"}),
    Option(("--is-auto",), {"action": "store_const", "const": 1, "help": "v2 description mode (body = prompt)"}),
    Option(("--prompt",), {"help": "v2 prompt (style) in custom mode; the cell body is then the lyrics"}),
    *OUTPUT_OPTIONS,
    Option(("--wait",), {"action": "store_true", "help": "block until the songs are finished; return them"}),
    Option(("--timeout",), {"type": float, "metavar": "SECONDS", "help": "give up waiting after this long"}),
    Option(("--no-watch",), {"action": "store_true", "help": "no watcher: return the task ids at once"}),
    Option(("text",), {"nargs": "*", "help": "line form: the description (or lyrics, as the cell body would be)"}),
)
V1_FIELDS = ("mv", "style", "title", "lyrics", "gender", "instrumental", "continue_at", "continue_song_id")
V1_FIELDS += ("audio_url", "singer_id")
V2_EXTRA_FIELDS = ("title", "instrumental", "continue_at", "continue_song_id")
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
    fields = _given(args, (*V2_EXTRA_FIELDS, "lyrics"))
    prompt = args.prompt or args.style
    if prompt:
        fields["prompt"] = prompt
    is_auto = args.is_auto if args.is_auto is not None else int(not fields)
    _place_body(fields, body, ("prompt", "lyrics"), "v2")
    model = args.model_version or args.mv or default_model
    return {"is_auto": is_auto, "model_version": model, **fields}
