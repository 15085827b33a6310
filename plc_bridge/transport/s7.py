"""The S7 transport: PUT/GET over ISO-on-TCP (python-snap7), one ``db_write`` / ``db_read`` of a
whole block per request.

python-snap7 3.x is pure Python. Its ``Client.connect`` opens the socket with a 5 s timeout
(``ISOTCPConnection.timeout``) and its ``RecvTimeout`` parameter is stored but not applied to
the socket, so the session sets ``client.connection.socket.settimeout`` itself (``set_timeout``):
a PLC that stops answering then fails the request within ``plc_timeout_s``.

Requests: ``Client.connect`` does the ISO-on-TCP and S7 set-up; each request then goes through
the client's own ``protocol`` (PDU builder and parser) directly, one job in flight at a time,
the reply's PDU reference checked. That skips the client's per-request layers (operation
logging, rate limiter, reconnect wrapper, lock), ~45 us a request measured against the virtual
PLC (p50 165 -> 117 us), and the link does its own reconnecting anyway. One job at a time is
also what python-snap7 negotiates (``max_amq_caller = 1``), so a read is not sent before the
write's reply: a real PLC may refuse a second job in flight.

The framing around the PDU (TPKT, RFC 1006: version 3, a reserved byte, the frame's length;
COTP data transfer, ISO 8073 class 0: ``02 f0 80``) is the session's own, for the syscalls: a
socket with a Python timeout polls before every call, and python-snap7's ``receive_data``
receives the TPKT header and the rest apart (six syscalls a request, each giving up and taking
back the GIL). Here the timeout is the kernel's (``SO_RCVTIMEO`` / ``SO_SNDTIMEO`` on a blocking
socket) and a reply, a few dozen bytes, comes in one ``recv``: two syscalls a request. A
timeout raises python-snap7's own ``S7TimeoutError``, a closed or broken link its
``S7ConnectionError``, as its connection does.

At connect the negotiated PDU is checked against the blocks: a PLC that accepts a smaller PDU
than the blocks need is refused with an error naming both sizes.

A lost session's socket is aborted (``SO_LINGER`` 0, then close: the kernel drops anything
still queued and sends RST), so a write sent before the loss can never be delivered after it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Sequence
from typing import Any

import snap7
from snap7.datatypes import S7Area, S7WordLen
from snap7.error import S7ConnectionError, S7TimeoutError

from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout, max_payload
from plc_bridge.errors import LinkRefusedError

TPKT_VERSION = 3
COTP_DT = b"\x02\xf0\x80"   # COTP data transfer: header length 2, DT, last data unit (EOT)
HEADERS_B = 4 + len(COTP_DT)  # TPKT + COTP in front of every S7 PDU
RECV_B = 65536               # more than any frame (TPKT's length is 16 bits)


def timeval(seconds: float) -> bytes:
    """``seconds`` as a C ``struct timeval`` for ``SO_RCVTIMEO`` / ``SO_SNDTIMEO``: whole
    seconds and microseconds below 1e6, at least 1 us (all zero would mean no timeout)."""
    return struct.pack("ll", *divmod(max(1, round(seconds * 1e6)), 1_000_000))


def frame(pdu: bytes) -> bytes:
    """``pdu`` in a TPKT frame (RFC 1006) as a COTP data transfer (ISO 8073 class 0)."""
    return struct.pack(">BBH", TPKT_VERSION, 0, HEADERS_B + len(pdu)) + COTP_DT + pdu


def receive_frame(sock: socket.socket) -> bytes:
    """The S7 PDU of the next frame on ``sock``: one ``recv`` for a whole reply, more only when
    TCP split it. Kernel timeouts: ``S7TimeoutError``; a closed or broken link, bytes beyond the
    frame (one job in flight: nothing may follow its reply) or a frame that is not a COTP data
    transfer: ``S7ConnectionError``."""
    data = b""
    length = HEADERS_B
    try:
        while len(data) < length:
            chunk = sock.recv(RECV_B)
            if not chunk:
                raise S7ConnectionError("Connection closed by peer")
            data += chunk
            if len(data) >= 4:
                if data[0] != TPKT_VERSION:
                    raise S7ConnectionError(f"Invalid TPKT version: {data[0]}")
                length = int.from_bytes(data[2:4], "big")
                if length < HEADERS_B:
                    raise S7ConnectionError(f"Invalid TPKT length: {length}")
    except (BlockingIOError, TimeoutError):   # SO_RCVTIMEO ran out (EAGAIN)
        raise S7TimeoutError("Receive timeout") from None
    except OSError as e:
        raise S7ConnectionError(f"Receive failed: {e}") from None
    if len(data) > length:
        raise S7ConnectionError(
            f"{len(data) - length} B after a {length} B reply: with one job in flight nothing "
            f"may follow it")
    if data[4:HEADERS_B] != COTP_DT:
        raise S7ConnectionError(f"Expected a COTP data transfer, got {data[4:HEADERS_B].hex()}")
    return data[HEADERS_B:]


def abort_socket(sock: socket.socket | None) -> None:
    """Close with RST: unsent data is discarded, not delivered late (SO_LINGER on, 0 s)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class S7Session:
    """One S7 connection (``open`` connects and checks the PDU)."""

    connecting_note = "connecting (no reply yet; python-snap7's connect timeout is 5 s)"

    def __init__(self, client: snap7.Client):
        self.client = client
        self.warning = ""

    @classmethod
    def open(cls, config: BridgeConfig, writes: Sequence[DbLayout],
             reads: Sequence[DbLayout]) -> S7Session:
        client = snap7.Client()
        try:
            client.connect(config.plc_host, config.rack, config.slot, config.plc_port)
            conn = client.connection
            if conn is None or conn.socket is None:
                raise ConnectionError("snap7 connected without a socket")
            cls.check_pdu(config, writes, reads, int(client.pdu_length))
        except BaseException:
            cls(client).abort()
            raise
        return cls(client)

    @staticmethod
    def check_pdu(config: BridgeConfig, writes: Sequence[DbLayout], reads: Sequence[DbLayout],
                  pdu: int) -> None:
        """Refuse (``LinkRefusedError``) a PDU too small for a block, naming both sizes."""
        model = f"_{config.model}"
        for blocks, direction in ((writes, "write"), (reads, "read")):
            for block in blocks:
                name, size = block.name.removesuffix(model), block.size
                if size > max_payload(pdu, direction):
                    raise LinkRefusedError(
                        f"the PLC negotiated a PDU of {pdu} B; the {name} DB ({size} B) needs "
                        f"more (one {direction} carries {max_payload(pdu, direction)} B): "
                        f"shrink the block in plc.yaml or use a CPU with a larger PDU")

    def set_timeout(self, timeout_s: float) -> None:
        """Every later send and receive fails after ``timeout_s`` [s] without progress: the
        kernel's timeouts on a blocking socket (no poll before each call), which Linux rounds
        up to its tick (4 ms at HZ=250: plc_timeout_s = 0.001 acts as 0.004)."""
        conn = self.client.connection
        if conn is None or conn.socket is None:
            raise ConnectionError("snap7 client has no connection")
        conn.timeout = timeout_s
        sock = conn.socket
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval(timeout_s))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval(timeout_s))

    def _request(self, pdu: bytes) -> dict[str, Any]:
        """Send one S7 job and return its parsed reply (the PDU reference must match)."""
        conn = self.client.connection
        if conn is None or conn.socket is None:
            raise S7ConnectionError("Not connected")
        sock = conn.socket
        try:
            sock.sendall(frame(pdu))
        except (BlockingIOError, TimeoutError):   # SO_SNDTIMEO ran out: the PLC reads nothing
            raise S7TimeoutError("Send timeout") from None
        except OSError as e:
            raise S7ConnectionError(f"Send failed: {e}") from None
        reply = self.client.protocol.parse_response(receive_frame(sock))
        self.client.protocol.validate_pdu_reference(reply["sequence"])
        return reply

    def write(self, block: DbLayout, data: bytes) -> None:
        protocol = self.client.protocol
        reply = self._request(protocol.build_write_request(
            S7Area.DB, block.db_number, 0, S7WordLen.BYTE, bytes(data)))
        protocol.check_write_response(reply)

    def read(self, block: DbLayout) -> bytes:
        protocol = self.client.protocol
        reply = self._request(protocol.build_read_request(
            S7Area.DB, block.db_number, 0, S7WordLen.BYTE, block.size))
        return bytes(protocol.extract_read_data(reply, S7WordLen.BYTE, block.size))

    def abort(self, graceful: bool = False) -> None:
        conn = self.client.connection
        abort_socket(conn.socket if conn is not None else None)
        with contextlib.suppress(Exception):  # already broken
            self.client.disconnect()
