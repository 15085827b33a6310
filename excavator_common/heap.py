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

:func:`release_free_pages` is for a process that changes phase: the demo's operator, whose heap
the run has grown, before its final plots and picture (issue 32: the demo's end is the peak of
its memory).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

M_MMAP_THRESHOLD = -3   # glibc's malloc.h
LARGE_BLOCK_BYTES = 128 * 1024   # glibc's initial threshold, kept fixed
MAX_THRESHOLD_BYTES = 32 * 1024 * 1024   # glibc's DEFAULT_MMAP_THRESHOLD_MAX (64-bit)

_log = logging.getLogger(__name__)


def _libc_function(name: str) -> Any:
    """``name`` of the C library, or None where it has none (musl has neither mallopt nor
    malloc_trim: it keeps its own policy)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name, None)
    except OSError:
        return None


def map_large_blocks(threshold_bytes: int = LARGE_BLOCK_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``: every block at least this large is
    mapped on its own and returned to the system when freed. False (and nothing changed)
    where the C library is not glibc or refuses the value. ValueError for a threshold outside
    a page .. glibc's 32 MiB cap."""
    if not 4096 <= threshold_bytes <= MAX_THRESHOLD_BYTES:
        raise ValueError(f"mmap threshold {threshold_bytes} bytes is outside 4096 .. "
                         f"{MAX_THRESHOLD_BYTES} (a page .. glibc's cap): use "
                         f"{LARGE_BLOCK_BYTES}, glibc's own start value")
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)))
    if not done:
        _log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold_bytes)
    return done


def release_free_pages() -> bool:
    """Collect the garbage, then hand every free page of the heap back to the system (glibc's
    ``malloc_trim(0)``, which since glibc 2.8 releases free pages inside the heap too, not only
    at its top: malloc_trim(3)). glibc keeps a heap's freed memory for the next allocations
    while anything above it lives, so a process that built and dropped many objects (a run's
    messages) holds that memory until it ends. False where the C library is not glibc or had
    nothing to release."""
    import gc

    gc.collect()
    trim = _libc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return bool(trim(0))
