"""The S7 connection: one ``db_write`` of the control DB and one ``db_read`` of the monitor DB.

python-snap7 3.x is pure Python. Its ``Client.connect`` opens the socket with a 5 s timeout
(``ISOTCPConnection.timeout``) and its ``RecvTimeout`` parameter is stored but not applied to
the socket, so after connecting we set ``client.connection.socket.settimeout(plc_timeout)``
ourselves: a PLC that stops answering then fails the request within ``plc_timeout`` and the
link is reported lost within 3 cycles. Connecting happens in a ``Reconnector`` thread, so the
loop never blocks on a dead host.

Writes go only to data blocks in ``write_allow_list``: checked here, on every write, in code.
"""

from __future__ import annotations

import contextlib

import snap7

from plc_bridge.config import BridgeConfig
from plc_bridge.reconnect import Backoff, Reconnector


class WriteNotAllowedError(PermissionError):
    """A write to a data block outside the configured allow-list."""


class PlcLink:
    """Connection state, non-blocking reconnect, guarded DB access."""

    def __init__(self, config: BridgeConfig):
        self.config = config
        self._allowed = frozenset(config.write_allow_list)
        self.client: snap7.Client | None = None
        self.reconnects = 0
        self.just_connected = False    # True until the first cycle after a (re)connect ran
        self.last_error = ""
        self._ever_connected = False
        self._reconnector: Reconnector[snap7.Client] = Reconnector(
            self._connect, Backoff(config.reconnect_min, config.reconnect_max,
                                   config.reconnect_jitter), "plc")

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
            conn.timeout = cfg.plc_timeout
            conn.socket.settimeout(cfg.plc_timeout)
        except BaseException:
            client.disconnect()
            raise
        return client

    def poll(self, now_s: float) -> bool:
        """Adopt a finished background connect; start one when due. True when connected."""
        if self.client is not None:
            return True
        client = self._reconnector.poll(now_s)
        if client is None:
            self.last_error = self._reconnector.last_error
            return False
        self.client = client
        self.just_connected = True
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        return True

    def lost(self, error: BaseException | str) -> None:
        """Drop the connection after a failed request; reconnecting starts at the next poll."""
        self.last_error = str(error)
        client, self.client = self.client, None
        if client is not None:
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
            client.db_write(db_number, 0, bytearray(data))
        except Exception as e:  # noqa: BLE001 - any S7/socket error means the link is unusable
            self.lost(f"write DB{db_number}: {type(e).__name__}: {e}")
            return False
        return True

    def read(self, db_number: int, size: int) -> bytearray | None:
        client = self.client
        if client is None:
            return None
        try:
            data = client.db_read(db_number, 0, size)
        except Exception as e:  # noqa: BLE001
            self.lost(f"read DB{db_number}: {type(e).__name__}: {e}")
            return None
        if len(data) != size:
            self.lost(f"read DB{db_number}: got {len(data)} B, expected {size} B")
            return None
        return data

    def close(self) -> None:
        self.lost("closed")
