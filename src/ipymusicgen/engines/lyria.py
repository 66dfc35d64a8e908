"""Lyria 3's wire rules through the Gemini API: `POST /v1beta/models/{model}:generateContent` with the
`x-goog-api-key` header; the answer's `candidates[0].content.parts` hold the audio (`inlineData`, base64) and
text parts (lyrics and structure); errors are `{"error": {"code", "message", "status"}}`. Sources:
docs/providers.md.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ..client.responses import Endpoint
from ..config import DEFAULT_GEMINI_BASE_URL, ENV_GEMINI_BASE_URL, ENV_GEMINI_KEY
from ..models.providers import LYRIA, EngineRequest
from .wire import AnswerError, Charge, EngineAnswer, EngineRules, WireRequest

KEY_HEADER = "x-goog-api-key"
ENV_KEY = ENV_GEMINI_KEY
ENV_BASE_URL = ENV_GEMINI_BASE_URL
DEFAULT_BASE_URL = DEFAULT_GEMINI_BASE_URL
API_VERSION = "v1beta"
API_VERSIONS = ("v1beta", "v1")
"""The documented Lyria path is v1beta; Google's own SDK (google-genai 3.x) sends v1 by default."""
GENERATE = Endpoint("lyria generate", "POST", f"/{API_VERSION}/models/{{model}}:generateContent", paid=True)
MODELS = ("lyria-3-clip-preview", "lyria-3-pro-preview")
CLIP_SECONDS = 30.0


def path(model: str) -> str:
    return f"/{API_VERSION}/models/{model}:generateContent"


def model_of_path(url_path: str) -> str | None:
    """The model a generateContent path names (`/v1beta/models/lyria-3-clip-preview:generateContent`)."""
    suffix = ":generateContent"
    for version in API_VERSIONS:
        prefix = f"/{version}/models/"
        if url_path.startswith(prefix) and url_path.endswith(suffix):
            return url_path[len(prefix) : -len(suffix)] or None
    return None


def priced_fields(url_path: str, body: Any = None) -> tuple[str, float | None]:
    """What a generateContent call is priced by, read from the wire: the model its path names and the length it
    makes (a clip: always 30 s; Pro picks its own length: None). One call is priced as one song, so a body asking
    for more candidates (`candidateCount`, in any spelling Google's JSON reader takes) is `ValueError`, as are a
    body naming another model than the path and a path naming no model."""
    model = model_of_path(url_path)
    if not model:
        raise ValueError("the path names no model")
    if isinstance(body, dict) and "model" in body and body["model"] not in (model, f"models/{model}"):
        raise ValueError("the body names another model than the path")  # the price is the path's model's
    configs = [body.get(k) for k in ("generationConfig", "generation_config")] if isinstance(body, dict) else []
    for config in (c for c in configs if isinstance(c, dict)):
        for name in ("candidateCount", "candidate_count"):
            if config.get(name, 1) != 1 or isinstance(config.get(name), bool):
                raise ValueError("a call makes one song: candidateCount must be 1")
    return model, CLIP_SECONDS if model == MODELS[0] else None


def prompt_text(request: EngineRequest) -> str:
    """The one text part: the style, the length asked (Pro takes it in words), instrumental, the lyrics."""
    lines = [request.prompt.strip()] if request.prompt.strip() else []
    if request.seconds is not None and request.capability.fixed_seconds is None:
        lines.append(f"Length: about {request.seconds:g} seconds.")
    if request.instrumental:
        lines.append("Instrumental only, no vocals.")
    if request.lyrics and request.lyrics.strip():
        lines.append("Lyrics:\n" + request.lyrics.strip())
    return "\n".join(lines)


def build(request: EngineRequest) -> WireRequest:
    body = {
        "contents": [{"role": "user", "parts": [{"text": prompt_text(request)}]}],
        "generationConfig": {"responseModalities": ["AUDIO", "TEXT"]},
    }
    return WireRequest(GENERATE, {}, body, path=path(request.model_name))


def error_text(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        status = error.get("status")
        message = str(error.get("message") or "")[:300]
        return f"{status}: {message}" if status else message
    return str(body)[:300] if isinstance(body, str) else ""


def parse_answer(content_type: str, body: bytes) -> EngineAnswer:
    """The audio and text parts of the first candidate; a blocked prompt (no candidates) was not a song."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise AnswerError("the answer was not JSON") from None
    if not isinstance(data, dict):
        raise AnswerError("the answer was not a JSON object")
    candidates = data.get("candidates")
    if not candidates:
        feedback = data.get("promptFeedback") if isinstance(data.get("promptFeedback"), dict) else {}
        reason = feedback.get("blockReason")
        if reason:  # refused before any music was made
            raise AnswerError(f"the prompt was blocked ({str(reason)[:80]})", Charge.NOT_CHARGED)
        raise AnswerError("the answer held no candidates")
    first = candidates[0] if isinstance(candidates[0], dict) else {}
    content = first.get("content") if isinstance(first.get("content"), dict) else {}
    audio: bytes | None = None
    media = "audio/mpeg"
    texts: list[str] = []
    for part in content.get("parts") or []:
        if not isinstance(part, dict):
            continue
        inline = part.get("inlineData") or part.get("inline_data")
        if isinstance(inline, dict) and isinstance(inline.get("data"), str):
            try:
                audio = base64.b64decode(inline["data"], validate=True)
            except (binascii.Error, ValueError):
                raise AnswerError("the audio part was not base64") from None
            media = str(inline.get("mimeType") or inline.get("mime_type") or media)
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
    if not audio:
        raise AnswerError(f"the answer held no audio (finish reason {str(first.get('finishReason'))[:40]})")
    return EngineAnswer(audio, media, lyrics="\n".join(texts).strip() or None)


RULES = EngineRules(
    provider=LYRIA,
    key_header=KEY_HEADER,
    env_key=ENV_KEY,
    env_base_url=ENV_BASE_URL,
    default_base_url=DEFAULT_BASE_URL,
    endpoints=(GENERATE,),
    error_text=error_text,
)
