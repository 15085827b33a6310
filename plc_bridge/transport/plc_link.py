"""The S7 connection: one ``db_write`` of the control DB and one ``db_read`` of the monitor DB.

python-snap7 3.x is pure Python. Its ``Client.connect`` opens the socket with a 5 s timeout
(``ISOTCPConnection.timeout``) and its ``RecvTimeout`` parameter is stored but not applied to
the socket, so after connecting we set ``client.connection.socket.settimeout(plc_timeout_s)``
ourselves: a PLC that stops answering then fails the request within ``plc_timeout_s`` and the
link is reported lost within 3 cycles. Connecting happens in a ``Reconnector`` thread, so the
loop never blocks on a dead host.

Requests: ``Client.connect`` does the ISO-on-TCP and S7 set-up; the cycle's two requests then
go through the client's own ``protocol`` (PDU builder and parser) and ``connection`` (TPKT/COTP
framing) directly, one job in flight at a time, the reply's PDU reference checked. That skips
the client's per-request layers (operation logging, rate limiter, reconnect wrapper, lock),
~45 us a request measured against the virtual PLC (p50 165 -> 117 us), and the bridge does its
own reconnecting anyway. One job at a time is also what python-snap7 negotiates
(``max_amq_caller = 1``), so the read is not sent before the write's reply: a real PLC may
refuse a second job in flight.

At connect the negotiated PDU is checked against the data blocks: a PLC that accepts a
smaller PDU than the blocks need is refused with an error naming both sizes. Then one read of
the monitor DB is timed with a generous timeout: a PLC that needs more than ``plc_timeout_s`` is
refused with the measured reply time and the fix (raise ``plc_timeout_s``); one that needs more
than half a cycle is served at the rate it allows, with a warning (``slow_warning``) naming the
time and the rate. Failed connects back off up to ``reconnect_max_s``; the back-off is reset only
after the link has worked for ``STABLE_S``, so a PLC that accepts and then fails is not
hammered.

A lost link's socket is aborted (``SO_LINGER`` 0, then close: the kernel drops anything still
queued and sends RST), so a control-DB write sent before the loss can never be delivered after
it by this bridge's TCP stack.

Writes go only to data blocks in ``write_allow_list``: checked here, on every write, in code.

The same link serves the plant link (``plc_bridge.plant_link``: it reads ``plant_out`` and
writes ``plant_in``, with its own allow-list and rate): ``PlcLink(config, read_block=...,
write_block=..., allow_list=..., rate_hz=..., rate_parameter=...)``; the defaults are the
bridge's (monitor read, control write, ``write_allow_list``, ``cycle_hz``).
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import snap7
from snap7.datatypes import S7Area, S7WordLen

from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout, max_payload
from plc_bridge.errors import LinkRefusedError, WriteNotAllowedError
from plc_bridge.reconnect import Backoff, Reconnector

STABLE_S = 1.0   # a link up this long resets the reconnect back-off


def abort_socket(sock: socket.socket | None) -> None:
    """Close with RST: unsent data is discarded, not delivered late (SO_LINGER on, 0 s)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class PlcLink:
    """Connection state, non-blocking reconnect, guarded DB access.

    ``read_block`` / ``write_block``: the blocks of a cycle (checked against the negotiated
    PDU; the read one also times the PLC at connect); ``allow_list``: the only DB numbers
    ``write`` accepts; ``rate_hz``: the cycle rate a slow PLC is judged against, named as
    ``rate_parameter`` in the warning; ``clock``: the owner's monotonic time [s] (the one
    passed to ``poll``). Defaults: the bridge's."""

    def __init__(self, config: BridgeConfig, *, read_block: DbLayout | None = None,
                 write_block: DbLayout | None = None, allow_list: tuple[int, ...] | None = None,
                 rate_hz: float | None = None, rate_parameter: str = "cycle_hz",
                 name: str = "plc", who: str = "the bridge",
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        self._clock = clock
        self.read_block = read_block or config.monitor
        self.write_block = write_block or config.control
        self.rate_hz = float(rate_hz or config.cycle_hz)
        self._rate_parameter = rate_parameter
        self._who = who
        self._allowed = frozenset(config.write_allow_list if allow_list is None else allow_list)
        self.client: snap7.Client | None = None
        self.reconnects = 0
        self.just_connected = False    # True until the first cycle after a (re)connect ran
        self.last_error = ""
        self._ever_connected = False
        self.reply_s: float | None = None       # monitor-DB read time measured at connect
        self.slow_warning = ""                  # set at a connect to a slow PLC (log it once)
        self._warned_rate: float | None = None  # the rate [Hz] the last warning named
        self._connected_since: float | None = None
        self._reconnector: Reconnector[snap7.Client] = Reconnector(
            self._connect, Backoff(config.reconnect_min_s, config.reconnect_max_s,
                                   config.reconnect_jitter), name, clock)

    @property
    def connected(self) -> bool:
        return self.client is not None

    def _connect(self) -> snap7.Client:
        cfg = self.config
        client = snap7.Client()
        try:
            client.connect(cfg.plc_host, cfg.rack, cfg.slot, cfg.plc_port)
            conn = client.connection
            if conn is None or conn.socket is None:
                raise ConnectionError("snap7 connected without a socket")
            self._check_pdu(int(client.pdu_length))
            probe_timeout = max(1.0, 10.0 * cfg.plc_timeout_s)
            conn.timeout = probe_timeout
            conn.socket.settimeout(probe_timeout)
            t0 = self._clock()
            probe = self.read_block
            reply = self._request(client, client.protocol.build_read_request(
                S7Area.DB, probe.db_number, 0, S7WordLen.BYTE, probe.size))
            client.protocol.extract_read_data(reply, S7WordLen.BYTE, probe.size)
            reply_s = self._clock() - t0
            where = f"the PLC at {cfg.plc_host}:{cfg.plc_port}"
            rate, rate_name = self.rate_hz, self._rate_parameter
            if reply_s > cfg.plc_timeout_s:
                raise LinkRefusedError(
                    f"{where} answered a read of DB{probe.db_number} in {reply_s * 1e3:.1f} ms, "
                    f"more than plc_timeout_s = {cfg.plc_timeout_s * 1e3:.0f} ms; raise "
                    f"plc_timeout_s to at least {min(2.0, 2.0 * reply_s):.3g} s (--plc-timeout) "
                    f"and lower {rate_name} to {min(rate, 0.5 / reply_s):.3g} Hz or less, "
                    f"or check the PLC's cycle time and network")
            conn.timeout = cfg.plc_timeout_s
            conn.socket.settimeout(cfg.plc_timeout_s)
            self.reply_s = reply_s
            allows = 1.0 / (2.0 * reply_s) if reply_s > 0 else math.inf
            # said once; again only when a reconnect finds the rate changed by more than 25 %
            if allows < rate and self._warned_rate is not None and \
                    abs(allows - self._warned_rate) <= 0.25 * self._warned_rate:
                return client
            self._warned_rate = allows if allows < rate else None
            self.slow_warning = "" if allows >= rate else (
                f"{where} answers in {reply_s * 1e3:.1f} ms: a cycle (one write, one read) "
                f"takes ~{2 * reply_s * 1e3:.0f} ms, so {self._who} runs "
                f"at ~{allows:.3g} Hz instead of {rate_name} = {rate:g} Hz (each late cycle "
                f"counts as an overrun); set {rate_name} <= {allows:.3g} or speed up the PLC "
                f"link")
        except BaseException:
            abort_socket(client.connection.socket if client.connection else None)
            with contextlib.suppress(Exception):
                client.disconnect()
            raise
        return client

    def _check_pdu(self, pdu: int) -> None:
        model = f"_{self.config.model}"
        for block, direction in ((self.write_block, "write"), (self.read_block, "read")):
            name, size = block.name.removesuffix(model), block.size
            if size > max_payload(pdu, direction):
                raise LinkRefusedError(
                    f"the PLC negotiated a PDU of {pdu} B; the {name} DB ({size} B) needs more "
                    f"(one {direction} carries {max_payload(pdu, direction)} B): shrink the "
                    f"block in plc.yaml or use a CPU with a larger PDU")

    def _request(self, client: snap7.Client, pdu: bytes) -> dict[str, Any]:
        """Send one S7 job and return its parsed reply (the PDU reference must match)."""
        conn = client.connection
        if conn is None:
            raise ConnectionError("snap7 client has no connection")
        conn.send_data(pdu)
        reply = client.protocol.parse_response(conn.receive_data())
        client.protocol.validate_pdu_reference(reply["sequence"])
        return reply

    def poll(self, now_s: float) -> bool:
        """Adopt a finished background connect; start one when due. True when connected."""
        if self.client is not None:
            if self._connected_since is not None and now_s - self._connected_since >= STABLE_S:
                self._connected_since = None
                self._reconnector.healthy()
            return True
        client = self._reconnector.poll(now_s)
        if client is None:
            self.last_error = self._reconnector.last_error or self.last_error or (
                "connecting (no reply yet; python-snap7's connect timeout is 5 s)")
            return False
        self.client = client
        self.just_connected = True
        self._connected_since = now_s
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        return True

    def lost(self, error: BaseException | str) -> None:
        """Drop the connection after a failed request; reconnecting starts at the next poll."""
        self.last_error = str(error)
        if self._connected_since is not None:   # failed soon after connecting
            self._reconnector.flapped(self._clock())
        self._connected_since = None
        client, self.client = self.client, None
        if client is not None:
            conn = client.connection
            abort_socket(conn.socket if conn is not None else None)
            with contextlib.suppress(Exception):  # already broken
                client.disconnect()

    def write(self, db_number: int, data: bytes) -> bool:
        """Write ``data`` at offset 0 of ``db_number``; False (and link lost) on failure."""
        if db_number not in self._allowed:
            raise WriteNotAllowedError(
                f"write to DB{db_number} refused: only {sorted(self._allowed)} are allowed "
                f"(parameter write_allow_list)")
        client = self.client
        if client is None:
            return False
        try:
            reply = self._request(client, client.protocol.build_write_request(
                S7Area.DB, db_number, 0, S7WordLen.BYTE, bytes(data)))
            client.protocol.check_write_response(reply)
        except Exception as e:  # noqa: BLE001 - any S7/socket error means the link is unusable
            self.lost(f"write DB{db_number}: {type(e).__name__}: {e}")
            return False
        return True

    def read(self, db_number: int, size: int) -> bytearray | None:
        client = self.client
        if client is None:
            return None
        try:
            reply = self._request(client, client.protocol.build_read_request(
                S7Area.DB, db_number, 0, S7WordLen.BYTE, size))
            data = bytearray(client.protocol.extract_read_data(reply, S7WordLen.BYTE, size))
        except Exception as e:  # noqa: BLE001
            self.lost(f"read DB{db_number}: {type(e).__name__}: {e}")
            return None
        if len(data) != size:
            self.lost(f"read DB{db_number}: got {len(data)} B, expected {size} B")
            return None
        return data

    def close(self) -> None:
        self.lost("closed")
