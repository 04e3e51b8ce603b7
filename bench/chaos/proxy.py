"""A TCP proxy the harness owns, to cut one process off the network without touching anyone
else's: `cut()` black-holes every connection through it (bytes are held, new connections are
accepted but not connected upstream), `heal()` lets everything flow again. That is what a
partition looks like to TCP: no reset, no error, just silence, then the held bytes arrive."""

from __future__ import annotations

import asyncio
import contextlib


class PartitionableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._open.wait()  # during a cut the connection hangs, as a lost SYN-ACK would
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                return  # the server is down: the client sees the connection close
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                await self._open.wait()
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.write_eof()  # one side finished: pass the half-close on
