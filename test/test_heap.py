"""excavator_common.heap: with glibc's mmap threshold fixed, a large block freed and allocated
again (the dashboard's terrain grid, 0.8 MB a message) is mapped on its own each time, not
carved from the heap; without it, glibc's dynamic threshold moves the second one into the heap
(the growth bench/soak.py's memory check found). Each case runs in a process of its own: the
setting is process-wide."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from excavator_common.heap import map_large_blocks
from excavator_hil.local_services import STARTUP_TIMEOUT_S

PROBE = """
import ctypes, sys
from excavator_common.heap import map_large_blocks


class MallInfo2(ctypes.Structure):   # glibc's struct mallinfo2 (malloc.h)
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert map_large_blocks()
first = bytearray(800_000)
del first                        # freed: glibc's dynamic threshold rises past its size
before = libc.mallinfo2().hblks
second = bytearray(800_000)
print(libc.mallinfo2().hblks - before)
"""


def _mapped_blocks_for_the_second_grid(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=STARTUP_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@pytest.mark.skipif(not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2"),
                    reason="not glibc 2.33+: no mallopt/mallinfo2 to check against")
def test_a_large_block_stays_mapped_after_one_was_freed() -> None:
    assert _mapped_blocks_for_the_second_grid("dynamic") == 0   # glibc's default: in the heap
    assert _mapped_blocks_for_the_second_grid("fixed") == 1


def test_a_threshold_outside_glibcs_range_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"mmap threshold -1 bytes is outside 4096 .. 33554432"):
        map_large_blocks(-1)


TRIM_PROBE = """
import sys
from excavator_common.heap import release_free_pages


def heap_rss_kib() -> int:
    rss, in_heap = 0, False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            in_heap = fields[-1] == "[heap]"
        elif in_heap and fields[0] == "Rss:":
            rss += int(fields[1])
    return rss


blocks = [bytearray(1000) for _ in range(60_000)]   # 60 MB of small blocks: the heap's own
survivor = bytearray(1000)                          # above them: free() alone cannot shrink it
del blocks
before = heap_rss_kib()
released = release_free_pages()
print(before, heap_rss_kib(), released)
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim"),
                    reason="not glibc: no malloc_trim")
def test_freed_small_blocks_under_a_live_one_go_back_to_the_system() -> None:
    # what the demo's operator does before its final picture: the run's freed heap returned
    proc = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True,
                          timeout=STARTUP_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    before_kib, after_kib, released = proc.stdout.split()
    assert released == "True"
    assert int(before_kib) > 50_000, "the probe's blocks did not stay in the heap"
    assert int(after_kib) < int(before_kib) - 40_000
