"""Errors of ``plc_bridge``: one root, :class:`BridgeError`; every message names the value, the
limit and the fix.

The subclasses also derive from the built-in exception of their kind (ValueError,
PermissionError, ConnectionRefusedError) so generic handlers keep working. Errors of
``excavator_kinematics`` met inside the bridge (vehicle geometry, number formatting) are
re-raised as bridge errors with the original as ``__cause__``; a bridge configuration error is
not a kinematics error.
"""

from __future__ import annotations

from excavator_common.errors import ConfigurationError


class BridgeError(Exception):
    """Root of the bridge's errors."""


class BridgeConfigError(BridgeError, ConfigurationError):
    """A missing, malformed or out-of-range bridge parameter, layout or file."""


class LayoutError(BridgeError, ValueError):
    """A malformed field declaration, a value that does not fit its field, or a block too big
    (configuration reads it as a BridgeConfigError)."""


class InputRejectedError(BridgeError, ValueError):
    """A control value that must not be forwarded; the message names key, value and limit."""


class WriteNotAllowedError(BridgeError, PermissionError):
    """A write to a data block outside the configured allow-list."""


class LinkRefusedError(BridgeError, ConnectionRefusedError):
    """The peer answered but does not fit the configuration (PDU too small, too slow): retrying
    soon cannot help, so the next attempt waits ``reconnect.REFUSED_RETRY_S``."""


class PlcStoppedError(BridgeError, ConnectionError):
    """The PLC answered, but its CPU is in STOP (OPC UA: a write answered BadOutOfService):
    the session is sound and stays; nothing is taken until the CPU is back in RUN."""
