"""Settings: the key, the two hosts, timeouts and polling (arguments win over the environment), and `PaidAsk`, the
one rule for asking before paying that `Settings.needs_confirm` decides."""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

DEFAULT_BASE_URL = "https://api.musicful.ai"
DEFAULT_V2_BASE_URL = "https://api.topmediai.com"
ENV_KEY = "MUSICGEN_API_KEY"
ENV_BASE_URL = "MUSICGEN_BASE_URL"
ENV_V2_BASE_URL = "MUSICGEN_V2_BASE_URL"
ENV_JOURNAL = "MUSICGEN_JOURNAL"
ENV_ELEVENLABS_KEY = "ELEVENLABS_API_KEY"
ENV_GEMINI_KEY = "GEMINI_API_KEY"
ENV_ELEVENLABS_BASE_URL = "MUSICGEN_ELEVENLABS_BASE_URL"
ENV_GEMINI_BASE_URL = "MUSICGEN_GEMINI_BASE_URL"
DEFAULT_ELEVENLABS_BASE_URL = "https://api.elevenlabs.io"
DEFAULT_GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
ENV_MAX_DOWNLOAD_MB = "MUSICGEN_MAX_DOWNLOAD_MB"
ENV_MIN_POLL_INTERVAL = "MUSICGEN_MIN_POLL_INTERVAL"
ENV_MIN_LISTEN_S = "MUSICGEN_MIN_LISTEN_S"
MAX_SECONDS = 1e9
"""The longest timeout or wait accepted (some 31 years): beyond it sockets and sleeps overflow."""
DEMO_KEY = "sandbox-demo-key"
"""The key every embedded sandbox accepts unless given its own `keys`: a client holding it is the sandbox."""
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _env_bool(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_float(name: str) -> float | None:
    """A positive, finite number from the environment (None when unset); anything else is one line naming it."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number (got {value!r})") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a finite number above 0 (got {value!r})")
    return number


def _env_seconds(name: str) -> float | None:
    """Seconds from the environment, 0 allowed (None when unset); anything else is one line naming it."""
    value = os.environ.get(name, "").strip()
    if value in ("0", "0.0"):
        return 0.0
    return env_float(name) if value else None


def url_host(url: str) -> str:
    """The host of a URL, normalised: lower case, no brackets, no trailing dot ("LOCALHOST." -> "localhost")."""
    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""
    return host.lower().rstrip(".")


DEFAULT_PORTS = MappingProxyType({"http": 80, "https": 443})


def service_address(url: str) -> str:
    """One spelling of a service's base URL, so two spellings of it compare equal: scheme and host in lower case,
    the default port and user info dropped, no trailing slash ("HTTPS://API.x.com:443/" -> "https://api.x.com")."""
    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text.rstrip("/")
    scheme, host = parts.scheme.lower(), url_host(text)
    if not host:
        return text.rstrip("/")
    shown = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        shown += f":{port}"
    return f"{scheme}://{shown}{parts.path.rstrip('/')}"


def url_scheme(url: str) -> str:
    return urlsplit(url.strip()).scheme.lower()


def is_loopback(url: str) -> bool:
    """Whether a URL points at this machine (127.0.0.0/8, ::1, localhost), however it is spelled."""
    host = url_host(url)
    if host in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def key_in_clear(url: str) -> bool:
    """Whether a key sent to `url` would cross the network unencrypted: plain http to another machine (the one
    rule for the client and the gateway; http to this machine, and https anywhere, is fine)."""
    return url_scheme(url) == "http" and not is_loopback(url)


@dataclass(frozen=True)
class Settings:
    """Everything a client needs to know. The key is a `SecretStr`: its repr is masked."""

    api_key: SecretStr | None = field(default=None, repr=False)
    base_url: str = DEFAULT_BASE_URL
    v2_base_url: str = DEFAULT_V2_BASE_URL
    elevenlabs_api_key: SecretStr | None = field(default=None, repr=False)
    gemini_api_key: SecretStr | None = field(default=None, repr=False)
    elevenlabs_base_url: str = DEFAULT_ELEVENLABS_BASE_URL
    gemini_base_url: str = DEFAULT_GEMINI_BASE_URL
    timeout: float = 30.0
    connect_timeout: float = 5.0
    max_retries: int = 2
    poll_interval: float = 5.0
    wait_timeout: float = 600.0
    allow_unknown_models: bool = False
    allow_insecure_http: bool = False
    journal_path: str | None = None
    max_download_mb: float = 200.0
    """Largest download accepted (Content-Length and bytes streamed), in MB."""
    min_poll_interval: float = 0.5
    """The shortest wait between polling rounds of a real service (`wait()`, watchers, batches): a smaller
    interval is raised to it, so no loop hammers the service. `MUSICGEN_MIN_POLL_INTERVAL` lowers it."""
    min_listen_s: float = 5.0
    """Seconds each side of a blind comparison must play before the page's vote counts (Music Arena's rule);
    0 counts a vote at once. `MUSICGEN_MIN_LISTEN_S`."""
    embedded_sandbox: bool = False
    """Set by the embedded sandbox for the clients it makes (whatever key it was given); see `is_embedded_sandbox`."""

    def __post_init__(self) -> None:
        key = self.api_key.get_secret_value() if isinstance(self.api_key, SecretStr) else self.api_key
        if isinstance(key, str):  # a pasted key often brings a newline or spaces along: they are not part of it
            key = key.strip()
            object.__setattr__(self, "api_key", SecretStr(key) if key else None)
        object.__setattr__(self, "base_url", self.base_url.strip().rstrip("/"))
        object.__setattr__(self, "v2_base_url", self.v2_base_url.strip().rstrip("/"))
        for name in ("elevenlabs_api_key", "gemini_api_key"):  # the engines' keys: the same care as the service's
            value = getattr(self, name)
            value = (value.get_secret_value() if isinstance(value, SecretStr) else value or "").strip()
            object.__setattr__(self, name, SecretStr(value) if value else None)
        object.__setattr__(self, "elevenlabs_base_url", self.elevenlabs_base_url.strip().rstrip("/"))
        object.__setattr__(self, "gemini_base_url", self.gemini_base_url.strip().rstrip("/"))

    @property
    def has_key(self) -> bool:
        return self.api_key is not None and bool(self.api_key.get_secret_value())

    @property
    def is_embedded_sandbox(self) -> bool:
        """The one rule for "is this the free embedded sandbox": its demo key, or a client the sandbox made.

        Known by identity, never by host: a proxy on 127.0.0.1 in front of the paid service is a real service.
        The sandbox stays out of the user's journal, archive and library, and its calls need no confirm.
        """
        return self.embedded_sandbox or self.is_free

    @property
    def is_free(self) -> bool:
        """The one rule for "do calls cost nothing": only the demo key. A sandbox given its own keys plays a
        paid service (credits counted, confirms asked), though its songs stay out of the user's archive."""
        return self.key_value() == DEMO_KEY

    def needs_confirm(self, choice: bool | None = None) -> bool:
        """The one rule for "does a paid step ask first": the caller's explicit choice, else every key that
        may cost money asks and the free demo key does not."""
        return choice if choice is not None else not self.is_free

    def poll_interval_for(self, interval: float | None = None) -> float:
        """The one rule for how often to poll: the interval asked (or `poll_interval`), never below the floor
        (`min_poll_interval`; the embedded sandbox, which costs nothing and runs here, has none)."""
        asked = self.poll_interval if interval is None else float(interval)
        return asked if self.is_embedded_sandbox else max(asked, self.min_poll_interval)

    def key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def engine_key(self, provider: str) -> str | None:
        """The key of a synchronous engine (`elevenlabs`, `lyria`), or None."""
        key = {"elevenlabs": self.elevenlabs_api_key, "lyria": self.gemini_api_key}.get(provider)
        return key.get_secret_value() if key is not None else None

    def engine_base_url(self, provider: str) -> str:
        return {"elevenlabs": self.elevenlabs_base_url, "lyria": self.gemini_base_url}[provider]

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if not f.name.endswith("api_key"))
        return f"Settings(api_key={'<set>' if self.has_key else None}, {shown})"

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from MUSICGEN_* environment variables; keyword arguments that are not None win."""
        env: dict[str, Any] = {
            "api_key": os.environ.get(ENV_KEY) or None,
            "base_url": os.environ.get(ENV_BASE_URL) or None,
            "v2_base_url": os.environ.get(ENV_V2_BASE_URL) or None,
            "elevenlabs_api_key": os.environ.get(ENV_ELEVENLABS_KEY) or None,
            "gemini_api_key": os.environ.get(ENV_GEMINI_KEY) or None,
            "elevenlabs_base_url": os.environ.get(ENV_ELEVENLABS_BASE_URL) or None,
            "gemini_base_url": os.environ.get(ENV_GEMINI_BASE_URL) or None,
            "timeout": env_float("MUSICGEN_TIMEOUT"),
            "poll_interval": env_float("MUSICGEN_POLL_INTERVAL"),
            "allow_unknown_models": _env_bool("MUSICGEN_ALLOW_UNKNOWN_MODELS"),
            "allow_insecure_http": _env_bool("MUSICGEN_ALLOW_INSECURE_HTTP"),
            "journal_path": os.environ.get(ENV_JOURNAL) or None,
            "max_download_mb": env_float(ENV_MAX_DOWNLOAD_MB),
            "min_poll_interval": env_float(ENV_MIN_POLL_INTERVAL),
            "min_listen_s": _env_seconds(ENV_MIN_LISTEN_S),
        }
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: v for k, v in env.items() if v is not None})

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes)


# -- asking before paying ---------------------------------------------------------------------------------------
# `PaidAsk`: the one rule for asking before paying, beside `Settings.needs_confirm` that decides it (no widget code:
# the views, the notebook's cells and the card actions all hold one).
#
# A pane's "Make songs", the grid's Run, a card's Concat / Retry / WAV / MP4, a batch's "Retry failed rows" and the
# Send of a `%%musicgen_batch` or `%%musicgen_grid` cell all go through it. With a key that may cost money (the
# settings' rule, or the caller's own `confirm=` choice, e.g. `studio(confirm=False)`) the first press only asks:
# the question says the price, and what was priced is kept as a snapshot. The confirm sends only when what would
# be sent now is that snapshot; otherwise nothing is sent and the question is asked again for what stands now.
# With confirming off the press sends at once. A call from code is the decision itself and never asks.

Question = Callable[[bool], str | None]
"""What to ask; its argument says the source changed since the last question. None: nothing to pay now."""


@dataclass(frozen=True)
class Asked:
    """A question shown: which control asked, what it priced (as data), and the words shown."""

    key: Hashable
    snapshot: Any
    question: str


class PaidAsk:
    """Ask before paying, once per control, honouring the caller's confirm choice (see the module's docstring)."""

    def __init__(self, needs_confirm: Callable[[], bool]) -> None:
        self._needs_confirm = needs_confirm
        self.asked: Asked | None = None
        self.forced: bool | None = None
        """True/False set by a caller (a view's `confirm_required = ...`): always/never ask; None: the rule."""

    @classmethod
    def of(cls, settings: Any, confirm: bool | None = None) -> PaidAsk:
        """The rule of a client's settings with the caller's choice (`confirm=None`: ask with a real key only)."""
        return cls(lambda: settings.needs_confirm(confirm))

    @property
    def needed(self) -> bool:
        """Whether a paid press asks first now."""
        return self.forced if self.forced is not None else bool(self._needs_confirm())

    @property
    def question(self) -> str:
        """The question standing ("" when none)."""
        return self.asked.question if self.asked is not None else ""

    def asking(self, key: Hashable) -> bool:
        """Whether the standing question is this control's."""
        return self.asked is not None and self.asked.key == key

    def press(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """A paid control was pressed: True to send now; False when its question is shown instead."""
        self.asked = None
        if not self.needed:
            return True
        text = question(False)
        if text is None:  # nothing to pay now (an extra made before): sent, never asked
            return True
        self.asked = Asked(key, snapshot, text)
        return False

    def confirm(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """The confirm of a shown question: True to send `snapshot`, which is what the question priced. A confirm
        with no question of this control standing sends nothing; a changed source is asked again."""
        asked, self.asked = self.asked, None
        if asked is None or asked.key != key:
            return False
        if asked.snapshot != snapshot:
            text = question(True)
            if text is None:  # nothing to pay now after all: sent
                return True
            self.asked = Asked(key, snapshot, text)
            return False
        return True

    def press_again(self, key: Hashable, snapshot: Any, question: Question) -> bool:
        """A control whose second press confirms (a card's button, "Retry failed rows"): confirm its standing
        question, else ask it."""
        if self.asking(key):
            return self.confirm(key, snapshot, question)
        return self.press(key, snapshot, question)

    def cancel(self) -> None:
        """Drop the standing question; nothing is sent."""
        self.asked = None
