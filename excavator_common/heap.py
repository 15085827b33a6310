"""Large buffers handed back to the system at once (glibc malloc), for long-running processes
that take big messages: the terrain grid (0.8 MB a sample) in the dashboard and sim_node.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mapping and
unmaps it on free. Its *dynamic* threshold then rises to the size of every mapped block freed
(up to 32 MiB): from the second terrain grid on, each one comes from the heap of the thread
that decoded it, among the small objects of the process, and the holes it leaves are not
given back while anything above them lives. The heap then grows by about a grid now and then
(0.8 MiB steps, +8 MiB in two minutes of the soak: bench/soak.py's memory check). A fixed
threshold keeps every block above it mapped (glibc's ``mallopt(M_MMAP_THRESHOLD)``; setting it
turns the dynamic threshold off: mallopt(3)). The cost is a mapping per large block, worth it
for a few per second, not for a loop that allocates large temporaries at a kHz.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

M_MMAP_THRESHOLD = -3   # glibc's malloc.h
LARGE_BLOCK_BYTES = 128 * 1024   # glibc's initial threshold, kept fixed
MAX_THRESHOLD_BYTES = 32 * 1024 * 1024   # glibc's DEFAULT_MMAP_THRESHOLD_MAX (64-bit)

_log = logging.getLogger(__name__)


def map_large_blocks(threshold_bytes: int = LARGE_BLOCK_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``: every block at least this large is
    mapped on its own and returned to the system when freed. False (and nothing changed)
    where the C library is not glibc or refuses the value. ValueError for a threshold outside
    a page .. glibc's 32 MiB cap."""
    if not 4096 <= threshold_bytes <= MAX_THRESHOLD_BYTES:
        raise ValueError(f"mmap threshold {threshold_bytes} bytes is outside 4096 .. "
                         f"{MAX_THRESHOLD_BYTES} (a page .. glibc's cap): use "
                         f"{LARGE_BLOCK_BYTES}, glibc's own start value")
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc (musl has no mallopt): its own policy
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)))
    if not done:
        _log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold_bytes)
    return done
