"""Whose a file URL is: an `upload`/`upload_extend` may name only a file of the caller's own songs, or one outside
the upstream's file hosts.

Every user shares one upstream account, so the upstream would fetch any file of it: a user who builds another
user's file URL from their task id (the pattern shows in their own answers) would get songs made of that user's
audio. The file hosts are the upstream's own hosts and every host a caller's song records name (learned from the
caller's own tasks, read upstream at most once per `SCAN_TTL` for all of a caller's look-ups). Hosts compare as the
machine they name where that needs no lookup: any loopback spelling, an IPv4 address written in any of its legacy
forms (`127.1`, `0x7f000001`). A DNS name that resolves to a file host is not caught (that would need a lookup per
upload); nor is a file host no record of the caller's names yet, on a replica that has seen none.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from ..config import is_loopback, url_host
from .cache import RecentScans

FOREIGN_FILE = (
    "audio_url: use the file URL of one of your own songs, or an address outside the music service's file host"
)


def host_key(url: str) -> str:
    """The machine a URL names, one spelling per machine where no lookup is needed."""
    host = url_host(url)
    with contextlib.suppress(OSError, UnicodeError, ValueError):
        host = socket.inet_ntoa(socket.inet_aton(host))  # 127.1, 0x7f.1, 2130706433 -> 127.0.0.1
    return "loopback" if is_loopback(f"http://{host}") or is_loopback(url) else host


def urls_in(records: Any) -> set[str]:
    """Every http(s) URL among the string values of task records (audio, cover, video, preview, ...)."""
    found: set[str] = set()
    stack = [records]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and item.strip().lower().startswith(("http://", "https://")):
            found.add(item.strip())
    return found


def urls_in_body(body: bytes) -> set[str]:
    try:
        return urls_in(json.loads(body))
    except (ValueError, RecursionError):
        return set()


class FileOwners:
    """The rule above, over the upstream (its `base_url` and `v2_base_url`) and a way to read a caller's own task
    answers upstream (bodies, in chunks)."""

    def __init__(self, upstream: Any, read_own: Callable[[str], Awaitable[list[bytes]]]) -> None:
        self.upstream = upstream
        self.hosts: set[str] = set()
        """File hosts learned from callers' song records."""
        self._read_own = read_own
        self._scans = RecentScans()

    async def _own_files(self, user: str) -> set[str]:
        files: set[str] = set()
        for body in await self._read_own(user):
            files |= urls_in_body(body)
        self.hosts |= {host_key(u) for u in files}
        return files

    async def allows(self, user: str, url: str) -> bool:
        """Whether `user` may have the upstream fetch `url`: one of their songs' files, or on no file host."""
        mine = await self._scans.get(user, lambda: self._own_files(user))
        hosts = self.hosts | {host_key(self.upstream.base_url), host_key(self.upstream.v2_base_url)}
        return url.strip() in mine or host_key(url) not in hosts
