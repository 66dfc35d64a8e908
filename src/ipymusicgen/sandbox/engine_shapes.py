"""What the engines' sandbox answers look like: their error bodies, the ElevenLabs request checks, word
timestamps and the multipart detailed answer. Rules the client also follows come from `engines/` (paths, auth
headers, the bounds of a composition plan); only the server's side of each shape is here.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import io
import json
import math
import uuid
import zipfile
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..engines import elevenlabs as el
from ..models.providers import PLAN_MAX_LINE_CHARS, PLAN_MAX_LINES, PLAN_SECTION_SECONDS

EL_OUTPUT_FORMATS = frozenset(
    [f"mp3_{r}" for r in ("22050_32", "24000_48", "44100_32", "44100_64", "44100_96", "44100_128", "44100_192")]
    + [f"pcm_{r}" for r in (8000, 16000, 22050, 24000, 32000, 44100, 48000)]
    + ["ulaw_8000", "alaw_8000"]
    + [f"opus_48000_{b}" for b in (32, 64, 96, 128, 192)]
    + ["auto"]
)
EL_MODELS = frozenset({"music_v1", "music_v2", "music_v2_5"})
EL_INVALID_KEY = MappingProxyType({"detail": {"status": "invalid_api_key", "message": "Invalid API key"}})
EL_MISSING_KEY = MappingProxyType({"detail": {"status": "needs_authorization", "message": "Neither authorization header nor xi-api-key received, please provide one."}})  # fmt: skip  # noqa: E501
GEMINI_MODELS = frozenset({"lyria-3-clip-preview", "lyria-3-pro-preview"})


class Refusal(Exception):
    """An answer other than the song: a status and its body."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.body = dict(body)  # its own copy (the constant bodies are read-only mappings)
        super().__init__(status)


def el_problem(field: str, message: str, kind: str = "value_error") -> Refusal:
    """A 422 in ElevenLabs' (FastAPI's) shape: `{"detail": [{"loc", "msg", "type"}]}`."""
    return Refusal(422, {"detail": [{"loc": ["body", *field.split(".")], "msg": message, "type": kind}]})


def gemini_error(status: int, message: str, code_name: str, reason: str | None = None) -> Refusal:
    error: dict[str, Any] = {"code": status, "message": message, "status": code_name}
    if reason:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com"}
        ]
    return Refusal(status, {"error": error})


def _int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise el_problem(name, "Input should be a valid integer", "int_type")
    return value


def check_el_body(body: Any, output_format: str | None) -> dict[str, Any]:
    """The checks ElevenLabs makes before any work: prompt xor plan, the length bounds, a seed only with a plan,
    force_instrumental only with a prompt, the plan's section bounds; each a 422."""
    if not isinstance(body, dict):
        raise el_problem("body", "Input should be a valid dictionary", "dict_type")
    if output_format is not None and output_format not in EL_OUTPUT_FORMATS:
        raise Refusal(422, {"detail": [{"loc": ["query", "output_format"], "msg": "Input should be a valid output "
                                        "format", "type": "enum"}]})  # fmt: skip
    prompt, plan = body.get("prompt"), body.get("composition_plan")
    if (prompt is None) == (plan is None):
        raise el_problem("prompt", "Exactly one of prompt or composition_plan must be provided")
    model = body.get("model_id", "music_v1")
    if model not in EL_MODELS:
        raise el_problem("model_id", f"Unknown model {str(model)[:40]!r}")
    length = _int(body, "music_length_ms")
    if length is not None and not el.MIN_LENGTH_MS <= length <= el.MAX_LENGTH_MS:
        raise el_problem("music_length_ms", f"music_length_ms must be between {el.MIN_LENGTH_MS} and "
                         f"{el.MAX_LENGTH_MS} (got {length})")  # fmt: skip
    seed = _int(body, "seed")
    if seed is not None and prompt is not None:
        raise el_problem("seed", "seed cannot be used in conjunction with prompt")
    if body.get("force_instrumental") and plan is not None:
        raise el_problem("force_instrumental", "force_instrumental can only be used with prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise el_problem("prompt", "prompt must be a non-empty string")
    if plan is not None:
        _check_plan(plan)
    return {"model": model, "length_ms": length, "seed": seed}


def _check_plan(plan: Any) -> None:
    sections = plan.get("sections") if isinstance(plan, dict) else None
    if not isinstance(sections, list) or not sections:
        raise el_problem("composition_plan.sections", "At least one section is required")
    low, high = (round(s * 1000) for s in PLAN_SECTION_SECONDS)
    total = 0
    for index, section in enumerate(sections):
        where = f"composition_plan.sections.{index}"
        if not isinstance(section, dict):
            raise el_problem(where, "Input should be a valid dictionary", "dict_type")
        duration = section.get("duration_ms")
        if isinstance(duration, bool) or not isinstance(duration, int) or not low <= duration <= high:
            raise el_problem(f"{where}.duration_ms", f"duration_ms must be between {low} and {high}")
        lines = section.get("lines", [])
        if not isinstance(lines, list) or len(lines) > PLAN_MAX_LINES:
            raise el_problem(f"{where}.lines", f"At most {PLAN_MAX_LINES} lines per section")
        if any(not isinstance(line, str) or len(line) > PLAN_MAX_LINE_CHARS for line in lines):
            raise el_problem(
                f"{where}.lines", f"Each line must be a string of at most {PLAN_MAX_LINE_CHARS} characters"
            )
        total += duration
    if not el.MIN_LENGTH_MS <= total <= el.MAX_LENGTH_MS:
        raise el_problem(
            "composition_plan", f"The plan's total length must be {el.MIN_LENGTH_MS} to {el.MAX_LENGTH_MS} ms"
        )


def plan_sections(body: dict[str, Any]) -> list[tuple[str, int, list[str]]]:
    """(name, duration in ms, lines) of each section of a plan."""
    plan = body["composition_plan"]
    return [(str(s.get("section_name") or f"Section {i + 1}"), s["duration_ms"], list(s.get("lines") or []))
            for i, s in enumerate(plan["sections"])]  # fmt: skip


def word_timestamps(sections: list[tuple[str, int, list[str]]]) -> list[dict[str, Any]]:
    """Each section's words spread evenly over its length, so a player can highlight the line being sung."""
    found: list[dict[str, Any]] = []
    start = 0
    for _name, duration, lines in sections:
        words = [w for line in lines for w in line.split()]
        if words:
            step = duration / len(words)
            for n, word in enumerate(words):
                found.append({"word": word, "start_ms": math.floor(start + n * step),
                              "end_ms": math.floor(start + (n + 1) * step)})  # fmt: skip
        start += duration
    return found


def detailed_body(metadata: dict[str, Any], audio: bytes, media_type: str) -> tuple[bytes, str]:
    """The `multipart/mixed` answer of `/v1/music/detailed`: the JSON metadata, then the audio file."""
    boundary = uuid.uuid4().hex
    parts = [
        f"--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode() + json.dumps(metadata).encode() + b"\r\n",
        f"--{boundary}\r\nContent-Type: {media_type}\r\nContent-Disposition: attachment; filename=\"song.mp3\"\r\n\r\n"
        .encode() + audio + b"\r\n",
        f"--{boundary}--\r\n".encode(),
    ]  # fmt: skip
    return b"".join(parts), f"multipart/mixed; boundary={boundary}"


STEM_NAMES = MappingProxyType(
    {
        "two_stems_v1": ("vocals", "instrumental"),
        "six_stems_v1": ("vocals", "drums", "bass", "guitar", "piano", "other"),
    }
)
"""The sandbox's stem names per variation (ElevenLabs names the variations; the file names are the sandbox's)."""
MAX_STEM_SECONDS = 600.0


def read_form(content_type: str, body: bytes) -> dict[str, bytes]:
    """A `multipart/form-data` body's fields by name (stdlib parser: no extra dependency); a 422 if it is not one."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise el_problem("file", "Expected multipart/form-data with a file", "missing")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields[name] = part.get_payload(decode=True) or b""
    return fields


def _seconds_of(audio: bytes) -> float:
    try:
        from mutagen import File as MutagenFile

        found = MutagenFile(io.BytesIO(audio))
        length = float(found.info.length) if found is not None else 0.0
    except Exception:  # not audio mutagen knows: the stems get a short default length
        length = 0.0
    return min(length, MAX_STEM_SECONDS) if length > 0 else 10.0


def stems_zip(upload: bytes, names: tuple[str, ...]) -> bytes:
    """A ZIP of one synthesized MP3 per stem, as long as the upload (seeded by its bytes)."""
    from .audio import render_song

    seconds = _seconds_of(upload)
    seed = hashlib.sha256(upload).hexdigest()[:16]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name in names:
            audio, media = render_song(f"{seed}|{name}", seconds=seconds, vocal=name == "vocals")
            archive.writestr(f"{name}.{'mp3' if media == 'audio/mpeg' else 'wav'}", audio)
    return buffer.getvalue()
