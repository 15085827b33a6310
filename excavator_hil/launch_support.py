"""What the launch files in launch/ share: one table of launch arguments (:data:`ARGUMENTS`,
:data:`LAUNCH_FILES`): every launch file declares its arguments from it
(:func:`declare_arguments`), so an argument two files share is written once and the checks
(test/test_launch_files.py, test/test_docs_config.py) read the same table; the supervision of
required nodes (:class:`Supervision`: the launch's exit code 1 naming a node that died, respawn
with a start limit, :class:`RespawnPolicy`); the real-time set-up of each node
(:func:`realtime_plan`, the demo's rules from ``excavator_common.realtime``); every node is
started through :func:`supervised_node`; and the RViz default.

Imported by the launch files under ``ros2 launch`` (``launch`` is imported inside the functions,
so this module imports without ROS launch installed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from excavator_hil.errors import HilConfigError, HilError

RVIZ_HINT = ("rviz2 is not installed here (on a ROS 2 install: sudo apt install "
             "ros-kilted-rviz2); start with rviz:=false, or open RViz elsewhere with "
             "rviz/excavator.rviz")


def rviz_installed() -> bool:
    """Whether ``ros2 run rviz2 rviz2`` would find an executable (ament index on
    ``AMENT_PREFIX_PATH``)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        return False
    try:
        prefix = get_package_prefix("rviz2")
    except (PackageNotFoundError, ValueError, OSError):  # OSError: no AMENT_PREFIX_PATH
        return False
    return os.access(Path(prefix) / "lib" / "rviz2" / "rviz2", os.X_OK)


def rviz_default() -> str:
    """``rviz``'s default: "true" where rviz2 is installed, else "false"."""
    return "true" if rviz_installed() else "false"


# --- supervision: required nodes, respawn, the launch's exit code ----------------------------
# ``ros2 launch`` returns what ``LaunchService.run()`` returns: 0 after a ``Shutdown`` action
# (whatever its reason), 1 when an exception reached the launch loop (it logs "Caught exception
# in launch ...: <message>" and shuts everything down). So a required node's death is handled
# in two steps: its exit stops the other nodes (``Shutdown``), and when the last process of the
# launch has ended the failure is raised as :class:`RequiredNodeError`: the launch's last log
# line names the node and how it ended, and ``ros2 launch`` exits 1. A Ctrl-C (or any shutdown
# not caused by a failure) still ends with 0.
RESPAWN_DELAY_RANGE_S = (0.1, 600.0)
RESPAWN_LIMIT_RANGE = (1, 1000)
RESPAWN_WINDOW_RANGE_S = (1.0, 86400.0)
SUPERVISION_KEY = "excavator_hil_supervision"   # in the launch context's globals


class LaunchArgumentError(HilConfigError, ValueError):
    """A launch argument with a value the launch cannot use (names the value, range, fix)."""


class RequiredNodeError(HilError, RuntimeError):
    """Raised into the launch loop once every process has ended after a required node failed:
    launch logs it as its last line and ``ros2 launch`` exits 1."""


def describe_exit(returncode: int | None) -> str:
    """How a node ended, in words: "was killed by signal 9 (SIGKILL)", "failed with exit code
    1 ...", "refused its configuration (code 2 ...)"."""
    if returncode == 0:
        return "exited (code 0) although nothing asked it to"
    if returncode == 2:
        return "refused its configuration (code 2; its [FATAL] message above names the value)"
    if returncode is not None and returncode < 0:
        try:
            name = f" ({signal.Signals(-returncode).name})"
        except ValueError:
            name = ""
        return f"was killed by signal {-returncode}{name}"
    return f"failed with exit code {returncode} (its messages above say why)"


def exit_reason(name: str, returncode: int | None) -> str:
    """Why a node's exit ends the launch, in one line."""
    return f"required node {name} {describe_exit(returncode)}"


def number_argument(name: str, text: str, kind: type[float] | type[int],
                    bounds: tuple[float, float], fix: str) -> float:
    """Launch argument ``name``'s value ``text`` as a number within ``bounds``, else a
    :class:`LaunchArgumentError` naming the value, the range and ``fix``."""
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise LaunchArgumentError(f"{name}:={text!r} is not {what}; {fix}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise LaunchArgumentError(f"{name}:={text} is outside {bounds[0]:g}..{bounds[1]:g}; "
                                  f"{fix}")
    return value


@dataclass(frozen=True)
class RespawnPolicy:
    """What happens when a required node ends by itself (launch arguments ``respawn``,
    ``respawn_delay_s``, ``respawn_limit``, ``respawn_window_s``).

    Off: the launch stops the other nodes and exits 1. On: the node is started again after
    ``delay_s``. A death within ``window_s`` of the node's start counts as failing to start;
    after ``limit`` respawns that each failed so, in a row, the next such death is not
    respawned: the launch stops the other nodes and exits 1. A node that ran longer than
    ``window_s`` before dying is respawned and its count starts afresh. A node that refused its
    configuration (exit code 2) is never respawned: the same configuration would be refused
    again."""

    enabled: bool = False
    delay_s: float = 2.0
    limit: int = 5
    window_s: float = 60.0

    @classmethod
    def parse(cls, respawn: str, delay_s: str, limit: str, window_s: str) -> RespawnPolicy:
        """From the launch arguments' strings; :class:`LaunchArgumentError` names a bad one."""
        if respawn not in BOOL:
            raise LaunchArgumentError(f"respawn:={respawn!r} must be true or false")
        return cls(
            respawn == "true",
            number_argument("respawn_delay_s", delay_s, float, RESPAWN_DELAY_RANGE_S,
                            "the wait before a dead node is started again [s] (launch needs a "
                            "pause to tell a respawn from a shutdown)"),
            int(number_argument("respawn_limit", limit, int, RESPAWN_LIMIT_RANGE,
                                "how many times in a row a node that dies soon after its start "
                                "is respawned")),
            number_argument("respawn_window_s", window_s, float, RESPAWN_WINDOW_RANGE_S,
                            "a death this soon after a start counts as failing to start [s]"))


@dataclass(frozen=True)
class Decision:
    """What the launch does about a supervised node's exit, and the line it logs."""

    respawn: bool
    message: str
    # launch itself will not start the node again (respawn off): the stop may wait for the
    # launch's own SIGINT (SIGINT_GRACE_S) without the node coming back in between
    may_wait: bool = False


@dataclass
class _Supervised:
    name: str
    policy: RespawnPolicy
    action: Any                     # the launch action (kept: its id is the key)
    started_s: float | None = None
    quick_deaths: int = 0           # deaths in a row within policy.window_s of their start
    respawns: int = 0


class Supervision:
    """The launch's bookkeeping, without ROS launch (the tests drive it directly): the
    processes running, the required nodes and their respawns, and the failure the launch ends
    with. One per ``ros2 launch`` (the first launch file that starts a node creates it; files
    it includes share it)."""

    def __init__(self) -> None:
        self.running = 0
        self.failure: str | None = None
        self.unconfirmed = False   # the failure waits for the launch's own pending SIGINT
        self._nodes: dict[int, _Supervised] = {}

    def add(self, action: Any, name: str, policy: RespawnPolicy) -> None:
        """``action`` (a launch ``Node``) is a required node called ``name``."""
        self._nodes[id(action)] = _Supervised(name, policy, action)

    def started(self, action: Any, now_s: float) -> None:
        """A process (any, supervised or not) started at ``now_s`` [s, monotonic]."""
        self.running += 1
        node = self._nodes.get(id(action))
        if node is not None:
            node.started_s = now_s

    def exited(self, action: Any, returncode: int | None, now_s: float,
               shutting_down: bool) -> Decision | None:
        """A process ended. None: nothing to do (not supervised, or the launch is shutting
        down anyway); else respawn (launch does it, the node was created with ``respawn``) or
        stop the launch (:attr:`failure` is set)."""
        self.running = max(0, self.running - 1)
        node = self._nodes.get(id(action))
        if node is None or shutting_down or self.failure is not None:
            return None
        head = exit_reason(node.name, returncode)
        ran_s = now_s - node.started_s if node.started_s is not None else 0.0
        policy = node.policy
        if not policy.enabled:
            return dataclasses.replace(
                self._fail(head, f"{head}: stopping the other nodes of this launch "
                                 "(respawn:=true starts it again instead)"), may_wait=True)
        if returncode == 2:
            return self._fail(head, f"{head}: not respawned (the same configuration would be "
                                    "refused again); stopping the other nodes of this launch")
        node.quick_deaths = node.quick_deaths + 1 if ran_s <= policy.window_s else 0
        if node.quick_deaths > policy.limit:
            return self._fail(
                f"{head}: its death #{node.quick_deaths} in a row within {policy.window_s:g} s "
                "of its start, not respawned again",
                f"{head} {ran_s:.1f} s after its start, the {node.quick_deaths}th time in a "
                f"row within respawn_window_s ({policy.window_s:g} s) of a start: not "
                f"respawned again (respawn_limit {policy.limit}); stopping the other nodes "
                "of this launch")
        node.respawns += 1
        in_a_row = (f"{node.quick_deaths} of {policy.limit} deaths in a row within "
                    f"{policy.window_s:g} s of a start" if node.quick_deaths else
                    f"it ran longer than {policy.window_s:g} s: count reset")
        return Decision(True, f"{head} {ran_s:.1f} s after its start: respawning it in "
                              f"{policy.delay_s:g} s (respawn #{node.respawns}; {in_a_row})")

    def _fail(self, summary: str, message: str) -> Decision:
        self.failure = summary
        return Decision(False, message)

    def confirm(self, interrupted: bool) -> bool:
        """The failure judged on a node's exit, once launch had the moment it needs to see its
        own SIGINT (``SIGINT_GRACE_S``): withdrawn when it did (``interrupted``: the exit was a
        Ctrl-C's, not a failure), kept otherwise. Returns whether it stands."""
        self.unconfirmed = False
        if interrupted:
            self.failure = None
        return self.failure is not None

    def verdict(self) -> str | None:
        """The failure to end the launch with, once no process of it runs any more."""
        if self.failure is None or self.unconfirmed or self.running > 0:
            return None
        return (f"{self.failure}; the launch stopped its other nodes and exits with code 1")


def supervision(context: Any) -> Supervision:
    """This launch's :class:`Supervision`; the first call registers its event handlers (for
    every process of the launch, started by whichever launch file)."""
    found = context.get_locals_as_dict().get(SUPERVISION_KEY)
    if isinstance(found, Supervision):
        return found
    from launch.actions import OpaqueFunction, Shutdown, TimerAction
    from launch.event_handlers import OnProcessExit, OnProcessStart
    from launch.logging import get_logger

    sup = Supervision()
    logger = get_logger("excavator_hil")
    interrupted = _record_sigint()

    def on_start(event: Any, _context: Any) -> None:
        sup.started(event.action, time.monotonic())

    def on_exit(event: Any, ctx: Any) -> list[Any] | None:
        decision = sup.exited(event.action, event.returncode, time.monotonic(),
                              ctx.is_shutdown or interrupted.is_set())
        out: list[Any] = []
        if decision is not None:
            if decision.respawn:
                logger.warning(decision.message)
            elif not decision.may_wait:
                logger.error(decision.message)
                out.append(Shutdown(reason=decision.message))
            else:
                # judged after SIGINT_GRACE_S: a Ctrl-C reaches launch and its nodes at once, and
                # a process stopped while it came (seen in CI under a SIGSTOPped launch) can see
                # a node's exit before its own SIGINT has been delivered to it
                sup.unconfirmed = True

                def confirm(c: Any) -> list[Any]:
                    if not sup.confirm(c.is_shutdown or interrupted.is_set()):
                        return []
                    logger.error(decision.message)
                    verdict = sup.verdict()
                    if verdict is not None:
                        raise RequiredNodeError(verdict)
                    return [Shutdown(reason=decision.message)]

                out.append(TimerAction(period=SIGINT_GRACE_S,
                                       actions=[OpaqueFunction(function=confirm)]))
        verdict = sup.verdict()
        if verdict is not None:
            raise RequiredNodeError(verdict)
        return out

    context.register_event_handler(OnProcessStart(on_start=on_start))
    context.register_event_handler(OnProcessExit(on_exit=on_exit))
    context.extend_globals({SUPERVISION_KEY: sup})
    return sup


_SIGINT_SEEN = threading.Event()
# How long a required node's unexpected exit waits for the launch's own SIGINT before it is a
# failure [s]: the signal is pending when the process runs again, so its handler runs within
# milliseconds; a real failure stops the launch this much later.
SIGINT_GRACE_S = 0.5


def _record_sigint() -> threading.Event:
    """An event set when this process gets SIGINT (once installed, chained before the handler
    in place; Python's default one, KeyboardInterrupt, is dropped: see ``record``).

    A terminal's Ctrl-C (and ``kill -INT`` of the process group) reaches ``ros2 launch`` and
    its nodes at once. launch handles its SIGINT in its event loop (a wakeup fd), and a node's
    exit reaches the same loop from the child watcher: when both are ready in one turn of the
    loop their order is the selector's, and a node that ended from its own SIGINT could be
    judged while ``is_shutdown`` still said no ("required node ... exited (code 0) although
    nothing asked it to", exit code 1 for a Ctrl-C). Python runs this handler in the main
    thread at the first bytecode after the signal arrived, before launch's loop looks at any
    process exit that came after it."""
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "_records_sigint", False):
        return _SIGINT_SEEN

    def record(signum: int, frame: Any) -> Any:
        _SIGINT_SEEN.set()
        # Python's default handler raises KeyboardInterrupt wherever the main thread is: launch
        # handles SIGINT through its wakeup fd and only swallows that exception around its
        # loop, but raised inside one of its tasks it kills the task (seen: "Task exception was
        # never retrieved ... KeyboardInterrupt" in the task that had just reaped a node, then
        # launch sent SIGTERM and SIGKILL to that node long gone and ran on). Not raised here.
        if callable(previous) and previous is not signal.default_int_handler:
            return previous(signum, frame)
        return None

    record._records_sigint = True   # type: ignore[attr-defined]
    # ValueError off the main thread (launch runs its loop there): is_shutdown only, then
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGINT, record)
    return _SIGINT_SEEN


def respawn_policy(context: Any) -> RespawnPolicy:
    """The policy the launch arguments ``respawn*`` ask for (defaults where a file does not
    declare them)."""
    def arg(name: str, default: str) -> str:
        return str(context.launch_configurations.get(name, default))

    d = RespawnPolicy()
    return RespawnPolicy.parse(arg("respawn", "false"), arg("respawn_delay_s", f"{d.delay_s}"),
                               arg("respawn_limit", f"{d.limit}"),
                               arg("respawn_window_s", f"{d.window_s}"))


# --- the real-time set-up of each node (excavator_common.realtime: the demo's rules) ---------
REALTIME_MODES = ("auto", "off")
FAIR_SLICE_MS = 0.1   # the demo's default (--bridge-slice-ms), measured: docs/benchmarks.md
BACKGROUND_NICE = 10  # the demo's default (--background-nice)
# what the nodes started through excavator_common.ros_runtime.run_node (and the virtual PLC) do
# themselves once started
IN_NODE = "gc frozen after start-up, GIL handed over after 0.5 ms (in the node)"
SETS_UP_ITSELF = frozenset({"sim_node", "soil_node", "ik_node", "teleop_node", "plc_bridge",
                            "virtual_plc", "plant_link"})
# the process group of each node (excavator_common.realtime.GROUPS)
NODE_GROUPS = {"plc_bridge": "bridge", "virtual_plc": "bridge", "plant_link": "bridge",
               "sim_node": "sim",
               "soil_node": "sim", "ik_node": "sim", "teleop_node": "sim",
               "robot_state_publisher": "sim", "dashboard": "background", "rviz2": "background",
               "foxglove_view": "background"}
# launch's SIGINT grace (``sigterm_timeout``, 5 s unless the launch sets it) before it sends
# SIGTERM: every node gets at least NODE_SIGINT_GRACE_S [s]: a clean stop (a node's DDS
# participant torn down, the bridge's drives left stopped) over a fast one; ik_node's stop
# outlasted 5 s once on a 2-core host with one core busy and the suite's other worker running
# (ci75), and a SIGTERM then ends it with nothing said ...
NODE_SIGINT_GRACE_S = 15.0
# ... and a background node under nice at least this long [s]. At nice 10 the fair scheduler
# gives it a tenth of a normal task's share: the dashboard's stop (0.04 s of CPU) took 1.5-3 s
# beside two busy cores. (foxglove_view's stops that outlasted 5 s in CI were a hang, not this:
# it outlasted 20 s and a SIGTERM too; foxglove_view/node.py.)
BACKGROUND_SIGINT_GRACE_S = 20.0


@dataclass(frozen=True)
class RealtimePlan:
    """What the launch applies to each group of nodes, decided once per launch: the command
    prefixes (``excavator_common.realtime.command_prefixes``, leaving out what this host does
    not support), the SCHED_FIFO priority for the bridge and the virtual PLC (None: the bridge
    keeps ``plc_params``' ``rt_priority``), the niceness of the background and, per group, the
    measures in words (applied, and not applied with why)."""

    mode: str
    prefixes: dict[str, list[str]]
    rt_priority: int | None
    plc_rt_priority: int
    background_nice: int
    notes: dict[str, list[str]]

    @property
    def env(self) -> dict[str, str]:
        """Environment of every node: off also turns off what the nodes do themselves."""
        from excavator_common.realtime import ENV

        return {ENV: "off"} if self.mode == "off" else {}

    def line(self, name: str, label: str | None = None) -> str:
        """The one log line of node ``name``'s set-up (``label``: its full name)."""
        notes = list(self.notes[NODE_GROUPS.get(name, "sim")])
        if self.plc_rt_priority and name == "plc_bridge":
            notes.insert(1, f"SCHED_FIFO {self.plc_rt_priority} for its loop, "
                            f"{max(1, self.plc_rt_priority - 1)} for its executor thread")
        elif self.plc_rt_priority and name == "virtual_plc":
            notes.insert(1, f"SCHED_FIFO {self.plc_rt_priority} (the whole process)")
        elif self.plc_rt_priority and name == "plant_link":
            notes.insert(1, f"SCHED_FIFO {self.plc_rt_priority} for its exchange thread")
        if name in SETS_UP_ITSELF and self.mode != "off":
            notes.append(IN_NODE)
        return f"real-time set-up of {label or name}: " + "; ".join(notes or ["unchanged"])


def _file_rt_priority(plc_params: str) -> int:
    """``rt_priority`` of the bridge's parameter file (0 when the file says nothing or cannot be
    read: the bridge then reports the file itself)."""
    from excavator_common.parameter_files import read_parameter_file

    try:
        value = read_parameter_file(plc_params, "plc_bridge").get("rt_priority", 0)
    except Exception:  # noqa: BLE001 - the bridge names a broken file at its start
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def realtime_plan(mode: str, rt_priority: str, pin_cpus: str, plc_params: str,
                  support: Any = None) -> RealtimePlan:
    """The plan for ``realtime:=<mode>`` (auto: every measure this host supports; off: none),
    ``rt_priority`` ("" = plc_params' value) and ``pin_cpus``. ``support``: an
    ``excavator_common.realtime.HostSupport`` (default: asked of this host)."""
    from excavator_common import realtime

    if mode not in REALTIME_MODES:
        raise LaunchArgumentError(f"realtime:={mode!r} must be one of {', '.join(REALTIME_MODES)}"
                                  " (auto: every measure this host supports; off: none)")
    if pin_cpus not in BOOL:
        raise LaunchArgumentError(f"pin_cpus:={pin_cpus!r} must be true or false")
    asked = None
    if rt_priority.strip():
        asked = int(number_argument(
            "rt_priority", rt_priority, int, (0, 99), "SCHED_FIFO priority 1..99 of the bridge "
            "loop and the virtual PLC, 0 = normal scheduling, empty = plc_params' rt_priority"))
    rt = asked if asked is not None else _file_rt_priority(plc_params)
    if mode == "off":
        off = "off (realtime:=off): normal scheduling, the kernel's slice, default gc and GIL"
        notes = {g: [off] for g in realtime.GROUPS}
        if rt > 0:
            notes["bridge"].append(f"rt_priority {rt} not applied")
        return RealtimePlan(mode, {g: [] for g in realtime.GROUPS}, 0 if rt > 0 else asked, 0,
                            0, notes)
    if support is None:
        support = realtime.host_support(rt, FAIR_SLICE_MS)
    notes = {g: [] for g in realtime.GROUPS}
    slice_ms = FAIR_SLICE_MS if support.fair_slice else 0.0
    if support.fair_slice:
        notes["bridge"].append(f"fair-scheduler slice {FAIR_SLICE_MS:g} ms (python -m "
                               "excavator_common.realtime)")
    else:
        notes["bridge"].append(f"no fair-scheduler slice: {support.fair_slice_why}")
    fifo = rt > 0 and support.fifo   # SCHED_FIFO: said per node (RealtimePlan.line)
    if rt > 0 and not fifo:
        notes["bridge"].append(f"rt_priority {rt} not applied, normal scheduling: "
                               f"{support.fifo_why}")
    elif rt == 0:
        notes["bridge"].append("normal scheduling (rt_priority 0)")
    pin = pin_cpus == "true" and not support.pin_why
    if pin_cpus == "true" and support.pin_why:
        for g in ("bridge", "sim"):
            notes[g].append(f"not pinned: {support.pin_why}")
    prefixes = realtime.command_prefixes(realtime.ProcessSetup(
        rt_priority=0, background_nice=BACKGROUND_NICE, bridge_slice_ms=slice_ms,
        pin_cpus=pin, hold_sigint=True))
    if pin:
        cpus = support.cpus
        notes["bridge"].append(f"pinned to CPU {cpus[-1]}")
        notes["sim"].append(f"pinned to CPUs {','.join(map(str, cpus[:-1]))}")
    notes["background"].append(f"nice {BACKGROUND_NICE}")
    if not notes["sim"]:
        notes["sim"].append("normal scheduling")
    # the bridge: 0 where SCHED_FIFO is not permitted (said above, once), else what was asked
    # (None: plc_params' value stands)
    bridge_rt = 0 if rt > 0 and not fifo else asked
    return RealtimePlan(mode, prefixes, bridge_rt, rt if fifo else 0, BACKGROUND_NICE, notes)


def plant_link_parameters(plant_link_params: str, plc_params: str, plc_host: str,
                          plc_port: int, model: str, plan: RealtimePlan) -> dict[str, Any]:
    """The plant link's parameters in a launch (``plant:=closed``): its own file, and the PLC
    the bridge talks to (host, port, model, the bridge's file for the blocks), so the two can
    never name different PLCs; its exchange thread under the virtual PLC's SCHED_FIFO
    priority (0 where the plan applies none)."""
    return {"config_file": plant_link_params, "plc_config_file": plc_params,
            "plc_host": plc_host, "plc_port": int(plc_port), "model": model,
            "rt_priority": int(plan.plc_rt_priority)}


def _launch_prefix(context: Any, executable: str) -> list[str]:
    """The user's ``--launch-prefix`` (``launch-prefix`` configuration) for ``executable``,
    honouring ``--launch-prefix-filter``: a node given its own prefix would lose it."""
    prefix = str(context.launch_configurations.get("launch-prefix", "")).strip()
    pattern = str(context.launch_configurations.get("launch-prefix-filter", ""))
    if not prefix or (pattern and re.match(pattern, executable) is None):
        return []
    return shlex.split(prefix)


def sigint_grace(group: str, plan: RealtimePlan, sigterm_timeout: str) -> str | None:
    """The ``sigterm_timeout`` [s] for a node of ``group`` where it differs from the launch's
    (``sigterm_timeout``, as given): at least :data:`BACKGROUND_SIGINT_GRACE_S` for a
    background node under nice, at least :data:`NODE_SIGINT_GRACE_S` for any other; None to
    keep the launch's (as long or longer, or a value that is no number: launch reports that
    itself)."""
    try:
        asked = float(sigterm_timeout)
    except ValueError:
        return None
    least = (BACKGROUND_SIGINT_GRACE_S if group == "background" and plan.background_nice > 0
             else NODE_SIGINT_GRACE_S)
    return None if asked >= least else f"{least:g}"


def supervised_node(context: Any, plan: RealtimePlan, *, name: str, required: bool = True,
                    package: str = "excavator_hil", executable: str | None = None,
                    log_namespace: str | None = None, **kwargs: Any) -> list[Any]:
    """A launch_ros ``Node`` with this launch's supervision and real-time set-up, and the one
    log line of that set-up: ``required`` nodes end the launch (exit code 1) or are respawned
    (:class:`RespawnPolicy`); the node's group prefix (fair slice, CPUs, nice) goes before the
    user's ``--launch-prefix``; a background node under nice gets a longer SIGINT grace
    (:func:`sigint_grace`); ``realtime:=off`` reaches the node's own set-up through its
    environment. ``log_namespace``: the namespace to name the node by in that line, where the
    group pushes it after this call (default: the namespace pushed so far)."""
    from launch.actions import LogInfo
    from launch_ros.actions import Node

    exe = executable or name
    group = NODE_GROUPS.get(name, "sim")
    prefix = plan.prefixes.get(group, [])
    if group == "background" and package != "excavator_hil":
        # a program of another package (RViz) does not read EXCAVATOR_HIL_NICE: nice -n
        from excavator_common.realtime import nice_prefix

        prefix = nice_prefix(plan.background_nice)
    if prefix:
        kwargs["prefix"] = shlex.join([*prefix, *_launch_prefix(context, exe)])
    if plan.env:
        kwargs["additional_env"] = {**kwargs.get("additional_env", {}), **plan.env}
    grace = sigint_grace(group, plan, str(context.launch_configurations.get("sigterm_timeout",
                                                                            "5")))
    if grace is not None:
        kwargs["sigterm_timeout"] = grace
    policy = respawn_policy(context) if required else RespawnPolicy()
    # exec_name: the label of its log lines ([plc_bridge-2]), else the prefix's first word
    node = Node(package=package, executable=exe, name=name, exec_name=exe, output="screen",
                respawn=policy.enabled, respawn_delay=policy.delay_s, **kwargs)
    sup = supervision(context)
    if required:
        sup.add(node, name, policy)
    ns = log_namespace
    if ns is None:
        ns = str(context.launch_configurations.get("ros_namespace", "") or "")
    ns = ns.strip("/")
    label = f"/{ns}/{name}" if ns else name
    return [LogInfo(msg=plan.line(name, label)), node]


def plan_from_arguments(context: Any) -> RealtimePlan:
    """This launch's :class:`RealtimePlan` from its arguments (one per launch: the first file
    that asks decides; included files get the same arguments)."""
    key = "excavator_hil_realtime_plan"
    found = context.get_locals_as_dict().get(key)
    if isinstance(found, RealtimePlan):
        return found

    def arg(name: str, default: str = "") -> str:
        return str(context.launch_configurations.get(name, default))

    plan = realtime_plan(arg("realtime", "auto"), arg("rt_priority"), arg("pin_cpus", "false"),
                         arg("plc_params"))
    context.extend_globals({key: plan})
    return plan


# --- the launch arguments: one table for every launch file -----------------------------------
BOOL = ("true", "false")
# the launch argument ``plant``: hardware in the loop through the simulated machine, or not
PLANT_ARRANGEMENTS = ("closed", "standalone")
MODELS = ("skid_steer", "ackermann", "4wd4ws")
RVIZ_AUTO = "<rviz2 installed>"  # default: rviz_default() when the launch file runs


@dataclass(frozen=True)
class LaunchArgument:
    """One launch argument: a literal ``default``, or a file under the package's share
    directory (``share_path``, e.g. ``("config", "sim.yaml")``), or :data:`RVIZ_AUTO`."""

    name: str
    description: str
    default: str = ""
    choices: tuple[str, ...] = ()
    share_path: tuple[str, ...] = ()

    def but(self, **changes: Any) -> LaunchArgument:
        """This argument with another default or description (one launch file's variant)."""
        return replace(self, **changes)


def _param_file(name: str, node: str, what: str = "") -> LaunchArgument:
    return LaunchArgument(f"{name}_params", f"{node} parameter file{what}",
                          share_path=("config", f"{name}.yaml"))


ARGUMENTS: dict[str, LaunchArgument] = {a.name: a for a in (
    LaunchArgument("namespace", "ROS namespace of this excavator's nodes and topics"),
    LaunchArgument("use_sim_time", "follow the simulator's /clock (sim_node publishes it only "
                   "when true; false: every node on wall time)", "true", BOOL),
    LaunchArgument("rviz", "start RViz with rviz/excavator.rviz (default: true where rviz2 is "
                   "installed, else false)", RVIZ_AUTO, BOOL),
    LaunchArgument("soil", "start soil_node (deformable terrain, soil forces)", "true", BOOL),
    LaunchArgument("soil_in_process", "with soil: run the soil model inside sim_node (exact "
                   "coupling: every bucket pose answered within its period; no soil_node "
                   "process) instead of soil_node over DDS", "true", BOOL),
    LaunchArgument("track_command", "topic whose track_left/track_right velocities [m/s] drive "
                   "sim_node's tracks, a wheeled machine's wheel_<w> velocities [m/s] and "
                   "steer_<w> angles [rad] its wheels (plant:=standalone; excavator.launch.py: "
                   "the PLC's plc/wheel_states)",
                   "track_command"),
    _param_file("sim", "sim_node"),
    _param_file("soil", "soil_node"),
    _param_file("ik", "ik_node"),
    LaunchArgument("teleop", "start teleop_node (joystick / coordinated / impedance control "
                   "from joy and hand_pose)", "false", BOOL),
    _param_file("teleop", "teleop_node"),
    _param_file("plc", "plc_bridge", " (data blocks, model, timeouts; a key left "
                "out takes the default of docs/configuration.md, an unknown key stops the "
                "bridge)"),
    LaunchArgument("plc_host", "IP address of the S7-1200/1500 (PUT/GET enabled)",
                   "192.168.0.1"),
    LaunchArgument("redis_url", "Redis URL (redis:// or rediss://, user:pass@ for AUTH)",
                   "redis://127.0.0.1:6379/0"),
    LaunchArgument("machine", "machine preset (a name in config/machines/ or a file; empty = "
                   "the default tracked machine): sim_node simulates it, and a wheeled one "
                   "(wheeled_ackermann_11t, wheeled_4ws_11t) sets the bridge's model and "
                   "vehicle geometry to its own (plant:=closed: the PLC's loops drive its drive "
                   "train; standalone: its wheels follow plc/wheel_states); checked against the "
                   "bridge at start-up (excavator_hil.machine_match)"),
    LaunchArgument("model", "vehicle kinematic model between Redis and the PLC", "skid_steer",
                   MODELS),
    LaunchArgument("virtual_plc", "start the virtual PLC and connect the bridge to it",
                   "false", BOOL),
    LaunchArgument("plant", "the PLC's plant. closed: hardware in the loop, the simulated "
                   "machine is the plant (the plant link exchanges the PLC's plant_in / "
                   "plant_out blocks with sim_node's drive train, the virtual PLC runs "
                   "plant_mode external); standalone: no plant link, the virtual PLC's built-in "
                   "first-order plant, sim_node's tracks follow track_command",
                   "standalone", PLANT_ARRANGEMENTS),
    _param_file("plant_link", "plant_link", " (exchange rate, write allow-list; the PLC "
                "connection, model and blocks come from plc_params)"),
    LaunchArgument("virtual_plc_port", "TCP port of the virtual PLC's S7 server", "1102"),
    _param_file("virtual_plc", "the virtual PLC's plant and watchdog", " (--plant-config: "
                "its watchdog times, built-in plant and HIL program; the data blocks come from "
                "plc_params)"),
    LaunchArgument("dashboard", "browser dashboard on http://127.0.0.1:8080/ "
                   "(dashboard.launch.py for its own arguments)", "false", BOOL),
    LaunchArgument("host", "interface the web page binds (not loopback: needs token)",
                   "127.0.0.1"),
    LaunchArgument("port", "TCP port of the page", "8080"),
    LaunchArgument("token", "access token, >= 16 characters (required when host is not "
                   "loopback; open /?token=...)"),
    LaunchArgument("refresh_hz", "machine view refresh per browser tab [Hz], 1..30", "10"),
    LaunchArgument("foxglove", "Foxglove live view on ws://127.0.0.1:8765 (foxglove.launch.py "
                   "for its own arguments; docs/foxglove.md)", "false", BOOL),
    LaunchArgument("foxglove_host", "interface the Foxglove WebSocket server binds (no "
                   "authentication: keep loopback unless the network is yours)", "127.0.0.1"),
    LaunchArgument("foxglove_port", "TCP port of the Foxglove WebSocket server", "8765"),
    LaunchArgument("count", "number of machines, 1..16 (namespaces exc1, exc2, ...); ignored "
                   "when namespaces is set", "2"),
    LaunchArgument("namespaces", "comma-separated namespaces, one machine each (e.g. "
                   "exc_a,exc_b); empty: from count"),
    LaunchArgument("spacing", "distance between machines along world y [m]", "20.0"),
    LaunchArgument("shared_terrain", "one soil_node and one terrain for every machine (true), "
                   "or a soil_node and terrain per machine", "true", BOOL),
    LaunchArgument("db_base", "Redis database of the first machine", "0"),
    LaunchArgument("respawn", "start a required node again when it ends by itself, instead of "
                   "stopping the launch (exit code 1)", "false", BOOL),
    LaunchArgument("respawn_delay_s", "wait before a dead node is started again [s], "
                   f"{RESPAWN_DELAY_RANGE_S[0]:g}..{RESPAWN_DELAY_RANGE_S[1]:g}",
                   f"{RespawnPolicy.delay_s:g}"),
    LaunchArgument("respawn_limit", "respawns in a row of a node that dies within "
                   "respawn_window_s of its start; the next such death stops the launch "
                   "(exit code 1)", f"{RespawnPolicy.limit}"),
    LaunchArgument("respawn_window_s", "a death this soon after a start counts as failing to "
                   "start [s]; a node that ran longer is respawned with its count reset",
                   f"{RespawnPolicy.window_s:g}"),
    LaunchArgument("realtime", "real-time set-up of the nodes (docs/plc_bridge.md, HIL host "
                   "set-up): auto = every measure this host supports, each node's in the log; "
                   "off = none", "auto", REALTIME_MODES),
    LaunchArgument("rt_priority", "SCHED_FIFO priority 1..99 of the bridge loop and the "
                   "virtual PLC (needs CAP_SYS_NICE or RLIMIT_RTPRIO); 0 = normal scheduling; "
                   "empty = plc_params' rt_priority"),
    LaunchArgument("pin_cpus", "pin the bridge and the virtual PLC to the last CPU, the "
                   "simulation nodes to the others (hosts with >= 2 CPUs)", "false", BOOL),
)}

_A = ARGUMENTS
_SIM = ("namespace", "use_sim_time", "rviz", "soil", "track_command", "sim_params",
        "soil_params", "ik_params", "teleop", "teleop_params", "soil_in_process", "machine")
_BRIDGE = ("namespace", "use_sim_time", "plc_params", "plc_host", "redis_url", "model",
           "virtual_plc", "virtual_plc_port", "machine")
# ``plant`` per file: where a file runs only one half of the loop, the loop is closed only when
# asked (the other half must run too); sim.launch.py's own description
_PLANT_SIM = _A["plant"].but(description="closed: sim_node's tracks are the PLC's plant "
                             "(drive_mode plant: the plant link's plant/actuation drives them "
                             "through the drive train; plant/sensors and imu answer; start "
                             "bridge.launch.py with plant:=closed too); standalone: they follow "
                             "track_command")
_PLANT_BRIDGE = _A["plant"].but(description="closed: also start the plant link (the PLC's "
                                "plant_in / plant_out <-> plant/sensors, imu, plant/actuation "
                                "of a sim_node with plant:=closed) and run the virtual PLC with "
                                "plant_mode external; standalone: no plant link, the virtual "
                                "PLC's built-in plant (a real machine: always standalone)")
# where the whole loop runs in one launch (the simulation and the PLC): closed by default
_PLANT_LOOP = _A["plant"].but(default="closed", description="closed (default): hardware in "
                              "the loop, the simulated machine is the PLC's plant (plant link, "
                              "sim_node drive_mode plant, the virtual PLC's plant_mode "
                              "external; a real PLC needs the HIL blocks of docs/plc_setup.md); "
                              "standalone: the former arrangement, the virtual PLC's built-in "
                              "plant and sim_node's tracks following track_command")
# every launch file that starts required nodes: supervision and real-time set-up
_SUPERVISION = ("respawn", "respawn_delay_s", "respawn_limit", "respawn_window_s", "realtime")
_REALTIME = ("rt_priority", "pin_cpus")

# Per launch file, in order: the arguments it declares (a name: the table's entry as it is).
LAUNCH_FILES: dict[str, tuple[str | LaunchArgument, ...]] = {
    "sim.launch.py": (*_SIM, _PLANT_SIM, *_SUPERVISION, *_REALTIME),
    "bridge.launch.py": (
        _A["namespace"].but(description="ROS namespace of the bridge's node and topics"),
        _A["use_sim_time"].but(default="false", description="use /clock (true needs sim_node "
                               "with use_sim_time true, or bag play --clock)"),
        *_BRIDGE[2:], "virtual_plc_params", _PLANT_BRIDGE, "plant_link_params",
        *_SUPERVISION, *_REALTIME),
    # everything of sim.launch.py and bridge.launch.py (forwarded to both), and the dashboard
    "excavator.launch.py": (
        *_SIM[:4],
        _A["track_command"].but(default="plc/wheel_states", description="plant:=standalone: "
                                "topic whose track_left/track_right velocities [m/s] drive "
                                "sim_node's tracks: the PLC's measured track speeds "
                                "(track_command: drive them directly); unused with "
                                "plant:=closed"),
        *_SIM[5:], "plc_params",
        _A["plc_host"].but(description="IP address of the S7-1200/1500 (ignored with "
                           "virtual_plc:=true)"),
        "redis_url", "model",
        _A["virtual_plc"].but(default="true", description="use the virtual PLC instead of real "
                              "hardware (false: the PLC at plc_host)"),
        "virtual_plc_port", "virtual_plc_params", _PLANT_LOOP, "plant_link_params",
        "dashboard", "foxglove",
        "foxglove_host", "foxglove_port", *_SUPERVISION, *_REALTIME),
    "dashboard.launch.py": (
        _A["namespace"].but(description="ROS namespace of the excavator to show and drive"),
        _A["use_sim_time"].but(description="stamp the targets it sends on /clock like the "
                               "stack it drives (false: wall time, for a stack on wall time)"),
        "host", "port", "token",
        _A["redis_url"].but(description="Redis of the PLC bridge"),
        _A["plc_params"].but(description="plc_bridge parameter file (model, command envelope, "
                             "key layout)"),
        "refresh_hz", *_SUPERVISION),
    "foxglove.launch.py": (
        _A["namespace"].but(description="ROS namespace of the excavator to show"),
        _A["use_sim_time"].but(description="follow /clock like the stack it shows (false: "
                               "wall time, for a stack on wall time)"),
        "foxglove_host", "foxglove_port",
        _A["redis_url"].but(default="", description="Redis of the PLC bridge, read only, for "
                            "the /plc/* channels (empty: none)"),
        "soil_params", *_SUPERVISION),
    "fleet.launch.py": (
        "count", "namespaces", "spacing", "soil", "shared_terrain",
        _A["redis_url"].but(default="redis://127.0.0.1:6379", description="the shared Redis "
                            "server, without a database: machine k uses database db_base + k"),
        "db_base",
        _A["virtual_plc_port"].but(description="S7 port of the first machine's virtual PLC; "
                                   "machine k uses this + k"),
        "virtual_plc_params",
        "model",
        _A["machine"].but(description="machine preset of every machine (a name in "
                          "config/machines/ or a file; empty = the default tracked machine), "
                          "or a comma-separated list, one per machine (a mixed fleet); a "
                          "wheeled one brings its model and vehicle geometry to its bridge and "
                          "virtual PLC"),
        "sim_params", "soil_params", "ik_params",
        _A["plc_params"].but(description="plc_bridge parameter file"),
        _PLANT_LOOP.but(description="closed (default): each machine's simulation is its "
                        "virtual PLC's plant (a plant link per machine, sim_node drive_mode "
                        "plant, plant_mode external); standalone: the virtual PLCs' built-in "
                        "plants, each sim_node's tracks following its plc/wheel_states"),
        "plant_link_params",
        # operated: the tools that serve any machine of the fleet, one each for all of them
        _A["teleop"].but(description="start one teleop_node (root namespace: the joystick on "
                         "/joy) driving teleop_machine"),
        "teleop_params",
        LaunchArgument("teleop_machine", "the machine teleop_node drives (one of the fleet's "
                       "namespaces, e.g. exc2; its parameter machine); empty: the first"),
        _A["dashboard"].but(description="browser dashboard on http://127.0.0.1:8080/ (root "
                            "namespace): its selector lists the fleet's machines and switches "
                            "between them"),
        "host", "port", "token", "refresh_hz",
        LaunchArgument("dashboard_machine", "the machine the dashboard shows at start (the "
                       "selector switches; the PLC panel and Drive follow: each machine's "
                       "bridge in its Redis database); empty: the first"),
        _A["foxglove"].but(description="one Foxglove live view on ws://127.0.0.1:8765 with every "
                           "machine in one scene (machines parameter: the fleet's namespaces) "
                           "and each one's PLC plots (/<ns>/plc/*); layout "
                           "layouts/excavator_foxglove_fleet.json"),
        "foxglove_host", "foxglove_port",
        _A["rviz"].but(default="false", description="start RViz with every machine in one scene "
                       "(a config for the fleet's namespaces and spacing, written as fleet.rviz "
                       "in the launch's log directory; rviz/fleet.rviz is the one for "
                       "exc1,exc2)"),
        *_SUPERVISION, *_REALTIME),
}


def arguments_of(launch_file: str) -> list[LaunchArgument]:
    """The arguments ``launch_file`` (e.g. ``"sim.launch.py"``) declares, in order."""
    return [ARGUMENTS[a] if isinstance(a, str) else a for a in LAUNCH_FILES[launch_file]]


def declare_arguments(launch_file: str, package: str = "excavator_hil") -> list[Any]:
    """``DeclareLaunchArgument`` actions for every argument of ``launch_file``."""
    from launch.actions import DeclareLaunchArgument
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.substitutions import FindPackageShare

    out = []
    for a in arguments_of(launch_file):
        default: Any = a.default
        if a.share_path:
            default = PathJoinSubstitution([FindPackageShare(package), *a.share_path])
        elif a.default == RVIZ_AUTO:
            default = rviz_default()
        out.append(DeclareLaunchArgument(a.name, default_value=default,
                                         description=a.description,
                                         **({"choices": list(a.choices)} if a.choices else {})))
    return out
