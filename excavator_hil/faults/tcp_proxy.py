"""A loopback TCP proxy for fault injection on a link (bridge <-> S7 server, client <-> Redis).

It behaves like a store-and-forward hop on the path (a switch buffer, a NAT box, a stalled
middlebox): while ``stall()`` holds, everything each side sends is read and *kept*; on
``release()`` the kept bytes are delivered, even when the side that sent them has closed its
socket in the meantime. That is how a write sent before a link outage can reach a PLC after it.
``block_new`` refuses new connections (accept, then close) while set; ``reply_delay_s`` delays
every chunk from the server to the client (a PLC or link that answers slowly), and
``slow_reply = (n, s)`` only the n-th chunk (from 0) of each connection's answers by s seconds
(one reply held up, e.g. by a busy host). ``cut()`` is a
link cut as a cable pulled between the two: the open connections stall (their bytes kept) and
new ones are refused; ``restore()`` plugs it back (what was kept is delivered first).
``record=True`` keeps a copy of every byte it reads, per direction (``recorded["to_server"]``,
``recorded["to_client"]``): a tap on the link, e.g. to show what a listener on the wire sees.

In a test it runs in the test's process (``TcpProxy(target_port)``). The soak
(``bench/soak.py``) runs it as its own process, so no thread of the soak's own can hold the
link up: ``python -m excavator_hil.faults.tcp_proxy --target-port 1102 --port 1103``, cut on
SIGUSR1, restored on SIGUSR2, printing ``TCP_PROXY READY <port>`` once it accepts. It binds
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

from excavator_common import supervisor_watch

# How long a pipe waits in select() before looking at its flags again [s]: bytes are forwarded
# as soon as they arrive; only a change of stall or close waits for this.
_POLL_S = 0.02


class _Pipe:
    """One direction of one proxied connection."""

    def __init__(self, proxy: TcpProxy, src: socket.socket, dst: socket.socket,
                 delay: bool) -> None:
        self.proxy, self.src, self.dst, self.delay = proxy, src, dst, delay
        self.buf = bytearray()
        self.chunks = 0   # chunks read from src so far
        self.src_open = True
        self.stalled = proxy.stalled_now
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="tcp-proxy-pipe")

    def _run(self) -> None:
        p = self.proxy
        while not p.closed:
            if self.src_open:
                try:
                    readable, _, _ = select.select([self.src], [], [], _POLL_S)
                    if readable:
                        chunk = self.src.recv(65536)
                        if chunk:
                            if p.recorded is not None:
                                p.recorded["to_client" if self.delay else "to_server"] += chunk
                            if self.delay and p.reply_delay_s > 0:
                                time.sleep(p.reply_delay_s)
                            if self.delay and p.slow_reply and p.slow_reply[0] == self.chunks:
                                time.sleep(p.slow_reply[1])
                            self.chunks += 1
                            self.buf += chunk
                        else:
                            self.src_open = False
                except OSError:
                    self.src_open = False
            else:
                time.sleep(_POLL_S)
            if self.buf and not self.stalled:
                try:
                    self.dst.sendall(bytes(self.buf))
                    p.delivered += len(self.buf)
                except OSError:
                    break
                self.buf.clear()
            if not self.src_open and not self.buf and not self.stalled:
                with contextlib.suppress(OSError):
                    self.dst.shutdown(socket.SHUT_WR)
                break
        self.done = True
        p.pipe_ended()


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket, proxy: TcpProxy) -> None:
        self.socks = (client, upstream)
        self.pipes = (_Pipe(proxy, client, upstream, False), _Pipe(proxy, upstream, client, True))

    def ended(self) -> bool:
        return all(p.done for p in self.pipes)

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", port: int = 0,
                 record: bool = False) -> None:
        self.target = (target_host, target_port)
        # every byte read, per direction (only with ``record``)
        self.recorded: dict[str, bytearray] | None = (
            {"to_server": bytearray(), "to_client": bytearray()} if record else None)
        self.block_new = False
        self.reply_delay_s = 0.0
        self.slow_reply: tuple[int, float] | None = None
        self.closed = False
        self.stalled_now = False   # connections accepted while stalled start stalled too
        self.accepted = 0
        self.delivered = 0
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        self._thread = threading.Thread(target=self._accept, daemon=True, name="tcp-proxy")
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
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted += 1
            conn = _Connection(client, upstream, self)
            with self._lock:
                self._connections.append(conn)
            for pipe in conn.pipes:
                pipe.thread.start()

    def pipe_ended(self) -> None:
        """Close and forget the connections whose two directions have both ended (a soak
        through the proxy reconnects thousands of times)."""
        with self._lock:
            done = [c for c in self._connections if c.ended()]
            self._connections = [c for c in self._connections if c not in done]
        for c in done:
            c.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def held(self) -> bytes:
        """The bytes kept from the clients (towards the server) while stalled."""
        with self._lock:
            pipes = [c.pipes[0] for c in self._connections]
        return b"".join(bytes(p.buf) for p in pipes if p.stalled)

    def stall(self) -> None:
        """Stop forwarding on the open connections (bytes are kept, not lost)."""
        self.stalled_now = True
        with self._lock:
            for c in self._connections:
                for pipe in c.pipes:
                    pipe.stalled = True

    def release(self) -> None:
        """Deliver what was kept and forward again."""
        self.stalled_now = False
        with self._lock:
            for c in self._connections:
                for pipe in c.pipes:
                    pipe.stalled = False

    def cut(self) -> None:
        """The cable pulled: open connections stall (bytes kept), new ones are refused."""
        self.block_new = True
        self.stall()

    def restore(self) -> None:
        """The cable back: what was kept is delivered, then new connections are accepted."""
        self.release()
        self.block_new = False

    def close(self) -> None:
        self.closed = True
        self.release()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for c in connections:
            c.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m excavator_hil.faults.tcp_proxy",
        description="loopback store-and-forward TCP proxy: SIGUSR1 cuts the link (open "
                    "connections stall, new ones refused), SIGUSR2 restores it")
    parser.add_argument("--target-port", type=int, required=True, help="port on 127.0.0.1 to "
                        "forward to")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (127.0.0.1; "
                        "default any free port)")
    args = parser.parse_args(argv)
    supervisor_watch.end_with_supervisor()
    for name, port in (("--target-port", args.target_port), ("--port", args.port)):
        if not 0 <= port <= 65535 or (name == "--target-port" and port == 0):
            parser.error(f"{name} {port} is not a TCP port (1..65535)")
    try:
        proxy = TcpProxy(args.target_port, port=args.port)
    except OSError as e:
        print(f"tcp_proxy: error: cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: proxy.cut())
    signal.signal(signal.SIGUSR2, lambda *_: proxy.restore())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"TCP_PROXY READY {proxy.port}", flush=True)
    while not stop.wait(0.5):
        pass
    proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
