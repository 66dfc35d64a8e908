"""The agent server: the notebook's client, journal, budget and library as MCP tools (the official SDK).

Every paid tool prices its call first and asks the user through MCP elicitation ("Pay about N credits (the
key has M credits left)? ...", the agent's words after, quoted); a host that cannot ask needs `max_credits` ≥
the estimate. `--budget` caps what the server may spend in its lifetime. An `idempotency_key` records the
call before it is sent, so the same key returns the first call's ids, after a restart too. Errors are one
line naming the field; the key is taken out of every result and error; server text stays plain data.

A paid song call without an idempotency_key gets one derived from its request and a ten-minute window (sliding,
from the first call: `desk.REISSUE_WINDOW_S`): a host that re-issues a dropped call gets the first call's ids
(`repeat: true`); `again=true` asks for new songs. Every tool declares its output (`outputs`); archived songs
are offered as `resource_link`s to `song://{id}/audio`, inline audio only when asked.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import (
    AudioContent,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ResourceLink,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError

from ..archive.archived_audio import ArchivedAudioError, archived_audio_kind, audio_type, read_archived_audio
from ..client.waiting import check_id
from ..errors import MusicGenError, RequestValidationError, one_line, storage_reason
from ..models.schema import PROMPT_MAX, V1_SHAPES, LyricsRequest, V2Request
from ..models.tasks import TaskSet
from ..storage.errors import StorageError
from .consent import CARD_URI, QuoteBook
from .consent_card import Answer, ConsentCard
from .consent_page import ConsentPages
from .desk import MAX_KEY_LENGTH, REISSUE_WINDOW_S, AgentDesk, AgentError, Plan, dollars_what, in_dollars
from .outputs import (
    AccountOutput,
    BatchOutput,
    BatchStatusOutput,
    ExtraOutput,
    LyricsOutput,
    PaidSongOutput,
    SearchOutput,
    SongsOutput,
    UnfinishedOutput,
)
from .songs import SERVICE_TEXT, stage, state_of
from .text import service_text
from .tool_params import bounds_of, model_schema, v1_schema, with_request_fields

T = TypeVar("T")
AUDIO_MAX_BYTES = 8 * 1024 * 1024
"""Largest archived song `get_songs(include_audio=true)` returns as AudioContent (base64 grows it by a third)."""
MAX_IDS = 50
MODEL_MAX = 100
"""Longest model name a search takes (the known ones are under 20 characters)."""
WAIT_MAX_S = 600.0

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
PAID = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
EXTRA = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
"""Paid, but once per (song, kind): asking again reuses what was made."""

Ids = Annotated[list[str], Field(min_length=1, max_length=MAX_IDS, description="task ids (v1) or song ids (v2)")]
Key = Annotated[
    Annotated[str, Field(max_length=MAX_KEY_LENGTH)] | None,
    Field(description="Makes this paid call safe to retry: the same key and parameters return the first call's ids"),
]
Again = Annotated[
    bool,
    Field(
        description=f"true: new songs on purpose. Without it, the same call (no idempotency_key) repeated within "
        f"{REISSUE_WINDOW_S / 60:g} minutes of the first is a re-issue and returns the first call's ids"
    ),
]
REISSUE = (
    f" Safe to re-issue: without an idempotency_key, the same call within {REISSUE_WINDOW_S / 60:g} minutes of the "
    "first returns the first call's task_ids (repeat: true) and pays nothing; pass again=true for new songs."
)
MaxCredits = Annotated[
    Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None,
    Field(description="Consent to pay up to this many credits (needed when the host cannot ask the user)"),
]
"""A number above 0 and finite: `true` is not a credit, nor is "5"."""
Provider = Annotated[
    Annotated[str, Field(max_length=40)] | None,
    Field(
        description="musicful (the default: the service's v1 songs, priced in credits), elevenlabs (ElevenLabs Music) "
        "or lyria (Google Lyria 3 clip, 30 s); an engine's song is priced in US dollars"
    ),
]
Seconds = Annotated[
    Annotated[float, Field(strict=True)] | None,
    Field(description="the song's length for elevenlabs (3 to 600 s) or lyria (its clip is always 30 s)"),
]


V2_DEFAULTS = MappingProxyType({"is_auto": 1, "model_version": "v4.5-plus"})
"""What generate_song_v2 sends when the agent leaves these out (the model itself requires them)."""

CONSENT = "consent"
INPUT_REQUIRED_VERSION = "2026-07-28"
"""From this protocol revision a tool asks the user by returning `InputRequiredResult` (no mid-call request)."""


def _digest(question: str) -> str:
    return hashlib.sha256(question.encode()).hexdigest()


class Consent(BaseModel):
    """What the user answers to a paid call's question."""

    send: bool = Field(strict=True, description="Send this paid request (true only)")


def instructions(desk: AgentDesk) -> str:
    where = (
        "This server runs on the embedded sandbox (no MUSICGEN_API_KEY): songs are synthesized locally and "
        "cost nothing real."
        if desk.client.settings.is_embedded_sandbox
        else "This server uses the real music service: paid tools cost credits and ask the user first."
    )
    return (
        f"{where} Make songs with generate_song (or generate_song_v2); it returns task ids at once. Then call "
        "wait_for_songs with the ids (it returns the ones still running when its timeout passes: call it again). "
        "Pass an idempotency_key to make a paid call safe to retry; without one, the same call repeated within "
        f"{REISSUE_WINDOW_S / 60:g} minutes returns the first call's ids (again=true for new songs). make_extra "
        "gives a finished song's WAV, MP4 or singer voice, paid once. account() tells credits and budget left; "
        "unfinished() lists paid calls whose songs were not received."
    )


class _MusicServer(MCPServer):
    """The SDK's server, with its argument errors told in one line that names the field."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in cause.errors(include_url=False)
            )
            raise ToolError(f"Error executing tool {name}: {problems}") from None


class AgentServer:
    """The MCP server over one `AgentDesk`: tool wrappers that price, ask, send and redact."""

    def __init__(self, desk: AgentDesk, quotes: QuoteBook | None = None) -> None:
        self.desk = desk
        self.card = ConsentCard(self, quotes if quotes is not None else QuoteBook())
        """A host with MCP Apps gets a quote and the consent card (`consent_card`) instead of a question."""
        self.pages = ConsentPages(self.card)
        """Over HTTP, a host that elicits by URL only is sent to a one-time consent page (`consent_page`)."""
        v1_shapes = tuple(V1_SHAPES.values())
        tools = [
            self._tool(
                with_request_fields(self.generate_song, v1_shapes, {"action": "auto"}),
                PAID,
                v1_schema(),
                REISSUE,
                card=True,
            ),
            self._tool(
                with_request_fields(self.generate_song_v2, (V2Request,), V2_DEFAULTS),
                PAID,
                model_schema(V2Request),
                REISSUE,
                card=True,
            ),
            self._tool(
                with_request_fields(self.write_lyrics, (LyricsRequest,)), PAID, model_schema(LyricsRequest), card=True
            ),
            self._tool(self.wait_for_songs, READ_ONLY),
            self._tool(self.get_songs, READ_ONLY),
            self._tool(self.search_library, READ_ONLY),
            self._tool(self.account, READ_ONLY),
            self._tool(self.run_batch, PAID, card=True),
            self._tool(self.make_extra, EXTRA, card=True),
            self._tool(self.batch_status, READ_ONLY),
            self._tool(self.unfinished, READ_ONLY),
        ]
        self.mcp = _MusicServer(
            "ipymusicgen",
            instructions=instructions(desk),
            tools=tools,
            log_level="WARNING",
            extensions=[self.card.apps],
        )
        self.mcp.resource("song://{task_id}", mime_type="application/json", description="A song's record")(
            self.song_resource
        )
        self.mcp.resource("song://{task_id}/audio", description="A song's archived audio file")(self.song_audio)

    @staticmethod
    def _tool(
        fn: Callable[..., Any],
        annotations: ToolAnnotations,
        schema: dict[str, Any] | None = None,
        note: str = "",
        *,
        card: bool = False,
    ) -> Tool:
        description = " ".join((fn.__doc__ or "").split()) + note
        meta = {"ui": {"resourceUri": CARD_URI}} if card else None  # MCP Apps: a host with Apps shows the card
        tool = Tool.from_function(fn, annotations=annotations, description=description, meta=meta)
        if schema is not None:  # the bounds of the spec, from the request models (validation also goes through them)
            declared = tool.parameters.get("properties", {})
            bounds = {name: bounds_of(prop) for name, prop in schema["properties"].items()}
            properties = {name: {**prop, **bounds.get(name, {})} for name, prop in declared.items()}
            tool.parameters = {**tool.parameters, "properties": properties, "required": schema.get("required", [])}
        return tool

    # -- helpers -------------------------------------------------------------------------------------

    def _clean(self, value: Any) -> Any:
        """The key out of every string of a result (a hostile service may echo it back), and no terminal escape,
        control or format character in any (a service's words in a note or a batch's errors are plain too)."""
        if isinstance(value, str):
            return self.desk.client.redact(service_text(value, lines=True))
        if isinstance(value, dict):
            return {k: self._clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._clean(v) for v in value]
        return value

    def _error(self, exc: BaseException) -> ToolError:
        text = service_text(one_line(exc)) or type(exc).__name__  # a service's message may carry escapes
        if isinstance(exc, StorageError):  # never SQLite's own words: what the journal cannot do, and what to do
            where = self.desk.store.path or "in memory"
            text = f"The journal {where} cannot be read or written now ({storage_reason(exc)}); try again"
        elif not isinstance(exc, AgentError):
            text = f"{type(exc).__name__}: {text}"
        return ToolError(self.desk.client.redact(text)[:1000])

    async def _blocking(self, call: Callable[[], T]) -> T:
        """Run a blocking desk call off the event loop; its failure becomes one redacted line."""
        try:
            return await anyio.to_thread.run_sync(call)
        except Exception as exc:  # a locked journal, a bug: one redacted line for the agent, never a traceback
            raise self._error(exc) from None

    async def _gate(
        self,
        ctx: Context,
        tool: str,
        plan: Plan,
        cap: float | None,
        execute: Callable[[Plan], dict[str, Any]],
        answer: Answer,
        replan: Callable[[], Plan] | None = None,
    ) -> Any:
        """The strongest consent this host can show, then the call: the Apps card (a quote: nothing sent), else the
        form question (elicitation), else over HTTP the one-time consent page (URL-mode elicitation), else
        `max_credits` (the agent decides: the weakest)."""
        if self.card.shows(ctx, plan):
            refusal = self.desk.refusal(plan, cap)
            if refusal is not None:
                raise ToolError(refusal)
            again = replan if replan is not None else functools.partial(self.desk.replan, plan)
            return self.card.quote(ctx, tool, plan, again, execute, answer)
        if self.pages.shows(ctx, plan):  # over HTTP, a host that elicits by URL only: the one-time consent page
            refusal = self.desk.refusal(plan, cap)
            if refusal is not None:
                raise ToolError(refusal)
            again = replan if replan is not None else functools.partial(self.desk.replan, plan)
            return self._clean(await self.pages.ask(ctx, tool, plan, again, execute, answer))
        declined = await self._consent(ctx, plan, cap)
        if isinstance(declined, InputRequiredResult):
            return declined
        if declined is not None:
            return self._clean(answer(plan, "declined", declined))
        return self._clean(await self._blocking(lambda: execute(plan)))

    async def _consent(self, ctx: Context, plan: Plan, max_credits: float | None) -> str | InputRequiredResult | None:
        """None when the call may be sent; why not (declined); or, on a 2026-07-28 connection, the question
        to return (the client asks the user and calls again with the answer). Refusals raise."""
        refusal = self.desk.refusal(plan, max_credits)
        if refusal is not None:
            raise ToolError(refusal)
        if plan.free or self.desk.free:
            return None
        capabilities = ctx.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):  # no form to ask in
            if in_dollars(plan):  # priced in dollars: no credits cap stands for the user's consent
                field = "provider" if plan.kind == "engine" else "kind"
                raise ToolError(
                    f"{field}: {dollars_what(plan)} costs about ${plan.dollars} and this host cannot ask the user "
                    "(no MCP Apps, no elicitation); nothing was sent"
                )
            if max_credits is None or max_credits < plan.estimate:
                raise ToolError(
                    f"max_credits: this host cannot ask the user (no form elicitation), so pass max_credits >= "
                    f"{plan.estimate} to consent to about {plan.estimate} credits"
                )
            return None
        question = self.desk.client.redact(self.desk.question(plan))
        if ctx.protocol_version and is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION):
            answer = self._answer_in_round(ctx, question)
            if answer is None:  # ask (again): the answer must be to this very question
                form = ElicitRequestFormParams(message=question, requested_schema=render_elicitation_schema(Consent))
                return InputRequiredResult(
                    input_requests={CONSENT: ElicitRequest(params=form)}, request_state=_digest(question)
                )
            action, send = answer
        else:  # asked mid-call; read the answer by the same rule, not the SDK's lax model (which takes "yes")
            schema = render_elicitation_schema(Consent)
            session = ctx.request_context.session
            elicited = await session.elicit_form(question, schema, related_request_id=ctx.request_id)
            action, send = elicited.action, _consents(elicited)
        if action == "accept" and send:
            return None
        return f"the user {'cancelled' if action == 'cancel' else 'declined'}: nothing was sent"

    @staticmethod
    def _answer_in_round(ctx: Context, question: str) -> tuple[str, bool] | None:
        """The user's answer carried by this round, if it answers `question` (the state holds its digest)."""
        responses = ctx.input_responses or {}
        answer = responses.get(CONSENT)
        if not isinstance(answer, ElicitResult) or ctx.request_state != _digest(question):
            return None
        return answer.action, _consents(answer)

    async def _paid_song(
        self, ctx: Context, kind: str, fields: dict[str, Any], key: str | None, cap: float | None, again: bool
    ) -> Any:
        plan = await self._blocking(lambda: self.desk.plan(kind, fields, key, again=again))
        tool = "generate_song_v2" if kind == "v2" else "generate_song"

        def unsent(plan: Plan, state: str, note: str) -> dict[str, Any]:
            attempt = plan.name if state == "quoted" else None
            return {"task_ids": [], "credits_estimate": plan.estimate, "attempt": attempt, "state": state, "note": note}

        return await self._gate(ctx, tool, plan, cap, self.desk.send, unsent)

    # -- paid tools ----------------------------------------------------------------------------------

    async def generate_song(
        self,
        ctx: Context,
        idempotency_key: Key = None,
        again: Again = False,
        max_credits: MaxCredits = None,
        provider: Provider = None,
        seconds: Seconds = None,
        **fields: Any,
    ) -> PaidSongOutput | InputRequiredResult:
        """Start a song (the service's v1 endpoint, or provider elevenlabs / lyria); returns {task_ids,
        credits_estimate, attempt} at once, without waiting. Costs money: the user is asked first (an engine's
        price in dollars)."""
        fields = {**fields, "provider": provider, "seconds": seconds}
        return await self._paid_song(ctx, "v1", fields, idempotency_key, max_credits, again)

    async def generate_song_v2(
        self,
        ctx: Context,
        idempotency_key: Key = None,
        again: Again = False,
        max_credits: MaxCredits = None,
        **fields: Any,
    ) -> PaidSongOutput | InputRequiredResult:
        """Start a song on the v2 endpoint; returns {task_ids, credits_estimate, attempt} at once.
        Costs credits: the user is asked first."""
        return await self._paid_song(ctx, "v2", fields, idempotency_key, max_credits, again)

    async def write_lyrics(
        self, ctx: Context, max_credits: MaxCredits = None, **fields: Any
    ) -> LyricsOutput | InputRequiredResult:
        """Write lyrics from a prompt; returns {title, text}. Costs a credit: the user is asked first. Not
        deduplicated: each call writes (and pays for) new lyrics."""
        plan = await self._blocking(lambda: self.desk.plan("lyrics", fields))

        def write(plan: Plan) -> dict[str, Any]:
            result = self.desk.write_lyrics(plan)
            written = {"title": service_text(result.title or ""), "text": service_text(result.text or "", lines=True)}
            return {**written, "state": "written", "service_text": SERVICE_TEXT}

        def unsent(plan: Plan, state: str, note: str) -> dict[str, Any]:
            return {"title": None, "text": None, "state": state, "note": note}

        return await self._gate(ctx, "write_lyrics", plan, max_credits, write, unsent)

    async def run_batch(
        self,
        ctx: Context,
        rows: Annotated[
            list[dict[str, Any]],
            Field(min_length=1, max_length=500, description="one request per row (generate_song's fields)"),
        ],
        name: Annotated[
            str,
            Field(max_length=MAX_KEY_LENGTH, description="the batch's name: re-running it sends only rows never sent"),
        ],
        budget: Annotated[
            Annotated[int, Field(strict=True, ge=0)] | None, Field(description="credits this batch may spend")
        ] = None,
        concurrency: Annotated[int, Field(ge=1, le=10, description="rows in flight at once")] = 3,
        max_credits: MaxCredits = None,
    ) -> BatchOutput | InputRequiredResult:
        """Start a batch of songs and return at once; batch_status(name) reports on it. Costs credits. Safe to
        re-issue: a batch is known by its name, and running it again sends only rows never sent."""

        def priced() -> Plan:
            return self.desk.batch_plan(rows, name, budget)

        def start(plan: Plan) -> dict[str, Any]:
            batch = self.desk.run_batch(rows, name, budget, concurrency, shown=plan.estimate)
            return {
                "name": batch.name,
                "state": "started",
                "credits_estimate": plan.estimate,
                "line": batch.progress_line(),
            }

        def unsent(plan: Plan, state: str, note: str) -> dict[str, Any]:
            return {"name": name, "state": state, "note": note, "credits_estimate": plan.estimate}

        plan = await self._blocking(priced)
        if not plan.estimate:  # every row was sent before: nothing to pay, nothing to ask
            return self._clean(await self._blocking(lambda: start(plan)))
        return await self._gate(ctx, "run_batch", plan, max_credits, start, unsent, priced)

    async def make_extra(
        self,
        ctx: Context,
        task_id: Annotated[
            str, Field(max_length=MAX_KEY_LENGTH, description="the finished song's task id (or its song id)")
        ],
        kind: Annotated[
            Literal["wav", "mp4", "vibe", "stems"],
            Field(
                description="wav: lossless audio; mp4: a video; vibe: a singer id (the service's, in credits); stems: "
                "ElevenLabs stem separation of the song's audio (a ZIP of stems, priced in US dollars)"
            ),
        ],
        max_credits: MaxCredits = None,
    ) -> ExtraOutput | InputRequiredResult:
        """A finished song's WAV, MP4 video or singer voice (for artist_consistency), or its ElevenLabs stems, archived
        beside the song. Costs once per song and kind (credits; stems: US dollars), whatever name the song is given:
        the user is asked first, the price first; asking
        again (here, from a notebook or another kernel, by its task id or song id) reuses what was made and pays
        nothing: the note then says it is already made."""
        plan = await self._blocking(lambda: self.desk.plan_extra(task_id, kind))

        def unsent(plan: Plan, state: str, note: str) -> dict[str, Any]:
            answer = {"song": plan.request.song, "kind": plan.request.kind, "state": state, "value": None}
            estimate = plan.estimate if state == "quoted" else 0
            return {**answer, "path": None, "note": note, "sent": False, "credits_estimate": estimate}

        def again() -> Plan:
            return self.desk.plan_extra(plan.request.song, plan.request.kind)

        return await self._gate(ctx, "make_extra", plan, max_credits, self.desk.make_extra, unsent, again)

    # -- reading tools -------------------------------------------------------------------------------

    async def wait_for_songs(
        self,
        ctx: Context,
        task_ids: Ids,
        timeout_s: Annotated[float, Field(ge=0, le=WAIT_MAX_S, description="seconds to wait at most")] = 50,
    ) -> SongsOutput:
        """Wait for songs, with a progress notification at each change (queued → writing → preview → ready).
        When timeout_s passes first, the unfinished ones come back as still running (not an error)."""
        ids, invalid = checked_ids(task_ids)
        tasks = await self._blocking(lambda: self.desk.tasks_for(ids))
        interval = self.desk.client.settings.poll_interval_for(None)
        deadline = anyio.current_time() + timeout_s
        shown: dict[str, str] = {}
        error = None
        while True:
            if await client_gone(ctx):  # nobody will read the answer: stop querying the service for it
                break
            try:
                await anyio.to_thread.run_sync(lambda: self.desk.poll(tasks))
                error = None
            except MusicGenError as exc:  # a failed read: try again next round, say so if it lasts
                error = self.desk.client.redact(one_line(exc))[:300]
            await self._progress(ctx, tasks, ids, shown)
            left = deadline - anyio.current_time()
            if tasks.all_finished or left <= 0:
                break
            await anyio.sleep(min(interval, left))
        result = self._songs_result(tasks, ids, invalid)
        if error:
            result["last_error"] = error
        return cast(SongsOutput, result)

    async def _progress(self, ctx: Context, tasks: TaskSet, ids: list[str], shown: dict[str, str]) -> None:
        states = {i: state_of(tasks.get(i)) for i in ids}
        changed = [i for i in ids if shown.get(i) != states[i]]
        if not changed:
            return
        shown.update(states)
        words = "; ".join(f"{i}: {states[i]}" for i in changed)
        done = sum(stage(s) for s in states.values())
        await ctx.report_progress(done, 3 * len(ids), self.desk.client.redact(words)[:500])

    def _songs_result(
        self, tasks: TaskSet, ids: list[str], invalid: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        records = [r for r in (tasks.get(i) for i in ids) if r is not None]
        songs = self.desk.views(records, ids)
        running = [s["id"] for s in songs if s["state"] not in ("ready", "failed")]
        note = "all finished" if not running else "still running: call wait_for_songs again with these ids"
        result: dict[str, Any] = {"songs": songs, "all_finished": not running, "still_running": running}
        if invalid:  # named first: the agent's mistake, then what the good ids say
            note = "; ".join(i["problem"] for i in invalid) + f"; not read. The other ids: {note}"
            result["invalid_ids"] = invalid
        return self._clean({**result, "note": note})

    async def get_songs(
        self,
        task_ids: Ids,
        include_audio: Annotated[
            bool,
            Field(
                description="also attach archived songs inline as base64 audio (size-bounded); by default each "
                "is offered as a resource_link to song://{id}/audio"
            ),
        ] = False,
    ) -> Annotated[CallToolResult, SongsOutput]:
        """The songs' current state, without waiting (one query); archived songs as resource_links to their audio."""
        ids, invalid = checked_ids(task_ids)

        def read() -> dict[str, Any]:
            tasks = self.desk.tasks_for(ids)
            self.desk.poll(tasks)
            return self._songs_result(tasks, ids, invalid)

        result = await self._blocking(read)
        content: list[Any] = [TextContent(type="text", text=json.dumps(result, ensure_ascii=False))]
        for song in result["songs"]:
            link = _audio_link(song)
            if link is not None:
                content.append(link)
            audio = _audio(song.get("archived_path")) if include_audio else None
            if audio is not None:
                content.append(audio)
            elif include_audio and song.get("archived_path"):
                song["audio_note"] = f"larger than {AUDIO_MAX_BYTES // (1024 * 1024)} MB: not attached"
        return CallToolResult(content=content, structured_content=result)

    async def search_library(
        self,
        text: Annotated[
            str | None, Field(max_length=PROMPT_MAX * 10, description="words in title, style, lyrics")
        ] = None,
        favourite: Annotated[bool | None, Field(description="only favourites (true) or only others (false)")] = None,
        model: Annotated[
            Annotated[str, Field(max_length=MODEL_MAX)] | None, Field(description="only songs of this model")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> SearchOutput:
        """Search the library of every paid song (newest first)."""
        songs = await self._blocking(lambda: self.desk.search(text, favourite, model, limit))
        return cast(SearchOutput, self._clean({"songs": songs, "count": len(songs)}))

    async def account(self) -> AccountOutput:
        """Credits left on the key, spend today, and the budget left for this server."""
        return self._clean(await self._blocking(self.desk.account))

    async def batch_status(
        self, name: Annotated[str, Field(max_length=MAX_KEY_LENGTH, description="the batch's name")]
    ) -> BatchStatusOutput:
        """How a batch is doing: rows per state, its ids, its progress line."""
        return self._clean(await self._blocking(lambda: self.desk.batch_status(name)))

    async def unfinished(self) -> UnfinishedOutput:
        """What was paid for and not yet received: unknown attempts and songs still running (as resume())."""
        return self._clean(await self._blocking(self.desk.unfinished))

    async def song_resource(self, task_id: str) -> str:
        """The record of one song as JSON (`song://{task_id}`); a bad id or a failed read is one line (a
        `ResourceError`: the SDK logs anything else with a traceback)."""

        def read() -> dict[str, Any]:
            tasks = self.desk.tasks_for([task_id])
            self.desk.poll(tasks)
            return self._songs_result(tasks, [task_id])["songs"][0]

        try:
            return json.dumps(await self._blocking(read), ensure_ascii=False)
        except ToolError as exc:
            raise ResourceError(f"song://{{task_id}}: {exc}") from None

    async def song_audio(self, task_id: str) -> bytes:
        """The archived audio of one song (`song://{task_id}/audio`): the bytes of the kept file, read from the
        library (never a path the agent names)."""

        def read() -> bytes:
            check_id(task_id, "task_id")
            library = self.desk.library()
            path = library.archived_path(task_id) if library is not None else None
            try:  # a real file of the archive, counted to the cap, and audio (never a link to /proc or a key file)
                return read_archived_audio(path, int(self.desk.client.settings.max_download_mb * 2**20))
            except ArchivedAudioError:
                raise AgentError(f"task_id: no archived audio for {task_id[:80]!r} yet") from None

        try:
            return await self._blocking(read)
        except ToolError as exc:
            raise ResourceError(f"song://{{task_id}}/audio: {exc}") from None


def _consents(answer: ElicitResult) -> bool:
    """Consent is an accepted answer whose `send` is the boolean true: not "yes", not 1."""
    return answer.action == "accept" and (answer.content or {}).get("send") is True


async def client_gone(ctx: Context) -> bool:
    """Whether the HTTP client of this call has disconnected (never on stdio: its end closes the server)."""
    try:
        request = ctx.request_context.request
    except ValueError:
        return False
    check = getattr(request, "is_disconnected", None)
    if check is None:
        return False
    try:
        return bool(await check())
    except Exception:  # a transport that cannot tell: keep waiting, as before
        return False


def checked_ids(task_ids: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The good ids (spaces around taken off, each once) and the bad ones, each with one line naming it
    (the client's rule: no comma, not blank, not over-long, no control characters). With no good id at
    all, the call is refused in one line: nothing is read, nothing is waited on."""
    good: list[str] = []
    invalid: list[dict[str, Any]] = []
    for index, value in enumerate(task_ids):
        field = f"task_ids[{index}]"
        try:
            good.append(check_id(value, field))
        except RequestValidationError as exc:
            invalid.append({"index": index, "problem": one_line(exc)[:300]})  # the id itself only escaped, inside
    if not good:
        raise ToolError("; ".join(i["problem"] for i in invalid)[:1000] + "; nothing was read")
    return list(dict.fromkeys(good)), invalid


def _audio_link(song: dict[str, Any]) -> ResourceLink | None:
    """A link to an archived song's audio (`song://{id}/audio`), read with resources/read when wanted."""
    found = archived_audio_kind(song.get("archived_path"))  # a real file of the archive that is audio, or no link
    if found is None:
        return None
    mime, size = found
    return ResourceLink(
        type="resource_link", uri=f"song://{song['id']}/audio", name=song.get("title") or song["id"],
        mime_type=mime, size=size,
    )  # fmt: skip


def _audio(path: str | None) -> AudioContent | None:
    if not path:
        return None
    try:
        data = read_archived_audio(path, AUDIO_MAX_BYTES)  # as the page's: no link followed, only audio
    except ArchivedAudioError:
        return None
    return AudioContent(type="audio", data=base64.b64encode(data).decode("ascii"), mime_type=str(audio_type(data)))


def build_server(desk: AgentDesk, quotes: QuoteBook | None = None) -> MCPServer:
    """The MCP server over `desk`; `quotes` (its TTL, its clock) for the consent card's quotes."""
    return AgentServer(desk, quotes).mcp


Transport = Literal["stdio", "streamable-http"]
