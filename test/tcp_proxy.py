"""A loopback TCP proxy for fault injection between the bridge and an S7 server.

It behaves like a store-and-forward hop on the path (a switch buffer, a NAT box, a stalled
middlebox): while ``stall()`` holds, everything each side sends is read and *kept*; on
``release()`` the kept bytes are delivered, even when the side that sent them has closed its
socket in the meantime. That is how a write sent before a link outage can reach a PLC after it.
``block_new`` refuses new connections (accept, then close) while set; ``reply_delay_s`` delays
every chunk from the server to the client (a PLC or link that answers slowly).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time


class _Pipe:
    """One direction of one proxied connection."""

    def __init__(self, proxy: TcpProxy, src: socket.socket, dst: socket.socket,
                 delay: bool) -> None:
        self.proxy, self.src, self.dst, self.delay = proxy, src, dst, delay
        self.buf = bytearray()
        self.src_open = True
        self.stalled = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        p = self.proxy
        while not p.closed:
            if self.src_open:
                try:
                    readable, _, _ = select.select([self.src], [], [], 0.002)
                    if readable:
                        chunk = self.src.recv(65536)
                        if chunk:
                            if self.delay and p.reply_delay_s > 0:
                                time.sleep(p.reply_delay_s)
                            self.buf += chunk
                        else:
                            self.src_open = False
                except OSError:
                    self.src_open = False
            else:
                time.sleep(0.002)
            if self.buf and not self.stalled:
                try:
                    self.dst.sendall(bytes(self.buf))
                    p.delivered += len(self.buf)
                except OSError:
                    return
                self.buf.clear()
            if not self.src_open and not self.buf and not self.stalled:
                with contextlib.suppress(OSError):
                    self.dst.shutdown(socket.SHUT_WR)
                return


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.block_new = False
        self.reply_delay_s = 0.0
        self.closed = False
        self.accepted = 0
        self.delivered = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._pipes: list[_Pipe] = []
        self._stalled: list[_Pipe] = []
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.block_new:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5.0)
            except OSError:
                client.close()
                continue
            self.accepted += 1
            self._socks += [client, upstream]
            for pipe in (_Pipe(self, client, upstream, False), _Pipe(self, upstream, client, True)):
                self._pipes.append(pipe)
                pipe.thread.start()

    def held(self) -> bytes:
        """The bytes kept from the clients (towards the server) while stalled."""
        return b"".join(bytes(p.buf) for p in self._stalled if not p.delay)

    def stall(self) -> None:
        """Stop forwarding on the open connections (bytes are kept, not lost)."""
        self._stalled = list(self._pipes)
        for pipe in self._stalled:
            pipe.stalled = True

    def release(self) -> None:
        """Deliver what was kept and forward again."""
        for pipe in self._stalled:
            pipe.stalled = False
        self._stalled = []

    def close(self) -> None:
        self.closed = True
        self.release()
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
