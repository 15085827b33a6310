"""What the bridge and the plant link need of a PLC connection, whatever carries it.

A ``PlcSession`` is one connected session (an S7 connection, or an OPC UA secure channel and
session): it writes a whole block and reads a whole block, one request in flight, each within
the timeout set last, and raises on any failure (the caller then drops the session and connects
anew). Blocks go in and out as the bytes of their S7 layout (``DbLayout``), whatever the wire
carries, so everything above the transport (the cycle, ``seq``, the watchdog, the first write
after a reconnect being a stop, the status keys, the counters) is the same for both.
``PlcLink`` (``plc_link``) owns a session: reconnection off the caller's thread, the write
allow-list, the reply-time check at connect.
"""

from __future__ import annotations

from typing import Protocol

from plc_bridge.db_layout import DbLayout


class PlcSession(Protocol):
    """One live connection to a PLC; made by a transport's ``open`` (connect and every check
    at connect done), used by one thread, dropped with ``abort``."""

    # what ``PlcLink.last_error`` says while the first connect is under way
    connecting_note: str
    # a warning to log once after the connect (e.g. an unsecured OPC UA channel), or ''
    warning: str

    def set_timeout(self, timeout_s: float) -> None:
        """Each later request fails after ``timeout_s`` [s] without a reply."""

    def write(self, block: DbLayout, data: bytes) -> None:
        """Write the whole ``block`` (``block.size`` bytes of its S7 layout); raises on failure."""

    def read(self, block: DbLayout) -> bytes:
        """Read the whole ``block`` as the bytes of its S7 layout; raises on failure."""

    def abort(self, graceful: bool = False) -> None:
        """Drop the connection at once (nothing queued is delivered later); ``graceful``: end
        the session politely first (a clean stop, within a short bound)."""
