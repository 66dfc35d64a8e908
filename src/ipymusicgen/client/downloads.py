"""Safe file names and atomic writes for downloaded songs: no traversal, no half files left behind; and the one
rule for a song host's redirects (`redirect_refusal`): a public host may not send the kernel to this machine or a
private network (a song URL redirecting to a loopback status page would put that page in the browser)."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tempfile
import time
import unicodedata
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import DownloadError

if TYPE_CHECKING:
    import httpx

_UNSAFE = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]+')
_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
)
_MEDIA_EXTENSIONS = MappingProxyType(
    {
        "audio/mpeg": ".mp3",
        "audio/mp3": ".mp3",
        "audio/wav": ".wav",
        "audio/x-wav": ".wav",
        "audio/wave": ".wav",
        "video/mp4": ".mp4",
        "image/svg+xml": ".svg",
        "image/png": ".png",
        "image/jpeg": ".jpg",
    }
)
_KNOWN_SUFFIXES = frozenset({".mp3", ".wav", ".mp4", ".m4a", ".ogg", ".flac", ".svg", ".png", ".jpg", ".jpeg", ".webp"})
MAX_STEM = 120
MAX_NAME_BYTES = 255
"""File systems allow 255 bytes per name: the stem, the suffix and any " (2)" counter together."""
COUNTER_ROOM = len(" (99999)")


def _fit(stem: str, room: int) -> str:
    """The stem cut to `room` UTF-8 bytes on a character boundary, without a trailing space or dot."""
    return stem.encode()[: max(room, 0)].decode("utf-8", "ignore").rstrip(" .")


def _clean(text: str) -> str:
    """No control, format (bidi overrides U+202E, isolates U+2066...) or unassigned characters; one line."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") else ch for ch in text)
    return re.sub(r"\s+", " ", _UNSAFE.sub(" ", text)).strip(" .")  # "../x" must not become hidden ".. x"


def safe_filename(title: str | None, suffix: str, fallback: str = "song") -> str:
    """A file name from an untrusted title: one path component, no control or bidi characters, not hidden,
    and short enough (255 bytes) with its suffix and a " (2)" counter."""
    suffix = _clean(suffix)[:16]
    suffix = "." + suffix.lstrip(".") if suffix else ""
    room = MAX_NAME_BYTES - len(suffix.encode()) - COUNTER_ROOM
    stem = _fit(_clean(title or "")[:MAX_STEM], room)
    if not stem or stem.split(".")[0].strip().upper() in _RESERVED:  # Windows reserves "CON.txt" too
        stem = _fit(_clean(fallback).replace(" ", "_"), room) or "song"
        if stem.split(".")[0].strip().upper() in _RESERVED:
            stem = "song"
    return stem + suffix


def suffix_for(url: str, content_type: str | None) -> str:
    """The file extension from the response's media type, else the URL path, else .mp3."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in _MEDIA_EXTENSIONS:
        return _MEDIA_EXTENSIONS[media]
    suffix = Path(urlsplit(url).path).suffix.lower()
    return suffix if suffix in _KNOWN_SUFFIXES else ".mp3"


def unique_path(directory: Path, name: str) -> Path:
    """`directory/name`, or `name (2)` etc. if that exists, so a download never overwrites (within 255 bytes)."""
    path = directory / name
    stem, suffix = Path(name).stem, Path(name).suffix
    number = 2
    while path.exists():
        tail = f" ({number}){suffix}"
        path = directory / (_fit(stem, MAX_NAME_BYTES - len(tail.encode())) + tail)
        number += 1
    return path


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (changing it races with other threads)."""
    with suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


MIN_DOWNLOAD_RATE = 4096
"""Bytes per second a download must average once its grace period is over (a drip-feeding host is cut off)."""


class SizeLimit:
    """A download's bounds: its size (from Content-Length when declared, and while streaming either way), and
    its pace: after `grace` seconds it must average `min_rate` bytes/s, so a drip-feeding host cannot hang it."""

    def __init__(self, limit: int, url: str, *, grace: float = 30.0, min_rate: float = MIN_DOWNLOAD_RATE) -> None:
        self.limit = limit
        parts = urlsplit(url)  # named in messages: without user info (proxy credentials), query or fragment
        self.where = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()[:200]
        self.size = 0
        self.grace = grace
        self.min_rate = min_rate
        self.started = time.monotonic()

    def _refuse(self, size: int) -> DownloadError:
        return DownloadError(
            f"Download of {self.where} refused: {size} bytes or more, above the limit of {self.limit // 2**20} MB "
            "(max_download_mb, MUSICGEN_MAX_DOWNLOAD_MB); nothing was saved."
        )

    def check_declared(self, headers: Mapping[str, str]) -> None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            raise self._refuse(int(declared))

    def take(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.limit:
            raise self._refuse(self.size)
        elapsed = time.monotonic() - self.started
        if elapsed > self.grace and self.size < self.min_rate * elapsed:
            raise DownloadError(
                f"Download of {self.where} stopped: {self.size} bytes in {elapsed:.0f} s is too slow (the host may be "
                "stalling); nothing was saved. Try again later."
            )
        return chunk


class AtomicFile:
    """Write to a hidden temp file beside the target and rename only when complete."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        fd, name = tempfile.mkstemp(dir=directory, prefix=".ipymusicgen-", suffix=".part")
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a saved song is an ordinary file
        except OSError:
            os.close(fd)
            Path(name).unlink(missing_ok=True)
            raise
        self._file = os.fdopen(fd, "wb")
        self.temp_path = Path(name)

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)

    def commit(self, name: str) -> Path:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        target = unique_path(self.directory, name)
        os.replace(self.temp_path, target)
        return target

    def discard(self) -> None:
        with suppress(OSError):  # a full disk may refuse even the close; the temp file must still go
            if not self._file.closed:
                self._file.close()
        with suppress(OSError):
            self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None or self.temp_path.exists():
            self.discard()


MAX_SONG_REDIRECTS = 5
HostIsInner = Callable[[str], bool | None]
"""Whether a host is this machine or a private network (True), a public host (False), or unknown (None)."""


class SongRedirectRefused(DownloadError):
    """A song host redirected somewhere the kernel does not follow; the message names hosts only."""


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d,
    6to4 2002:aabb:ccdd::): a relay or translator may take the kernel there."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _inner_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        carried = _carried_ipv4(address)  # ::ffff:127.0.0.1, 64:ff9b::7f00:1, 2002:7f00:1:: are 127.0.0.1
        if carried is not None and (not carried.is_global or carried.is_multicast):
            return True
    return not address.is_global or address.is_multicast


def host_is_inner(host: str) -> bool | None:
    """True when `host` is this machine or a private network (loopback, private, link-local such as the cloud's
    169.254.169.254, unspecified, reserved): an address as written, a name when every address it resolves to is;
    False for a public host (every address public); None when the name does not resolve or resolves both ways (a
    name with one public and one loopback address is neither: not trusted as inner, refused as a target)."""
    name = host.strip("[]").rstrip(".").lower()
    try:
        return _inner_address(ipaddress.ip_address(name))
    except ValueError:
        pass
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return None
    kinds = {_inner_address(ipaddress.ip_address(str(a).split("%")[0])) for a in found}
    return kinds.pop() if len(kinds) == 1 else None


def redirect_refusal(source: str, target: str, inner: HostIsInner = host_is_inner) -> str | None:
    """Why a song host's redirect from `source` to `target` is not followed (None: follow it). Only http(s)
    is followed; a host that is not known to be inner (a public one) may send the kernel only to a host known to
    be public. A host on this machine or a private network may send it anywhere (the sandbox lives on loopback)."""
    to = urlsplit(target)
    if to.scheme not in ("http", "https") or not to.hostname:
        return "a redirect to something that is not an http(s) address is not followed"
    start = urlsplit(source).hostname or ""
    if inner(start) is True:
        return None
    if inner(to.hostname) is not False:
        return (
            f"{start[:100]} redirected to {to.hostname[:100]}, an address on this machine or a private network "
            "(or one that does not resolve); a public song host's redirect there is not followed"
        )
    return None


def _next_hop(request: httpx.Request, following: httpx.Request, inner: HostIsInner) -> httpx.Request:
    why = redirect_refusal(str(request.url), str(following.url), inner)
    if why:
        raise SongRedirectRefused(f"The song's host redirected the download: {why}.")
    return following


def _too_many(max_redirects: int) -> SongRedirectRefused:
    return SongRedirectRefused(f"The song's host redirected more than {max_redirects} times; not followed.")


def send_song_request(
    http: httpx.Client,
    request: httpx.Request,
    *,
    inner: HostIsInner = host_is_inner,
    max_redirects: int = MAX_SONG_REDIRECTS,
) -> httpx.Response:
    """Send a song download's request (streamed), following its redirects one by one by `redirect_refusal` (at most
    `max_redirects`); `SongRedirectRefused` otherwise. The caller closes the response."""
    for _ in range(max_redirects + 1):
        response = http.send(request, stream=True, follow_redirects=False)
        if response.next_request is None:
            return response
        response.close()
        request = _next_hop(request, response.next_request, inner)
    raise _too_many(max_redirects)


async def send_song_request_async(
    http: httpx.AsyncClient,
    request: httpx.Request,
    *,
    inner: HostIsInner = host_is_inner,
    max_redirects: int = MAX_SONG_REDIRECTS,
) -> httpx.Response:
    """`send_song_request` for an async client."""
    for _ in range(max_redirects + 1):
        response = await http.send(request, stream=True, follow_redirects=False)
        if response.next_request is None:
            return response
        await response.aclose()
        request = _next_hop(request, response.next_request, inner)
    raise _too_many(max_redirects)


def open_song_url(
    http: httpx.Client, url: str, *, inner: HostIsInner = host_is_inner, max_redirects: int = MAX_SONG_REDIRECTS
) -> httpx.Response:
    """A streamed GET of a song's URL, its redirects followed by the rule (`send_song_request`)."""
    return send_song_request(http, http.build_request("GET", url), inner=inner, max_redirects=max_redirects)
