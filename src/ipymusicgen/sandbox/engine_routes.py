"""The engines' host of the sandbox: ElevenLabs Music (`/v1/music`, `/v1/music/detailed`) and the Gemini API's
`generateContent` for the Lyria models, with their auth headers, bodies, error shapes and limits.

Each answers with synthesized audio of the length asked (a Lyria clip: always 30 s), lyrics text, and word
timestamps in ElevenLabs' detailed answer. The keys are the sandbox's (the demo key by default); faults come
from the same plan as the service's hosts (`SandboxMiddleware`), so 429s, 5xx, slow answers and a connection
dropped after the request was read can be played on these paths too.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from ..engines import elevenlabs as el
from ..engines import lyria
from .engine_shapes import (
    EL_INVALID_KEY,
    EL_MISSING_KEY,
    GEMINI_MODELS,
    STEM_NAMES,
    Refusal,
    check_el_body,
    detailed_body,
    el_problem,
    gemini_error,
    plan_sections,
    read_form,
    stems_zip,
    word_timestamps,
)
from .lyricsgen import generate_lyrics
from .middleware import ASGIApp, SandboxMiddleware
from .state import SandboxState
from .validation import read_json

PRO_DEFAULT_SECONDS = 120.0
PRO_MAX_SECONDS = 184.0
"""Lyria 3 Pro makes "a couple of minutes"; the sandbox honours a length named in the prompt up to this."""
_ASKED_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*(?:seconds|secs?|s)\b", re.IGNORECASE)


def _render(seed_text: str, seconds: float, vocal: bool) -> tuple[bytes, str]:
    from .audio import render_song

    return render_song(seed_text, seconds=seconds, vocal=vocal)


async def _rendered(seed_text: str, seconds: float, vocal: bool) -> tuple[bytes, str]:
    return await anyio.to_thread.run_sync(lambda: _render(seed_text, seconds, vocal))


def _refused(refusal: Refusal) -> JSONResponse:
    return JSONResponse(refusal.body, status_code=refusal.status)


def elevenlabs_router(state: SandboxState) -> APIRouter:
    router = APIRouter()

    def key_of(request: Request) -> str:
        key = request.headers.get(el.KEY_HEADER)
        if key is None:
            raise Refusal(401, EL_MISSING_KEY)
        if not state.knows_key(key):
            raise Refusal(401, EL_INVALID_KEY)
        state.touch(key)
        return key

    async def compose(request: Request, detailed: bool) -> Response:
        try:
            key_of(request)
            body = await read_json(request)
            checked = check_el_body(body, request.query_params.get("output_format"))
        except Refusal as refusal:
            return _refused(refusal)
        if "composition_plan" in body:
            sections = plan_sections(body)
            styles = body["composition_plan"].get("positive_global_styles") or []
            seed_text = " ".join(str(s) for s in styles) + f"|{checked['seed']}"
            vocal = any(lines for _n, _d, lines in sections)
        else:
            seconds = (checked["length_ms"] or state.song_seconds * 1000) / 1000
            vocal = not body.get("force_instrumental")
            text, _title = generate_lyrics(body["prompt"]) if vocal else ("", "")
            lines = [line for line in text.splitlines() if line.strip() and not line.startswith("[")]
            sections = [("Song", round(seconds * 1000), lines)]
            seed_text = body["prompt"]
        total_ms = sum(duration for _n, duration, _l in sections)
        audio, media = await _rendered(seed_text, total_ms / 1000, vocal)
        headers = {"song-id": state.new_id()}
        if not detailed:
            return Response(audio, media_type=media, headers=headers)
        title = generate_lyrics(seed_text)[1]
        metadata: dict[str, Any] = {
            "composition_plan": {
                "positive_global_styles": [seed_text.split("|")[0]],
                "negative_global_styles": [],
                "sections": [
                    {
                        "section_name": n,
                        "positive_local_styles": [],
                        "negative_local_styles": [],
                        "duration_ms": d,
                        "lines": lines,
                    }
                    for n, d, lines in sections
                ],
            },
            "song_metadata": {
                "title": title,
                "description": seed_text.split("|")[0][:200],
                "genres": [],
                "languages": ["en"] if vocal else [],
                "is_explicit": False,
            },
        }
        if body.get("with_timestamps"):
            metadata["words_timestamps"] = word_timestamps(sections)
        content, content_type = detailed_body(metadata, audio, media)
        return Response(content, headers={**headers, "content-type": content_type})

    @router.post(el.COMPOSE.path)
    async def music(request: Request) -> Response:
        return await compose(request, detailed=False)

    @router.post(el.DETAILED.path)
    async def music_detailed(request: Request) -> Response:
        return await compose(request, detailed=True)

    @router.post(el.STEMS.path)
    async def stem_separation(request: Request) -> Response:
        """A ZIP of stems of the uploaded song (`two_stems_v1`: vocals and instrumental; `six_stems_v1`: six)."""
        try:
            key_of(request)
            form = read_form(request.headers.get("content-type", ""), await request.body())
        except Refusal as refusal:
            return _refused(refusal)
        upload = form.get("file")
        if not isinstance(upload, bytes) or not upload:
            return _refused(el_problem("file", "Field required", "missing"))
        variation = form.get("stem_variation_id", b"two_stems_v1")
        variation = variation.decode("utf-8", "replace") if isinstance(variation, bytes) else "two_stems_v1"
        names = STEM_NAMES.get(variation)
        if names is None:
            return _refused(el_problem("stem_variation_id", "Input should be 'two_stems_v1' or 'six_stems_v1'", "enum"))
        content = await anyio.to_thread.run_sync(lambda: stems_zip(upload, names))
        return Response(content, media_type="application/zip", headers={"song-id": state.new_id()})

    return router


def _prompt_of(body: Any) -> str:
    contents = body.get("contents") if isinstance(body, dict) else None
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list) or not contents:
        raise gemini_error(400, "* GenerateContentRequest.contents: contents is not specified", "INVALID_ARGUMENT")
    texts = []
    for content in contents:
        for part in (content.get("parts") or []) if isinstance(content, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    if not "".join(texts).strip():
        raise gemini_error(400, "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty",
                           "INVALID_ARGUMENT")  # fmt: skip
    return "\n".join(texts)


def gemini_router(state: SandboxState) -> APIRouter:
    router = APIRouter()

    @router.post("/v1beta/models/{model}:generateContent")
    @router.post("/v1/models/{model}:generateContent")  # google-genai 3.x sends v1 unless told v1beta
    async def generate_content(model: str, request: Request) -> Response:
        try:
            key = request.headers.get(lyria.KEY_HEADER) or request.query_params.get("key")
            if key is None:
                raise gemini_error(403, "Method doesn't allow unregistered callers (callers without established "
                                   "identity). Please use API Key or other form of API consumer identity to call "
                                   "this API.", "PERMISSION_DENIED")  # fmt: skip
            if not state.knows_key(key):
                raise gemini_error(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT",
                                   "API_KEY_INVALID")  # fmt: skip
            state.touch(key)
            if model not in GEMINI_MODELS:
                raise gemini_error(404, f"models/{model[:80]} is not found for API version v1beta, or is not "
                                   "supported for generateContent.", "NOT_FOUND")  # fmt: skip
            prompt = _prompt_of(await read_json(request))
        except Refusal as refusal:
            return _refused(refusal)
        seconds = lyria.CLIP_SECONDS if model == "lyria-3-clip-preview" else _pro_seconds(prompt)
        instrumental = "instrumental" in prompt.lower()
        lyrics_text, title = generate_lyrics(prompt)
        audio, media = await _rendered(prompt, seconds, not instrumental)
        structure = f"{title}\n\n" + ("[Instrumental]" if instrumental else lyrics_text)
        answer = {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": structure},
                            {"inlineData": {"mimeType": media, "data": base64.b64encode(audio).decode()}},
                        ],
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": len(prompt.split()), "totalTokenCount": len(prompt.split())},
            "modelVersion": model,
            "responseId": state.new_id(),
        }
        return JSONResponse(answer)

    return router


def _pro_seconds(prompt: str) -> float:
    asked = _ASKED_SECONDS.search(prompt)
    if asked is None:
        return PRO_DEFAULT_SECONDS
    return max(10.0, min(float(asked.group(1)), PRO_MAX_SECONDS))


def create_engines_app(state: SandboxState) -> ASGIApp:
    """The engines' host: ElevenLabs and Gemini side by side (their paths do not meet), counted and faulted."""
    app = FastAPI(title="ipymusicgen sandbox: ElevenLabs Music and Gemini (Lyria)", docs_url="/docs", redoc_url=None)
    app.include_router(elevenlabs_router(state))
    app.include_router(gemini_router(state))
    return SandboxMiddleware(app, state, engines=True)
