"""A browser that opens the dashboard and vanishes: the page loaded over HTTP, its websocket
(NiceGUI's socket.io, engine.io v4 over a plain RFC 6455 websocket) opened with the page's own
query, the page's updates read (and the server's pings answered) for a while, then the TCP
connection reset without a goodbye (``SO_LINGER`` 0): a laptop closed, a tab killed, Wi-Fi gone.

Standard library only, on loopback. The server must then keep serving others and drop what it
held for the vanished tab (NiceGUI: after its ``reconnect_timeout``): the soak checks the page
still loads and the dashboard process leaks neither memory, descriptors nor threads.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import http.client
import json
import os
import re
import socket
import struct
import time
import urllib.parse
import uuid
from typing import Any

WS_PATH = "/_nicegui_ws/socket.io/"


class DashboardError(RuntimeError):
    """The dashboard did not serve the page or its websocket as a browser expects."""


def fetch_page(host: str, port: int, timeout_s: float = 10.0, path: str = "/"
               ) -> tuple[int, str]:
    """GET ``path``: (status, body). The page (``/``) makes the server build one for a new
    browser, kept until it connects or is pruned (NiceGUI: 60 s); ``/favicon.ico`` only shows
    that the server answers."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def page_query(html: str) -> dict[str, Any]:
    """The socket.io query the page's script connects with (``client_id`` ...)."""
    m = re.search(r"query:\s*(\{.*?\})\s*,\s*\n", html)
    if not m:
        raise DashboardError("the page has no socket.io query (not a NiceGUI page?)")
    try:   # NiceGUI renders it as a Python literal (quotes, True), JSON in other versions
        query: dict[str, Any] = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        query = json.loads(m.group(1))
    if "client_id" not in query:
        raise DashboardError(f"the page's socket.io query has no client_id: {query}")
    return query


class VanishingClient:
    """One browser tab: :meth:`open`, :meth:`hold`, :meth:`vanish`."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.sock: socket.socket | None = None
        self.frames = 0      # websocket frames the server sent
        self.connected = False   # socket.io connected (the page's handshake accepted)
        self._buf = b""

    def open(self) -> VanishingClient:
        status, html = fetch_page(self.host, self.port, self.timeout_s)
        if status != 200:
            raise DashboardError(f"GET / answered {status}")
        query = page_query(html)
        params = {"EIO": "4", "transport": "websocket", "tab_id": str(uuid.uuid4()),
                  "document_id": str(uuid.uuid4()),
                  **{k: (str(v).lower() if isinstance(v, bool) else str(v))
                     for k, v in query.items()}}
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        self.sock = sock
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {WS_PATH}?{urllib.parse.urlencode(params)} HTTP/1.1\r\n"
                   f"Host: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n")
        sock.sendall(request.encode())
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise DashboardError(f"websocket refused: {head.splitlines()[0]!r}")
        self._send_text("40")            # socket.io: connect to the default namespace
        deadline = time.monotonic() + self.timeout_s
        while not self.connected:
            if time.monotonic() > deadline:
                raise DashboardError("socket.io never connected (no '40' answer)")
            self._read_frame()
        return self

    def hold(self, seconds: float) -> None:
        """Stay on the page, reading what it sends and answering pings."""
        assert self.sock is not None
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(min(left, 0.5))
            try:
                self._read_frame()
            except TimeoutError:
                continue
        self.sock.settimeout(self.timeout_s)

    def vanish(self) -> None:
        """Reset the connection: no websocket close, no socket.io disconnect, no FIN."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
                self.sock.close()
            self.sock = None

    # --- websocket framing (RFC 6455: the client masks, the server does not) ------------------
    def _recv(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(65536)
        if not chunk:
            raise DashboardError("the dashboard closed the websocket")
        self._buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._recv()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _read_frame(self) -> None:
        b0, b1 = self._take(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._take(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._take(8))[0]
        payload = self._take(n)
        opcode = b0 & 0x0F
        self.frames += 1
        if opcode == 0x9:
            self._send(0xA, payload)                 # websocket ping -> pong
        elif opcode == 0x8:
            raise DashboardError("the dashboard closed the websocket")
        elif opcode == 0x1:
            text = payload.decode(errors="replace")
            if text == "2":
                self._send_text("3")                 # engine.io ping -> pong
            elif text.startswith("40"):
                self.connected = True
            elif text.startswith("44"):
                raise DashboardError(f"socket.io refused the connection: {text[2:]}")

    def _send_text(self, text: str) -> None:
        self._send(0x1, text.encode())

    def _send(self, opcode: int, payload: bytes) -> None:
        assert self.sock is not None
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)
