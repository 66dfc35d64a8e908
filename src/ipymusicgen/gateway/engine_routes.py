"""The synchronous engines at their own paths: ElevenLabs Music (`POST /v1/music`, `/v1/music/detailed`) and Lyria
through the Gemini API (`POST /v1beta/models/{model}:generateContent`, and `/v1/...` as google-genai sends it), so the
gateway's root is every provider's base URL and a user's gateway token is their key for each.

Each call: the token is read from the engine's own auth header (`xi-api-key`; `x-goog-api-key` or `?key=`), the body
(bounded) is priced in US dollars by the price table (`models.dollar_prices`) from what it asks (the engine module's
`priced_fields`), and the price is reserved from the user's dollar budget in the transaction that claims its
Idempotency-Key (`storage.ledger_dollars`): a user with only a credits budget is refused in one line (units are never
added). The call is then sent once on the team's key (`engine_upstream`), never retried: its answer is the song
itself. A definite refusal is released; an answer lost after sending is "may have been charged", kept so and never
sent again; the repeat of an Idempotency-Key gets the kept answer, or that truth. Refusals speak each engine's own
error shape, so the engine's own SDK raises its own error types.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..client.engine_recovery import REPEAT_ONLY_HEADER
from ..engines import elevenlabs as el
from ..engines import lyria
from ..engines.wire import AnswerError, Charge, charge_of_status
from ..models.dollar_prices import STEMS, DollarPriceError, price_table, stems_estimate
from ..models.providers import CAPABILITIES, ELEVENLABS, LYRIA
from ..storage import ledger_dollars as dollars
from ..storage.ledger import DONE, REFUSED, UNKNOWN
from .admission import Limits, read_body
from .backlog import Unwritten
from .engine_upstream import ENGINE_TIMEOUT, EngineAnswer, EngineUpstream
from .upstream import NotSent, encode_body

log = logging.getLogger(__name__)
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_IDEMPOTENCY_KEY = 200
MAY_HAVE_BEEN_CHARGED = (
    "This call was sent to {provider} and no answer is known for it (yet): it may have been charged. It was NOT "
    "sent again; check your songs before trying a new call."
)
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
"""The largest stem separation upload taken (a ten-minute song is well under it); JSON bodies keep `Limits`."""
NOT_SENT = "{provider} could not be reached through the gateway; nothing was sent or charged."
LEDGER_DOWN = "The gateway's ledger cannot be reached just now: nothing was sent or charged. Try again in a moment."
NEVER_RECEIVED = "No call with this Idempotency-Key reached the gateway: it was never sent, nor charged."
KEY_REUSED = "This Idempotency-Key was already used for another request; nothing was sent. Use a new key."
NO_DOLLAR_BUDGET = (
    "{user} has no dollar budget: {provider} songs are priced in US dollars, and a credits budget never pays "
    "for them. Nothing was sent. The gateway's admin can set one: gateway user budget-usd {user} 5"
)
PARSERS: Mapping[str, Callable[[str, bytes], Any]] = MappingProxyType(
    {ELEVENLABS: el.parse_answer, LYRIA: lyria.parse_answer}
)


# -- each engine's own error shapes ----------------------------------------------------------------------------


def _el_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"detail": {"status": code, "message": message}}, status_code=status)


def _gemini_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": status, "message": message, "status": code}}, status_code=status)


ERROR_SHAPES: Mapping[str, Callable[[int, str, str], JSONResponse]] = MappingProxyType(
    {ELEVENLABS: _el_error, LYRIA: _gemini_error}
)


def _refused(provider: str, status: int, code: str, message: str) -> JSONResponse:
    return ERROR_SHAPES[provider](status, code, message)


def _bad_key(provider: str, given: bool) -> JSONResponse:
    if provider == ELEVENLABS:
        return _el_error(401, "invalid_api_key", "Invalid API key" if given else "Missing xi-api-key header")
    if not given:
        return _gemini_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers: use an API key.")
    return _gemini_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")


# -- prices -----------------------------------------------------------------------------------------------------


def price_of(provider: str, model: str, seconds: float | None) -> Decimal:
    """The dollars a call is reserved at: the table's price for the model at the length asked, or at the longest the
    model makes when the engine picks it (an estimate never comes out low); a length below the shortest is priced at
    the shortest. A model with no capability row or no price is refused (`DollarPriceError`): nothing is sent."""
    capability = CAPABILITIES.get((provider, model))
    price = price_table().get((provider, model))
    if capability is None or price is None:
        raise DollarPriceError(f"{provider} model {model[:60]!r} has no dollar price at this gateway")
    longest = capability.max_seconds or capability.fixed_seconds or 600.0
    length = longest if seconds is None else max(seconds, capability.min_seconds or 0.0)
    return price.of(length)


def _fingerprint(path: str, params: dict[str, str], body: Any) -> str:
    text = json.dumps([path, sorted(params.items()), body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _priced_upload(content_type: str, raw: bytes) -> tuple[str, Decimal, list[str], tuple[bytes, str]]:
    """A stem separation: its price by the upload's own length (the longest any reader says, miniaudio's or
    mutagen's: a format one cannot read, AIFF or M4A, may be longer than ten minutes; the longest song when none
    can, so an estimate never comes out low), and what names the request for its Idempotency-Key (a repeat's multipart
    boundary differs: the variation and the audio's hash), and the body sent: exactly that audio and variation."""
    from ..archive.extras import _seconds_of

    audio, variation = el.read_upload(content_type, raw)
    named = [variation, hashlib.sha256(audio).hexdigest()]
    lengths = [s for s in (_seconds_of(audio), _tagged_seconds(audio)) if s is not None]
    return STEMS, stems_estimate(max(lengths, default=None)), named, el.upload_body(audio, variation)


def _tagged_seconds(audio: bytes) -> float | None:
    """The audio's length as mutagen reads it (the formats miniaudio does not), or None."""
    import io
    import math

    import mutagen

    try:
        found = mutagen.File(io.BytesIO(audio))
        seconds = float(found.info.length) if found is not None else 0.0
    except Exception:  # mutagen raises its own errors, and more, on hostile bytes: then no reading
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _stems_answer(content_type: str, body: bytes) -> None:
    """A stem separation's 2xx is paid when it holds the stems (a ZIP); anything else may have been charged."""
    if not body.startswith(b"PK"):
        raise AnswerError("the stem separation's answer held no ZIP of stems")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _token(request: Request, provider: str) -> str | None:
    if provider == ELEVENLABS:
        return request.headers.get(el.KEY_HEADER)
    return request.headers.get(lyria.KEY_HEADER) or request.query_params.get("key")


# -- the calls ---------------------------------------------------------------------------------------------------


class EngineDoor:
    """The rules over the gateway's ledger and its engine upstreams (`gateway.engines`)."""

    def __init__(self, gateway: Any, limits: Limits) -> None:
        self.gateway = gateway
        self.limits = limits

    async def handle(self, request: Request, provider: str) -> Response:
        upstream: EngineUpstream | None = self.gateway.engines.get(provider) if self.gateway.engines else None
        if upstream is None:
            return _refused(provider, 404, "NOT_FOUND", f"{provider} is not served by this gateway")
        token = _token(request, provider)
        user = await self.gateway.user_of(token)
        if user is None:  # before the body: a caller without a live token gets none of it read
            answer = _bad_key(provider, bool(token))
            answer.headers["connection"] = "close"
            return answer
        stems = request.url.path == el.STEMS.path
        raw = await read_body(request, MAX_UPLOAD_BYTES if stems else self.limits.max_body_bytes)
        if isinstance(raw, Response):
            return raw
        idem_key = request.headers.get(IDEMPOTENCY_HEADER) or None
        if idem_key is not None and len(idem_key) > MAX_IDEMPOTENCY_KEY:
            return _refused(
                provider, 400, "invalid_request", f"Idempotency-Key: at most {MAX_IDEMPOTENCY_KEY} characters"
            )
        params = {k: v for k, v in request.query_params.items() if not (provider == LYRIA and k == "key")}
        content_type = request.headers.get("content-type", "application/json")
        try:
            if stems:  # priced by the upload's own length, as the client prices it
                model, price, body, (raw, content_type) = await asyncio.to_thread(_priced_upload, content_type, raw)
            else:
                body = json.loads(raw, parse_constant=_no_constant)  # NaN, Infinity: not JSON, never forwarded
                raw, content_type = encode_body(body) or b"null", "application/json"  # sent as priced (one key once)
                path = request.url.path
                model, seconds = el.priced_fields(body) if provider == ELEVENLABS else lyria.priced_fields(path, body)
                price = price_of(provider, model, seconds)
            micros = dollars.to_micros(price)
            fingerprint = _fingerprint(request.url.path, params, body) if idem_key else None
        except (ValueError, RecursionError) as exc:  # DollarPriceError is a ValueError: nothing reserved or sent
            if isinstance(exc, DollarPriceError) and provider == LYRIA:  # as Gemini answers a model it has not
                return _gemini_error(404, "NOT_FOUND", f"{exc}: not found for generateContent here")
            text = str(exc) if isinstance(exc, DollarPriceError) else f"the body cannot be priced ({str(exc)[:120]})"
            gemini = provider == LYRIA  # each engine's own shape: Gemini's 400 INVALID_ARGUMENT, ElevenLabs' 422
            return _refused(provider, 400 if gemini else 422, "INVALID_ARGUMENT" if gemini else "invalid_request", text)
        try:
            held = await self.gateway.blocking(
                dollars.reserve, self.gateway.ledger, user, idem_key, provider, request.url.path, model, micros,
                fingerprint, bool(idem_key and request.headers.get(REPEAT_ONLY_HEADER)),
            )  # fmt: skip
        except Exception:
            log.warning("the ledger could not reserve an engine call: nothing was sent")
            return _refused(provider, 503, "ledger_unavailable", LEDGER_DOWN)
        if held.kind == "conflict":
            return _refused(provider, 409, "idempotency_key_reused", KEY_REUSED)
        if held.kind == "unseen":  # a resume asking again for a call that never reached this gateway
            return _refused(provider, 404, "not_found", NEVER_RECEIVED)
        if held.kind == "no_budget":
            return _refused(provider, 402, "payment_required", NO_DOLLAR_BUDGET.format(user=user, provider=provider))
        if held.kind == "over":
            return _refused(provider, 402, "payment_required", await self._over(user, held, micros))
        if held.kind == "repeat":
            return self._repeat(provider, held)
        assert held.call_id is not None
        send = self._send(upstream, held.call_id, request.url.path, params, raw, content_type, idem_key is not None)
        return await asyncio.shield(send)  # a caller hanging up stops neither the send nor its recording

    async def _over(self, user: str, held: dollars.EngineReservation, micros: int) -> str:
        standing = await self.gateway.blocking(dollars.standing, self.gateway.ledger)
        team = held.over == "the team's dollar budget"
        budget, spent = standing.get("" if team else user, (None, 0))
        command = "gateway team budget-usd N" if team else f"gateway user budget-usd {user} N"
        return (
            f"Not enough left in {held.over} (budget {dollars.shown(budget)}, charged {dollars.shown(spent)}; this "
            f"call needs about {dollars.shown(micros)}). Nothing was sent. Only the gateway's admin can raise it "
            f"({command})."
        )

    def _repeat(self, provider: str, held: dollars.EngineReservation) -> Response:
        """The first call's kept answer (in the backlog while the ledger could not take it), or the truth about it:
        never sent again."""
        waiting = self.gateway.backlog.kept(held.call_id, engine=True) if held.call_id is not None else None
        if waiting is not None and waiting.status_code is not None and waiting.body is not None:
            return Response(
                waiting.body, waiting.status_code, media_type=waiting.media_type or "application/octet-stream"
            )
        if held.state in (DONE, REFUSED) and held.status_code is not None and held.body is not None:
            return Response(held.body, held.status_code, media_type=held.media_type or "application/octet-stream")
        return _refused(provider, 503, "may_have_been_charged", MAY_HAVE_BEEN_CHARGED.format(provider=provider))

    async def _send(
        self,
        upstream: EngineUpstream,
        call_id: int,
        path: str,
        params: dict[str, str],
        raw: bytes,
        content_type: str,
        keep: bool,
    ) -> Response:
        provider = upstream.provider
        try:
            answer = await upstream.paid(path, params, raw, content_type)
        except NotSent:
            await self._finish(call_id, REFUSED, None, None, None, "not sent: the engine could not be reached")
            return _refused(provider, 502, "upstream_unreachable", NOT_SENT.format(provider=provider))
        except Exception as exc:  # MaybeSent, or anything once the send began: the outcome is not known
            await self._finish(call_id, UNKNOWN, None, None, None, f"no answer ({type(exc).__name__})")
            return _refused(provider, 503, "may_have_been_charged", MAY_HAVE_BEEN_CHARGED.format(provider=provider))
        state = await self._state_of(provider, path, answer)
        kept = answer.body if keep and state in (DONE, REFUSED) else None
        await self._finish(call_id, state, answer.status_code, answer.media_type, kept, None)
        return Response(answer.body, answer.status_code, headers=answer.headers)

    async def _state_of(self, provider: str, path: str, answer: EngineAnswer) -> str:
        """done (charged), refused (released) or unknown, by the engine module's own rules: a 2xx that holds no song
        says itself whether it was charged (a blocked Lyria prompt was not)."""
        charge = charge_of_status(answer.status_code)
        if charge is Charge.CHARGED:
            read = _stems_answer if path == el.STEMS.path else PARSERS[provider]
            try:
                await asyncio.to_thread(read, answer.media_type, answer.body)
            except AnswerError as exc:
                charge = exc.charge
            except Exception:
                charge = Charge.UNKNOWN
        return {Charge.CHARGED: DONE, Charge.NOT_CHARGED: REFUSED}.get(charge, UNKNOWN)

    async def _finish(
        self, call_id: int, state: str, status: int | None, media: str | None, body: bytes | None, note: str | None
    ) -> None:
        try:
            await self.gateway.blocking(dollars.finish, self.gateway.ledger, call_id, state, status, media, body, note)
        except Exception:  # the caller still gets the answer; the backlog writes it once the ledger is back
            log.warning("the ledger could not record engine call %s now: its end is kept until it can", call_id)
            end = Unwritten(call_id, state, status, body, engine=True, media_type=media, note=note)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.gateway.backlog.keep, end)
            except Exception:  # pending, so it counts as may-be-charged, and a restart makes it unknown
                log.error("could not keep engine call %s's end: it stays pending (may have been charged)", call_id)


def recover_engine_calls(ledger: Any) -> int:
    """As a gateway starts: engine calls an earlier one left pending (killed mid-call) become unknown, "may have
    been charged", never sent again (a call pending longer than any compose takes is as dead)."""
    return dollars.left_over(ledger, ENGINE_TIMEOUT + 60.0)


def engine_routes(gateway: Any, limits: Limits) -> list[Route]:
    """The engines' own paths, served when the gateway holds that engine's key (`gateway.engines`)."""
    if gateway.engines is None:
        return []
    door = EngineDoor(gateway, limits)

    def route(path: str, provider: str) -> Route:
        async def endpoint(request: Request) -> Response:
            return await door.handle(request, provider)

        return Route(path, endpoint, methods=["POST"])

    served: list[Route] = []
    if gateway.engines.get(ELEVENLABS) is not None:
        served += [route(e.path, ELEVENLABS) for e in (el.COMPOSE, el.DETAILED, el.STEMS)]
    if gateway.engines.get(LYRIA) is not None:
        served += [route(f"/{v}/models/{{model}}:generateContent", LYRIA) for v in lyria.API_VERSIONS]
    return served
