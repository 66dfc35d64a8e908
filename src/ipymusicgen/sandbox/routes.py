"""The two FastAPI apps: the v1 host (generation, lyrics, key info, tasks, files) and the v2 host.

Handlers only check the key, validate, charge and shape answers; the rules live in `actions`, the
memory in `state`, the files in `files`, and faults in `middleware`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from .actions import check_v2, create_v1, create_v2
from .faults import FaultRule
from .files import FileStore, answer, wav_url
from .lyricsgen import generate_lyrics
from .middleware import TASK_FAIL_STATE, ASGIApp, SandboxMiddleware
from .records import INSUFFICIENT_CREDITS, INVALID_KEY, MP4_UNSUPPORTED, envelope, key_info, v1_task, v2_song
from .state import Phase, SandboxState, Task, checked_settings
from .validation import V2Refusal, read_json, validate_lyrics, validate_v1, validate_v2

SONG_COST = 2
"""Music counts a generate/submit call naming no model takes (per model: `SandboxState.call_cost`)."""


def _key_dependency(state: SandboxState) -> Any:
    def require_key(x_api_key: str | None = Header(default=None)) -> str:
        if x_api_key is None or not state.knows_key(x_api_key):
            raise HTTPException(status_code=401, detail=INVALID_KEY)
        state.touch(x_api_key)
        return x_api_key

    return Depends(require_key)


def _too_many_running(state: SandboxState, api_key: str) -> JSONResponse | None:
    """429 with Retry-After when the key already has `max_running` generations running, as the service does.

    Checked and charged with no `await` in between, so concurrent creates cannot both slip under the limit.
    """
    calls, soonest = state.running_calls(api_key)
    if calls < state.max_running:
        return None
    retry_after = max(1, math.ceil(soonest))
    message = f"Too many generations running at once ({calls}, at most {state.max_running}); try again later"
    return JSONResponse(envelope(None, 429, message), status_code=429, headers={"Retry-After": str(retry_after)})


def _task_fault(request: Request) -> FaultRule | None:
    return getattr(request.state, TASK_FAIL_STATE, None)


def _finished(state: SandboxState, song_id: str) -> Task | dict[str, Any]:
    """The finished song, or the envelope error to answer with."""
    song = state.get(song_id)
    if song is None:
        return envelope(None, 404, f"Song not found: {song_id!r}")
    if state.phase(song) is not Phase.COMPLETE:
        return envelope(None, 400, f"Song {song_id!r} is not finished yet")
    return song


def v1_router(state: SandboxState, files: FileStore) -> APIRouter:
    router = APIRouter()
    key = _key_dependency(state)

    @router.post("/v1/music/generate")
    async def generate(request: Request, api_key: str = key) -> dict[str, Any]:
        body = validate_v1(await read_json(request))
        busy = _too_many_running(state, api_key)
        if busy is not None:
            return busy
        if not state.charge(api_key, state.call_cost(getattr(body, "mv", None))):
            return envelope(None, 400, INSUFFICIENT_CREDITS)
        tasks = create_v1(state, api_key, body, _task_fault(request))
        return envelope({"ids": [t.id for t in tasks]})

    @router.get("/v1/music/tasks", response_model=None)
    async def tasks(ids: str | None = Query(default=None), api_key: str = key) -> Any:
        wanted = [i.strip() for i in ids.split(",") if i.strip()] if ids is not None else None
        records = [v1_task(state, t) for t in state.tasks_of(api_key, wanted)]
        return envelope(records) if state.envelope_tasks else records

    @router.post("/v1/lyrics")
    async def lyrics(request: Request, api_key: str = key) -> dict[str, Any]:
        body = validate_lyrics(await read_json(request))
        text, title = generate_lyrics(body.prompt)
        return envelope({"text": text, "title": title})

    @router.get("/v1/get_api_key_info")
    async def get_key_info(api_key: str = key) -> dict[str, Any]:
        return envelope(key_info(state.account(api_key)))

    @router.post("/v1/music/generate-vibe")
    async def generate_vibe(song_id: str = Query(), api_key: str = key) -> dict[str, Any]:
        song = _finished(state, song_id)
        return song if isinstance(song, dict) else envelope({"singer_id": state.add_singer(song.song_id)})

    @router.post("/v1/music/generate-wav")
    async def generate_wav(song_id: str = Query(), api_key: str = key) -> dict[str, Any]:
        song = _finished(state, song_id)
        return song if isinstance(song, dict) else envelope({"wav_url": wav_url(state.files_base, song)})

    @router.post("/v1/music/generate-mp4")
    async def generate_mp4(song_id: str = Query(), api_key: str = key) -> dict[str, Any]:
        return envelope(None, 501, MP4_UNSUPPORTED)

    @router.api_route("/files/{name}", methods=["GET", "HEAD"])
    async def file(name: str, request: Request) -> Response:
        body = await anyio.to_thread.run_sync(files.get, name)
        if body is None:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        sent = answer(body, request.headers.get("range"))  # byte ranges (206), so browsers can seek
        return Response(sent.content, status_code=sent.status, media_type=body.media_type, headers=sent.headers)

    return router


def v2_router(state: SandboxState) -> APIRouter:
    router = APIRouter()
    key = _key_dependency(state)

    @router.post("/v2/submit")
    async def submit(request: Request, api_key: str = key) -> dict[str, Any]:
        try:
            body = validate_v2(await read_json(request))
            song = check_v2(state, body)
        except V2Refusal as exc:
            return envelope(None, 400, str(exc))
        busy = _too_many_running(state, api_key)
        if busy is not None:
            return busy
        if not state.charge(api_key, state.call_cost(body.model_version)):
            return envelope(None, 400, INSUFFICIENT_CREDITS)
        tasks = create_v2(state, api_key, body, song, _task_fault(request))
        return envelope([v2_song(state, t) for t in tasks])

    @router.get("/v2/query")
    async def query(song_id: str = Query(), api_key: str = key) -> dict[str, Any]:
        wanted = [i.strip() for i in song_id.split(",") if i.strip()]
        songs = [v2_song(state, t, query=True) for t in state.tasks_of(api_key, wanted)]
        if not songs:
            return envelope(None, 404, f"No song with song_id {song_id!r}")
        return envelope(songs)

    return router


def admin_router(state: SandboxState) -> APIRouter:
    """Key-less controls for tests and demos; never counted, never faulted."""
    router = APIRouter(prefix="/_sandbox")

    @router.get("/stats")
    async def stats() -> dict[str, Any]:
        return {
            "requests": state.counts(),
            "faults": state.faults.describe(),
            "envelope_tasks": state.envelope_tasks,
            "stage_seconds": state.stage_seconds,
            "song_seconds": state.song_seconds,
        }

    @router.post("/faults")
    async def faults(request: Request) -> JSONResponse:
        raw = (await request.body()).decode("utf-8", "replace").strip()
        try:
            spec = json.loads(raw) if raw.startswith(("{", "[", '"')) else raw
            state.faults.replace_rules(spec)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"detail": str(exc)}, status_code=400)
        return JSONResponse({"faults": state.faults.describe()})

    @router.post("/reset")
    async def reset() -> dict[str, Any]:
        state.reset()
        return {"reset": True}

    @router.post("/settings")
    async def settings(request: Request) -> Any:
        body = await read_json(request)
        if not isinstance(body, dict):
            return JSONResponse(envelope(None, 400, "send an object of settings"), status_code=400)
        try:
            changes = checked_settings(body)
        except ValueError as exc:  # every bad value is the caller's: 400 with the service's envelope, never 500
            return JSONResponse(envelope(None, 400, str(exc)), status_code=400)
        for name, value in changes.items():
            setattr(state, name, value)
        return {"envelope_tasks": state.envelope_tasks, "stage_seconds": state.stage_seconds}

    return router


def create_apps(state: SandboxState) -> tuple[ASGIApp, ASGIApp]:
    """(v1 app, v2 app), sharing one state; each wrapped in the counting and fault layer."""
    v1 = FastAPI(title="ipymusicgen sandbox: v1 host", docs_url="/docs", redoc_url=None)
    v1.include_router(v1_router(state, FileStore(state)))
    v1.include_router(admin_router(state))
    v2 = FastAPI(title="ipymusicgen sandbox: v2 host", docs_url="/docs", redoc_url=None)
    v2.include_router(v2_router(state))
    v2.include_router(admin_router(state))
    return SandboxMiddleware(v1, state), SandboxMiddleware(v2, state)
