"""What the agent server does, without MCP: price a paid call, check the money, send it once, read songs.

The server's tools are thin async wrappers over this class, so the rules live here and in the layers
below: the request models validate, `models.costs` prices, the batch tables (`storage.batches`) record
each paid call under its idempotency key before it is sent, the client journals it, and the library
and the archive keep what comes back. Every method is blocking; the server runs them off its event loop.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from pathlib import Path
from typing import Any

from ..archive.extras import extra_price, held, kind_of, make_extra, song_named, stems_quote
from ..batch.drivers import Batch, BatchError, request_hash, validate_rows
from ..client.faces import MusicClient
from ..client.responses import create_may_have_landed
from ..client.waiting import check_id
from ..errors import JournalUnavailableError, MusicGenError, RequestValidationError
from ..models import costs
from ..models.dollar_prices import DollarBudget, DollarPriceError, budget_charge
from ..models.schema import LyricsResult, V2Song, build_generate_request, build_lyrics_request, build_v2_request
from ..models.tasks import TaskSet
from ..song_library import Library
from ..storage.agent_quotes import name_paying_quote
from ..storage.batches import NEVER_SENT, BatchStore
from ..storage.database import Database
from ..storage.errors import StorageError, StorageUnavailableError
from .agent_budget import AgentBudget, Amount, OverBudget, Spend
from .agent_budget import shown as with_unit
from .budget_units import amount_of, credit_rate_set, dollar_charge, dollars_refusal, over_budget, server_budget
from .engine_songs import CENT, dollars_of, engine_song, no_seconds, provider_of
from .songs import song_view
from .text import quoted

NAME_PREFIX = "agent:"
"""Paid calls of the agent server are recorded as one-row batches named `agent:<idempotency key>`."""
MAX_KEY_LENGTH = 200
REISSUE_WINDOW_S = 600.0
"""A paid call without an idempotency_key that repeats one made less than this long ago (same tool, same fields)
is a re-issue (a host whose stream broke sends the call again): it gets the first call's ids. Sliding, measured
from the first call; `again=true` asks for new songs on purpose."""
AUTO = "auto-"
"""Derived keys: `agent:auto-<request digest>-<first call's time>`."""
SHOWN = ("name", "kind", "song", "action", "mv", "model_version", "style", "prompt", "title", "lyrics")
"""The request fields a consent question quotes (a batch shows its name), in this order."""


class AgentError(MusicGenError):
    """A tool call refused or failed; its message is one line that names the field or the reason."""


@dataclass(frozen=True)
class Plan:
    """A priced paid call, not sent yet: what the consent question shows is what `send` sends."""

    kind: str
    """"v1", "v2", "lyrics", "engine" (a synchronous engine's song), "batch" or "extra"."""
    request: Any
    estimate: int
    credits_left: int | None
    name: str | None
    """The batch name that records it (None for lyrics: nothing to follow or resend)."""
    replay: dict[str, Any] | None = None
    """The first call's answer when this idempotency key was sent before: nothing is paid again."""
    dollars: Decimal | None = None
    """The price in US dollars: an engine's always (its `estimate` is 0 credits), a service call's where the user
    set a credit rate; consent shows it first."""
    quote: str | None = None
    """The consent quote the user confirmed for this call: its attempt row names it before the call goes out."""

    @property
    def free(self) -> bool:
        return self.replay is not None


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _problem_line(exc: RequestValidationError) -> str:
    problems = getattr(exc, "problems", None) or []
    return "; ".join(str(p) for p in problems) or _one_line(exc)


@dataclass(frozen=True)
class ExtraRequest:
    """What an extra's consent question shows: which extra of which song."""

    kind: str
    song: str

    def to_payload(self) -> dict[str, Any]:
        return {"kind": kind_of(self.kind).label, "song": self.song}


def in_dollars(plan: Plan) -> bool:
    """Priced in US dollars only (an engine's song; ElevenLabs' stems of a song): no credits are counted, reserved,
    asked for or capped (units are never added), and consent shows the dollars alone."""
    return plan.kind == "engine" or (plan.kind == "extra" and getattr(plan.request, "kind", None) == "stems")


def dollars_what(plan: Plan) -> str:
    """What a dollar-priced plan buys, in the server's own words."""
    if plan.kind == "engine":
        return f"a {plan.request.provider} song"
    return "a song's stems (ElevenLabs stem separation)"


@dataclass(frozen=True)
class BatchRequest:
    """What a batch's consent question shows (its name and rows) where a single call shows its request."""

    name: str
    rows: int

    def to_payload(self) -> dict[str, Any]:
        return {"name": self.name}


class AgentDesk:
    """The agent server's state: one client (with its journal, archive and library), a lifetime budget."""

    def __init__(
        self,
        client: MusicClient,
        *,
        budget: int | str | DollarBudget | None = None,
        database: Database | None = None,
        budget_usd: Any = None,
    ):
        try:  # whole credits, or dollars ('$5', '5usd', budget_usd=5): the notebook's spellings (`budget_units`)
            checked = server_budget(budget, budget_usd)
        except DollarPriceError as exc:
            raise AgentError(_one_line(exc)) from None
        self.client = client
        self.budget: int | DollarBudget | None = checked
        self.in_usd = isinstance(checked, DollarBudget)
        """The budget is in US dollars across providers (else credits, or none)."""
        self.database = database
        """The workspace's `Database` (its songs are the agent's library); None: the client's journal file."""
        self._lock = threading.Lock()
        self.ledger = AgentBudget(amount_of(checked), dollars=self.in_usd)
        """Every paid call and batch, reserved under one lock before it is sent, counted as measured if it can be."""
        self._batches: dict[str, Batch] = {}
        self._library: Library | None = None
        self.clock = time.time
        self._naming = threading.Lock()
        """Held while a derived key is looked up and recorded: two re-issues at once share one name."""
        """The re-issue window's clock (a test gives it a fake one)."""
        self.store: BatchStore = client.wiring.batch_store(client)  # the one its batches use (`client.batch`)

    # -- money ---------------------------------------------------------------------------------------

    @property
    def free(self) -> bool:
        """The embedded sandbox's demo key: nothing costs real credits, so nothing asks first."""
        return self.client.settings.is_free

    def budget_left(self) -> Amount | None:
        """The budget not spent (as measured where known) nor reserved by a call or batch under way, in its unit:
        credits, or dollars (a `Decimal`) when `in_usd`."""
        return self.ledger.left()

    def charge(self, plan: Plan) -> tuple[Amount, Decimal | None]:
        """What `plan` counts against the budget, in its unit, and the credit rate it was priced at (`budget_units`:
        a dollar budget with no credit rate refuses a service call in one line saying how to set it)."""
        if not self.in_usd:
            return plan.estimate, None
        try:
            return dollar_charge(plan, in_dollars(plan))
        except DollarPriceError as exc:
            raise AgentError(f"budget: {_one_line(exc)} Nothing was sent.") from None

    def credits_left(self) -> int:
        return self.client.key_info().key_music_counts

    def refusal(self, plan: Plan, max_credits: float | None) -> str | None:
        """Why this call may not be paid (budget, credits left, the caller's cap), or None."""
        if plan.free:
            return None
        if in_dollars(plan) and self.budget is not None and not self.in_usd:  # units are never added
            return dollars_refusal(dollars_what(plan), plan.dollars, self.budget)  # type: ignore[arg-type]
        try:
            charge, _ = self.charge(plan)
        except AgentError as exc:  # a dollar budget, a service call, no credit rate: how to set it
            return str(exc)
        left = self.budget_left()
        if left is not None and charge > left:
            return over_budget(left, self.budget, charge)  # type: ignore[arg-type]
        if plan.credits_left is not None and plan.estimate > plan.credits_left:
            return (
                f"credits: the key has {plan.credits_left} left and this call costs about {plan.estimate}; "
                "nothing was sent"
            )
        if max_credits is not None and plan.estimate > max_credits:
            return f"max_credits: this call costs about {plan.estimate}, more than max_credits={max_credits:g}"
        return None

    def question(self, plan: Plan) -> str:
        """The consent question: the price and the credits left first, in the server's own words; then what
        the agent wrote, quoted and escaped (`text.quoted`), so no style, title or name can restate the price."""
        unit = "credit" if plan.estimate == 1 else "credits"
        left = "an unknown number of" if plan.credits_left is None else str(plan.credits_left)
        doing = {
            "v1": "Make songs", "v2": "Make songs (v2)", "lyrics": "Write lyrics", "batch": "Run a batch",
            "extra": "Make a song's paid extra",
        }  # fmt: skip
        payload = plan.request.to_payload()
        words = "; ".join(f"{field} {quoted(payload[field])}" for field in SHOWN if payload.get(field))
        what = f"{doing.get(plan.kind, 'Make')}{f' of {plan.request.rows} row(s)' if plan.kind == 'batch' else ''}"
        balance = f"the key has {left} credits left"
        if plan.kind == "engine":  # dollars are its own unit; the server's words say what and how long
            price, what = f"Pay about ${plan.dollars} (USD)?", f"Make {plan.request.describe()}"
        elif in_dollars(plan):  # ElevenLabs' stems: dollars alone, no credits
            price, what = f"Pay about ${plan.dollars} (USD)?", f"Make {dollars_what(plan)}"
        elif (dollars := dollars_of(plan.kind, plan.request, plan.estimate)) is not None:  # then the own unit
            price = f"Pay about ${dollars} ({plan.estimate} {unit}; {balance})?"
        else:
            price = f"Pay about {plan.estimate} {unit} ({balance})?"
        return f"{price} {what}, as the agent wrote it: {words}."

    # -- planning ------------------------------------------------------------------------------------

    def plan(
        self, kind: str, fields: Mapping[str, Any], idempotency_key: str | None = None, *, again: bool = False
    ) -> Plan:
        """Validate (the request models: one line naming the field), price, and look the key up.

        Without a key, one is derived from the request and the re-issue window (`REISSUE_WINDOW_S`), so a host
        re-issuing a dropped call pays once; `again=True` asks for new songs (a fresh key)."""
        values = {k: v for k, v in fields.items() if v is not None}
        allow = self.client.settings.allow_unknown_models
        try:
            if kind in ("v1", "engine"):  # the song tool: `provider` names the engine (musicful: the service's v1)
                provider = provider_of(values)
                kind = "v1" if provider == "musicful" else "engine"
                if kind == "v1" and values.pop("seconds", None) is not None:
                    raise no_seconds(provider)
                values.pop("provider", None)
            if kind == "engine":
                request: Any = engine_song(provider, values)
            elif kind == "v1":
                request = build_generate_request(values, allow_unknown_models=allow)
            elif kind == "v2":
                request = build_v2_request(values, allow_unknown_models=allow)
            else:
                request = build_lyrics_request(values.get("prompt"))
        except RequestValidationError as exc:
            raise AgentError(_problem_line(exc)) from None
        name = None
        derived = False
        if kind != "lyrics":
            if idempotency_key is not None:
                name = NAME_PREFIX + self._key(idempotency_key)
            elif again:
                name = NAME_PREFIX + uuid.uuid4().hex
            else:
                name, derived = self._derived_name(request, kind == "v2"), True
        replay = self._replay(name, request, kind == "v2") if name and not again else None
        if replay is not None:
            replay = {**replay, "repeat": True}
            if derived and replay["state"] == "replayed":
                replay["note"] = (
                    f"a repeat of the same call made within {REISSUE_WINDOW_S / 60:g} minutes: the first call's "
                    "songs, nothing paid again (pass again=true for new songs)"
                )
        estimate = 0 if kind == "engine" else costs.estimate_credits(request)
        credits_left = None if replay is not None or kind == "engine" else self.credits_left()
        return Plan(kind, request, estimate, credits_left, name, replay, self._dollars(kind, request, estimate))

    @staticmethod
    def _dollars(kind: str, request: Any, credits: int) -> Decimal | None:
        try:
            return dollars_of(kind, request, credits)
        except DollarPriceError as exc:
            raise AgentError(f"{_one_line(exc)}; nothing was sent") from None

    def replan(self, plan: Plan) -> Plan:
        """The same call priced again now, under the same name: the cost table, the journal (sent meanwhile: its
        replay) and the credits left of now. A consent card's Confirm pays this, never the agent's numbers."""
        if plan.kind == "lyrics":
            estimate = costs.estimate_credits(plan.request)
            dollars = self._dollars("lyrics", plan.request, estimate)
            return Plan("lyrics", plan.request, estimate, self.credits_left(), None, None, dollars)
        assert plan.name is not None and plan.kind in ("v1", "v2", "engine")
        replay = self._replay(plan.name, plan.request, plan.kind == "v2")
        if replay is not None:
            replay = {**replay, "repeat": True}
        engine = plan.kind == "engine"
        estimate = 0 if engine else costs.estimate_credits(plan.request)
        left = None if replay or engine else self.credits_left()
        dollars = self._dollars(plan.kind, plan.request, estimate)
        return Plan(plan.kind, plan.request, estimate, left, plan.name, replay, dollars)

    def record(self, plan: Plan) -> None:
        """Record a quoted v1/v2 call under its name before anyone confirms it (nothing sent yet): its attempt is in
        the journal's batch tables from the quote on, as a derived name's is."""
        if plan.name is None or plan.free or plan.kind not in ("v1", "v2", "engine"):
            return
        v2 = plan.kind == "v2"
        row = [(request_hash(plan.request, v2), json.dumps(plan.request.to_payload()), v2)]
        with contextlib.suppress(ValueError, StorageError):  # recorded again when sent; a locked file says so there
            self.store.open_batch(plan.name, row)

    def _derived_name(self, request: Any, v2: bool) -> str:
        """The name a call without a key is recorded under: the latest one of the same request whose first call
        is less than the window old, else a new one stamped now. Recorded at once (nothing sent yet), so a
        re-issue arriving while the first waits for the user's answer finds it and is not sent twice."""
        with self._naming:
            return self._derive(request, v2)

    def _derive(self, request: Any, v2: bool) -> str:
        digest = request_hash(request, v2)
        prefix = f"{NAME_PREFIX}{AUTO}{digest[:32]}-"
        now = self.clock()
        stamps = [
            int(n[len(prefix) :]) for n in self.store.names() if n.startswith(prefix) and n[len(prefix) :].isdigit()
        ]
        recent = [t for t in stamps if 0 <= now - t < REISSUE_WINDOW_S]
        if recent:
            return f"{prefix}{max(recent)}"
        name = f"{prefix}{int(now)}"
        with contextlib.suppress(ValueError, StorageError):  # recorded again when sent; a locked file says so there
            self.store.open_batch(name, [(digest, json.dumps(request.to_payload()), v2)])
        return name

    @staticmethod
    def _key(key: str) -> str:
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
            raise AgentError(f"idempotency_key: 1 to {MAX_KEY_LENGTH} characters, not blank")
        return key

    def _replay(self, name: str, request: Any, v2: bool) -> dict[str, Any] | None:
        """The first call's answer under this key, an error if the key was used for other parameters,
        or None when it was never sent."""
        row = self.store.rows(name).get(0)
        if row is None:
            return None
        if row.request_hash != request_hash(request, v2):
            raise AgentError("idempotency_key: already used with different parameters; use a new key for a new request")
        if row.state in NEVER_SENT:
            return None
        if row.state == "sending" and row.owner_alive:  # in flight now (this server's other request, or another's)
            who = "this server" if row.mine else f"process {row.owner_pid}"
            state = "sending"
            note = (
                f"the same call is being sent now by {who}: nothing was sent again; call again in a moment for its ids"
            )
        elif row.state in ("sending", "unknown"):
            state = "unknown"
            note = "the first call with this key may have reached the service and its answer was lost; nothing was"
            note += " sent again (see unfinished())"
        else:
            state, note = "replayed", "sent before with this idempotency key: the same songs, nothing paid again"
        return {"task_ids": list(row.ids), "state": state, "note": note}

    # -- sending -------------------------------------------------------------------------------------

    def send(self, plan: Plan) -> dict[str, Any]:
        """Send a planned v1/v2 call once, recorded under its name before it leaves; the ids at once."""
        if plan.replay is not None:
            return self._answer(plan, **plan.replay)
        assert plan.name is not None
        v2 = plan.kind == "v2"
        digest = request_hash(plan.request, v2)
        try:
            self.store.open_batch(plan.name, [(digest, json.dumps(plan.request.to_payload()), v2)])
        except ValueError:
            raise AgentError("idempotency_key: already used with different parameters") from None
        except StorageError as exc:  # locked by another program, read-only, full: the notebook's words
            raise JournalUnavailableError.cannot_record(self.store.path, exc) from None
        spend = self._reserve(plan)  # checked and taken in one step: two calls cannot both fit
        try:
            claimed = self.store.claim(plan.name, 0, plan.estimate)
        except BaseException as exc:
            self.ledger.release(spend)
            if isinstance(exc, StorageError):
                raise JournalUnavailableError.cannot_record(self.store.path, exc) from None
            raise
        if not claimed:
            self.ledger.release(spend)
            raise AgentError("idempotency_key: this call is being sent by another request; nothing was sent")
        if plan.quote is not None:  # the journal says which quote pays this attempt, before it goes out
            with contextlib.suppress(StorageError):
                name_paying_quote(self.store, plan.name, plan.quote)
        engine = plan.kind == "engine"  # priced in dollars: the key's music counts do not measure it
        before = None if engine else self._counts_left()
        try:
            if engine:  # checked, journalled before sending, composed in the client's background thread
                ids = list(self.client.generate(plan.request.engine).ids)
            elif v2:
                ids = [song.id for song in self.client.submit_v2(plan.request)]
            else:
                ids = list(self.client.generate(plan.request).ids)
        except BaseException as exc:
            landed = create_may_have_landed(exc) or not isinstance(exc, Exception)
            state = "unknown" if landed else "rejected"
            with contextlib.suppress(StorageError):  # the client's journal holds the attempt either way
                self.store.set_state(plan.name, 0, state, error=_one_line(exc)[:500])
            if not landed:
                self.ledger.release(spend)
            else:
                self.ledger.settle(spend, before, self._counts_left() if isinstance(exc, Exception) else None)
            if isinstance(exc, Exception) and landed:
                return self._answer(plan, [], "unknown", f"{_one_line(exc)}; nothing was sent again")
            raise
        self.ledger.settle(spend, before, None if engine else self._counts_left())
        with contextlib.suppress(StorageError):  # sent: the client's journal has the ids (or keeps them to write)
            self.store.set_state(plan.name, 0, "submitted", ids=ids)
        return self._answer(plan, ids, "sent", "started: call wait_for_songs with these ids")

    def _reserve(self, plan: Plan, *, batch: bool = False, charge: Amount | None = None) -> Spend:
        """Take the plan's charge (in the budget's unit; `charge` when the caller priced it) out of the budget."""
        rate = None
        if charge is None:
            charge, rate = self.charge(plan)
        elif self.in_usd:  # a batch's service rows: counted at the rate they were priced at (none: none can be sent)
            rate = credit_rate_set()
        try:
            return self.ledger.reserve(charge, batch=batch, rate=rate)
        except OverBudget as exc:
            what = "this batch" if batch else "this call"
            left, cost = with_unit(exc.left, self.in_usd), with_unit(exc.estimate, self.in_usd)
            raise AgentError(
                f"budget: {left} left of {self.budget if not self.in_usd else f'{self.budget} (US dollars)'} and "
                f"{what} costs about {cost}; nothing was sent"
            ) from None

    def _counts_left(self) -> int | None:
        """The key's music counts now, or None when they cannot be read (then a call is counted as estimated)."""
        try:
            return self.credits_left()
        except MusicGenError:
            return None

    def _answer(self, plan: Plan, task_ids: list[str], state: str, note: str, repeat: bool = False) -> dict[str, Any]:
        return {
            "task_ids": task_ids,
            "credits_estimate": plan.estimate,
            "attempt": plan.name,
            "state": state,
            "repeat": repeat,
            "note": note,
        }

    # -- paid extras ---------------------------------------------------------------------------------

    def plan_extra(self, task_id: str, kind: str) -> Plan:
        """An extra of a song, priced; free (a replay) when the journal holds it already or it is in doubt."""
        try:
            song, spec = check_id(task_id, "task_id"), kind_of(kind)
            song = song_named(self.client, song).task_id  # its song id, case, spacing: one song, asked of once
        except RequestValidationError as exc:
            raise AgentError(_problem_line(exc)) from None
        found = held(self.client, song, spec.name)
        replay = None
        if found is not None and found.state in ("made", "sending", "unknown"):
            replay = {"state": found.state}
        if spec.name == "stems":  # ElevenLabs' price in dollars, of the audio to be uploaded (read now, free)
            try:
                dollars = None if replay is not None else stems_quote(self.client, song).quantize(CENT, ROUND_UP)
            except MusicGenError as exc:
                raise AgentError(f"{_one_line(exc)}; nothing was sent") from None
            return Plan("extra", ExtraRequest(spec.name, song), 0, None, None, replay, dollars)
        estimate = extra_price(spec.name)
        credits_left = None if replay is not None else self.credits_left()
        return Plan("extra", ExtraRequest(spec.name, song), estimate, credits_left, None, replay)

    def make_extra(self, plan: Plan) -> dict[str, Any]:
        """Make (or reuse) the extra: at most one request per (song, kind) across kernels and agents."""
        request = plan.request
        if in_dollars(plan):  # dollars: the key's credits neither pay nor measure it (the journal prices it)
            spend = self._reserve(plan) if self.in_usd and not plan.free else None  # a dollar budget: reserved first
            try:
                result = make_extra(self.client, request.song, request.kind)
            except Exception as exc:
                self._end(spend, create_may_have_landed(exc))  # counted at its estimate where it may have landed
                raise AgentError(_one_line(exc)) from None
            self._end(spend, result.sent)
            answer = result.as_dict()
            answer["credits_estimate"] = 0
            return answer
        spend = None if plan.free else self._reserve(plan)
        before = None if spend is None else self._counts_left()
        try:
            result = make_extra(self.client, request.song, request.kind)
        except Exception as exc:
            if spend is not None:
                if create_may_have_landed(exc):
                    self.ledger.settle(spend, before, self._counts_left())
                else:
                    self.ledger.release(spend)
            raise AgentError(_one_line(exc)) from None
        if spend is not None:
            if result.sent:
                self.ledger.settle(spend, before, self._counts_left())
            else:
                self.ledger.release(spend)
        answer = result.as_dict()
        answer["credits_estimate"] = plan.estimate if result.sent else 0
        return answer

    def _end(self, spend: Spend | None, sent: bool) -> None:
        """A dollar-priced extra's reservation: counted at its estimate if it was (or may have been) sent."""
        if spend is not None:
            self.ledger.settle(spend, None, None) if sent else self.ledger.release(spend)

    def write_lyrics(self, plan: Plan) -> LyricsResult:
        spend = self._reserve(plan)
        try:
            result = self.client.lyrics(plan.request.prompt)
        except Exception as exc:
            if create_may_have_landed(exc):
                self.ledger.settle(spend, None, None)
            else:
                self.ledger.release(spend)
            raise
        self.ledger.settle(spend, None, None)  # music counts do not say what lyrics cost: counted as estimated
        return result

    # -- batches -------------------------------------------------------------------------------------

    def plan_batch(self, rows: list[Mapping[str, Any]], name: str) -> tuple[int, int | None]:
        """Validate every row (nothing is sent if one is bad) and price the rows not sent before."""
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_KEY_LENGTH:
            raise AgentError(f"name: 1 to {MAX_KEY_LENGTH} characters, not blank")
        if name.startswith(NAME_PREFIX):  # single calls' idempotency keys live there: a batch must not replay one
            raise AgentError(f"name: may not start with {NAME_PREFIX!r} (kept for single calls' idempotency keys)")
        return costs.estimate_total(r.request for r in self._unsent(rows, name)), self.credits_left()

    def _unsent(self, rows: list[Mapping[str, Any]], name: str) -> list[Any]:
        """Every row validated (one bad: nothing is sent), then those of them never sent before."""
        try:
            validated = validate_rows(list(rows), allow_unknown_models=self.client.settings.allow_unknown_models)
        except RequestValidationError as exc:
            raise AgentError(f"rows: {_problem_line(exc)}") from None
        except (BatchError, ValueError, TypeError) as exc:
            raise AgentError(f"rows: {_one_line(exc)}") from None
        stored = self.store.rows(name)
        return [r for r in validated if r.index not in stored or stored[r.index].state in NEVER_SENT]

    def batch_plan(self, rows: list[Mapping[str, Any]], name: str, budget: int | None = None) -> Plan:
        """A batch priced for its question: credits, and under a dollar budget what it counts there (`dollars`)."""
        if self.in_usd and budget is not None:  # refused before the user is asked (units are never added)
            raise AgentError("budget: this server's budget is in US dollars; leave out the batch's budget in credits")
        estimate, left = self.plan_batch(rows, name)
        dollars = self._rows_dollars(rows, name) if self.in_usd else None
        return Plan("batch", BatchRequest(name, len(rows)), estimate, left, name, dollars=dollars)  # type: ignore[arg-type]

    def run_batch(
        self, rows: list[Mapping[str, Any]], name: str, budget: int | None, concurrency: int, shown: int | None = None
    ) -> Batch:
        """Start a batch in its own thread (the engine: idempotent by name, budget, 429s); returns at once.

        Its estimate is reserved out of the server's budget before it starts, under the lock single calls use,
        and the batch may spend no more than that, nor than the estimate the user was `shown` (as measured on
        the key, when the service charges more than the table says); what it does not send is given back."""
        estimate, _ = self.plan_batch(rows, name)
        if shown is not None and estimate > shown:
            raise AgentError(f"rows: the batch now costs about {estimate} credits, more than the {shown} asked about")
        if self.in_usd and budget is not None:  # units are never added: one budget, in dollars
            raise AgentError("budget: this server's budget is in US dollars; leave out the batch's budget in credits")
        charge = self._rows_dollars(rows, name) if self.in_usd else estimate
        cap = DollarBudget(charge) if isinstance(charge, Decimal) else None  # the batch keeps to its dollars too
        plan = Plan("batch", BatchRequest(name, len(rows)), estimate, None, name)
        spend = self._reserve(plan, batch=True, charge=charge)
        caps = [b for b in (budget, estimate) if b is not None]
        try:
            batch = self.client.batch(
                list(rows), name=name, budget=cap if cap is not None else min(caps) if caps else None,
                concurrency=concurrency, wait=False,
            )  # fmt: skip
        except BatchError as exc:
            self.ledger.release(spend)
            raise AgentError(_one_line(exc)) from None
        except StorageError as exc:  # its rows could not be recorded: nothing was sent
            self.ledger.release(spend)
            raise JournalUnavailableError.cannot_record(self.store.path, exc) from None
        except BaseException:
            self.ledger.release(spend)
            raise
        self.ledger.started(spend, batch)
        with self._lock:
            self._batches[name] = batch
        return batch

    def _rows_dollars(self, rows: list[Mapping[str, Any]], name: str) -> Decimal:
        try:  # an engine's row at its dollars, a service row at the user's credit rate (none set: refused)
            return sum((budget_charge(r.request, self.budget) for r in self._unsent(rows, name)), Decimal(0))
        except DollarPriceError as exc:
            raise AgentError(f"budget: {_one_line(exc)} Nothing was sent.") from None

    def batch_status(self, name: str) -> dict[str, Any]:
        """A batch this server started (live), or one recorded in the journal's batch tables."""
        batch = self._batches.get(name)
        if batch is not None:
            summary = {"name": name, "running": not batch.done, "line": batch.progress_line(), "ids": batch.ids}
            return {**summary, **batch.summary()}
        stored = self.store.rows(name)
        if not stored:
            raise AgentError(f"name: no batch {name!r} is known")
        states: dict[str, int] = {}
        for row in stored.values():
            states[row.state] = states.get(row.state, 0) + 1
        ids = [i for row in stored.values() for i in row.ids]
        return {"name": name, "running": False, "rows": len(stored), "states": states, "ids": ids}

    # -- reading -------------------------------------------------------------------------------------

    def poll(self, tasks: TaskSet) -> list[Any]:
        return self.client.poll(tasks)

    def tasks_for(self, task_ids: Iterable[str]) -> TaskSet:
        """A task set for ids, seeded with what the journal knows (a v2 id is queried on its own endpoint,
        and its title outlives the v2 query's blanks)."""
        ids = list(dict.fromkeys(task_ids))
        journal = self.client.journal
        known = [r for r in journal.known(ids) if r is not None] if journal is not None else []
        v2 = {r.id for r in known if isinstance(r, V2Song)}
        found = TaskSet()
        found.add([i for i in ids if i not in v2])
        found.add([i for i in ids if i in v2], v2=True)
        found.update(known)
        return found

    def library(self) -> Library | None:
        """The library over the client's journal, opened once (None until the journal file exists)."""
        with self._lock:
            if self._library is None:
                journal = self.client.journal
                if self.database is not None and self.database.path.exists():
                    self._library = Library(self.database)  # read through the workspace's own store
                elif self.database is None:
                    path = getattr(journal, "path", None) if journal is not None else None
                    if path is not None and Path(path).exists():
                        self._library = Library(path)
            return self._library

    def views(self, records: Iterable[Any], ids: Iterable[str]) -> list[dict[str, Any]]:
        """Each id as a plain dict, in the order asked; ids with no record yet are "queued"."""
        by_id = {r.id: r for r in records}
        library = self.library()
        return [song_view(by_id.get(i), i, library) for i in ids]

    def search(self, text: str | None, favourite: bool | None, model: str | None, limit: int) -> list[dict[str, Any]]:
        library = self.library()
        if library is None:
            return []
        with contextlib.suppress(StorageUnavailableError):  # another process holds the file: search what is indexed
            library.store.sync()  # songs this server learnt of since it opened
        songs = library.songs(text=text or None, favourite=favourite, model=model, limit=limit)
        return [song_view(None, s.id, library, song=s) for s in songs]

    def close(self) -> None:
        with self._lock:
            if self._library is not None:
                self._library.close()
                self._library = None

    def account(self) -> dict[str, Any]:
        info = self.client.key_info()
        today = None
        library = self.library()
        if library is not None:
            day = dt.date.today().isoformat()
            row = next((r for r in library.spend(by="day").rows if r["day"] == day), None)
            today = {"calls": 0, "credits_estimated": 0} if row is None else {
                "calls": row["calls"], "credits_estimated": row["credits_estimated"]
            }  # fmt: skip
        return {
            "credits_left": info.key_music_counts,
            "spent_today": today,
            **self.ledger.report(),
            "sandbox": self.client.settings.is_embedded_sandbox,
        }

    def unfinished(self) -> dict[str, Any]:
        found = self.client.unfinished()
        running = [i for i in (*found.v1_ids, *found.v2_ids)]
        return {
            "running_task_ids": running,
            "unknown_attempts": [
                {"attempt": a.id, "endpoint": a.endpoint, "what": a.describe(), "note": _one_line(a.note or "")}
                for a in found.unknown
            ],
            "note": "unknown attempts may have been charged: check the service before sending them again",
        }
