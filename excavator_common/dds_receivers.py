"""Whether this process's Fast DDS is stuck in its discovery deadlock, read from ``/proc``.

Fast DDS 3.2 (the ``ros-kilted`` wheels) can deadlock a participant: a reception thread removes
a remote writer (its peer deleted it or left) while holding the discovery (PDP) mutex and waits
for the event thread, which waits for that mutex (docs/deployment.md, "A known deadlock in Fast
DDS 3.2"). From then on every call that needs the mutex (``destroy_publisher``,
``destroy_node``) blocks for good, and it blocks holding Python's GIL: the whole process stops.

A healthy UDP reception thread (named ``dds.udp.<port>``) waits for datagrams in the kernel's
socket wait; a stuck one waits on a futex. Every participant hears every other's announcement
on the multicast port at least every announcement period (3 s by default), so a participant
whose mutex is held for good has its multicast reception thread on that futex within a period.
Sampling the threads' kernel wait channel (``/proc/self/task/<tid>/wchan``) a few times tells
the two apart without calling into Fast DDS, so a caller can leave a stuck participant alone
instead of hanging on it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RECEIVER_PREFIX = "dds.udp."
TASKS = Path("/proc/self/task")


def _receivers_on_a_lock() -> set[str]:
    """``"<thread name> (tid)"`` of each Fast DDS UDP reception thread now waiting on a futex."""
    found: set[str] = set()
    try:
        tasks = os.listdir(TASKS)
    except OSError:           # no /proc (not Linux): nothing can be told
        return found
    for tid in tasks:
        try:
            name = (TASKS / tid / "comm").read_text().strip()
            if not name.startswith(RECEIVER_PREFIX):
                continue
            wchan = (TASKS / tid / "wchan").read_text().strip()
        except OSError:       # the thread ended between the listing and the read
            continue
        if "futex" in wchan:
            found.add(f"{name} ({tid})")
    return found


def stalled_receivers(samples: int = 4, interval_s: float = 0.05) -> list[str]:
    """The Fast DDS UDP reception threads of this process that waited on a lock in each of
    ``samples`` looks ``interval_s`` [s] apart (a healthy one takes a lock for microseconds);
    empty for a healthy process, and where ``/proc`` tells nothing. Returns at the first look
    that finds none, so a healthy process pays one look."""
    if samples < 1 or not interval_s >= 0.0:
        raise ValueError(f"samples {samples} must be >= 1 and interval_s {interval_s} >= 0")
    stuck = _receivers_on_a_lock()
    for _ in range(samples - 1):
        if not stuck:
            break
        time.sleep(interval_s)
        stuck &= _receivers_on_a_lock()
    return sorted(stuck)
