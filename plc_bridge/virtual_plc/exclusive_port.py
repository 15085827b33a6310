"""One S7 server per port: python-snap7's ``Server`` binds with ``SO_REUSEPORT``.

With that option a second server started on a port that one already serves does not fail: the
kernel joins it to the first and hands each new connection to one of them at random, so a
bridge would talk to two PLCs by turns (found in CI: a test's client reached another test's
virtual PLC, which closed it). A real PLC owns its port 102; so does the virtual PLC. The
check is in two steps because the server's own bind cannot be made exclusive:

1. before the server binds, :func:`refuse_taken_port` binds the port once *without*
   ``SO_REUSEPORT``: any listener already there refuses it (``EADDRINUSE``);
2. after, :func:`refuse_shared_port` counts the listening sockets on the port
   (:func:`listeners_on`, Linux's ``/proc/net/tcp``): more than one means another server
   joined in the moment between, and both starts fail with the same message.
"""
from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path

PROC_NET_TCP = Path("/proc/net/tcp")
TCP_LISTEN = "0A"   # the socket state column of /proc/net/tcp


def taken(host: str, port: int) -> OSError:
    """The error of a port another server holds (the CLI prints it with the fix)."""
    return OSError(errno.EADDRINUSE, f"another server already listens on {host}:{port} "
                   f"(python-snap7 servers share a port silently; this one refuses to)")


def refuse_taken_port(host: str, port: int) -> None:
    """Raise ``OSError(EADDRINUSE)`` if anything listens on ``host:port`` (port 0: nothing to
    check, the kernel picks a free port)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: a connection of an earlier run in TIME_WAIT does not hold the port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise taken(host, port) from e
            raise


def refuse_shared_port(host: str, port: int) -> None:
    """Raise ``OSError(EADDRINUSE)`` if another socket listens on ``host:port`` beside this
    process's server (not checked where the kernel does not say: not Linux)."""
    if (listeners_on(host, port) or 0) > 1:
        raise taken(host, port)


def listeners_on(host: str, port: int, table: Path = PROC_NET_TCP) -> int | None:
    """How many IPv4 sockets listen on ``host:port`` in this network namespace (a listener on
    the wildcard address counts for every host; for the wildcard host, every listener on the
    port counts), or None where the kernel does not say (no
    ``/proc/net/tcp``: not Linux)."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return None
    wildcard = socket.inet_aton("0.0.0.0")
    own = socket.inet_aton(socket.gethostbyname(host))
    count = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN:
            continue
        address_hex, port_hex = fields[1].split(":")
        if int(port_hex, 16) != port:
            continue
        # the address column is the network-order word read as a native integer, in hex
        address = int(address_hex, 16).to_bytes(4, sys.byteorder)
        # a wildcard on either side overlaps every address
        if own == address or wildcard in (own, address):
            count += 1
    return count
