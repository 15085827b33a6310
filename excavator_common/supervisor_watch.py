"""A supervised process ends with its supervisor, however the supervisor ended.

A supervisor (the demo, the soak, a bench, the tests: ``excavator_hil.local_services``'
``ManagedProcess``) names itself in each child's environment: ``EXCAVATOR_HIL_SUPERVISOR_PID``.
A child that calls :func:`end_with_supervisor` as it starts (every node through ``run_node``,
the virtual PLC, the recorder, the CLI's commands) sends itself SIGTERM when that process ends,
and SIGKILL :data:`GRACE_S` later if it is still there.

Why: a supervisor that is killed (SIGKILL from a test's timeout, the out-of-memory killer,
``kill -9``) runs no cleanup, and its children live on as orphans: nodes still publishing on
the ROS domain, a virtual PLC holding its port, a bridge still writing to Redis. One run of the
suite lost 35 tests that way to a killed demo's sim_node. SIGTERM is a clean end for a node
(rclpy shuts its context down, the node's own cleanup runs: a bag is closed).

The watch blocks on a pidfd (Linux 5.3+, ``os.pidfd_open``): no polling, no wake-ups. Without
the variable (a node run by ``ros2 launch`` or by hand) nothing is started.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

ENV = "EXCAVATOR_HIL_SUPERVISOR_PID"
# [s] from the SIGTERM to the SIGKILL of a process that did not end: a node's clean shutdown
# takes ~0.5-1 s; a loaded host's several
GRACE_S = 10.0

_watching = threading.Event()


def supervised_environment(pid: int | None = None) -> dict[str, str]:
    """The variable a supervisor puts in a child's environment (``pid``: default this one)."""
    return {ENV: str(os.getpid() if pid is None else pid)}


def end_with_supervisor() -> bool:
    """Watch the supervisor named in the environment (and take the variable out of it: the
    processes this one starts are its own to supervise). Returns whether a supervisor is
    watched. A supervisor already gone ends this process at once (SIGTERM). Idempotent."""
    text = os.environ.pop(ENV, None)
    if _watching.is_set():
        return True
    if text is None:
        return False
    try:
        pid = int(text)
        if pid <= 1:
            raise ValueError
    except ValueError:
        print(f"{ENV}={text!r} is not a process id (an integer > 1): this process does not end "
              "with its supervisor; unset it or give the supervisor's pid", file=sys.stderr)
        return False
    _watching.set()
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        fd = None       # gone before this process could watch it
    except OSError as e:  # no pidfd (Linux before 5.3, a seccomp filter): poll its /proc entry
        print(f"{ENV}: pidfd_open({pid}) failed ({e}): watching /proc/{pid} once a second",
              file=sys.stderr)
        fd = -1
    if fd is None:
        _end(pid)
    else:
        threading.Thread(target=_watch, args=(pid, fd), daemon=True,
                         name="supervisor-watch").start()
    return True


def _watch(pid: int, fd: int) -> None:
    if fd >= 0:
        poller = select.poll()
        poller.register(fd, select.POLLIN)   # readable once the process has ended
        while not poller.poll():
            pass
        os.close(fd)
    else:
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(1.0)
    _end(pid)


def _end(pid: int) -> None:
    print(f"[excavator_hil] supervisor (pid {pid}) ended: ending this process (pid "
          f"{os.getpid()}) with it", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

    def last_resort() -> None:
        time.sleep(GRACE_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=last_resort, daemon=True, name="supervisor-gone").start()
