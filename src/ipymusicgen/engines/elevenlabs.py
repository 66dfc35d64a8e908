"""ElevenLabs Music's wire rules: `POST /v1/music` (the audio as the body), `POST /v1/music/detailed` (multipart:
JSON metadata with word timestamps, then the audio), the `xi-api-key` header, errors as `{"detail": ...}`.

A song with lyrics goes as a composition plan (one section per stanza, its lines as the section's lines, the
length split evenly); without lyrics as a prompt with `music_length_ms`. Sources: docs/providers.md.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import secrets
from typing import Any

from ..client.responses import Endpoint
from ..config import DEFAULT_ELEVENLABS_BASE_URL, ENV_ELEVENLABS_BASE_URL, ENV_ELEVENLABS_KEY
from ..models.providers import DEFAULT_STANZA_SECONDS, ELEVENLABS, EngineRequest, stanzas
from .wire import AnswerError, Charge, EngineAnswer, EngineRules, WireRequest, WordTimestamp

KEY_HEADER = "xi-api-key"
ENV_KEY = ENV_ELEVENLABS_KEY
ENV_BASE_URL = ENV_ELEVENLABS_BASE_URL
DEFAULT_BASE_URL = DEFAULT_ELEVENLABS_BASE_URL
COMPOSE = Endpoint("elevenlabs compose", "POST", "/v1/music", paid=True)
DETAILED = Endpoint("elevenlabs compose detailed", "POST", "/v1/music/detailed", paid=True)
STEMS = Endpoint("elevenlabs stem separation", "POST", "/v1/music/stem-separation", paid=True)
MIN_LENGTH_MS = 3_000
DEFAULT_MODEL = "music_v1"
"""The model a body without `model_id` gets (the API's default)."""
MAX_LENGTH_MS = 600_000


def composition_plan(request: EngineRequest) -> dict[str, Any]:
    """The lyrics as a `music_v1` composition plan: one section per stanza, the length split evenly (in ms)."""
    blocks = stanzas(request.lyrics or "")
    seconds = request.seconds if request.seconds is not None else DEFAULT_STANZA_SECONDS * len(blocks)
    total = round(seconds * 1000)
    each = total // len(blocks)
    sections = []
    for number, block in enumerate(blocks, 1):
        duration = each + (total - each * len(blocks) if number == len(blocks) else 0)
        sections.append(
            {
                "section_name": f"Stanza {number}",
                "positive_local_styles": [],
                "negative_local_styles": [],
                "duration_ms": duration,
                "lines": block,
            }
        )
    styles = [request.prompt.strip()] if request.prompt.strip() else []
    return {"positive_global_styles": styles, "negative_global_styles": [], "sections": sections}


def build(request: EngineRequest) -> WireRequest:
    """The request on the wire: a plan when there are lyrics, else a prompt with its length."""
    endpoint = DETAILED if request.timestamps else COMPOSE
    body: dict[str, Any] = {"model_id": request.model_name}
    if request.lyrics and request.lyrics.strip():
        body["composition_plan"] = composition_plan(request)
        if request.seed is not None:
            body["seed"] = request.seed
    else:
        body["prompt"] = request.prompt.strip()
        if request.seconds is not None:
            body["music_length_ms"] = round(request.seconds * 1000)
        if request.instrumental:
            body["force_instrumental"] = True
    if request.timestamps:
        body["with_timestamps"] = True
    params = {"output_format": request.output_format} if request.output_format else {}
    return WireRequest(endpoint, params, body)


def priced_fields(body: Any) -> tuple[str, float | None]:
    """What a compose body is priced by, read from the wire (the gateway prices callers' own bodies): its model and
    the length asked in seconds (`music_length_ms`, or the sum of a composition plan's sections); None when the
    engine picks the length. A plan's song is as long as its sections (`music_length_ms` goes with a prompt), so
    a body naming both is priced at the longer; a plan whose sections cannot be summed at the longest (None). A body
    that names neither sanely is `ValueError` (refused before anything is sent)."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    model = body.get("model_id", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise ValueError("model_id must be a model's name")
    length = body.get("music_length_ms")
    if length is not None and not _is_ms(length):
        raise ValueError("music_length_ms must be a whole number of milliseconds")
    plan = body.get("composition_plan")
    if plan is not None:
        sections = plan.get("sections") if isinstance(plan, dict) else None
        durations = [s.get("duration_ms") if isinstance(s, dict) else None for s in sections or ()]
        if not (isinstance(sections, list) and durations and all(_is_ms(d) for d in durations)):
            return model, None
        length = max(sum(durations), length or 0)
    return model, None if length is None else length / 1000


def read_upload(content_type: str, body: bytes) -> tuple[bytes, str]:
    """A stem separation's upload, read from the wire: (the audio file, `stem_variation_id`, by default
    `two_stems_v1`). A body that is not `multipart/form-data` with a non-empty `file` is `ValueError`, and so is one
    naming a field twice: form parsers differ on which one counts (this one would price the first file, a parser
    keeping the last would separate another song)."""
    if not (content_type or "").lower().startswith("multipart/form-data"):
        raise ValueError("a stem separation is multipart/form-data with a file")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, bytes] = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and name in fields:
            raise ValueError(f"the stem separation names {name[:40]!r} more than once")
        if isinstance(name, str):
            fields[name] = part.get_payload(decode=True) or b""
    if not fields.get("file"):
        raise ValueError("the stem separation has no file")
    variation = fields.get("stem_variation_id", b"two_stems_v1").decode("utf-8", "replace")
    return fields["file"], variation


UPLOAD_NAMES = (
    (b"RIFF", "song.wav", "audio/wav"),
    (b"fLaC", "song.flac", "audio/flac"),
    (b"OggS", "song.ogg", "audio/ogg"),
)


def upload_body(audio: bytes, variation: str) -> tuple[bytes, str]:
    """A stem separation's multipart body holding exactly `audio` and `variation` (what `read_upload` read and the
    gateway priced), under a fresh boundary the audio does not hold: (body, content type). The caller's own bytes
    are never sent on, since multipart readers differ (a boundary named twice, a preamble) on what they hold."""
    boundary = secrets.token_hex(16)
    while boundary.encode() in audio:  # pragma: no cover - 128 random bits
        boundary = secrets.token_hex(16)
    name, kind = next(((n, k) for magic, n, k in UPLOAD_NAMES if audio.startswith(magic)), ("song.mp3", "audio/mpeg"))
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="stem_variation_id"\r\n\r\n{variation}\r\n'
    file_head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
    body = (head + file_head + f"Content-Type: {kind}\r\n\r\n").encode() + audio + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _is_ms(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**9


def error_text(body: Any) -> str:
    """The message of `{"detail": {"status", "message"}}`, `{"detail": "..."}` or a 422's list of problems."""
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, dict):
        return str(detail.get("message") or detail.get("status") or "")[:300]
    if isinstance(detail, list):
        parts = []
        for item in detail[:5]:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", "")))
        return "; ".join(parts)[:300]
    return str(detail)[:300] if detail else ""


def _timestamps(metadata: dict[str, Any]) -> tuple[WordTimestamp, ...]:
    found = []
    for item in metadata.get("words_timestamps") or []:
        if isinstance(item, dict) and isinstance(item.get("word"), str):
            found.append(WordTimestamp(item["word"], int(item.get("start_ms", 0)), int(item.get("end_ms", 0))))
    return tuple(found)


def _lyrics_of(metadata: dict[str, Any]) -> str | None:
    plan = metadata.get("composition_plan")
    sections = plan.get("sections") if isinstance(plan, dict) else None
    if not isinstance(sections, list):
        return None
    stanzas_ = ["\n".join(str(x) for x in s.get("lines") or []) for s in sections if isinstance(s, dict)]
    text = "\n\n".join(s for s in stanzas_ if s)
    return text or None


def parse_multipart(content_type: str, body: bytes) -> EngineAnswer:
    """The detailed answer: a JSON part (metadata, timestamps) and an audio part."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    metadata: dict[str, Any] = {}
    audio: bytes | None = None
    media = "audio/mpeg"
    for part in message.iter_parts():
        kind = part.get_content_type()
        payload = part.get_payload(decode=True) or b""
        if kind == "application/json":
            loaded = json.loads(payload)
            metadata = loaded if isinstance(loaded, dict) else {}
        elif kind.startswith("audio/") or kind == "application/octet-stream":
            audio, media = payload, kind if kind.startswith("audio/") else "audio/mpeg"
    if not audio:
        raise AnswerError("the detailed answer held no audio part")
    song = metadata.get("song_metadata") if isinstance(metadata.get("song_metadata"), dict) else {}
    return EngineAnswer(
        audio,
        media,
        lyrics=_lyrics_of(metadata),
        title=song.get("title") if isinstance(song.get("title"), str) else None,
        timestamps=_timestamps(metadata),
        extra={"song_metadata": song},
    )


def parse_answer(content_type: str, body: bytes) -> EngineAnswer:
    """A 2xx answer as a song; one that holds none is `AnswerError` (the work was done: may have been charged)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if not body:
        raise AnswerError("the answer was empty")
    if kind.startswith("multipart/"):
        try:
            return parse_multipart(content_type, body)
        except (ValueError, TypeError, KeyError) as exc:
            raise AnswerError(f"the detailed answer could not be read ({type(exc).__name__})") from None
    if kind.startswith("audio/") or kind == "application/octet-stream":
        return EngineAnswer(body, kind if kind.startswith("audio/") else "audio/mpeg")
    raise AnswerError(f"the answer was {kind or 'untyped'}, not audio", Charge.UNKNOWN)


RULES = EngineRules(
    provider=ELEVENLABS,
    key_header=KEY_HEADER,
    env_key=ENV_KEY,
    env_base_url=ENV_BASE_URL,
    default_base_url=DEFAULT_BASE_URL,
    endpoints=(COMPOSE, DETAILED, STEMS),
    error_text=error_text,
)
