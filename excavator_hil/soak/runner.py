"""Runs the chaos soak (``bench/soak.py``): the demo's stack, digging and driving in a loop,
faults injected from a seeded schedule, an observer of its own watching, the checks at the end.

What runs:
- the demo's processes, started as ``excavator-hil demo`` starts them
  (:class:`excavator_hil.demo.run.DemoStack`): redis-server, the virtual PLC, plc_bridge,
  sim_node, soil_node, ik_node, the bag recorder; beside them the dashboard, the link proxy
  (``excavator_hil.faults.tcp_proxy``, its own process, between the bridge and the PLC) and the
  observer (:mod:`excavator_hil.soak.observer`, its own process);
- in this process: the operator (:class:`SoakOperator`, the demo's operator: it drives the
  tracks through Redis back and forth, every command a distinct speed, and digs the demo's dig
  cycle over and over, both at once so that every fault meets both paths), the supervisor
  (restarts any process that ended, ``respawn_delay_s`` after it noticed, as ``ros2 launch``'s
  ``respawn`` does; samples every process's PSS, descriptors and threads) and the fault
  injector (one fault at a time, each once the stack recovered from the previous one).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from excavator_common.clock_offset import realtime_minus_monotonic
from excavator_common.dds_profile import use_project_profile
from excavator_hil.bags.recorder import MOVED_TO_A_NEW_PARTICIPANT
from excavator_hil.demo.options import DemoOptions
from excavator_hil.local_services import ManagedProcess, free_port, stop_together, wait_for
from excavator_hil.soak import checks
from excavator_hil.soak.bounds import SoakBounds, load_bounds
from excavator_hil.soak.records import (
    DDS_NODES,
    PROCESSES,
    Command,
    FaultRecord,
    JointCommand,
    PlcSample,
    PlcWrite,
    ResourceSample,
    SoakRecords,
    StreamSample,
    Target,
)
from excavator_hil.soak.report import SoakReport, build_report
from excavator_hil.soak.schedule import (
    DASHBOARD_CLIENT,
    DDS_PEER_FROZEN,
    PLC_LINK_CUT,
    PLC_PAUSED,
    REDIS_RESTART,
    SIGKILL,
    SIGSTOP,
    Fault,
    make_schedule,
)

DRIVE_BASE_M_S = 0.2          # the slowest drive command [m/s]
DRIVE_STEP_M_S = 1e-4         # commands differ by this [m/s] ...
DRIVE_DISTINCT = 1000         # ... over this many commands (50 s at 20 Hz)
HEARTBEAT_PERIOD_S = 0.25     # the soak's heartbeat: a third of the bridge's 0.75 s timeout
RECORDED = ("joint_states", "soil/wrench")   # the streams whose gaps are judged
PLC_LOG_SIZE = 3000           # the virtual PLC's write log: ~20 s of writes


@dataclass
class SoakOptions:
    output_dir: Path = Path("output/soak")
    minutes: float = 20.0          # the fault phase [min] (start-up and the checks come on top)
    seed: int = 0
    respawn_delay_s: float = 2.0   # the supervisor restarts an ended process after this [s]
    mean_gap_s: float = 30.0       # between faults, on average [s]
    warmup_s: float | None = None  # per process life before its footprint is judged [s]
    sample_period_s: float = 2.0   # PSS / descriptors / threads [s]
    drive_span_m: float = 0.5      # the tracks drive back and forth this far from the start [m]
    # the arrangement its fault bounds are derived for (soak.bounds: the virtual PLC's own
    # first-order plant; the closed HIL loop's soak is not calibrated yet), with soil_node and
    # ik_node processes of their own, as the launch files run them (the default demo runs the
    # soil inside sim_node and ik_node in its process): the soak's faults kill, stop and cut
    # each of them like every other process of the dig path
    demo: DemoOptions = field(default_factory=lambda: DemoOptions(plant="standalone",
                                                                  soil_in_process=False,
                                                                  ik_in_sim_process=False,
                                                                  recorder_in_process=False))

    @property
    def duration_s(self) -> float:
        return 60.0 * self.minutes

    def warmup(self) -> float:
        return self.warmup_s if self.warmup_s is not None else min(120.0, 0.25 * self.duration_s)

    def window(self) -> float:
        return min(60.0, max(10.0, 0.1 * self.duration_s))

    def schedule(self) -> list[Fault]:
        """The faults of this soak: the first and the last window free of faults."""
        return make_schedule(self.seed, self.duration_s, PROCESSES, DDS_NODES, self.mean_gap_s,
                             quiet_head_s=self.window() + 2.0,
                             quiet_tail_s=self.window() + 10.0)


# --- the operator ---------------------------------------------------------------------------------

def _make_operator(redis_url: str, control_port: int, demo: DemoOptions, span_m: float) -> Any:
    """The demo's operator with what the soak needs on top (rclpy is imported here: after the
    ROS environment is set)."""
    from rclpy.impl.logging_severity import LoggingSeverity
    from sensor_msgs.msg import JointState

    from excavator_hil.demo.dig_cycle import default_dig_cycle
    from excavator_hil.demo.operator import (
        DRIVE_COMMAND_PERIOD_S,
        SETTLE_TIMEOUT_S,
        STILL_FOR_S,
        TARGET_PERIOD_S,
        DemoOperator,
    )
    from excavator_hil.errors import DemoError
    from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS
    from plc_bridge import redis_keys as keys

    class SoakOperator(DemoOperator):
        """Drives and digs at once, for ever, through faults; records what it commanded."""

        def __init__(self) -> None:
            super().__init__(redis_url, control_port, demo, keep_terrain=False)
            self.heartbeat.period_s = HEARTBEAT_PERIOD_S
            # the demo's warnings ("cannot keep up", rejected targets) are the soak's to
            # judge from its records, not to print a hundred times an hour
            self.get_logger().set_level(LoggingSeverity.ERROR)
            self.stop_event = threading.Event()
            self.commands: list[Command] = []
            self.targets: list[Target] = []
            self.cycles = 0            # dig cycles completed
            self.cycle_loads: list[float] = []   # peak bucket load of each [m^3]
            self.plan_errors = 0
            self.js_seen: deque[tuple[float, float]] = deque(maxlen=20000)   # (t, stamp)
            self.wrench_seen: deque[tuple[float, float]] = deque(maxlen=20000)
            self.jc_seen: deque[float] = deque(maxlen=5000)
            self.create_subscription(JointState, "joint_command", self._on_jc, 50)

        def _on_joints(self, msg: Any) -> None:
            super()._on_joints(msg)
            self.js_seen.append((time.monotonic(),
                                 msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec))

        def _on_wrench(self, msg: Any) -> None:
            super()._on_wrench(msg)
            self.wrench_seen.append((time.monotonic(),
                                     msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec))
            del self.wrenches[:-1000]   # the demo keeps them for its plot; the soak need not

        def _on_load(self, msg: Any, info: Any) -> None:
            super()._on_load(msg, info)
            del self.loads[:-1000]

        def _on_jc(self, _msg: Any) -> None:
            self.jc_seen.append(time.monotonic())

        # --- evidence for the injector ------------------------------------------------------
        def first_after(self, what: str, t: float, sim_after: float = -math.inf
                        ) -> float | None:
            seen: Any = {"joint_states": self.js_seen, "wrench": self.wrench_seen,
                         "joint_command": self.jc_seen}[what]
            for item in list(seen):
                tr, stamp = item if isinstance(item, tuple) else (item, math.inf)
                if tr >= t and stamp > sim_after:
                    return float(tr)
            return None

        def sim_time_at(self, t: float) -> float:
            before = [stamp for tr, stamp in list(self.js_seen) if tr <= t]
            return before[-1] if before else -math.inf

        # --- driving --------------------------------------------------------------------------
        def drive_loop(self) -> None:
            k = 0
            sign = 1.0
            x0: float | None = None
            while not self.stop_event.is_set():
                x = self.joints.get("base_x")
                if x is not None:
                    if x0 is None or abs(x - x0) > 5.0 * span_m:   # first, or a new simulation
                        x0 = x
                    if x > x0 + span_m:
                        sign = -1.0
                    elif x < x0 - span_m:
                        sign = 1.0
                value = sign * (DRIVE_BASE_M_S + DRIVE_STEP_M_S * (k % DRIVE_DISTINCT))
                try:
                    t = self._command(value)
                    self.commands.append(Command(k, value, t))
                    k += 1
                except (redis.RedisError, OSError):
                    pass   # Redis down or restarting: the next one goes out when it is back
                self.stop_event.wait(DRIVE_COMMAND_PERIOD_S)
            with contextlib.suppress(redis.RedisError, OSError):
                self._command(0.0)

        # --- digging --------------------------------------------------------------------------
        def dig_loop(self) -> None:
            k = 0
            while not self.stop_event.is_set():
                with self._lock:
                    joints = dict(self.joints)
                if not math.isfinite(self.sim_time) or not all(n in joints
                                                               for n in ACTIVE_JOINTS):
                    self.stop_event.wait(0.1)
                    continue
                try:
                    plan = default_dig_cycle(self.ik, [joints[n] for n in ACTIVE_JOINTS],
                                             time_scale=demo.time_scale)
                except DemoError:   # a pose no plan starts from (a simulation restarting)
                    self.plan_errors += 1
                    self.stop_event.wait(0.5)
                    continue
                t0 = prev = self.sim_time
                peak = 0.0
                still_since = math.inf
                while not self.stop_event.is_set():
                    now = self.sim_time
                    if now < prev - 1.0:
                        break   # the simulation restarted: a new plan from where it stands
                    prev = now
                    t = now - t0
                    still_since = min(still_since, t) if self._still() else math.inf
                    if t > plan.duration_s + 1.5 and (t - still_since >= STILL_FOR_S
                                                      or t > plan.duration_s
                                                      + SETTLE_TIMEOUT_S):
                        self.cycles += 1
                        self.cycle_loads.append(peak)
                        break
                    sample = plan.sample(min(t, plan.duration_s))
                    # its time on CLOCK_MONOTONIC, read before it goes out (a command that
                    # answers it comes later): never its wall stamp converted with an offset
                    # taken at start, which a wall-clock step (NTP, a VM resumed from a
                    # snapshot) moves by the step
                    sent = time.monotonic()
                    self._publish_target(sample.tip, sample.pitch)
                    self.targets.append(Target(k, sent,
                                               tuple(float(v) for v in sample.q)))
                    k += 1
                    if self.loads:
                        peak = max(peak, self.loads[-1][1])
                    self.stop_event.wait(TARGET_PERIOD_S)

        def bridge_status(self) -> str:
            try:
                return str(self.redis.get(keys.BRIDGE_STATUS))
            except redis.RedisError as exc:
                return f"(redis: {exc})"

    return SoakOperator()


# --- supervision ----------------------------------------------------------------------------------

@dataclass
class Supervised:
    """A process of the stack under the supervisor: ``handle`` is a ManagedProcess (or the
    LocalRedisServer for redis-server)."""

    name: str
    handle: Any
    life: int = 0
    spawned_at: float = 0.0
    killed: bool = False            # ended by the soak: no unexpected exit
    held: bool = False              # kept down on purpose (a Redis restart): not respawned
    dead_since: float | None = None
    phase: int = 0                  # the recorder's moves to a new participant (its log)

    @property
    def pid(self) -> int | None:
        proc = self.handle.proc
        return None if proc is None else int(proc.pid)

    def alive(self) -> bool:
        proc = self.handle.proc
        return proc is not None and proc.poll() is None


class Rig:
    """The running stack and its supervision."""

    def __init__(self, options: SoakOptions, bounds: SoakBounds):
        from excavator_hil.demo.run import DemoStack, process_layout

        self.options, self.bounds = options, bounds
        demo = options.demo
        demo.output_dir = options.output_dir
        self.stack = DemoStack(demo)
        self.machine = self.stack.machines[0]
        # the PLC's write log kept small: the observer copies it every second, and a log that
        # fills for minutes would read as growth of the PLC's memory
        self.machine.virtual_plc_args = ["--log-size", str(PLC_LOG_SIZE)]
        self.layout = process_layout(demo)
        self.logs = self.stack.logs
        self.bag_parts: list[Path] = [options.output_dir / "dig_bag"]
        self.dashboard_port = free_port()
        self.entries: dict[str, Supervised] = {}
        self.lock = threading.Lock()
        self.resources: list[ResourceSample] = []
        self.unexpected: list[tuple[float, str, int, str]] = []
        self.redis_losses: list[float] = []
        self.sampling = False
        self.proxy: ManagedProcess | None = None
        self.observer: ManagedProcess | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True, name="supervisor")

    # --- start and stop -------------------------------------------------------------------------
    def start(self) -> None:
        m = self.machine
        m.bridge_plc_port = free_port()
        self.proxy = ManagedProcess("excavator_hil.faults.tcp_proxy",
                                    ["--target-port", str(m.plc_port),
                                     "--port", str(m.bridge_plc_port)], self.logs,
                                    prefix=self.layout["bridge"])
        proxy = self.proxy
        wait_for(lambda: "TCP_PROXY READY" in proxy.log(), 30.0,
                 lambda: f"the link proxy: {proxy.log()[-2000:]}", period=0.1)
        self.stack.start()
        url = self.stack.redis_url(m)
        dashboard = ManagedProcess("excavator_hil.cli", [
            "dashboard", "--port", str(self.dashboard_port), "--redis-url", url], self.logs)
        self.observer = ManagedProcess("excavator_hil.soak.observer", [
            "--out", str(self.options.output_dir / "observed"), "--plc-port", str(m.plc_port),
            "--plc-control-port", str(m.plc_control_port), "--redis-url", url], self.logs)
        now = time.monotonic()
        self.entries["redis-server"] = Supervised("redis-server", self.stack.redis,
                                                  spawned_at=now)
        for name, proc in self.stack.procs.items():
            self.entries[name] = Supervised(name, proc, spawned_at=now)
        self.entries["dashboard"] = Supervised("dashboard", dashboard, spawned_at=now)
        missing = set(PROCESSES) - set(self.entries)
        if missing:
            raise RuntimeError(f"the stack has no {sorted(missing)}: the soak needs every "
                               "process of the demo (soil_in_process, ik_in_sim_process, "
                               "recorder_in_process and --joystick off)")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:   # not when start() failed before starting it
            self._thread.join(30.0)
        # the recorder first, the stack still running (demo/run.py's RECORDER_FIRST)
        recorder = self.entries.get("bag_record")
        if recorder is not None and recorder.alive():
            with contextlib.suppress(OSError):
                os.kill(recorder.handle.proc.pid, signal.SIGCONT)
            recorder.handle.stop(timeout=20.0)
        ending = [] if self.observer is None else [self.observer]
        for name in ("dashboard", *reversed(list(self.stack.procs))):
            entry = self.entries.get(name)
            if entry is not None and entry.alive():
                with contextlib.suppress(OSError):
                    os.kill(entry.handle.proc.pid, signal.SIGCONT)
                ending.append(entry.handle)
            elif entry is None and name in self.stack.procs:   # start() failed before it
                ending.append(self.stack.procs[name])
        stop_together(ending, timeout=20.0)   # at once: one by one took the sum of them
        self.stack.redis.stop()
        if self.proxy is not None:
            self.proxy.stop(timeout=5.0)

    def list_descriptors(self, path: Path) -> None:
        """Every process's open descriptors (what they point to), for a leak's diagnosis."""
        lines = []
        with self.lock:
            entries = list(self.entries.values())
        for e in entries:
            pid = e.pid
            if pid is None or not e.alive():
                continue
            lines.append(f"== {e.name} (life {e.life}, pid {pid})")
            with contextlib.suppress(OSError):
                for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
                    with contextlib.suppress(OSError):
                        lines.append(f"  {fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")

    # --- the supervisor -------------------------------------------------------------------------
    def _supervise(self) -> None:
        next_sample = 0.0
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self.lock:
                entries = list(self.entries.values())
            for e in entries:
                if e.held or e.alive():
                    continue
                if e.dead_since is None:
                    e.dead_since = now
                    if not e.killed:
                        self._unexpected(e, now)
                elif now - e.dead_since >= self.options.respawn_delay_s:
                    self._respawn(e)
            if self.sampling and now >= next_sample:
                next_sample = now + self.options.sample_period_s
                for e in entries:
                    if e.name == "bag_record" and isinstance(e.handle, ManagedProcess):
                        e.phase = e.handle.log().count(MOVED_TO_A_NEW_PARTICIPANT)
                    sample = _footprint(e, now)
                    if sample is not None:
                        self.resources.append(sample)

    def _unexpected(self, e: Supervised, now: float) -> None:
        code = e.handle.proc.returncode if e.handle.proc is not None else -1
        tail = ""
        if isinstance(e.handle, ManagedProcess):
            tail = "\n".join(e.handle.log().splitlines()[-15:])
        self.unexpected.append((now, e.name, int(code or 0), tail))

    def _respawn(self, e: Supervised) -> None:
        if e.name == "redis-server":
            e.handle.start()
            handle = e.handle
        elif e.name == "bag_record":
            part = self.options.output_dir / f"dig_bag_{len(self.bag_parts)}"
            self.bag_parts.append(part)
            args = list(e.handle.args)
            args[args.index("-o") + 1] = str(part)
            handle = e.handle.respawn(args)
        else:
            handle = e.handle.respawn()
        with self.lock:
            e.handle, e.life, e.spawned_at = handle, e.life + 1, time.monotonic()
            e.killed, e.dead_since = False, None

    # --- fault actions ----------------------------------------------------------------------------
    def entry(self, name: str) -> Supervised:
        with self.lock:
            return self.entries[name]

    def signal(self, name: str, sig: int) -> None:
        pid = self.entry(name).pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self, name: str) -> tuple[float, int]:
        """SIGKILL ``name``; returns when it is gone, and its life then."""
        e = self.entry(name)
        e.killed = True
        life = e.life
        if name == "redis-server":
            e.handle.kill()   # SIGKILL and reaped
        else:
            self.signal(name, signal.SIGKILL)
            e.handle.proc.wait(10.0)
        return time.monotonic(), life

    def wait_respawn(self, name: str, life: int, timeout_s: float) -> float | None:
        """When ``name`` was started again after ``life`` (None: not within the timeout)."""
        e = self.entry(name)
        try:
            wait_for(lambda: e.life > life, timeout_s, f"{name} restarted", period=0.05)
        except TimeoutError:
            return None
        return e.spawned_at


def _footprint(e: Supervised, now: float) -> ResourceSample | None:
    """PSS and its anonymous part [KiB] from /proc/<pid>/smaps_rollup, open descriptors,
    threads."""
    pid = e.pid
    if pid is None or not e.alive():
        return None
    try:
        fields: dict[str, int] = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Pss_Anon"):
                    fields[key] = int(rest.split()[0])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return None
    return ResourceSample(e.name, e.life, now, fields.get("Pss", 0), fds, threads,
                          fields.get("Pss_Anon", 0), e.phase)


# --- the fault injector ------------------------------------------------------------------------

class Injector:
    def __init__(self, rig: Rig, operator: Any, bounds: SoakBounds):
        self.rig, self.op, self.bounds = rig, operator, bounds
        self._control: Any = None
        self.notes: list[str] = []
        self.dashboard_refusals: list[checks.Violation] = []

    def plc(self) -> Any:
        from plc_bridge.virtual_plc.control import ControlClient

        if self._control is None:
            self._control = ControlClient(self.rig.machine.plc_control_port, timeout=3.0)
        return self._control

    def plc_call(self, fn: Callable[[Any], Any]) -> Any:
        """A control-channel call, reconnecting once (the PLC may have been restarted)."""
        for attempt in range(2):
            try:
                return fn(self.plc())
            except (OSError, RuntimeError, ValueError):
                if self._control is not None:
                    self._control.close()
                self._control = None
                if attempt:
                    raise
        return None

    def drove_since(self, t: float) -> bool:
        try:
            writes = self.plc_call(lambda c: c.writes(t))
        except (OSError, RuntimeError, ValueError):
            return False
        return any(w["refused"] is None and w["enable"] and not w["stop"]
                   and any(w[n] != 0.0 for n in ("speed_sp_left", "speed_sp_right"))
                   for w in writes)

    def run(self, fault: Fault) -> FaultRecord:
        kind, target = fault.kind, fault.target
        rig = self.rig
        if kind == SIGKILL:
            started, life = rig.kill(target)
            if target == "redis-server":
                rig.redis_losses.append(started)
            lifted = rig.wait_respawn(target, life, self.bounds.respawn_delay_s + 60.0)
            rec = FaultRecord(fault, started, lifted if lifted is not None else math.inf,
                              restarted=True)
            rec.ready = None if lifted is None else self.sign_of_life(target, lifted)
            return rec
        if kind in (SIGSTOP, DDS_PEER_FROZEN):
            rig.signal(target, signal.SIGSTOP)
            started = time.monotonic()
            time.sleep(fault.hold_s)
            lifted = time.monotonic()
            rig.signal(target, signal.SIGCONT)
            return FaultRecord(fault, started, lifted, ready=lifted)
        if kind == REDIS_RESTART:
            e = rig.entry("redis-server")
            e.held = True
            e.handle.stop()
            started = time.monotonic()
            rig.redis_losses.append(started)
            time.sleep(fault.hold_s)
            lifted = time.monotonic()
            e.handle.start()
            ready = time.monotonic()
            with rig.lock:
                e.life += 1
                e.spawned_at, e.held = ready, False
            return FaultRecord(fault, started, lifted, ready=ready, restarted=True)
        if kind == PLC_LINK_CUT:
            assert rig.proxy is not None
            rig.proxy.proc.send_signal(signal.SIGUSR1)
            started = time.monotonic()
            time.sleep(fault.hold_s)
            lifted = time.monotonic()
            rig.proxy.proc.send_signal(signal.SIGUSR2)
            return FaultRecord(fault, started, lifted, ready=lifted)
        if kind == PLC_PAUSED:
            self.plc_call(lambda c: c.faults(stall=True, freeze_alive=True))
            started = time.monotonic()
            time.sleep(fault.hold_s)
            lifted = time.monotonic()
            self.plc_call(lambda c: c.faults(stall=False, freeze_alive=False))
            return FaultRecord(fault, started, lifted, ready=lifted)
        if kind == DASHBOARD_CLIENT:
            return self.dashboard_client(fault)
        raise ValueError(f"unknown fault kind {kind!r}")

    def dashboard_client(self, fault: Fault) -> FaultRecord:
        from excavator_hil.faults.dashboard_client import (
            DashboardError,
            VanishingClient,
            fetch_page,
        )

        port = self.rig.dashboard_port
        started = time.monotonic()
        note = ""
        try:
            client = VanishingClient("127.0.0.1", port).open()
            started = time.monotonic()
            client.hold(fault.hold_s)
            note = f"page live: {client.frames} websocket frames"
            lifted = time.monotonic()
            client.vanish()
        except (OSError, DashboardError) as exc:
            lifted = time.monotonic()
            self.dashboard_refusals.append(checks.Violation(
                "dashboard", lifted, f"{fault.describe()}: the page did not serve a browser: "
                f"{type(exc).__name__}: {exc}"))
        try:   # it must go on serving (the next client shows it builds pages too)
            status, _ = fetch_page("127.0.0.1", port, path="/favicon.ico")
        except OSError as exc:
            status, note = 0, f"{note}; {exc}"
        if status != 200:
            self.dashboard_refusals.append(checks.Violation(
                "dashboard", time.monotonic(), f"{fault.describe()}: after the client "
                f"vanished, GET / answered {status or 'nothing'}"))
        return FaultRecord(fault, started, lifted, ready=lifted, note=note)

    def sign_of_life(self, name: str, after: float) -> float | None:
        """The first moment the restarted ``name`` showed life in the stack's own records."""
        deadline = after + self.bounds.startup_s
        op = self.op
        probes: dict[str, Callable[[], float | None]] = {
            "redis-server": lambda: after,
            "virtual_plc": lambda: self._plc_started(after),
            "plc_bridge": lambda: self._first_write(after),
            "sim_node": lambda: op.first_after("joint_states", after),
            "soil_node": lambda: op.first_after("wrench", after),
            "ik_node": lambda: op.first_after("joint_command", after),
            "bag_record": lambda: self._bag_started(after),
            "dashboard": self._dashboard_up,
        }
        probe = probes[name]
        while time.monotonic() < deadline:
            t = probe()
            if t is not None:
                return t
            time.sleep(0.1)
        return None

    def _plc_started(self, after: float) -> float | None:
        try:
            st = self.plc_call(lambda c: c.status())
        except (OSError, RuntimeError, ValueError):
            return None
        t = st.get("started_at")
        return float(t) if t is not None and t >= after else None

    def _first_write(self, after: float) -> float | None:
        try:
            writes = self.plc_call(lambda c: c.writes(after))
        except (OSError, RuntimeError, ValueError):
            return None
        return float(writes[0]["t"]) if writes else None

    def _bag_started(self, after: float) -> float | None:
        part = self.rig.bag_parts[-1]
        files = list(part.glob("*.mcap")) if part.is_dir() else []
        if not files:
            return None
        return max(after, files[0].stat().st_ctime - realtime_minus_monotonic())

    def _dashboard_up(self) -> float | None:
        from excavator_hil.faults.dashboard_client import fetch_page

        try:
            status, _ = fetch_page("127.0.0.1", self.rig.dashboard_port, timeout_s=2.0,
                                   path="/favicon.ico")
        except OSError:
            return None
        return time.monotonic() if status == 200 else None

    def wait_recovered(self, rec: FaultRecord) -> None:
        """Until driving and digging are seen again after the fault (or their bounds and a
        margin passed: the checks then say what did not come back)."""
        if rec.ready is None:
            return
        ready = rec.ready
        sim_at = -math.inf if (rec.restarted and rec.fault.target == "sim_node") \
            else self.op.sim_time_at(ready)
        deadline = ready + max(self.bounds.drive_rearm_s, self.bounds.dig_rearm_s) + 10.0
        while time.monotonic() < deadline:
            dig = (self.op.first_after("joint_command", ready) is not None
                   and self.op.first_after("wrench", ready, sim_at) is not None)
            if dig and self.drove_since(ready):
                return
            time.sleep(0.25)


# --- reading the records back -----------------------------------------------------------------

def _rows(path: Path) -> list[Any]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _bag_stamps(parts: list[Path], topics: tuple[str, ...]) -> tuple[dict[str, list[float]],
                                                                     list[str]]:
    """Header stamps [s] of ``topics`` in each bag part, in order; notes on salvaged parts."""
    import struct

    from excavator_hil.bags.io import messages_in_file_order
    from excavator_hil.errors import BagError

    names = [f"/{t}" for t in topics]
    stamps: dict[str, list[float]] = {t: [] for t in topics}
    notes = []
    for part in parts:
        if not part.is_dir():
            notes.append(f"{part.name}: missing")
            continue
        count = 0
        try:
            for m in messages_in_file_order(part, names):
                if len(m.data) >= 12:
                    sec, nsec = struct.unpack_from("<iI", m.data, 4)   # CDR LE: header.stamp
                    stamps[m.topic[1:]].append(sec + 1e-9 * nsec)
                    count += 1
        except BagError as exc:
            notes.append(f"{part.name}: unreadable ({exc})")
            continue
        if not (part / "metadata.yaml").is_file():
            notes.append(f"{part.name}: its recorder was killed; {count} messages of "
                         f"{', '.join(topics)} read from its complete chunks")
    return stamps, notes


def collect(out: Path, rig: Rig, op: Any, faults: list[FaultRecord], start: float,
            end: float) -> tuple[SoakRecords, list[str]]:
    obs = out / "observed"
    rec = SoakRecords(
        commands=list(op.commands), redis_losses=list(rig.redis_losses),
        plc_writes=[PlcWrite(r[0], r[1], r[2], r[3], tuple(r[4]), r[5])
                    for r in _rows(obs / "plc_writes.jsonl")],
        plc_samples=[PlcSample(r[0], r[1], tuple(r[2]), r[3], r[4])
                     for r in _rows(obs / "plc_samples.jsonl")],
        targets=list(op.targets),
        joint_commands=[JointCommand(r[0], r[1], tuple(r[2]))
                        for r in _rows(obs / "joint_commands.jsonl")],
        joint_states=[StreamSample(r[0], r[1]) for r in _rows(obs / "joint_states.jsonl")],
        wrenches=[StreamSample(r[0], r[1]) for r in _rows(obs / "wrenches.jsonl")],
        soil_mass=[(r[0], r[1]) for r in _rows(obs / "soil_mass.jsonl")],
        resources=list(rig.resources), faults=faults,
        unexpected_exits=list(rig.unexpected), start=start, end=end)
    rec.bag_stamps, notes = _bag_stamps(rig.bag_parts, RECORDED)
    return rec, notes


def dump_records(out: Path, records: SoakRecords, rig: Rig) -> None:
    """What the soak itself recorded (the observer wrote its own in ``observed/``), for a look
    after the run: commands, targets, faults, footprints, Redis losses."""
    from dataclasses import asdict

    own = out / "recorded"
    own.mkdir(exist_ok=True)
    for name, rows in (("commands", records.commands), ("targets", records.targets),
                       ("resources", records.resources)):
        with (own / f"{name}.jsonl").open("w") as f:
            f.writelines(json.dumps(list(asdict(r).values())) + "\n" for r in rows)
    faults = [{**asdict(f.fault), "started": f.started, "lifted": f.lifted, "ready": f.ready,
               "restarted": f.restarted, "note": f.note} for f in records.faults]
    (own / "faults.json").write_text(json.dumps(faults, indent=1, default=str))
    (own / "redis_losses.json").write_text(json.dumps(records.redis_losses))
    (own / "bag_parts.json").write_text(json.dumps([str(p) for p in rig.bag_parts]))


def warm_up(rig: Rig, op: Any, options: SoakOptions) -> None:
    """Before the faults, the stack does once what it will do all along: a whole dig cycle,
    a drive reversal, a dashboard page served and a file (its first page builds what every
    later one reuses; the file, the liveness check after a vanished client, starts a thread
    of the server's pool that stays for the next). The footprint of the processes started
    with the stack is judged from then on."""
    from excavator_hil.faults.dashboard_client import VanishingClient, fetch_page

    def serving() -> bool:
        with contextlib.suppress(OSError):
            return fetch_page("127.0.0.1", rig.dashboard_port, timeout_s=5.0,
                              path="/favicon.ico")[0] == 200
        return False
    dashboard = rig.entry("dashboard").handle
    wait_for(serving, options.demo.startup_timeout_s,
             lambda: f"the dashboard to serve: {dashboard.log()[-2000:]}", period=0.5)
    client = VanishingClient("127.0.0.1", rig.dashboard_port).open()
    client.hold(2.0)
    client.vanish()
    def warm() -> bool:
        return op.cycles >= 1 and {c.value_m_s > 0 for c in op.commands} == {True, False}
    wait_for(warm, options.demo.startup_timeout_s + 120.0,
             lambda: f"a first dig cycle and a drive reversal (cycles {op.cycles}, bridge "
                     f"{op.bridge_status()})", period=0.5)


# --- the run -----------------------------------------------------------------------------------

def run_soak(options: SoakOptions, log: Callable[[str], None] = print) -> SoakReport:
    """The whole soak; returns its report (also written to ``output_dir``)."""
    from excavator_hil.demo.operator import TARGET_PERIOD_S
    from excavator_hil.demo.run import _ros_environment, _spin_until_shutdown

    _ros_environment()
    import rclpy

    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("dig_bag*"), out / "observed"]:
        if stale.exists():
            import shutil

            shutil.rmtree(stale)
    bounds = load_bounds(options.respawn_delay_s, options.demo.startup_timeout_s,
                         DRIVE_BASE_M_S + DRIVE_STEP_M_S * DRIVE_DISTINCT, TARGET_PERIOD_S)
    schedule = options.schedule()
    log(f"soak: seed {options.seed} (replay with --seed {options.seed}), "
        f"{options.minutes:g} min, {len(schedule)} faults scheduled; output in {out}/")
    rig = Rig(options, bounds)
    use_project_profile()   # before the first participant: Fast DDS reads it then
    rclpy.init()
    op: Any = None
    faults: list[FaultRecord] = []
    threads: list[threading.Thread] = []
    end = math.inf
    t_up = time.monotonic()
    try:
        rig.start()
        op = _make_operator(rig.stack.redis_url(rig.machine), rig.machine.plc_control_port,
                            options.demo, options.drive_span_m)
        executor = rclpy.executors.SingleThreadedExecutor()
        executor.add_node(op)
        threads.append(threading.Thread(target=_spin_until_shutdown, args=(executor,),
                                        daemon=True, name="operator-spin"))
        threads[-1].start()

        def up() -> bool:
            rig.stack.check_alive()
            return bool(op.ready())
        wait_for(up, options.demo.startup_timeout_s,
                 lambda: f"the stack to come up ({op.waiting_for()})", period=0.2)
        for target in (op.drive_loop, op.dig_loop):
            threads.append(threading.Thread(target=target, daemon=True, name=target.__name__))
            threads[-1].start()
        injector = Injector(rig, op, bounds)
        log(f"soak: stack up in {time.monotonic() - t_up:.1f} s; warming up (a dig cycle, "
            "a drive reversal, a dashboard page)")
        warm_up(rig, op, options)
        injector.plc()   # its control connection open before the footprints count
        t0 = time.monotonic()
        log(f"soak: warm in {t0 - t_up:.1f} s; faults for {options.minutes:g} min")
        rig.sampling = True
        end = t0 + options.duration_s
        for fault in schedule:
            due = t0 + fault.at_s
            while time.monotonic() < min(due, end):
                time.sleep(min(0.2, max(0.0, due - time.monotonic())))
            if time.monotonic() >= end:
                break
            log(f"soak: {time.monotonic() - t0:6.1f} s  {fault.describe()}")
            rec = injector.run(fault)
            faults.append(rec)
            injector.wait_recovered(rec)
        while time.monotonic() < end:
            time.sleep(0.2)
        end = time.monotonic()
        rig.sampling = False
        rig.list_descriptors(out / "logs" / "descriptors_at_end.txt")
        op.stop_event.set()
        for t in threads[1:]:
            t.join(10.0)
        violations_runner = injector.dashboard_refusals
    finally:
        if op is not None:
            op.stop_event.set()
            op.close()
        rig.stop()
        rclpy.try_shutdown()
    records, notes = collect(out, rig, op, faults, t0, end)
    dump_records(out, records, rig)
    report = build_report(options.seed, options.minutes, schedule, records, bounds,
                          options.warmup(), options.window(), notes, violations_runner,
                          cycles=op.cycles, cycle_loads=op.cycle_loads)
    (out / "report.txt").write_text(report.text + "\n")
    (out / "report.json").write_text(json.dumps(report.summary, indent=2, default=str))
    return report

