"""What a downloaded file really is, from its first bytes: the archive keeps only audio as a song and only
images as a cover, and names each by what it is (never by what the server's Content-Type claimed).

A URL that expired often answers 200 with an HTML page, or an empty body: saved as the song, the paid song
would be lost for good once the URL is gone. Checked here, it is an archive error, retried with a fresh URL.
"""

from __future__ import annotations

from pathlib import Path

HEAD_BYTES = 64
AUDIO_SUFFIXES = (".mp3", ".wav", ".flac", ".ogg", ".m4a")
IMAGE_SUFFIXES = (".jpg", ".png", ".webp", ".gif", ".svg")


class NotAudioError(ValueError):
    """The song's URL answered something that is not audio (an HTML page, an empty body, a cover)."""


def head_of(path: Path, size: int = HEAD_BYTES) -> bytes:
    with open(path, "rb") as file:
        return file.read(size)


def audio_suffix(head: bytes) -> str | None:
    """The audio format the bytes start with (MP3 with ID3 or a frame sync, WAV, FLAC, Ogg, MP4), or None."""
    if head.startswith(b"ID3"):
        return ".mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06:  # MPEG frame sync, a layer
        return ".mp3"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return ".wav"
    if head.startswith(b"fLaC"):
        return ".flac"
    if head.startswith(b"OggS"):
        return ".ogg"
    if head[4:8] == b"ftyp":
        return ".m4a"
    return None


def image_suffix(head: bytes) -> str | None:
    """The image format the bytes start with (JPEG, PNG, WebP, GIF, SVG), or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return ".jpg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return ".png"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return ".webp"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return ".gif"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"<svg") or (text.startswith(b"<?xml") and b"<svg" in head.lower()):
        return ".svg"
    return None


def check_audio(path: Path) -> str:
    """The file's audio suffix, after its header is read as the decoder would; `NotAudioError` says what it is."""
    size = path.stat().st_size
    if size == 0:
        raise NotAudioError("the song's URL answered an empty body (an expired link?); it will be fetched again")
    head = head_of(path)
    suffix = audio_suffix(head)
    if suffix is None:
        looks = "an HTML page" if head.lstrip().startswith(b"<") else f"{size} bytes that are not audio"
        raise NotAudioError(f"the song's URL answered {looks} (an expired link?); it will be fetched again")
    if not readable_header(path):
        raise NotAudioError(f"the song's URL answered a {suffix[1:].upper()} file whose header cannot be read")
    return suffix


def readable_header(path: Path) -> bool:
    """Whether the audio header parses (mutagen reads MP3, WAV, FLAC, Ogg and MP4 headers without decoding)."""
    import mutagen

    try:
        return mutagen.File(path) is not None
    except Exception:  # mutagen's errors for a broken header are many: any of them means unreadable
        return False
