"""Process set-up for the real-time stack on a small HIL host (issue 12).

What a process of the stack does once its start-up is over, and what the demo (or a launch
file, or a systemd unit) sets from outside:

- :func:`quiet_gc`: every object alive after start-up (imported modules, rclpy, numba, the
  model) is moved out of the collector's reach (``gc.freeze()``) and full collections are made
  rarer. Measured in the demo with the stall probe (``excavator_common.stall_probe``): without
  it, full (generation 2) collections walked every object of the process, 43-70 ms each in
  soil_node (recurring: one per ~100 young collections), 50 ms in the recorder and 123 ms in
  the operator, each holding a CPU of a 2-core host (and the process's GIL) for that long;
  with it, none after start-up. The bridge and the virtual PLC had frozen theirs since
  session 3.
- :func:`short_gil_slices`: a thread that wakes for its deadline (the bridge loop, sim_node's
  executor) waits for the GIL at most this long while another thread of the process (rclpy's
  executor, a visualisation thread) runs Python; CPython's default is 5 ms, half a 100 Hz cycle.
- :func:`nice_threads_at_least`: a higher nice value for the work of the processes that are
  not on a real-time path (the recorder, the demo's operator, the dashboard, the Foxglove
  view), so that under CFS the simulation, soil and bridge processes win the CPU when they
  wake; their Fast DDS threads keep their priority (a shared-memory listener that stands for
  a second is taken for dead). From outside through :data:`NICE_ENV`, which the process
  applies once its participant exists (:func:`apply_background_nice`).
- :func:`pin_to_cpus`: optional CPU affinity (e.g. the bridge and the virtual PLC on one core,
  the simulation and soil on the other).
- :func:`fair_slice`: a short time slice of the kernel's fair scheduler (EEVDF, Linux >= 6.12)
  for the processes on the Redis -> PLC path (bridge, virtual PLC, redis-server): still normal
  scheduling, no privilege needed, but a waking thread of theirs pre-empts a running one at
  once instead of after its slice (1.4 ms on a 2-CPU host). ``python -m excavator_common.realtime
  --fair-slice-ms 0.1 -- COMMAND`` runs a command with it (like ``chrt``). Measured in the demo
  (session 6, normal scheduling, 11 and 8 runs): Redis->PLC above 3 ms in 12 of 521 commands
  with the default slice, 3 of 345 with 0.1 ms (docs/benchmarks.md, session 6).
- :func:`fifo`: ``SCHED_FIFO`` for the calling thread (the bridge loop; at one step less, every
  other Python thread of the bridge process). The GIL does not inherit priority: a real-time
  thread that needs it waits for whichever thread holds it, and if that one is an ordinary
  thread pre-empted by the rest of the stack, the real-time thread waits with it. Measured in
  the demo with ``--rt-priority 20`` (session 5): with only the loop under SCHED_FIFO, its
  cycles ran 13 ms (one of 2,140) and its first cycle started 340 ms late, each time waiting
  for the GIL held by rclpy's executor thread while that thread waited for a CPU.
- :func:`name_thread`: the OS name of the calling thread (``top -H``, ``ps -L``, ``perf sched``,
  ``chrt -p`` show it), e.g. ``plc-bridge-loop``.

Who applies what from outside, with one set of rules (:func:`command_prefixes`): the demo
(``excavator_hil/demo/run.py``), the launch files (``excavator_hil/launch_support.py``, which
first asks :func:`host_support` what this host allows and leaves out the rest, saying why) and
the systemd units of ``deploy/systemd/`` (docs/plc_bridge.md, "HIL host set-up").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from excavator_common.errors import ConfigurationError

# ``EXCAVATOR_HIL_RT_SETUP=off`` turns quiet_gc and short_gil_slices into no-ops in every
# process: the set-up before issue 12, for measuring what they do (bench/system.py --compare).
ENV = "EXCAVATOR_HIL_RT_SETUP"

# ``EXCAVATOR_HIL_NICE=N`` (0..19): the process nices its own threads to at least N once its DDS
# participant exists, all but Fast DDS's (background_nice_from_environment, the background
# group of command_prefixes); unset or 0: unchanged.
NICE_ENV = "EXCAVATOR_HIL_NICE"

# Generation-0 threshold and the multiples for generations 1 and 2 after start-up. Young
# collections stay frequent and short (they only see objects made since the last one); a full
# collection, which walks every object not frozen, happens 10x less often than by default.
GC_THRESHOLDS = (700, 10, 100)
# GIL hand-over interval in processes with a deadline thread [s] (CPython default 0.005).
GIL_SWITCH_INTERVAL_S = 0.0005

_PR_SET_NAME = 15


def enabled() -> bool:
    """False when ``EXCAVATOR_HIL_RT_SETUP`` is ``off`` (the old set-up, for comparison)."""
    return os.environ.get(ENV, "on").lower() != "off"


def quiet_gc(thresholds: tuple[int, int, int] = GC_THRESHOLDS) -> int:
    """After start-up: freeze every object the collector tracks (never scanned again) and set
    the thresholds. Returns the number of objects frozen. No ``gc.collect()`` first: with
    rclpy and numba loaded it takes 100-200 ms on a 2-core host, with the GIL held (the bridge
    loop already runs when its node finishes start-up); the start-up garbage it would free is
    a few hundred kB, frozen once."""
    if not enabled():
        return gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return gc.get_freeze_count()


def short_gil_slices(interval_s: float = GIL_SWITCH_INTERVAL_S) -> None:
    """Let a waiting thread take the GIL after ``interval_s`` instead of 5 ms."""
    if enabled():
        sys.setswitchinterval(interval_s)


# Fast DDS names its threads "dds.<role>" (dds.shm.<port>, dds.udp.<port>, dds.ev.<n>, ...)
DDS_THREAD_PREFIX = "dds."


def nice_threads_at_least(nice: int, spare_prefix: str = DDS_THREAD_PREFIX) -> int:
    """Raise every thread of this process to at least ``nice``, except the threads whose name
    starts with ``spare_prefix`` (Fast DDS's own by default); returns how many were raised.
    Linux only (elsewhere nothing changes, 0).

    Why the DDS threads are spared: Fast DDS's shared-memory port watchdog takes a listener
    that has not moved for ``healthy_check_timeout_ms`` (1 s) for a dead one, and the port it
    then regenerates can leave the listener deaf for good (docs/deployment.md). A niced
    listener on a loaded host can stand that long; the work in a process (the demo's operator,
    its recorder) is niced, its message reception is not."""
    if not sys.platform.startswith("linux"):
        return 0
    raised = 0
    # Sweeps until one raises nothing: a thread not yet niced may start another while a sweep
    # runs (rclpy's EventsExecutor starts its timer thread from its spin thread), and that
    # one inherits the old value; once a sweep finds all niced, every later thread inherits
    # the value from its starter (or is Fast DDS's, started by its own threads).
    for _ in range(10):
        now = 0
        for task in os.listdir("/proc/self/task"):
            tid = int(task)
            with contextlib.suppress(OSError):   # ended meanwhile
                name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
                if spare_prefix and name.startswith(spare_prefix):
                    continue
                if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                    os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
                    now += 1
        raised += now
        if now == 0:
            break
    return raised


def background_nice_from_environment(environ: Mapping[str, str] | None = None) -> int:
    """The nice value :data:`NICE_ENV` asks for (0 when unset or empty). Read at start-up, so
    that a bad value stops the process before it does anything.

    Raises:
        ConfigurationError: the value is no whole number in 0..19.
    """
    raw = (os.environ if environ is None else environ).get(NICE_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise ConfigurationError(
            f"{NICE_ENV}={raw!r} is not a nice value: a whole number 0..19 (the background's "
            "threads, Fast DDS's excepted, at least this nice; 0 or unset: unchanged)")
    return value


def apply_background_nice(nice: int) -> int:
    """Nice this process's threads to at least ``nice`` (0: nothing), Fast DDS's excepted
    (:func:`nice_threads_at_least`): call it once the process's participant exists, before
    its own threads start (they inherit the value of the thread that starts them)."""
    return nice_threads_at_least(nice) if nice > 0 else 0


def thread_nice_at_least(nice: int) -> int:
    """Raise the calling thread's nice value to ``nice`` if it is lower (Linux keeps one per
    thread: a background thread of a process that runs at normal priority, as the demo's
    recorder); returns the thread's value. Elsewhere the process's, with ``os.nice``."""
    if not sys.platform.startswith("linux"):
        current = os.nice(0)
        return os.nice(nice - current) if nice > current else current
    tid = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, tid)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
    return os.getpriority(os.PRIO_PROCESS, tid)


def pin_to_cpus(cpus: Iterable[int]) -> list[int]:
    """Restrict this process (its threads started later inherit it) to ``cpus``; CPUs this
    host does not have are dropped, and with none left nothing changes. Returns the set."""
    available = os.sched_getaffinity(0)
    chosen = {c for c in cpus if c in available}
    if chosen:
        os.sched_setaffinity(0, chosen)
    return sorted(os.sched_getaffinity(0))


def fifo(priority: int) -> None:
    """Put the calling thread under ``SCHED_FIFO`` at ``priority`` (1..99; Linux, needs
    ``CAP_SYS_NICE``). Threads it starts afterwards inherit the policy and priority (glibc's
    default ``PTHREAD_INHERIT_SCHED``). Raises ``OSError`` (no permission) or
    ``AttributeError`` (no ``sched_setscheduler`` on this OS); the caller says what then."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (Linux only: prctl, and the system calls glibc does not wrap)."""
    libc_name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or libc_name is None:
        return None
    return ctypes.CDLL(libc_name, use_errno=True)


def name_thread(name: str) -> None:
    """Set the calling thread's OS name (Linux, at most 15 bytes; elsewhere nothing)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


class _SchedAttr(ctypes.Structure):
    """``struct sched_attr`` (linux/sched/types.h, the 56-byte version of Linux 5.3)."""

    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32),
                ("sched_flags", ctypes.c_uint64), ("sched_nice", ctypes.c_int32),
                ("sched_priority", ctypes.c_uint32), ("sched_runtime", ctypes.c_uint64),
                ("sched_deadline", ctypes.c_uint64), ("sched_period", ctypes.c_uint64),
                ("sched_util_min", ctypes.c_uint32), ("sched_util_max", ctypes.c_uint32)]


# (sched_setattr, sched_getattr) system call numbers; glibc has no wrapper for either
_SCHED_ATTR_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
_FAIR_POLICIES = (os.SCHED_OTHER, getattr(os, "SCHED_BATCH", 3))
FAIR_SLICE_MS_RANGE = (0.1, 100.0)   # what the kernel accepts (it clamps to it) [ms]


def _sched_attr(tid: int) -> tuple[ctypes.CDLL, tuple[int, int], _SchedAttr] | None:
    calls = _SCHED_ATTR_SYSCALLS.get(os.uname().machine)
    libc = _libc()
    if libc is None or calls is None:
        return None
    attr = _SchedAttr()
    if libc.syscall(calls[1], tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return libc, calls, attr


def current_fair_slice(tid: int = 0) -> float | None:
    """The fair-scheduler slice of thread ``tid`` (0: the calling one) [s]; None where the
    system has no ``sched_getattr`` or the thread is not under a fair policy."""
    got = _sched_attr(tid)
    if got is None or got[2].sched_policy not in _FAIR_POLICIES:
        return None
    return float(got[2].sched_runtime) / 1e9


def fair_slice(slice_s: float, tid: int = 0) -> float | None:
    """Ask the kernel's fair scheduler (EEVDF, Linux >= 6.12) for a time slice of ``slice_s``
    for thread ``tid`` (0: the calling one; threads it starts later, and a program it execs,
    inherit it). Returns the slice then in force [s] (the kernel clamps to 0.1-100 ms; an
    older kernel keeps its own), or None where there is no such call or the thread runs under
    a real-time policy (which has no slice to set).

    Still normal scheduling (SCHED_OTHER, the nice value kept), no privilege needed: a task
    with a shorter slice gets an earlier virtual deadline, so when it wakes it pre-empts a task
    with the default slice (``PREEMPT_SHORT``) instead of waiting up to that task's slice
    (0.7 ms x (1 + log2 CPUs): 1.4 ms on 2 CPUs)."""
    got = _sched_attr(tid)
    if got is None:
        return None
    libc, calls, attr = got
    if attr.sched_policy not in _FAIR_POLICIES:
        return None
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags = 0
    attr.sched_runtime = round(slice_s * 1e9)
    if libc.syscall(calls[0], tid, ctypes.byref(attr), 0) != 0:
        return None
    return current_fair_slice(tid)


# --- the set-up of a whole stack, applied from outside (demo, launch files, systemd) ---------
# Process groups: the Redis -> PLC path (the bridge, the virtual PLC), redis-server, the
# simulation (sim_node, soil_node, ik_node, teleop_node, robot_state_publisher) and the
# background (what is only watched or recorded: the recorder, the demo's operator, the
# dashboard, RViz).
GROUPS = ("bridge", "redis", "sim", "background")


# The option of the wrapper (before ``--``) for a COMMAND that takes SIGINT over itself.
HOLD_SIGINT = "--hold-sigint"


@dataclass(frozen=True)
class ProcessSetup:
    """What the processes of a stack are started with (docs/plc_bridge.md, "HIL host set-up").

    ``rt_priority``: SCHED_FIFO priority of the Redis -> PLC path (the bridge loop and the
    virtual PLC set it themselves; redis-server is started under ``chrt -f``), 0 = normal
    scheduling. ``background_nice``: nice value of the background, 0 = unchanged.
    ``bridge_slice_ms``: fair-scheduler slice of the bridge, the virtual PLC and redis-server,
    0 = the kernel's. ``pin_cpus``: the Redis -> PLC path on the last CPU, the simulation on
    the others (hosts with >= 2 CPUs). ``hold_sigint``: the bridge group's commands are the
    package's node executables (:mod:`excavator_hil.node_entry`, as in the launch files), which
    take a Ctrl-C held across the fair-slice prefix's exec (:data:`HOLD_SIGINT`)."""

    rt_priority: int = 0
    background_nice: int = 10
    bridge_slice_ms: float = 0.1
    pin_cpus: bool = False
    hold_sigint: bool = False


def command_prefixes(setup: ProcessSetup, python: str = sys.executable
                     ) -> dict[str, list[str]]:
    """The command prefix of each of :data:`GROUPS` for ``setup`` (a tool missing from this
    host leaves its part out; see :func:`host_support` for what the kernel allows):

    - ``background_nice`` > 0: the background with :data:`NICE_ENV` set: the fair scheduler
      gives the real-time paths the CPU first when both wake. The process nices itself once
      its participant exists, all but Fast DDS's threads (:func:`apply_background_nice`); a
      program that does not read the variable needs ``nice -n`` (:func:`nice_prefix`);
    - ``bridge_slice_ms`` > 0: the bridge, the virtual PLC and redis-server with that
      fair-scheduler slice (``python -m excavator_common.realtime``, :func:`fair_slice`): under
      normal scheduling each wakes on the Redis -> PLC path and pre-empts the simulation;
    - ``rt_priority`` > 0: redis-server under ``chrt -f`` (the bridge loop and the virtual PLC
      set SCHED_FIFO themselves), as the Redis -> PLC path wakes it twice a command;
    - ``pin_cpus`` on a host with >= 2 CPUs: the bridge, the virtual PLC and redis-server on the
      last CPU, the simulation on the others (the background is not pinned).
    """
    layout: dict[str, list[str]] = {g: [] for g in GROUPS}
    if setup.rt_priority > 0 and shutil.which("chrt"):
        layout["redis"] += ["chrt", "-f", str(setup.rt_priority)]
    cpus = sorted(os.sched_getaffinity(0))
    if setup.pin_cpus and len(cpus) >= 2 and shutil.which("taskset"):
        rt_cpu, others = str(cpus[-1]), ",".join(str(c) for c in cpus[:-1])
        layout["bridge"] += ["taskset", "-c", rt_cpu]
        layout["redis"] = ["taskset", "-c", rt_cpu, *layout["redis"]]
        layout["sim"] += ["taskset", "-c", others]
    if setup.background_nice > 0 and shutil.which("env"):
        layout["background"] += ["env", f"{NICE_ENV}={setup.background_nice}"]
    if setup.bridge_slice_ms > 0:
        hold_bridge = [HOLD_SIGINT] if setup.hold_sigint else []
        for group, hold in (("bridge", hold_bridge), ("redis", [])):
            layout[group] += [python, "-m", "excavator_common.realtime", *hold,
                              "--fair-slice-ms", f"{setup.bridge_slice_ms:g}", "--"]
    return layout


def nice_prefix(nice: int) -> list[str]:
    """``nice -n N`` for a program of the background that does not read :data:`NICE_ENV` (RViz):
    every thread of it niced, its DDS threads included. Empty for 0 or without ``nice``."""
    return ["nice", "-n", str(nice)] if nice > 0 and shutil.which("nice") else []


@dataclass(frozen=True)
class HostSupport:
    """What this host lets the stack's processes do; each ``*_why`` says why not (empty when
    it does)."""

    fair_slice: bool
    fair_slice_why: str
    fifo_priority: int            # the SCHED_FIFO priority asked about (0: not asked)
    fifo: bool
    fifo_why: str
    cpus: list[int] = field(default_factory=list)
    pin_why: str = ""


_T = TypeVar("_T")


def _on_throwaway_thread(probe: Callable[[int], _T]) -> _T:
    """``probe(tid)`` run on a thread that ends right after: what it changes (a scheduling
    policy, a slice) dies with the thread, the calling process keeps its own."""
    box: list[_T] = []
    thread = threading.Thread(target=lambda: box.append(probe(threading.get_native_id())),
                              name="rt-probe", daemon=True)
    thread.start()
    thread.join()
    return box[0]


def host_support(rt_priority: int = 0, slice_ms: float = 0.1) -> HostSupport:
    """Ask the kernel, on a throwaway thread, whether it honours a fair-scheduler slice of
    ``slice_ms`` and (``rt_priority`` > 0) lets this user run SCHED_FIFO at ``rt_priority``;
    and whether there are CPUs to pin to. Nothing of this process changes."""
    slice_s = slice_ms / 1e3
    got = _on_throwaway_thread(lambda tid: fair_slice(slice_s, tid))
    fair = got is not None and abs(got - slice_s) < 1e-9
    if fair:
        fair_why = ""
    elif _libc() is None or os.uname().machine not in _SCHED_ATTR_SYSCALLS:
        fair_why = (f"no sched_setattr on this system ({sys.platform}, {os.uname().machine})")
    else:
        fair_why = (f"this kernel ({os.uname().release}) keeps its own fair-scheduler slice "
                    "(Linux >= 6.12 sets one per task)")
    fifo, fifo_why = False, ""
    if rt_priority > 0:
        def try_fifo(tid: int) -> str:
            try:
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(rt_priority))
            except (OSError, AttributeError) as e:
                return str(e) or type(e).__name__
            return ""
        fifo_why = _on_throwaway_thread(try_fifo)
        fifo = not fifo_why
        if not fifo:
            fifo_why = (f"SCHED_FIFO {rt_priority} not permitted here ({fifo_why}): it needs "
                        f"CAP_SYS_NICE or an RLIMIT_RTPRIO of at least {rt_priority} "
                        "(systemd: LimitRTPRIO=; a login: rtprio in /etc/security/limits.conf)")
    cpus = sorted(os.sched_getaffinity(0))
    pin_why = ""
    if len(cpus) < 2:
        pin_why = f"{len(cpus)} CPU here, nothing to separate"
    elif not shutil.which("taskset"):
        pin_why = "no taskset (util-linux) here"
    return HostSupport(fair, fair_why, rt_priority, fifo, fifo_why, cpus, pin_why)


def parse_command(argv: list[str] | None = None) -> tuple[float, list[str]]:
    """``--fair-slice-ms MS -- COMMAND...`` -> (slice [s], COMMAND); a bad one exits 2 with
    argparse's message naming it (also what the systemd units' check parses)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m excavator_common.realtime",
                                     description="Run COMMAND with a fair-scheduler slice.")
    lo, hi = FAIR_SLICE_MS_RANGE
    parser.add_argument("--fair-slice-ms", type=float, required=True, metavar="MS",
                        help=f"time slice {lo:g}..{hi:g} ms (Linux >= 6.12; elsewhere no "
                        "change)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no COMMAND given: put it after --")
    if not lo <= args.fair_slice_ms <= hi:
        parser.error(f"--fair-slice-ms {args.fair_slice_ms:g} is outside {lo:g}..{hi:g} ms "
                     "(the kernel's range)")
    return args.fair_slice_ms / 1e3, command


def main(argv: list[str] | None = None) -> None:
    """``python -m excavator_common.realtime [--hold-sigint] --fair-slice-ms MS -- COMMAND...``:
    exec COMMAND (it keeps this process's scheduling attributes) with the fair-scheduler slice
    MS.

    With ``--hold-sigint`` COMMAND starts with SIGINT blocked: a Ctrl-C between the exec and
    the new program's own SIGINT handling would kill it by the default action (exit -2,
    "process has died" under ros2 launch); blocked, it stays pending across exec until the
    program has its handler in place and unblocks it (the package's node executables do,
    :mod:`excavator_hil.node_entry`). Only for such programs: redis-server would never see it.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})   # first: the window is short
    args = list(sys.argv[1:] if argv is None else argv)
    head = args[:args.index("--")] if "--" in args else args
    hold = HOLD_SIGINT in head
    if hold:
        args.remove(HOLD_SIGINT)
    else:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    slice_s, command = parse_command(args)
    fair_slice(slice_s)
    try:
        os.execvp(command[0], command)
    finally:   # exec failed: this process goes on (and reports it) with SIGINT as it was
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


if __name__ == "__main__":
    main()
