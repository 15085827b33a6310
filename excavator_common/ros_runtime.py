"""What every node of the package shares: running it, declaring parameters, diagnostics.

rclpy only: the pure cores never import this module.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import rclpy
import rclpy.task
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.clock import Clock
from rclpy.clock_type import ClockType
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy_impl
from rclpy.node import Node
from rclpy.timer import Timer

from excavator_common import hang_watchdog, realtime, stall_probe, supervisor_watch
from excavator_common.dds_profile import use_project_profile
from excavator_common.dds_stuck import left_undestroyed, stuck_dds_threads
from excavator_common.errors import ConfigurationError, ParameterError
from excavator_common.hang_watchdog import HangWatchdog, timeout_from_environment
from excavator_common.node_args import NodeUsage, check_command_line
from excavator_common.parameter_files import check_ros_arguments
from excavator_common.process_exit import exit_without_teardown

# History depth of the publishers of the streams a bag records at 100 Hz (joint_states,
# bucket_pose, soil/wrench, soil/bucket_load): a reliable writer keeps only this many samples
# for a reader that fell behind. The recorder runs at nice 10 beside the real-time paths; on a
# busy host it was held up 0.28 s and lost 27 soil wrenches of a depth-10 history (the chaos
# soak). 100 covered a second, and the soak beside a second test process (pytest-xdist) still
# lost runs of 0.2-0.6 s of joint_states outside any fault: 500 covers 5 s. A reader that
# keeps up sees no difference; one that falls behind costs the writer at most 500 samples.
RECORDED_STREAM_DEPTH = 500

_RCLError = _rclpy_impl.RCLError

N = TypeVar("N", bound=Node)

OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR


# Set to 1 to see the traceback of an unexpected start-up error (a bug, not a bad setting).
TRACEBACK_ENV = "EXCAVATOR_HIL_TRACEBACK"


def fatal(message: str) -> int:
    """Print one ``[FATAL] ...`` line on stderr; returns the start-up error exit code, 2."""
    print(f"[FATAL] {message}", file=sys.stderr, flush=True)
    return 2


def clean_rcl_message(exc: BaseException) -> str:
    """rcl's error text without the C source locations (``, at /src/rcl/arguments.c:415``)."""
    text = re.sub(r",? at [^,]*?\.(?:c|cpp|hpp|h):\d+", "", str(exc))
    return " ".join(text.split())


def run_node(factory: Callable[[], N], args: Sequence[str] | None = None,
             cleanup: Callable[[N], None] | None = None, usage: NodeUsage | None = None) -> int:
    """Init rclpy, build the node, spin until shutdown, clean up; returns the exit code.

    First the command line (``args``, default ``sys.argv``, program name included) is checked
    against ``usage`` (:mod:`excavator_common.node_args`): ``--help`` prints it and returns 0,
    an argument outside ``--ros-args ... [--]`` returns 2 naming it, both before ROS starts.
    Then :func:`run_nodes` with this one node.
    """
    argv = list(sys.argv if args is None else args)
    usage = usage or NodeUsage(os.path.basename(argv[0]) if argv else "node",
                               "a ROS 2 node of excavator_hil")
    done = check_command_line(usage, argv)
    if done is not None:
        return done
    part: NodePart[N] = NodePart(factory, cleanup)
    return run_nodes([part], None if args is None else list(args), [argv])


@dataclass(frozen=True)
class NodePart(Generic[N]):
    """One node of a process (:func:`run_nodes`): its constructor (options bound: a composed
    node's own ``cli_args``) and what to do before it is destroyed."""

    factory: Callable[[], N]
    cleanup: Callable[[N], None] | None = None


def run_nodes(parts: Sequence[NodePart[Any]], args: Sequence[str] | None = None,
              checked: Sequence[Sequence[str]] = ()) -> int:
    """Init rclpy (``args``: its global arguments, default ``sys.argv``), build each node of
    ``parts`` in order, spin them all in one executor until shutdown, clean up in reverse
    order; returns the exit code. ``checked``: the ROS argument lists to check first (each
    node's own and the process's, :func:`check_ros_arguments`).

    ``ros2 launch`` sends SIGINT twice on Ctrl-C: SIGINT is ignored while cleaning up so the
    second one cannot interrupt it. Every start-up error ends in one ``[FATAL]`` line and exit
    code 2, never a traceback: a ``--params-file`` that is missing, not YAML or not shaped as
    a parameter file (checked before rcl sees it), other ROS arguments rcl rejects, a
    parameter of the wrong type or out of range (``use_sim_time:=maybe`` included), and any
    configuration error of any package (a :class:`ConfigurationError`: the kinematics'
    ``ConfigError``, ``SimConfigError``, ``SoilConfigError``, ``BridgeConfigError``...); set
    ``EXCAVATOR_HIL_TRACEBACK=1`` for the traceback of an unexpected one. A node whose
    factory raised ends the process there with that code (no rclpy teardown of a half-built
    node: ``excavator_common.process_exit``).
    """
    supervisor_watch.end_with_supervisor()   # a node started by a supervisor ends with it
    # The first SIGINT interrupts (KeyboardInterrupt) and ignores every later one at once, so
    # the second of ros2 launch's pair cannot land in the cleanup (rclpy's handler chains here).
    signal.signal(signal.SIGINT, _interrupt_once)
    sys.unraisablehook = _quiet_interrupt_hook(sys.unraisablehook)
    stall_probe.start_from_environment(os.path.splitext(os.path.basename(sys.argv[0]))[0])
    try:
        for ros_args in checked:
            check_ros_arguments(ros_args)
        hang_timeout_s = timeout_from_environment()
        background_nice = realtime.background_nice_from_environment()
        use_project_profile()   # before the first participant: Fast DDS reads it then
        rclpy.init(args=None if args is None else list(args))
    except KeyboardInterrupt:   # Ctrl-C before the node exists: nothing to clean up
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        rclpy.try_shutdown()
        return 0
    except ConfigurationError as exc:
        return fatal(f"invalid configuration: {exc}")
    except _RCLError as exc:
        return fatal(f"invalid ROS arguments: {clean_rcl_message(exc)}; see "
                     "'ros2 run --help' and docs/configuration.md")
    built: list[tuple[Node, NodePart[Any]]] = []
    watchdog = HangWatchdog(hang_timeout_s) if hang_timeout_s is not None else None
    code = 0
    try:
        for part in parts:
            try:
                built.append((part.factory(), part))
            except (KeyboardInterrupt, ExternalShutdownException):
                raise
            except Exception as exc:  # noqa: BLE001 - a start-up error is one line, never a traceback
                # A Ctrl-C while the node was built shuts rclpy's context down under it ("the
                # given context is not valid"): an interrupted start, not a failed one.
                code = 0 if _INTERRUPTED.is_set() else _startup_failure(exc)
                if code != 0:
                    # A node that failed to start ends here, without rclpy's teardown:
                    # destroying the half-built node (the context still tracks it) died of
                    # SIGSEGV in destroy_node once (a fresh-clone CI run), turning exit 2
                    # into -11
                    join_rclpy_signal_thread()
                    exit_without_teardown(code)
                break
        # a Ctrl-C that landed where Python cannot raise it (a finalizer or a weakref callback
        # of an import: _quiet_interrupt_hook) interrupted the start all the same
        if len(built) == len(parts) and not _INTERRUPTED.is_set():
            code = _check_use_sim_time([node for node, _ in built])
            if code == 0:
                # start-up is over: its objects frozen out of the collector's way, and a thread
                # waking for a deadline waits for the GIL 0.5 ms at most (realtime.py)
                realtime.quiet_gc()
                realtime.short_gil_slices()
                # the background's work niced, its DDS reception not (the participant exists)
                realtime.apply_background_nice(background_nice)
                executor = _Executor()
                try:
                    for node, _ in built:
                        executor.add_node(node)
                    if watchdog is not None:
                        _arm(watchdog, built[0][0])
                    executor.spin()
                finally:
                    join_rclpy_signal_thread()
                    executor.shutdown()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok() and not _INTERRUPTED.is_set():
            raise
        # Ctrl-C shut the context down while a callback ran (its publish failed), or landed
        # inside rclpy's C++ while it converted an argument (pybind11 turns the
        # KeyboardInterrupt into "RuntimeError: Unable to convert call argument"; seen in a
        # fresh-clone CI run): an interrupted node, not an error.
    finally:
        hang_watchdog.dump_stacks_on_sigterm()   # a stop that takes too long says where it is
        if watchdog is not None:
            watchdog.pet()   # the clean-up gets a whole timeout: a hang in it ends the process
        for node, part in reversed(built):
            _clean_up_quietly(node, _bound(part.cleanup, node))
        rclpy.try_shutdown()
        if watchdog is not None:
            watchdog.stop()
    return code


# --- timers ---------------------------------------------------------------------------------
# A timer on a node's ROS clock runs, outside simulated time, on the system clock: a step of it
# back (NTP correcting a clock that ran ahead, a wrong RTC set right) stalls the timer for as
# long as the step (an hour's step: an hour without diagnostics, heartbeats or control ticks,
# the PLC's watchdog stopping the machine and nothing saying why), and a step forward (a VM
# resumed from a snapshot) fires it at once. rcl sees no such step; only simulated time's jumps.

def steady_timer(node: Node, period_s: float, callback: Callable[[], Any],
                 **kwargs: Any) -> Timer:
    """A timer of ``node`` on the steady clock: for work paced in wall time (diagnostics,
    heartbeats, a device's cycle, a look at the graph), which a step of the system clock must
    neither stall nor hurry. ``kwargs``: ``create_timer``'s (``callback_group``, ...)."""
    return node.create_timer(period_s, callback, clock=Clock(clock_type=ClockType.STEADY_TIME),
                             **kwargs)


def pacing_timer(node: Node, period_s: float, callback: Callable[[], Any],
                 **kwargs: Any) -> Timer:
    """A timer paced by the simulated time under ``use_sim_time`` (the node's ROS clock, on
    ``/clock``), else by the steady clock (:func:`steady_timer`): a control loop that keeps
    step with the simulation where there is one."""
    if node.get_parameter("use_sim_time").value:
        return node.create_timer(period_s, callback, **kwargs)
    return steady_timer(node, period_s, callback, **kwargs)


def _arm(watchdog: HangWatchdog, node: Node) -> None:
    """Arm the hang watchdog and re-arm it from a steady-clock timer of ``node`` (spun by the
    process's executor: a stuck executor stops the re-arming as a held GIL does)."""
    if not watchdog.arm():
        node.get_logger().warning(
            f"the hang watchdog is off: stderr has no file descriptor to print the stacks to "
            f"({hang_watchdog.ENV}={watchdog.timeout_s:g} s asked for)")
        return
    steady_timer(node, watchdog.pet_period_s, watchdog.pet)
    node.get_logger().info(
        f"hang watchdog on: this process prints its threads' stacks and ends (exit 1) when "
        f"its executor stands {watchdog.timeout_s:g} s ({hang_watchdog.ENV})")


def _bound(cleanup: Callable[[N], None] | None, node: N) -> Callable[[], None] | None:
    return None if cleanup is None else (lambda: cleanup(node))


def _check_use_sim_time(nodes: Sequence[Node]) -> int:
    """rclpy only logs a use_sim_time of the wrong type (and a node that declares its overrides
    automatically keeps it): a start-up error like any other parameter's. 0 if all are bools."""
    for node in nodes:
        use_sim_time = node.get_parameter("use_sim_time").value
        if not isinstance(use_sim_time, bool):
            return fatal(f"invalid configuration: parameter {node.get_name()}.use_sim_time "
                         f"= {use_sim_time!r} must be true or false")
    return 0


_INTERRUPTED = threading.Event()   # set by the first SIGINT
# A KeyboardInterrupt can land while rclpy's executor builds a Task, before Future.__init__ set
# its fields: the half-built object's __del__ then printed "Exception ignored ... 'Task' object
# has no attribute '_exception'" at exit (seen in CI under ros2 launch's Ctrl-C). Class-level
# defaults (what __init__ sets first) make that __del__ a no-op; every built Future sets its own.
# Raising stays: with rclpy's handler alone (no KeyboardInterrupt while spinning) plc_bridge on
# a loaded host did not end on SIGINT within 30 s in 3 of 6 runs (test_systemd_units).
rclpy.task.Future._exception = None
rclpy.task.Future._exception_fetched = False


def _startup_failure(exc: Exception) -> int:
    """The ``[FATAL]`` line of an exception raised while the node was built; returns 2."""
    if isinstance(exc, ConfigurationError):
        return fatal(f"invalid configuration: {exc}")
    if isinstance(exc, ParameterException):
        return fatal(f"invalid configuration: {exc}; give each parameter a value of its "
                     "type (bools: true or false) within its range")
    if isinstance(exc, _RCLError):
        return fatal(f"start-up failed: {clean_rcl_message(exc)}")
    if os.environ.get(TRACEBACK_ENV) == "1":
        traceback.print_exception(exc)
    return fatal(f"start-up failed: {type(exc).__name__}: {exc} (set "
                 f"{TRACEBACK_ENV}=1 for the traceback)")


class _Executor(SingleThreadedExecutor):
    """rclpy's single-threaded executor, safe to half-build. A Ctrl-C that lands while it is
    built makes rclpy's signal handler shut the context down; the constructor then fails
    (RCLError, "the given context is not valid") before it set ``_sigint_gc``, and the
    half-built object's ``__del__`` printed "Exception ignored ... no attribute '_sigint_gc'"
    (seen once in CI). The class default makes that ``__del__`` a no-op."""

    _sigint_gc = None


def _interrupt_once(signum: int, frame: object) -> None:
    _INTERRUPTED.set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _quiet_interrupt_hook(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """``sys.unraisablehook`` that keeps quiet about the first SIGINT's KeyboardInterrupt.

    Python runs a signal handler between any two bytecodes of the main thread, also inside a
    finalizer or a weakref callback (importlib's module locks have one), where an exception
    cannot propagate: Python prints it as "Exception ignored in ... Traceback ...
    KeyboardInterrupt" and goes on (a fresh-clone CI run, sim_node interrupted while it
    imported). The interrupt is not lost (``_INTERRUPTED`` is set, and run_node does not spin a
    node built after it); only the message is dropped. Everything else goes to ``previous``."""
    def hook(unraisable: Any) -> object:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _INTERRUPTED.is_set():
            return None
        return previous(unraisable)
    return hook


def join_rclpy_signal_thread() -> None:
    """Ignore SIGINT from now on and end rclpy's signal thread, waiting for it.

    On SIGINT rclpy's handler wakes a C++ thread of its own, which triggers every executor's
    SIGINT guard condition from a list. On a loaded host that thread can run only after the
    main thread, interrupted by the same SIGINT, has shut its executor down: it then reads the
    freed list and triggers a destroyed guard condition, and the process dies of SIGSEGV
    (exit code -11) at Ctrl-C, in a thread that is not Python's (sim_node in CI, about 1 stop
    in 100 on a loaded host, faulthandler showing the main thread in ``destroy_node``).
    Uninstalling rclpy's handlers joins that thread; only then may the executor go."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rclpy.signals import uninstall_signal_handlers

    uninstall_signal_handlers()


def shutdown_quietly(node: Node | None, cleanup: Callable[[], None] | None = None) -> None:
    """Ignore further SIGINTs (``ros2 launch`` sends two), run ``cleanup``, destroy the node and
    shut rclpy down."""
    _clean_up_quietly(node, cleanup)
    rclpy.try_shutdown()


def _clean_up_quietly(node: Node | None, cleanup: Callable[[], None] | None) -> None:
    """Ignore further SIGINTs, run ``cleanup`` (one failing after a Ctrl-C is only warned
    about), destroy the node."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if node is not None:
        if cleanup is not None:
            try:
                cleanup()
            except Exception as exc:
                if not _INTERRUPTED.is_set():
                    raise
                # a Ctrl-C landed in the middle of a start-up step (a thread being started, a
                # connection being made): what it half built is left to the process's end
                print(f"[WARN] cleanup after Ctrl-C: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)
        stuck = stuck_dds_threads()
        if stuck:
            # destroying it would block for good, holding the GIL: the process ends without
            # (its callers end by os._exit), now rather than at the hang watchdog's deadline
            print(f"[WARN] {left_undestroyed(node.get_name(), stuck)}", file=sys.stderr, flush=True)
            return
        node.destroy_node()


def declare(node: Node, name: str, default: Any, description: str, *,
            low: float | None = None, high: float | None = None, unit: str = "",
            error: type[ConfigurationError] = ParameterError) -> Any:
    """Declare a parameter with a description and (for numbers) a range; return its value.

    An override outside the range, or of the wrong type, raises ``error`` (the calling
    package's configuration error; :class:`ParameterError` by default) naming the
    parameter, the value and the range.
    """
    descriptor = ParameterDescriptor(description=f"{description}" + (f" [{unit}]" if unit else ""))
    if low is not None and high is not None:
        if isinstance(default, bool):
            pass
        elif isinstance(default, int):
            descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high),
                                                     step=0)]
        elif isinstance(default, float):
            descriptor.floating_point_range = [FloatingPointRange(from_value=float(low),
                                                                  to_value=float(high), step=0.0)]
    try:
        value = node.declare_parameter(name, default, descriptor).value
    except Exception as exc:  # noqa: BLE001 - rclpy raises several exception types here
        raise error(
            f"parameter {node.get_name()}.{name}: {exc}; expected {type(default).__name__}"
            + (f" in {low}..{high} {unit}" if low is not None else "")
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"parameter {node.get_name()}.{name} = {value} must be finite")
    return value


def warn_unknown_parameters(node: Node) -> list[str]:
    """Warn about parameter overrides (from a parameter file or ``-p``) that the node never
    declared: a misspelt key would otherwise be dropped without a word and its default used.
    Returns the unknown names. A warning, not an error: one ``/**`` file may serve several
    nodes."""
    import difflib

    declared = set(node._parameters)
    overrides = set(getattr(node, "_parameter_overrides", {}))
    unknown = sorted(overrides - declared)
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(declared), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        node.get_logger().warning(f"parameter '{name}' is not a parameter of "
                                  f"{node.get_name()} and is ignored{hint}")
    return unknown


class Diagnostics:
    """Publishes one DiagnosticStatus per call on ``/diagnostics`` (absolute, as aggregators
    expect)."""

    def __init__(self, node: Node, name: str, hardware_id: str = "excavator_hil"):
        self._node = node
        self.name = name
        self.hardware_id = hardware_id
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)

    def publish(self, level: bytes, message: str, values: dict[str, Any] | None = None) -> None:
        msg = DiagnosticArray()
        msg.header.stamp = self._node.get_clock().now().to_msg()
        status = DiagnosticStatus(level=level, name=self.name, message=message,
                                  hardware_id=self.hardware_id)
        status.values = [KeyValue(key=str(k), value=str(v)) for k, v in (values or {}).items()]
        msg.status = [status]
        self._pub.publish(msg)


class Rejections:
    """Counts rejected inputs, keeps the last reason, logs it and reports it on
    ``/diagnostics`` (level ERROR) with the node's counters."""

    def __init__(self, node: Node, diagnostics: Diagnostics, what: str = "input"):
        self._node = node
        self._diagnostics = diagnostics
        self._what = what
        self.count = 0
        self.last = ""

    def reject(self, reason: str, counters: dict[str, Any]) -> None:
        self.count += 1
        self.last = reason
        self._node.get_logger().warning(f"{self._what} rejected: {reason}")
        self._diagnostics.publish(ERROR, reason, {**counters, "rejected": self.count,
                                                  "last_error": reason})
