"""One exception tree for everything the client can raise.

Catch `MusicGenError` for everything, or a precise subclass. Messages say what to do next and never
contain the API key (the transport core redacts it from any server text before it gets here).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from .models.schema import TaskRecord, V2Song, ValidationErrorDetail

KEY_HINT = "Set MUSICGEN_API_KEY in the environment, pass api_key= to the client, or run %musicgen_login in a notebook."
ENV_KEY = "MUSICGEN_API_KEY"


def mask_key(key: str | None) -> str:
    """The one key mask: enough of a key to tell two apart, never enough to use it."""
    if not key:
        return "(not set)"
    return "****" + key[-4:] if len(key) >= 16 else "****"


def refused_key_hint(key: str | None) -> str:
    """What to do about a key the service refused, by where the key came from: a key set in MUSICGEN_API_KEY is
    checked and fixed there (a fresh `api_key=` would not help); one given in the code or by %musicgen_login is
    entered again. The key is shown only masked."""
    if not key:
        return KEY_HINT
    import os

    if os.environ.get(ENV_KEY, "").strip() == key:
        return (
            f"The key in {ENV_KEY} ({mask_key(key)}) was refused: check it against your account's API keys (or, "
            "through a team gateway, the token its admin gave you), then fix it where it is set (the environment "
            "the notebook server or script starts from) and restart; or unset it and run %musicgen_login."
        )
    return (
        f"The key given to the client (api_key= or %musicgen_login; {mask_key(key)}) was refused: check it against "
        f"your account's API keys (or a team gateway's token) and pass or enter it again ({ENV_KEY} is not used "
        "while one is given)."
    )


class MusicGenError(Exception):
    """Base of every error raised by ipymusicgen."""


@dataclass(frozen=True)
class FieldProblem:
    """One client-side validation problem, in plain words."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class RequestValidationError(MusicGenError, ValueError):
    """A request broke a bound of the spec; raised before anything is sent."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class IgnoredFieldsWarning(UserWarning):
    """The request is valid, but the service will ignore some of its fields."""


class InsecureTransportError(MusicGenError):
    """Refused to send the key over plain http to a host that is not this machine."""


class MissingKeyError(MusicGenError):
    """A paid call with no API key: refused before anything is sent (a real service may answer it with a 500)."""


class DownloadError(MusicGenError):
    """A download was refused (too large) or could not be written (disk full, no permission); no file is left."""


class WaitTimeoutError(MusicGenError, TimeoutError):
    """`wait()` gave up before every task finished; the tasks go on server-side."""

    def __init__(self, message: str, pending: list[str]) -> None:
        self.pending = pending
        super().__init__(message)


class APIError(MusicGenError):
    """Something went wrong talking to the service."""

    def __init__(self, message: str, *, request: httpx.Request | None = None, body: Any = None) -> None:
        self.message = message
        self.request = request
        self.body = body
        super().__init__(message)


class APIConnectionError(APIError):
    """The service could not be reached, or the connection broke."""

    def __init__(self, message: str = "Could not connect to the music service.", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)


class APITimeoutError(APIConnectionError):
    """The service did not answer in time."""

    def __init__(self, message: str = "The music service did not answer in time.", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)


class CreateOutcomeUnknownError(APIConnectionError):
    """A paid request may have reached the service but no answer came back.

    It is deliberately not retried: a second send could charge twice. Check key info (the music count)
    and the task list before trying again.
    """

    def __init__(self, message: str, *, attempt_id: str | None = None, **kwargs: Any) -> None:
        self.attempt_id = attempt_id
        super().__init__(message, **kwargs)


class APIResponseValidationError(APIError):
    """The service answered with a body whose shape the client does not understand."""


class APIStatusError(APIError):
    """The service answered with an error status (HTTP, or inside the JSON envelope)."""

    status_code: int

    def __init__(self, message: str, *, response: httpx.Response | None, body: Any, status_code: int) -> None:
        self.response = response
        self.status_code = status_code
        super().__init__(message, request=response.request if response is not None else None, body=body)


class BadRequestError(APIStatusError):
    """HTTP 400: the service refused the request (an error status inside a 200 envelope is an `EnvelopeError`)."""


class AuthenticationError(APIStatusError):
    """Missing or invalid API key: HTTP 401/403, or a 5xx or envelope status whose message says so."""


class PermissionDeniedError(AuthenticationError):
    """HTTP 403: the key was refused here (the real service answers a bad key with 401 or 403)."""


class NotFoundError(APIStatusError):
    """HTTP 404."""


class UnprocessableEntityError(APIStatusError):
    """HTTP 422 from the service, with its `detail` entries."""

    def __init__(self, message: str, *, detail: list[ValidationErrorDetail], **kwargs: Any) -> None:
        self.detail = detail
        super().__init__(message, **kwargs)


class RateLimitError(APIStatusError):
    """HTTP 429: too many requests."""


class InternalServerError(APIStatusError):
    """HTTP 5xx (an error status inside a 200 envelope, even 500, is an `EnvelopeError`)."""


class ServerAuthenticationError(AuthenticationError, InternalServerError):
    """HTTP 5xx whose message says the key was refused (the real service answers a missing key so)."""


class RedirectRefusedError(APIStatusError):
    """HTTP 3xx to an API call: redirects are never followed, so the key never goes to another address."""


class EnvelopeError(APIStatusError):
    """HTTP 200 whose JSON envelope carries an error status (`status_code` is that status)."""


class EnvelopeAuthenticationError(EnvelopeError, AuthenticationError):
    """An envelope error status whose message says the key is missing or invalid."""


class InsufficientCreditsError(EnvelopeError):
    """The key has no music credits left (an envelope status, often 400, speaking of the counts left)."""


class TaskFailedError(MusicGenError):
    """A generation task ended in failure."""

    def __init__(self, task: TaskRecord | V2Song) -> None:
        self.task = task
        self.fail_code = getattr(task, "fail_code", None)
        self.fail_reason = task.fail_reason
        reason = self.fail_reason or "no reason given"
        code = f" (code {self.fail_code})" if self.fail_code else ""
        super().__init__(f"Task {task.id} failed{code}: {reason}")


class JournalUnavailableError(MusicGenError):
    """The journal cannot record a paid request before it is sent, so nothing was sent (nothing paid)."""

    @classmethod
    def cannot_record(cls, path: object, exc: BaseException) -> JournalUnavailableError:
        """The one way to say a paid request was refused because it could not be recorded first (the notebook
        and the agent server alike): what went wrong, that nothing was sent or charged, and what to do."""
        return cls(
            f"The journal {path} cannot record this paid request ({storage_reason(exc)}), so it was not sent and "
            "nothing was charged. Close the other program holding the journal, free disk space or set "
            "MUSICGEN_JOURNAL to a writable file, then try again."
        )


def storage_reason(exc: BaseException) -> str:
    """A storage error in words: a locked file says another program holds it."""
    text = str(exc) or type(exc).__name__
    if "locked" in text or "busy" in text:
        return f"{text}: another program holds it"
    return text


class JournalWriteWarning(UserWarning):
    """A paid answer arrived but could not be journalled yet; it is kept in memory and written later."""


TYPOGRAPHIC_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"
"""Dashes an editor or chat tool puts where `--` was typed (en and em dash, minus sign ...)."""


def options_meant(given: str, known: Iterable[str], *, cutoff: float = 0.75) -> list[str]:
    """The known `--options` a typed one could mean: itself written with a typographic dash (—title), the ones it
    is the start of (--ti: --timeout, --timestamps, --title), else the closest one by spelling (difflib; 0.75, as
    --titel is not close to --interval at 0.71, while a swapped or dropped letter scores over 0.85)."""
    known = sorted({name for name in known if name.startswith("--")})
    wanted = "--" + given.lstrip("-" + TYPOGRAPHIC_DASHES) if given[:1] in TYPOGRAPHIC_DASHES else given
    if wanted in known:
        return [wanted]
    started = [name for name in known if name.startswith(wanted)] if len(wanted) > 2 else []
    return started or difflib.get_close_matches(wanted, known, n=1, cutoff=cutoff)


def dashed_option(token: str) -> bool:
    """Whether a token reads as an option typed with a typographic dash: a dash, then a letter (—title, –style)."""
    return token[:1] in TYPOGRAPHIC_DASHES and token.lstrip(TYPOGRAPHIC_DASHES)[:1].isalpha()


def unknown_option(given: str, known: Iterable[str]) -> str:
    """'unknown option --titel: did you mean --title?': the option as typed and the known ones it could mean,
    so a typo is named rather than blamed on the option after it (a typographic dash is said as such)."""
    shown = given if len(given) <= 40 else given[:40] + "..."
    if given[:1] in TYPOGRAPHIC_DASHES:
        shown += " (a typographic dash: options start with two hyphens, --)"
    meant = options_meant(given, known)
    return f"unknown option {shown}: did you mean {' or '.join(meant)}?" if meant else f"unknown option {shown}"


def one_line(message: object) -> str:
    """A message on one line (a problem list joined with '; '): for a status line, a note, a tool result."""
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
