"""MCP over stdin/stdout on the event loop's own pipes: no thread hop per line.

The SDK's stdio transport reads each line and writes (then flushes) each answer through a worker thread:
three thread wake-ups per call, which on a busy two-core machine cost more than the tool's own work. Here
the wire is read and written by asyncio pipe transports on private duplicates of fds 0 and 1, while fd 0
reads the null device and fd 1 points at stderr, as the SDK does, so stray output never corrupts the wire.
When the streams are not pipes (a file, a closed descriptor), the SDK's transport is used as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import stat
from collections.abc import AsyncIterator, Callable
from typing import Any

from mcp.server.stdio import stdio_server

LINE_LIMIT = 64 * 1024 * 1024
"""Longest message read (the SDK's reader has none; asyncio's default of 64 KB is too small for a batch)."""


def _pipe_like(fd: int, events: int) -> bool:
    """Whether the event loop can watch `fd`: a pipe, a socket or a terminal. Not /dev/null, a character device
    epoll refuses (a host that gives the server no stdin got a traceback and a server that never ended)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    selector = selectors.DefaultSelector()
    try:
        selector.register(fd, events)
    except (OSError, ValueError):
        return False
    finally:
        selector.close()
    return True


class _Lines:
    """`async for line in stdin` over an asyncio StreamReader (text, as the SDK's reader yields)."""

    def __init__(self, reader: asyncio.StreamReader, on_eof: Callable[[], None] | None = None) -> None:
        self._reader = reader
        self._on_eof = on_eof

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # a line past LINE_LIMIT: the wire is unusable, end as at EOF
            line = b""
        if not line:
            if self._on_eof is not None:
                self._on_eof()
                self._on_eof = None
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Writer:
    """`await stdout.write(text)` and `await stdout.flush()` over an asyncio StreamWriter."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@contextlib.asynccontextmanager
async def pipe_stdio(on_eof: Callable[[], None] | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's `stdio_server` streams, fed by asyncio pipes (or the SDK's own transport if that cannot be)."""
    if not (_pipe_like(0, selectors.EVENT_READ) and _pipe_like(1, selectors.EVENT_WRITE)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    saved_in, saved_out = os.dup(0), os.dup(1)
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(os.dup(1), "wb", buffering=0)
    transports: list[asyncio.BaseTransport] = []
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)  # stray prints go to stderr, never onto the wire
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        transports.append(read_transport)  # it owns (and closes) stdin now
        write_transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout)
        transports.append(write_transport)
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        async with stdio_server(stdin=_Lines(reader, on_eof), stdout=_Writer(writer)) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        for transport in transports:
            transport.close()
        for file in (stdin, stdout)[len(transports) :]:  # the ones no transport took
            file.close()
        for fd, saved in ((0, saved_in), (1, saved_out)):
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
            os.close(saved)


async def run_stdio(server: Any, on_eof: Callable[[], None] | None = None) -> None:
    """What `MCPServer.run_stdio_async` does, over `pipe_stdio`; `on_eof` is called when the host closes stdin."""
    lowlevel = server._lowlevel_server
    async with pipe_stdio(on_eof) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
