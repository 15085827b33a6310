"""The offset between the wall clock and the monotonic clock of this host.

Records stamped on ``time.monotonic`` (the virtual PLC's logs, the bridge's) and on the wall
clock (Redis's ``TIME``, DDS source timestamps) are compared through it. The soak's observer
uses it too: reading two clocks is no part of the stack it checks.
"""

from __future__ import annotations

import time


def realtime_minus_monotonic() -> float:
    """CLOCK_REALTIME - CLOCK_MONOTONIC [s], the reading bracketed most tightly of five, so a
    pre-emption between two clock reads (a niced writer) does not shift it."""
    best = (float("inf"), 0.0)
    for _ in range(5):
        m0 = time.monotonic()
        wall = time.time()
        m1 = time.monotonic()
        best = min(best, (m1 - m0, wall - 0.5 * (m0 + m1)))
    return best[1]
