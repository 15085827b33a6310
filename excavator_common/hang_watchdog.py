"""A node process that hangs ends, saying where it stood: the hang watchdog.

Why: Fast DDS 3.2 (the ``ros-kilted`` wheels) can deadlock two of a participant's threads, and
a later ``destroy_publisher`` or ``destroy_node`` in that process then waits for them holding
Python's GIL (docs/deployment.md, "A known deadlock in Fast DDS 3.2"). Such a process runs no
Python again: no signal handler, no timer, no thread of its own can notice. On an unattended
rig it would sit there until someone looks; under ``ros2 launch`` or systemd nobody restarts
a process that has not ended.

How: :mod:`faulthandler`'s watchdog is a C thread that needs no GIL. Armed with a deadline, it
prints every thread's Python stack to stderr and ends the process (``_exit(1)``) unless it is
re-armed first. :func:`run_nodes <excavator_common.ros_runtime.run_nodes>` re-arms it from a
steady-clock timer in the node's executor (so a stuck executor trips it as well as a held
GIL) and once more as the clean-up begins (so a clean-up that hangs, the case seen, trips it
too). A required node under ``ros2 launch`` that ends this way ends the launch with exit 1
(or is respawned), and systemd restarts the unit.

Opt-in, by the environment: ``EXCAVATOR_HIL_HANG_TIMEOUT_S`` [s] (unset or 0: off). A process
paused longer than about the timeout (SIGSTOP, a debugger's breakpoint) ends when it goes on:
keep it well above any pause you mean to survive (the chaos soak freezes a node 8 s at most).
The supervisors of this project (the demo, the soak, the tests) set
:data:`SUPERVISED_TIMEOUT_S`; the systemd units take it from ``excavator_hil.env``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import signal
import sys
from collections.abc import Mapping

from excavator_common.errors import ConfigurationError

ENV = "EXCAVATOR_HIL_HANG_TIMEOUT_S"
# [s] the smallest timeout taken: the executor re-arms every timeout / PETS_PER_TIMEOUT, and a
# loaded host delays a timer by up to a second
MIN_TIMEOUT_S = 5.0
PETS_PER_TIMEOUT = 4
# [s] what this project's own supervisors (local_services.ManagedProcess, the tests) give their
# node processes when the environment says nothing: far above the soak's longest freeze (8 s)
# and a loaded host's longest stall seen (~3 s), far below a test's timeout (300 s)
SUPERVISED_TIMEOUT_S = 60.0


def timeout_from_environment(environ: Mapping[str, str] | None = None) -> float | None:
    """The timeout [s] ``EXCAVATOR_HIL_HANG_TIMEOUT_S`` asks for; None when unset, empty or 0
    (off). Anything else that is not a finite number >= :data:`MIN_TIMEOUT_S` is a
    :class:`ConfigurationError` naming the value, the limit and the fix."""
    text = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value == 0.0:
        return None
    if not (math.isfinite(value) and value >= MIN_TIMEOUT_S):
        raise ConfigurationError(
            f"{ENV}={text!r} is not a hang timeout: give a number of seconds >= "
            f"{MIN_TIMEOUT_S:g} (e.g. {SUPERVISED_TIMEOUT_S:g}), or 0 to turn the watchdog off")
    return value


class HangWatchdog:
    """The process's faulthandler deadline (one per process: arming it replaces any other).

    Args:
        timeout_s: how long the process may go without :meth:`pet` [s].
    """

    def __init__(self, timeout_s: float) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0.0):
            raise ValueError(f"timeout_s = {timeout_s!r} must be a finite number > 0")
        self.timeout_s = timeout_s
        self.armed = False

    @property
    def pet_period_s(self) -> float:
        """How often to call :meth:`pet` [s]."""
        return self.timeout_s / PETS_PER_TIMEOUT

    def arm(self) -> bool:
        """Arm the deadline: ``timeout_s`` from now. False when stderr has no file descriptor
        to print to (a captured stream): the watchdog is then off."""
        try:
            faulthandler.dump_traceback_later(self.timeout_s, exit=True, file=sys.stderr)
        except (ValueError, OSError, AttributeError, RuntimeError):
            self.armed = False
            return False
        self.armed = True
        return True

    def pet(self) -> None:
        """Re-arm an armed deadline (a timer's callback)."""
        if self.armed:
            self.arm()

    def stop(self) -> None:
        """Disarm (a clean end)."""
        if self.armed:
            with contextlib.suppress(RuntimeError):
                faulthandler.cancel_dump_traceback_later()
            self.armed = False


def dump_stacks_on_sigterm() -> None:
    """From now on a SIGTERM first prints every thread's Python stack to stderr, then acts as
    before (``chain``: rclpy's handler or the default, the end of the process). For a stop
    under way: a supervisor's SIGTERM then means the stop took too long (``ros2 launch`` sends
    it 15 s after its SIGINT), and the stacks say where it stood, also with the GIL held."""
    with contextlib.suppress(ValueError, OSError, AttributeError, RuntimeError):
        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
