"""Audio over the widget channel: a view's players get opaque source names, and the kernel hands their bytes over.

Why: a URL names a song (the task id is in it), a file the browser cannot reach plays nowhere, and the same URL
twice tells a blind listener "these two are one song". So a view offers each player a fresh random name
(`AudioChannel.offer`); when the player starts, the page asks with the custom message
`{"kind": "audio", "source": name}` and the kernel answers `{"kind": "audio", "source", "type", "size"}` with
the bytes as the message's one buffer, or `{"kind": "audio", "source", "error"}`. The page plays them from a
`blob:` URL and releases it when the view goes (`imsKernelAudio` in common.js). Only what is asked is read,
never more than the download cap (max_download_mb). The bytes come from the song's archived file when there is
one, else from its http(s) URL, read by the kernel.

A blind copy (`offer_blind`) is the decoded sound as a 16-bit WAV with a fresh dither of one least significant
bit: no tags, no encoder's bytes, and never the same bytes twice, so neither a card's file nor the other
player of the same song can be matched to it by anything but listening. Every player of a round (`BlindRound`)
has one channel count, one rate and one length, so neither a header nor a duration tells the songs apart.
"""

from __future__ import annotations

import contextlib
import io
import math
import secrets
import threading
import wave
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ..archive.archived_audio import (
    ArchivedAudioError,
    ArchivedTooLarge,
    archived_file,
    audio_type,
    read_archived_audio,
)
from ..archive.sniff import audio_suffix
from ..archive.waveform import decode_cap
from ..client.downloads import HostIsInner, SizeLimit, SongRedirectRefused, host_is_inner, open_song_url
from ..client.transport import trust_store
from ..safe_html import http_url

BLOCK_FRAMES = 16_384
LENGTH_STEP = 15
"""Seconds a blind copy's length is rounded up to when the round's common length is unknown."""
STALE = "This player's audio is from an earlier pair (or unknown here); the view offers the current pair's."


class AudioUnavailable(Exception):
    """The kernel cannot hand a player its audio; the message is said to the listener as it is."""


@dataclass(frozen=True)
class AudioSource:
    """Where the kernel reads a song: its archived file when it is there, else its http(s) URL."""

    path: str | None = None
    url: str | None = None
    seconds: float | None = None
    """The length the service reported: bounds how much a blind copy decodes."""


def download_cap() -> int:
    """The most bytes a player is handed: the download cap of the settings in use."""
    from ..workspace.session import settings

    return int(settings().max_download_mb * 1024 * 1024)


def _refused(size: int, limit: int) -> AudioUnavailable:
    return AudioUnavailable(
        f"This song's audio ({size} bytes or more) is above the limit of {limit / 2**20:g} MB "
        "(max_download_mb, MUSICGEN_MAX_DOWNLOAD_MB); it is not played here."
    )


def read_audio(source: AudioSource, limit: int, *, inner: HostIsInner | None = None) -> bytes:
    """The song's audio bytes, at most `limit`: from its archived file (`archive.archived_audio`: a real file of
    the archive, read counting, never a link), else its URL (redirects by `client.downloads.redirect_refusal`;
    `inner` the rule's notion of a private host). Only bytes that sniff as audio; AudioUnavailable otherwise."""
    if archived_file(source.path) is not None:
        try:
            return read_archived_audio(source.path, limit)
        except ArchivedTooLarge as exc:
            raise _refused(exc.size, limit) from None
        except ArchivedAudioError as exc:
            raise AudioUnavailable(f"The song's archived file is not played: {exc}.") from None
    url = http_url(source.url)
    if not url:
        raise AudioUnavailable("This song has no audio the kernel can read (no archived file, no http(s) URL).")
    data = _fetch(url, limit, inner or host_is_inner)
    if audio_type(data) is None:
        raise AudioUnavailable("The song's URL did not answer audio (an expired link?); nothing was sent.")
    return data


def _fetch(url: str, limit: int, inner: HostIsInner) -> bytes:
    import httpx

    from ..errors import DownloadError
    from ..workspace.session import settings

    timeout = settings().timeout
    bound = SizeLimit(limit, url, grace=timeout)
    chunks: list[bytes] = []
    try:
        with (
            httpx.Client(timeout=timeout, verify=trust_store()) as http,
            contextlib.closing(open_song_url(http, url, inner=inner)) as response,
        ):
            if not response.is_success:
                raise AudioUnavailable(f"The song's audio could not be read: its host answered {response.status_code}.")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _refused(int(declared), limit)
            for chunk in response.iter_bytes():
                chunks.append(bound.take(chunk))
    except httpx.HTTPError as exc:
        raise AudioUnavailable(f"The song's audio could not be read: {type(exc).__name__}.") from None
    except SongRedirectRefused as exc:  # names hosts, never the song's path
        raise AudioUnavailable(str(exc)) from None
    except DownloadError:  # said without the URL: it would name the song
        if bound.size > limit:
            raise _refused(bound.size, limit) from None
        raise AudioUnavailable("The song's audio could not be read: its host is too slow.") from None
    return b"".join(chunks)


def _info(data: bytes) -> tuple[int, int, float]:
    """Channels, sample rate and seconds of encoded audio, from the file itself (sniffed, not guessed from a name)."""
    import miniaudio

    readers = {
        ".mp3": miniaudio.mp3_get_info,
        ".wav": miniaudio.wav_get_info,
        ".flac": miniaudio.flac_get_info,
        ".ogg": miniaudio.vorbis_get_info,
    }
    reader = readers.get(audio_suffix(data[:64]) or "")
    if reader is None:
        raise AudioUnavailable("The song's file is not audio the kernel can decode (MP3, WAV, FLAC or Ogg Vorbis).")
    try:
        info = reader(data)
    except miniaudio.DecodeError:
        raise AudioUnavailable("The song's file could not be decoded.") from None
    return info.nchannels, info.sample_rate, float(info.duration or 0.0)


def blind_copy(
    data: bytes,
    *,
    seconds: float | None,
    limit: int,
    shape: tuple[int, int] | None = None,
    last_for: float | None = None,
) -> bytes:
    """The sound of `data` as a 16-bit WAV with a fresh one-LSB dither: in `shape` (channels, rate; else its own),
    lasting `last_for` seconds (silence after the song; never cut), else its own length rounded up to
    `LENGTH_STEP`. `seconds`, the reported length, bounds the decode (a crafted file can claim hours)."""
    import miniaudio
    import numpy as np

    channels, rate = shape or _info(data)[:2]
    most_frames = int(decode_cap(seconds) * rate)
    noise = np.random.default_rng(secrets.randbits(64))
    out = io.BytesIO()
    frames = 0
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        stream = miniaudio.stream_memory(
            data, output_format=miniaudio.SampleFormat.SIGNED16, nchannels=channels, sample_rate=rate,
            frames_to_read=BLOCK_FRAMES,
        )  # fmt: skip
        try:
            for block in stream:
                samples = np.frombuffer(block, dtype=np.int16).astype(np.int32)
                frames += len(samples) // channels
                if frames > most_frames:
                    raise AudioUnavailable("The song's file decodes to more than its length allows; not played.")
                if out.tell() + 2 * len(samples) > limit:
                    raise _refused(out.tell() + 2 * len(samples), limit)
                samples += noise.integers(-1, 2, size=len(samples), dtype=np.int32)
                writer.writeframes(np.clip(samples, -32768, 32767).astype("<i2").tobytes())
            if not frames:
                raise AudioUnavailable("The song's file holds no sound.")
            step = LENGTH_STEP * rate
            target = math.ceil(last_for * rate) if last_for else math.ceil(frames / step) * step
            rest = max(0, target - frames) * channels
            if out.tell() + 2 * rest > limit:
                raise _refused(out.tell() + 2 * rest, limit)
            while rest > 0:  # the tail: silence, dithered like the rest
                size = min(rest, BLOCK_FRAMES * channels)
                writer.writeframes(noise.integers(-1, 2, size=size, dtype=np.int32).astype("<i2").tobytes())
                rest -= size
        except miniaudio.DecodeError:
            raise AudioUnavailable("The song's file could not be decoded.") from None
        finally:
            stream.close()
    return out.getvalue()


class BlindRound:
    """The players of one blind round: one shape for all (the most channels and the highest rate among its songs)
    and one length (the longest song's, and a second), found from the songs themselves, so no header and no
    duration on the page tells one song from the other. Each song's bytes are read once a round."""

    def __init__(self, sources: list[AudioSource]) -> None:
        self.sources = sources
        self._bytes: dict[int, bytes] = {}
        self._common: tuple[tuple[int, int], float | None] | None = None

    def read(self, index: int, limit: int) -> bytes:
        if index not in self._bytes:
            self._bytes[index] = read_audio(self.sources[index], limit)
        return self._bytes[index]

    def common(self, limit: int) -> tuple[tuple[int, int], float | None]:
        if self._common is None:
            infos = [_info(self.read(index, limit)) for index in range(len(self.sources))]
            longest = max(info[2] for info in infos)
            shape = (max(info[0] for info in infos), max(info[1] for info in infos))
            self._common = shape, (math.ceil(longest) + 1.0 if longest > 0 else None)
        return self._common

    def copy(self, index: int, limit: int) -> bytes:
        shape, last_for = self.common(limit)
        seconds = self.sources[index].seconds
        return blind_copy(self.read(index, limit), seconds=seconds, limit=limit, shape=shape, last_for=last_for)


@dataclass(frozen=True)
class _Offer:
    source: AudioSource
    blind: BlindRound | None = None
    index: int = 0
    key: Hashable | None = None
    """The card it plays (`offer_as`): its name answers only while the view shows that card (`show`)."""


class AudioChannel:
    """A widget's players by opaque name; answers the page's requests for their bytes from a worker thread.

    `offer()` names a source afresh each time (the same song offered twice gets two names); `clear()` forgets
    every name (a new round: the last round's players no longer answer); `show(keys)` says which cards the view
    shows now, and a card's name (`offer_as`) answers only while its card is shown. `handle(content)` takes the
    page's message and says whether it was an audio request; it never raises, and never blocks the kernel on a read.
    `inner`: the redirect rule's notion of a private host (`client.downloads.host_is_inner`; a test's seam).
    """

    def __init__(
        self,
        widget: Any,
        *,
        limit: Callable[[], int] = download_cap,
        refusal: str = STALE,
        inner: HostIsInner | None = None,
    ) -> None:
        self.widget = widget
        self.limit = limit
        self.refusal = refusal
        """The one line a request for a name this channel never gave (or gave no more) is answered with."""
        self.inner = inner
        self._offers: dict[str, _Offer] = {}
        self._kept: dict[Hashable, tuple[AudioSource, str]] = {}
        self._shown: set[Hashable] | None = None
        """The cards the view shows now (None until it says: every card's name answers)."""
        self._serving: set[str] = set()
        self._delivered: set[str] = set()
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one read and decode at a time: memory stays one song's worth

    def offer(self, source: AudioSource) -> str:
        """A fresh name for `source`: the page gets its bytes as they are."""
        return self._named(_Offer(source))

    def offer_as(self, key: Hashable, source: AudioSource) -> str:
        """The name `key` had while its source is the same (a card redrawn keeps its player), else a fresh one."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept[0] == source and kept[1] in self._offers:
                return kept[1]
        name = self._named(_Offer(source, key=key))
        with self._lock:
            self._kept[key] = (source, name)
        return name

    def show(self, keys: Any) -> None:
        """The cards the view shows now (their `offer_as` keys): the names of every other card answer no more,
        and are forgotten (a card shown again later gets a fresh name)."""
        shown = set(keys)
        with self._lock:
            self._shown = shown
            for name in [n for n, o in self._offers.items() if o.key is not None and o.key not in shown]:
                del self._offers[name]
            for key in [k for k in self._kept if k not in shown]:
                del self._kept[key]

    def _answers(self, name: Any) -> _Offer | None:
        """The offer behind `name` while it answers: given by this channel, and its card (if any) shown."""
        with self._lock:
            offer = self._offers.get(name) if isinstance(name, str) else None
            if offer is None or offer.key is None or self._shown is None or offer.key in self._shown:
                return offer
            return None

    def offer_blind(self, blind: BlindRound, index: int) -> str:
        """A fresh name for a blind copy of the round's song `index` (see `BlindRound`, `blind_copy`)."""
        return self._named(_Offer(blind.sources[index], blind, index))

    def _named(self, offer: _Offer) -> str:
        name = secrets.token_urlsafe(18)
        with self._lock:
            self._offers[name] = offer
        return name

    def delivered(self) -> set[str]:
        """The names whose bytes the page was handed this round (the blind view counts listening to those only)."""
        with self._lock:
            return set(self._delivered)

    def clear(self) -> None:
        with self._lock:
            self._offers.clear()
            self._kept.clear()
            self._delivered.clear()
            if self._shown is not None:
                self._shown = set()

    def handle(self, content: Any) -> bool:
        if not (isinstance(content, dict) and content.get("kind") == "audio"):
            return False
        name = content.get("source")
        offer = self._answers(name)
        if offer is None:
            self._answer(name if isinstance(name, str) else "", {"error": self.refusal})
            return True
        with self._lock:
            if name in self._serving:  # asked again while its answer is on the way: one answer serves
                return True
            self._serving.add(name)
        threading.Thread(target=self._serve, args=(name, offer), name="ipymusicgen-audio", daemon=True).start()
        return True

    def _serve(self, name: str, offer: _Offer) -> None:
        try:
            self._prepare_and_answer(name, offer)
        finally:
            with self._lock:
                self._serving.discard(name)

    def _prepare_and_answer(self, name: str, offer: _Offer) -> None:
        try:
            with self._reading:
                limit = self.limit()
                if offer.blind is not None:
                    data = offer.blind.copy(offer.index, limit)
                else:
                    data = read_audio(offer.source, limit, inner=self.inner)
        except AudioUnavailable as exc:
            self._answer(name, {"error": str(exc)})
            return
        except Exception as exc:  # never out of a thread unsaid
            self._answer(name, {"error": f"The song's audio could not be prepared ({type(exc).__name__})."})
            return
        kind = audio_type(data)  # only audio reaches the page, with its own type
        if kind is None:
            self._answer(name, {"error": "The song's audio is not audio the page can play; nothing was sent."})
            return
        if not self._answers(name):
            self._answer(name, {"error": self.refusal})
            return
        with self._lock:  # before the bytes go: the page's first report may come back at once
            if name in self._offers:  # still offered (a clear() meanwhile forgets it)
                self._delivered.add(name)
        self._answer(name, {"type": kind, "size": len(data)}, [data])

    def _answer(self, name: str, fields: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        try:
            self.widget.send({"kind": "audio", "source": name[:100], **fields}, buffers or None)
        except Exception:  # a view closed meanwhile: nobody is listening
            return
