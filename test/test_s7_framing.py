"""The S7 session's own TPKT/COTP framing (plc_bridge/transport/s7.py) over a real socket pair:
a reply split by TCP anywhere is put together, the kernel's timeout is python-snap7's
``S7TimeoutError``, and whatever is not one whole COTP data transfer drops the link
(``S7ConnectionError``) instead of being parsed. Against the two S7 servers the session runs in
test_bridge_snap7_c.py, test_plant_link_snap7_c.py and every rig test."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from snap7.error import S7ConnectionError, S7TimeoutError

from plc_bridge.transport.s7 import COTP_DT, frame, receive_frame, timeval


def _pair(timeout_s: float = 30.0) -> tuple[socket.socket, socket.socket]:
    """(client, peer): the client blocking, with the kernel's receive timeout as the session
    sets it (by default long: a starved sender thread must not read as a timeout)."""
    client, peer = socket.socketpair()
    client.settimeout(None)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval(timeout_s))
    return client, peer


def test_frame_is_tpkt_then_cotp_data_transfer() -> None:
    pdu = bytes(range(25))
    wire = frame(pdu)
    assert wire[:4] == b"\x03\x00\x00\x20"        # version 3, reserved, 4 + 3 + 25 = 32 B
    assert wire[4:7] == COTP_DT == b"\x02\xf0\x80"
    assert wire[7:] == pdu


@given(pdu=st.binary(min_size=0, max_size=600), cuts=st.lists(st.integers(1, 40), max_size=6))
def test_a_reply_split_anywhere_is_put_together(pdu: bytes, cuts: list[int]) -> None:
    client, peer = _pair()
    wire = frame(pdu)
    try:
        def send() -> None:
            at = 0
            for n in cuts:
                peer.sendall(wire[at:at + n])
                at += n
                time.sleep(0.001)
            peer.sendall(wire[at:])
        sender = threading.Thread(target=send)
        sender.start()
        assert receive_frame(client) == pdu
        sender.join()
    finally:
        client.close()
        peer.close()


def test_no_reply_within_the_timeout_is_a_timeout() -> None:
    client, peer = _pair(0.05)
    try:
        t0 = time.monotonic()
        with pytest.raises(S7TimeoutError, match="Receive timeout"):
            receive_frame(client)
        assert time.monotonic() - t0 >= 0.04
        peer.sendall(frame(b"late")[:5])         # half a frame, then silence: a timeout too
        with pytest.raises(S7TimeoutError):
            receive_frame(client)
    finally:
        client.close()
        peer.close()


@pytest.mark.parametrize(("wire", "said"), [
    (b"", "closed by peer"),
    (frame(b"abc")[:6], "closed by peer"),                # closed mid-frame
    (b"\x04\x00\x00\x08\x02\xf0\x80x", "TPKT version: 4"),
    (b"\x03\x00\x00\x05\x02", "TPKT length: 5"),
    (b"\x03\x00\x00\x08\x02\xe0\x80x", "COTP data transfer, got 02e080"),
    (frame(b"abc") + b"\x03", "1 B after a 10 B reply"),   # nothing may follow the reply
])
def test_what_is_not_one_whole_data_transfer_drops_the_link(wire: bytes, said: str) -> None:
    client, peer = _pair()
    try:
        peer.sendall(wire)
        peer.shutdown(socket.SHUT_WR)
        with pytest.raises(S7ConnectionError, match=said):
            receive_frame(client)
    finally:
        client.close()
        peer.close()


@given(st.floats(min_value=0.0, max_value=2.0))
def test_every_timeout_the_parameter_allows_is_a_valid_kernel_timeout(seconds: float) -> None:
    """plc_timeout_s is 0.001-2 s; 0.9999999 s once made 1,000,000 us, which the kernel
    refuses (EDOM). The kernel keeps at least the time asked, rounded up to its tick."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval(seconds))
        sec, usec = struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16))
    assert 0 <= usec < 1_000_000
    assert sec + usec / 1e6 >= seconds - 1e-6
    assert sec + usec / 1e6 > 0.0      # never "no timeout"
