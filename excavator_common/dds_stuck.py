"""Whether this process's Fast DDS is stuck in its discovery deadlock, read from ``/proc``.

Fast DDS 3.2 (the ``ros-kilted`` wheels) can deadlock a participant: a reception thread removes
a remote writer (its peer deleted it or left) while holding the discovery (PDP) mutex and waits
for the event thread, whose timer callback waits for that mutex (docs/deployment.md, "A known
deadlock in Fast DDS 3.2"). From then on every call that needs the mutex (``destroy_publisher``,
``destroy_node``) blocks for good, and it blocks holding Python's GIL: the whole process stops.

The kernel shows what each thread waits in (``/proc/self/task/<tid>/syscall``): a thread
blocked on a held mutex sits in ``futex(addr, FUTEX_WAIT[_PRIVATE], 2, NULL)`` (glibc's lock
wait), while a Fast DDS thread at rest waits on a condition (``FUTEX_WAIT_BITSET``, the event
thread and the shared-memory listeners) or its socket (``recvfrom``, the UDP receivers). A
Fast DDS thread (named ``dds.*``) found on the same held mutex in every one of a few looks is
stuck; a caller can then leave its participant alone instead of hanging on it, without
calling into Fast DDS to find out.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

DDS_THREAD_PREFIX = "dds."
TASKS = Path("/proc/self/task")
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine())
FUTEX_WAIT = 0
FUTEX_PRIVATE_FLAG = 128
LOCK_CONTENDED = 2      # glibc's lock word while a thread waits for it


def _threads_on_a_lock() -> dict[str, str]:
    """``"<thread name> (tid)"`` -> the mutex's address, for each Fast DDS thread of this
    process now waiting for a held mutex."""
    found: dict[str, str] = {}
    if FUTEX_SYSCALL is None:   # an architecture this does not know: nothing can be told
        return found
    try:
        tasks = os.listdir(TASKS)
    except OSError:             # no /proc (not Linux)
        return found
    for tid in tasks:
        try:
            name = (TASKS / tid / "comm").read_text().strip()
            if not name.startswith(DDS_THREAD_PREFIX):
                continue
            fields = (TASKS / tid / "syscall").read_text().split()
        except OSError:         # the thread ended between the listing and the read
            continue
        # "<nr> <arg1> .. <arg6> <sp> <pc>" while in a system call ("running" or "-1 .." not)
        if len(fields) < 5 or not fields[0].isdigit() or int(fields[0]) != FUTEX_SYSCALL:
            continue
        op, value, timeout = (int(f, 16) for f in fields[2:5])
        if op & ~FUTEX_PRIVATE_FLAG == FUTEX_WAIT and value == LOCK_CONTENDED and timeout == 0:
            found[f"{name} ({tid})"] = fields[1]
    return found


def stuck_dds_threads(samples: int = 11, interval_s: float = 0.1) -> list[str]:
    """The Fast DDS threads of this process found waiting for the same held mutex in each of
    ``samples`` looks ``interval_s`` [s] apart; empty for a healthy process, and where
    ``/proc`` tells nothing. A healthy thread waits for a lock for microseconds, but on a host
    whose cores are all taken the holder may wait its turn for a good fraction of a second:
    the default looks span a second before a thread is called stuck. Returns at the first
    look that finds none, so a healthy process pays one look."""
    if samples < 1 or not interval_s >= 0.0:
        raise ValueError(f"samples {samples} must be >= 1 and interval_s {interval_s} >= 0")
    stuck = _threads_on_a_lock()
    for _ in range(samples - 1):
        if not stuck:
            break
        time.sleep(interval_s)
        again = _threads_on_a_lock()
        stuck = {k: v for k, v in stuck.items() if again.get(k) == v}
    return sorted(stuck)


def left_undestroyed(node_name: str, stuck: list[str]) -> str:
    """What a process says when it leaves node ``node_name`` undestroyed on the ``stuck``
    threads (destroying it would block the process for good, holding the GIL)."""
    return (f"node '{node_name}' left undestroyed: Fast DDS threads {', '.join(stuck)} wait on "
            "a lock for good (the discovery deadlock of Fast DDS 3.2, docs/deployment.md); "
            "destroying it would hang the process")
