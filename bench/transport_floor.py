"""The transport's floor under the plant link's CPU: two paced TCP round trips over loopback per
exchange, with the byte counts and socket calls of an S7 write of ``plant_in`` and an S7 read
of ``plant_out`` as python-snap7 makes them (TPKT header received first, then the rest; a
socket timeout set, so every call polls first), against a peer process that answers at once.

No S7, no ROS, no encoding: what is left is the kernel's loopback TCP and the wake-ups of two
processes per round trip, which any S7 client in any language pays on this host. bench/
plant_link.py runs it beside the plant link's phases and reports the plant link's CPU per
exchange against it.

    .venv/bin/python bench/transport_floor.py [--seconds 30] [--hz 100]

Last stdout line: one JSON object (``cpu_us_per_exchange``: the client process's CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

# S7 PDUs of the plant link's two jobs (sizes from config/plc.yaml's plant blocks: plant_in
# 44 B written, plant_out 20 B read): request and reply lengths on the wire, TPKT included
# (TPKT 4 + COTP 3 + S7 header 10/12 + parameters + data).
WRITE_REQUEST_B, WRITE_REPLY_B = 4 + 3 + 10 + 14 + 4 + 44, 4 + 3 + 12 + 2 + 1
READ_REQUEST_B, READ_REPLY_B = 4 + 3 + 10 + 14, 4 + 3 + 12 + 2 + 4 + 20
TIMEOUT_S = 0.25   # the link's plc_timeout_s order: a timeout set, as the S7 session sets one


def _frame(n: int) -> bytes:
    """A TPKT frame of ``n`` bytes (version 3, the length in the header)."""
    return struct.pack(">BBH", 3, 0, n) + bytes(n - 4)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data.extend(chunk)
    return bytes(data)


def _recv_frame(sock: socket.socket) -> bytes:
    """As python-snap7's ``receive_data``: the 4-byte TPKT header, then the rest."""
    header = _recv_exact(sock, 4)
    (length,) = struct.unpack(">H", header[2:])
    return header + _recv_exact(sock, length - 4)


def serve(port_file: Path) -> None:
    """The peer: answers each request frame at once (a write request with the write reply, a
    read request with the read reply), until the client goes."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port_file.write_text(str(server.getsockname()[1]))
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        replies = {WRITE_REQUEST_B: _frame(WRITE_REPLY_B), READ_REQUEST_B: _frame(READ_REPLY_B)}
        try:
            while True:
                conn.sendall(replies[len(_recv_frame(conn))])
        except (ConnectionError, OSError):
            pass


def client(port: int, seconds: float, hz: float) -> dict[str, float]:
    """Paced exchanges (absolute deadlines, as the plant link's loop): a write round trip, then
    a read round trip. Returns the exchanges and this process's CPU per exchange [us]."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(TIMEOUT_S)
    write, read = _frame(WRITE_REQUEST_B), _frame(READ_REQUEST_B)
    period = 1.0 / hz
    cpu0, t0 = time.process_time(), time.monotonic()
    next_tick, n = t0, 0
    while time.monotonic() - t0 < seconds:
        sock.sendall(write)
        _recv_frame(sock)
        sock.sendall(read)
        _recv_frame(sock)
        n += 1
        next_tick += period
        time.sleep(max(0.0, next_tick - time.monotonic()))
    cpu = time.process_time() - cpu0
    sock.close()
    return {"exchanges": n, "cpu_us_per_exchange": 1e6 * cpu / max(1, n),
            "cpu_share": cpu / (time.monotonic() - t0)}


def measure(seconds: float, hz: float = 100.0) -> dict[str, float]:
    """The floor, each side in a process of its own (the wake-ups cross processes, as with a
    PLC): the client's CPU per exchange."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        peer = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
        try:
            deadline = time.monotonic() + 30.0
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline or peer.poll() is not None:
                    raise RuntimeError("the floor's peer did not start")
                time.sleep(0.01)
            out = subprocess.run([sys.executable, __file__, "--client", port_file.read_text(),
                                  "--seconds", str(seconds), "--hz", str(hz)],
                                 capture_output=True, text=True, check=True)
            return dict(json.loads(out.stdout.strip().splitlines()[-1]))
        finally:
            peer.kill()
            peer.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/transport_floor.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured [s]")
    ap.add_argument("--hz", type=float, default=100.0, help="exchanges per second")
    ap.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    ap.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not 0.5 <= args.seconds <= 3600.0:
        ap.error(f"--seconds {args.seconds:g} is outside 0.5..3600")
    if not 1.0 <= args.hz <= 1000.0:
        ap.error(f"--hz {args.hz:g} is outside 1..1000")
    if args.serve:
        serve(Path(args.serve))
        return 0
    if args.client:
        print(json.dumps(client(args.client, args.seconds, args.hz)))
        return 0
    r = measure(args.seconds, args.hz)
    print(f"transport floor: {r['exchanges']:.0f} exchanges at {args.hz:g} Hz, "
          f"{r['cpu_us_per_exchange']:.0f} us of CPU per exchange "
          f"({100 * r['cpu_share']:.1f} % of a core)")
    print(json.dumps({"bench": "transport_floor", "seconds": args.seconds, "hz": args.hz,
                      "load_average_1min": os.getloadavg()[0], **r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
