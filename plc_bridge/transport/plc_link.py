"""The PLC link: one write of a block and one read of a block per exchange, over S7 or OPC UA.

``plc_transport`` chooses the session (``s7.S7Session``: PUT/GET; ``opcua.OpcUaSession``: the
CPU's OPC UA server, signed and encrypted); this class is the same for both. Connecting happens
in a ``Reconnector`` thread, so the loop never blocks on a dead host; each request fails after
``plc_timeout_s`` and the link is then reported lost within 3 cycles.

At connect, after the session's own checks (S7: the negotiated PDU against the blocks; OPC UA:
certificate, user, namespace, node ids and types), one read of the read block is timed with a
generous timeout: a PLC that needs more than ``plc_timeout_s`` is refused with the measured
reply time and the fix (raise ``plc_timeout_s``); one that needs more than half a cycle is
served at the rate it allows, with a warning (``slow_warning``) naming the time and the rate.
Failed connects back off up to ``reconnect_max_s``; a connect refused by a check is retried
every 5 s; the back-off is reset only after the link has worked for ``STABLE_S``, so a PLC that
accepts and then fails is not hammered.

A CPU in STOP that says so (an OPC UA server answering a write BadOutOfService,
``PlcStoppedError``) is not a lost link: the write fails, ``cpu_stop`` names it, the session
stays (no reconnect storm against a PLC that answers); the first write taken again clears it.
A CPU in STOP that still takes the bytes (PUT/GET; an S7-1500's OPC UA server, which accepts
the write and does not process it, per Siemens' manual) is found by the bridge from its alive
counter standing still.

A lost link's session is aborted at once (S7: the socket closed with RST), so a control-DB write
sent before the loss can never be delivered after it by this process.

Writes go only to data blocks in ``write_allow_list``: checked here, on every write, in code.

The same link serves the plant link (``plc_bridge.plant_link``: it reads ``plant_out`` and
writes ``plant_in``, with its own allow-list and rate): ``PlcLink(config, read_block=...,
write_block=..., allow_list=..., rate_hz=..., rate_parameter=...)``; the defaults are the
bridge's (monitor read, control write, ``write_allow_list``, ``cycle_hz``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout
from plc_bridge.errors import LinkRefusedError, PlcStoppedError, WriteNotAllowedError
from plc_bridge.reconnect import Backoff, Reconnector
from plc_bridge.transport.base import PlcSession

STABLE_S = 1.0   # a link up this long resets the reconnect back-off
# The PLC's reply time is judged at connect by the fastest of up to this many reads: a PLC too
# slow for plc_timeout_s is slow on every read, while one read held up by the host (a PLC just
# resumed and catching up, a loaded test host) refused the link for REFUSED_RETRY_S; twice in a
# row it kept the soak's drives down 14 s after a 3 s PLC pause (a fresh-clone CI run). The
# same holds for the rate warning: a link too slow for the cycle rate is probed every time, so
# the rate it names is the link's, not one read's on a loaded host (two warnings naming 8.9 and
# 16.2 Hz for one 30 ms link, official CI of b99fa90).
PROBE_READS = 3


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
        self.session: PlcSession | None = None
        self.reconnects = 0
        self.just_connected = False    # True until the first cycle after a (re)connect ran
        self.last_error = ""
        self.cpu_stop = ""        # why the last write was refused by a CPU in STOP, or ''
        self._ever_connected = False
        self.reply_s: float | None = None       # read-block read time measured at connect
        self.slow_warning = ""                  # set at a connect to a slow PLC (log it once)
        self._warned_rate: float | None = None  # the rate [Hz] the last warning named
        self._connected_since: float | None = None
        self._blocks = {b.db_number: b for b in (self.read_block, self.write_block)}
        self._open = self._opener(name)
        self._reconnector: Reconnector[PlcSession] = Reconnector(
            self._connect, Backoff(config.reconnect_min_s, config.reconnect_max_s,
                                   config.reconnect_jitter), name, clock)

    def _opener(self, name: str) -> Callable[[], PlcSession]:
        """The transport's connect, with what it needs checked now (at start-up): OPC UA's
        node ids, key and password file."""
        cfg = self.config
        writes, reads = (self.write_block,), (self.read_block,)
        if cfg.plc_transport == "opcua":
            from plc_bridge.transport.opcua import OpcUaSession

            application = "plant_link" if name.startswith("plant") else "plc_bridge"
            prepared = OpcUaSession.prepare(cfg, writes, reads, application)
            return lambda: OpcUaSession.open(prepared)
        from plc_bridge.transport.s7 import S7Session

        return lambda: S7Session.open(cfg, writes, reads)

    @property
    def connected(self) -> bool:
        return self.session is not None

    @property
    def where(self) -> str:
        cfg = self.config
        if cfg.plc_transport == "opcua":
            return f"the PLC at opc.tcp://{cfg.plc_host}:{cfg.opcua_port}"
        return f"the PLC at {cfg.plc_host}:{cfg.plc_port}"

    def _connect(self) -> PlcSession:
        cfg = self.config
        session = self._open()
        try:
            session.set_timeout(max(1.0, 10.0 * cfg.plc_timeout_s))
            probe = self.read_block
            rate, rate_name = self.rate_hz, self._rate_parameter
            reply_s = allows = math.inf   # a cycle is a write and a read: the rate it allows
            for _ in range(PROBE_READS):
                t0 = self._clock()
                session.read(probe)
                reply_s = min(reply_s, self._clock() - t0)
                allows = 1.0 / (2.0 * reply_s) if reply_s > 0 else math.inf
                if reply_s <= cfg.plc_timeout_s and allows >= rate:
                    break
            where = self.where
            if reply_s > cfg.plc_timeout_s:
                raise LinkRefusedError(
                    f"{where} answered a read of DB{probe.db_number} in {reply_s * 1e3:.1f} ms, "
                    f"more than plc_timeout_s = {cfg.plc_timeout_s * 1e3:.0f} ms; raise "
                    f"plc_timeout_s to at least {min(2.0, 2.0 * reply_s):.3g} s (--plc-timeout) "
                    f"and lower {rate_name} to {min(rate, 0.5 / reply_s):.3g} Hz or less, "
                    f"or check the PLC's cycle time and network")
            session.set_timeout(cfg.plc_timeout_s)
            self.reply_s = reply_s
            # said once; again only when a reconnect finds the rate changed by more than 25 %
            if allows < rate and self._warned_rate is not None and \
                    abs(allows - self._warned_rate) <= 0.25 * self._warned_rate:
                return session
            self._warned_rate = allows if allows < rate else None
            slow = "" if allows >= rate else (
                f"{where} answers in {reply_s * 1e3:.1f} ms: a cycle (one write, one read) "
                f"takes ~{2 * reply_s * 1e3:.0f} ms, so {self._who} runs "
                f"at ~{allows:.3g} Hz instead of {rate_name} = {rate:g} Hz (each late cycle "
                f"counts as an overrun); set {rate_name} <= {allows:.3g} or speed up the PLC "
                f"link")
            self.slow_warning = "; ".join(w for w in (session.warning, slow) if w)
        except BaseException:
            session.abort()
            raise
        return session

    def poll(self, now_s: float) -> bool:
        """Adopt a finished background connect; start one when due. True when connected."""
        if self.session is not None:
            if self._connected_since is not None and now_s - self._connected_since >= STABLE_S:
                self._connected_since = None
                self._reconnector.healthy()
            return True
        session = self._reconnector.poll(now_s)
        if session is None:
            note = ("connecting (no reply yet; python-snap7's connect timeout is 5 s)"
                    if self.config.plc_transport == "s7" else
                    "connecting (OPC UA: secure channel, session, nodes; no reply yet)")
            self.last_error = self._reconnector.last_error or self.last_error or note
            return False
        self.session = session
        self.just_connected = True
        self._connected_since = now_s
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        return True

    def lost(self, error: BaseException | str, *, graceful: bool = False) -> None:
        """Drop the connection after a failed request; reconnecting starts at the next poll."""
        self.last_error = str(error)
        self.cpu_stop = ""
        if self._connected_since is not None:   # failed soon after connecting
            self._reconnector.flapped(self._clock())
        self._connected_since = None
        session, self.session = self.session, None
        if session is not None:
            session.abort(graceful)

    def _block(self, db_number: int, size: int | None = None) -> DbLayout:
        block = self._blocks.get(db_number)
        if block is None or (size is not None and size != block.size):
            known = ", ".join(f"DB{b.db_number} ({b.size} B)" for b in self._blocks.values())
            raise ValueError(f"DB{db_number} ({size} B) is not a block of this link: {known}")
        return block

    def write(self, db_number: int, data: bytes) -> bool:
        """Write ``data`` (the whole block) to ``db_number``; False (and link lost) on failure."""
        if db_number not in self._allowed:
            raise WriteNotAllowedError(
                f"write to DB{db_number} refused: only {sorted(self._allowed)} are allowed "
                f"(parameter write_allow_list)")
        session = self.session
        if session is None:
            return False
        block = self._block(db_number, len(data))
        try:
            session.write(block, bytes(data))
        except PlcStoppedError as e:   # the PLC answered: the session is sound
            self.cpu_stop = self.last_error = f"write DB{db_number}: {e}"
            return False
        except Exception as e:  # noqa: BLE001 - any transport error means the link is unusable
            self.lost(f"write DB{db_number}: {type(e).__name__}: {e}")
            return False
        self.cpu_stop = ""
        return True

    def read(self, db_number: int, size: int) -> bytearray | None:
        session = self.session
        if session is None:
            return None
        block = self._block(db_number, size)
        try:
            data = bytearray(session.read(block))
        except Exception as e:  # noqa: BLE001
            self.lost(f"read DB{db_number}: {type(e).__name__}: {e}")
            return None
        if len(data) != size:
            self.lost(f"read DB{db_number}: got {len(data)} B, expected {size} B")
            return None
        return data

    def close(self) -> None:
        """End the session (OPC UA: CloseSession, so the PLC frees it at once)."""
        self.lost("closed", graceful=True)
