"""Where a song card's player reads its audio: decided here, in Python; the browser computes no URL.

A card gets `play_url` (what its `<audio>` loads first: the Jupyter server's `files/` URL of the archived file,
or the song's http(s) URL while it is known good, or nothing) and `play_source` (an opaque name of this view's
`AudioChannel`: the kernel hands the song's bytes over the widget channel when the player starts). The page
falls back to `play_source` when `play_url` is empty or fails to load (an expired link, a 404, no `files/` API).

The `files/` URL is offered only when the host has a files API that reaches the file: the Jupyter server that
started this kernel (its pid is the kernel's JPY_PARENT_PID) serves a root the archive lies under, or the user
named such a root (MUSICGEN_SERVER_ROOT). marimo, VS Code, Colab and remote kernels have none: the kernel plays.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..archive.archived_audio import archived_file
from ..safe_html import http_url
from .audio_channel import AudioChannel, AudioSource

ENV_SERVER_ROOT = "MUSICGEN_SERVER_ROOT"
REMOTE_GOOD_DAYS = 14
"""The service keeps a song's files about two weeks (observed-behaviour.md): an older URL is not offered."""
REFUSAL = "This view never offered that audio (or no longer does); nothing was sent."


@dataclass(frozen=True)
class FilesApi:
    """A Jupyter server's files API: the folder it serves and the page path it serves it under."""

    root: Path
    base_url: str = "/"


def _kernel_server() -> dict[str, Any] | None:
    """The running Jupyter server that started this kernel, if any (matched by the launcher's pid)."""
    parent = os.environ.get("JPY_PARENT_PID", "")
    if not parent.isdigit():
        return None
    try:
        from jupyter_server.serverapp import list_running_servers

        for info in list_running_servers():
            if str(info.get("pid")) == parent and info.get("root_dir"):
                return info
    except Exception:  # no jupyter_server here, or an unreadable runtime file: no files API then
        return None
    return None


def files_apis() -> list[FilesApi]:
    """The files APIs the page of this kernel can use, most specific root first (none outside Jupyter)."""
    server = _kernel_server()
    base = str(server.get("base_url") or "/") if server else "/"
    apis = [FilesApi(Path(os.environ[ENV_SERVER_ROOT]), base)] if os.environ.get(ENV_SERVER_ROOT) else []
    if server:
        apis.append(FilesApi(Path(server["root_dir"]), base))
    resolved = {FilesApi(api.root.expanduser().resolve(), api.base_url) for api in apis}
    return sorted(resolved, key=lambda api: -len(api.root.parts))


def files_path(path: str | Path | None, roots: list[Path]) -> str | None:
    """The path of an archived file relative to a server root (for `<base>files/<path>`), or None."""
    if not path:
        return None
    target = archived_file(Path(path).expanduser())  # a file of its folder, not a link out of it
    if target is None:
        return None
    for root in roots:
        if target.is_relative_to(root):
            relative = target.relative_to(root)
            if any(part.startswith(".") for part in relative.parts):  # Jupyter serves no hidden file (~/.local)
                return None
            return relative.as_posix()
    return None


def files_url(path: str | Path | None, apis: list[FilesApi]) -> str | None:
    """The page path (`/base/files/...`, quoted) of an archived file under a files API's root, or None."""
    for api in apis:
        relative = files_path(path, [api.root])
        if relative:
            base = "/" + api.base_url.strip("/") + "/" if api.base_url.strip("/") else "/"
            return f"{base}files/{quote(relative)}"
    return None


def remote_known_good(url: str | None, created_at: float | None, now: float | None = None) -> bool:
    """An http(s) URL the page may try: younger than the service keeps files (unknown age: not known bad)."""
    if not http_url(url):
        return False
    if created_at is None:
        return True
    return ((now if now is not None else time.time()) - created_at) < REMOTE_GOOD_DAYS * 86_400


class CardAudio:
    """A view's card players: which URL each loads first and, by an opaque name, the kernel's bytes as a fallback.

    One name per song and source while its card is shown, so a card redrawn (a refresh, a poll) keeps its player;
    once the view stops showing a card (`show`: another page, a search it does not match) its name answers no
    more. `handle(content)` serves the page's `{"kind": "audio", "source"}`; anything else is not audio."""

    def __init__(self, widget: Any, apis: list[FilesApi] | None = None, *, inner: Any = None) -> None:
        self.channel = AudioChannel(widget, refusal=REFUSAL, inner=inner)
        self.apis = files_apis() if apis is None else apis

    def fields(
        self, key: Hashable, *, path: str | None, url: str | None, created_at: float | None = None
    ) -> dict[str, Any]:
        """`play_url` and `play_source` of a card (`key` names its song in this view)."""
        on_disk = str(path) if archived_file(path) is not None else None
        remote = http_url(url)
        if not on_disk and not remote:
            return {"play_url": None, "play_source": ""}
        local = files_url(on_disk, self.apis) if on_disk else None
        play_url = local or (remote if remote_known_good(remote, created_at) else None)
        source = AudioSource(path=on_disk, url=remote)
        return {"play_url": play_url, "play_source": self.channel.offer_as(key, source)}

    def show(self, keys: Any) -> None:
        """The cards the view shows now (by `key`): only their players' names answer."""
        self.channel.show(keys)

    def handle(self, content: Any) -> bool:
        return self.channel.handle(content)

    def close(self) -> None:
        self.channel.clear()
