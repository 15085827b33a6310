"""The demo's operator: an rclpy node that drives the tracks through Redis and digs by IK targets.

It plays the two upstream layers a real deployment has: the operational layer (ARTOF Redis keys
with a heartbeat) for the tracks, and a task planner (bucket-tip targets for ``ik_node``) for the
arm. It also measures what the summary reports.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import redis
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.node import Node
from rclpy.subscription import MessageInfo
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64, Float64MultiArray

from excavator_hil.demo.clock_watch import SimClockWatch
from excavator_hil.demo.dig_cycle import DigCyclePlan, default_dig_cycle
from excavator_hil.demo.drive_path import DrivePath
from excavator_hil.demo.hil_record import HilRecord
from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.progress import Progress
from excavator_hil.demo.soil_coupling import SoilCoupling
from excavator_hil.demo.summary import DemoSummary
from excavator_hil.hil_harness import Heartbeat, timed_mset
from excavator_hil.sim_clock_map import SimClockMap
from excavator_kinematics.bucket_orientation import bucket_quaternion
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS, InverseKinematics
from plc_bridge import redis_keys as keys
from plc_bridge.virtual_plc.control import ControlClient

# Drive-phase command period [s]: 20 Hz, so the few seconds of driving time a few dozen
# commands' Redis -> PLC latency (at 5 Hz there were 11: their p99 was only their worst)
DRIVE_COMMAND_PERIOD_S = 0.05
# each drive command differs from the last by a step of this (so its arrival in the control DB
# is recognised): standalone 1 mm/s; with the loop closed 0.1 mm/s, so the set-point the PLC
# holds the machine to wanders by 0.2 % at most, well inside the steady-state error it shows
SPEED_STEP_M_S = {"standalone": 0.001, "closed": 0.0001}

TARGET_PERIOD_S = 0.05  # IK targets at 20 Hz
STILL_RAD_S = 2e-4  # joints slower than this count as settled [rad/s] ...
STILL_FOR_S = 0.5  # ... for this long [s of sim time]
TERRAIN_PATCH_DEPTH = 5   # soil/terrain_patch queue of the final rendering [messages]
RENDER_SHADOW_SIZE = 2048  # the final picture's shadow map [px]
# /clock samples kept for placing loads: 10 s of them (a load is taken at most ~1 s late)
CLOCK_SAMPLES_KEPT, CLOCK_SAMPLES_KEPT_NS = 2000, 10_000_000_000
SETTLE_TIMEOUT_S = 8.0  # longest hold of the final target after the last leg [s of sim time]


class DemoOperator(Node):
    def __init__(self, redis_url: str, plc_control_port: int, options: DemoOptions,
                 namespace: str = "", sim_overrides: dict[str, Any] | None = None,
                 keep_terrain: bool = True, path: DrivePath | None = None):
        # namespace: the machine's ("" alone); its sim_node's parameters beyond the shipped
        # config (place, terrain grid) for the final rendering; keep_terrain: keep the soil
        # node's terrain patches for that rendering (a run of hours must not: the whole grid
        # arrives twice a second)
        super().__init__("demo_operator", namespace=f"/{namespace}" if namespace else "")
        self.options = options
        # path: the closed loop's drive over soft soil and a ridge (None: straight ahead, as
        # far as options.drive_distance_m); hil: what the closed loop's drive recorded
        self.path = path
        self.hil: HilRecord | None = HilRecord() if options.plant == "closed" else None
        self.machine = namespace
        self._prefix = f"{namespace}/" if namespace else ""   # its frames and its nodes' status
        self.sim_overrides = dict(sim_overrides or {})
        # the machine preset sim_node simulates ("" the default machine) and what its
        # simulation needs beyond the overrides, for the final rendering
        self.preset = ""
        self.render_overrides: dict[str, Any] = {}
        self.ik = InverseKinematics(default_geometry())
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=1.0, decode_responses=True)
        self.heartbeat = Heartbeat(redis_url).start()
        self._plc_control_port = plc_control_port
        self._lock = threading.Lock()
        self.sim_time = math.nan
        self.joints: dict[str, float] = {}
        self.velocities: dict[str, float] = {}
        self.track_distance = 0.0
        self._last_js_t = math.nan
        # Time series for the plot: (sim time, fx, fy, fz) and (sim time, load).
        self.wrenches: list[tuple[float, float, float, float]] = []
        # the operator starts once the soil loop is closed (demo/soil_coupling.py)
        self.soil = SoilCoupling()
        self._soil_late_said = False
        self.loads: list[tuple[float, float]] = []
        self.phase_marks: list[tuple[float, str]] = []
        self.rejected_targets = 0
        # the latest periodic status of sim_node and soil_node (key -> value), and the
        # "cannot keep up" warnings seen
        self.sim_status: dict[str, str] = {}
        self.soil_status: dict[str, str] = {}
        self.teleop_status: dict[str, str] = {}  # --joystick: teleop_node's counters
        self.lag_warnings = 0
        # (command time [s, monotonic], Redis -> PLC latency [ms]) of the drive phase
        self.latency_samples: list[tuple[float, float]] = []
        # the drive's commands no control-DB write carried: (s after the first, why)
        self.not_carried: list[tuple[float, str]] = []
        self._phase = ""
        self.session_start_s = 0.0  # [s of sim time] the dig session's start (_play_session)
        self.session_lead_s = 0.0   # [s of sim time] that start past the /clock seen then
        self.target_pub = self.create_publisher(PoseStamped, "target_pose", 10)
        self.create_subscription(Clock, "/clock", self._on_clock, 10)
        self.create_subscription(JointState, "joint_states", self._on_joints, 10)
        self.create_subscription(WrenchStamped, "soil/wrench", self._on_wrench, 50)
        # 1 s of loads: a starved operator takes them late, not fewer of them
        self.create_subscription(Float64, "soil/bucket_load", self._on_load, 100)
        # /clock by the time it was sent: a load (no header) is placed at the simulated time
        # it was sent, not at the one when this process got to it (soil_moved_m3)
        self._clock_sent = SimClockMap()
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        # The soil's changed terrain regions, replayed into the rendering model at the end.
        self.terrain_patches = TerrainPatches()
        if self.hil is not None:   # the closed loop: what the plant link hands the PLC
            from rclpy.qos import qos_profile_sensor_data

            self.create_subscription(JointState, "plant/sensors", self._on_sensors,
                                     qos_profile_sensor_data)
            self.create_subscription(Imu, "imu", self._on_imu, qos_profile_sensor_data)
        # (one terrain for a fleet: the one soil_node's topic, in the root namespace)
        if keep_terrain:
            # a shallow queue: each message may be a whole grid (~0.8 MB), and DDS keeps a
            # buffer of the largest size per slot (depth 50 grew this process by ~30 MB on a
            # busy host); a patch lost while this process lags is overwritten by the whole
            # grid the soil sends after every change (TerrainPatches), the last one included
            self.create_subscription(Float64MultiArray, "/soil/terrain_patch" if namespace
                                     else "soil/terrain_patch", self._on_patch,
                                     TERRAIN_PATCH_DEPTH)

    # --- subscriptions -------------------------------------------------------------------
    def _on_clock(self, msg: Clock, info: MessageInfo) -> None:
        self.sim_time = msg.clock.sec + msg.clock.nanosec * 1e-9
        sent_ns = int(info["source_timestamp"])
        self._clock_sent.add(sent_ns, msg.clock.sec * 1_000_000_000 + msg.clock.nanosec)
        if len(self._clock_sent) > CLOCK_SAMPLES_KEPT:
            self._clock_sent.forget_before(sent_ns - CLOCK_SAMPLES_KEPT_NS)
        if self.hil is not None and self._phase == "drive":
            # wall (monotonic) -> simulated time, for the PLC's logged set-points: at the time
            # sim_node sent it (this niced process may take it hundreds of ms later on a busy
            # host; the delay on the wall clock, the same host's)
            late_s = max(0.0, time.time() - sent_ns * 1e-9)
            self.hil.clock.append((time.monotonic() - late_s, self.sim_time))

    def _on_sensors(self, msg: JointState) -> None:
        if self.hil is None or self._phase != "drive":
            return
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        v = dict(zip(msg.name, msg.velocity, strict=False))
        e = dict(zip(msg.name, msg.effort, strict=False))
        with self._lock:
            x = self.joints.get("base_x", math.nan)
        self.hil.sensors.append((t, v["track_left"], v["track_right"],
                                 v.get("ground_speed", math.nan), e["track_left"],
                                 e["track_right"], x))

    def _on_imu(self, msg: Imu) -> None:
        if self.hil is None or self._phase != "drive":
            return
        from plc_bridge.plant_link.core import roll_pitch

        q = msg.orientation
        _, pitch = roll_pitch(q.x, q.y, q.z, q.w)
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        # REP-103 pitch is positive nose down: nose up positive for the plot
        self.hil.imu.append((t, float(msg.angular_velocity.z), -pitch))

    def _on_joints(self, msg: JointState) -> None:
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self._lock:
            self.joints = dict(zip(msg.name, msg.position, strict=False))
            self.velocities = dict(zip(msg.name, msg.velocity, strict=False))
            vl = self.velocities.get("track_left", 0.0)
            vr = self.velocities.get("track_right", 0.0)
            if math.isfinite(self._last_js_t) and t > self._last_js_t:
                self.track_distance += abs(0.5 * (vl + vr)) * (t - self._last_js_t)
            self._last_js_t = t

    def _on_wrench(self, msg: WrenchStamped) -> None:
        f = msg.wrench.force
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.wrenches.append((t, f.x, f.y, f.z))
        self.soil.on_wrench(t, self.sim_time, time.monotonic())

    def _on_load(self, msg: Float64, info: MessageInfo) -> None:
        if self._clock_sent.started:
            t = 1e-9 * self._clock_sent.at(int(info["source_timestamp"]))
        else:
            t = self.sim_time if math.isfinite(self.sim_time) else 0.0
        self.loads.append((t, msg.data))

    def soil_moved_m3(self) -> float:
        """Soil the dump moved [m^3]: the load as it entered the dump (the latest before the
        dump phase began, after the lift began: not the peak, since a heap that falls over the
        lip while lifting (issue 14.7) lands by the trench, not on the pile) less the least
        load from the dump on. Judged on the loads' and the phases' simulated times once the
        session is over, not on the phase current when a load arrived: a starved operator
        takes a burst of queued loads in whatever phase it is in by then."""
        starts = {name: t for t, name in self.phase_marks}
        if "dump" not in starts:
            return 0.0
        t_dump, t_lift = starts["dump"], starts.get("lift", -math.inf)
        entering = [v for t, v in self.loads if t_lift <= t < t_dump]
        after = [v for t, v in self.loads if t >= t_dump]
        if not entering or not after:
            return 0.0
        return max(0.0, entering[-1] - min(after))

    def _on_patch(self, msg: Float64MultiArray) -> None:
        dims = msg.layout.dim
        if len(dims) != 2 or len(msg.data) < 2:
            return
        # a copy of the float64 buffer (one full grid is ~10^5 values at 2 Hz)
        self.terrain_patches.add(dims[0].size, dims[1].size, np.array(msg.data, dtype=float))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            own_sim = status.name.startswith(f"{self._prefix}sim_node")
            if (own_sim or status.name.startswith("soil_node")) and \
                    status.message.startswith("running"):
                values = {kv.key: kv.value for kv in status.values}
                if own_sim:
                    self.sim_status = values
                    if "cannot keep up" in status.message:
                        self.lag_warnings += 1
                        self.get_logger().warning(status.message)
                else:
                    self.soil_status = values
            elif status.name.startswith(f"{self._prefix}teleop_node"):
                self.teleop_status = {kv.key: kv.value for kv in status.values}
            if status.name.startswith(f"{self._prefix}ik_node") and status.level == b"\x02":
                self.rejected_targets += 1
                self.get_logger().warning(f"IK rejected a target: {status.message}")

    # --- readiness -----------------------------------------------------------------------
    def _missing(self) -> list[str]:
        missing = []
        if not math.isfinite(self.sim_time):
            missing.append("/clock from sim_node (published only with use_sim_time:=true)")
        if not self.joints:
            missing.append("joint_states from sim_node")
        if self.target_pub.get_subscription_count() == 0:
            missing.append("ik_node subscribed to target_pose")
        if not self.soil.ready(time.monotonic()):
            missing.append(f"a soil/wrench answering a pose at most {self.soil.live_age_s:g} s "
                           "old (the soil coupling live)")
        elif self.soil.late(time.monotonic()) and not self._soil_late_said:
            self._soil_late_said = True
            self.get_logger().warning(
                f"soil_node has answered for {self.soil.late_start_s:g} s, never within "
                f"{self.soil.live_age_s:g} s of the pose (now {self.soil.lag_s:.2f} s behind "
                "/clock): this host cannot hold the soil coupling in real time; the run starts "
                "with the soil forces late (sim_node's diagnostics count the periods without a "
                "fresh one). Run fewer machines, or on a less busy host")
        try:
            if self.redis.get(keys.BRIDGE_STATUS) is None:
                missing.append("plc_bridge status in Redis")
        except redis.RedisError as exc:
            missing.append(f"Redis ({exc})")
        return missing

    def ready(self) -> bool:
        return not self._missing()

    def waiting_for(self) -> str:
        return ", ".join(self._missing()) or "nothing"

    # --- the run -------------------------------------------------------------------------
    def run(self, check_alive: Callable[[], None]) -> None:
        self._drive(check_alive)
        self._dig(check_alive)

    def _command(self, longitudinal: float) -> float:
        """Write a velocity command; returns when Redis set it, as ``time.monotonic()`` [s].

        The time is Redis's own (``TIME`` in the same MULTI/EXEC, so taken right after the MSET
        and before any other client's command), not this process's clock before the write: the
        operator runs at a lower priority than the bridge and may wait for a CPU between its
        clock reading and the write, which is not the bridge's latency."""
        return timed_mset(self.redis, {keys.LONGITUDINAL: f"{longitudinal:.10g}",
                                       keys.LATERAL: "0", keys.ANGULAR: "0"})

    def _drive(self, check_alive: Callable[[], None]) -> None:
        """Drive forward through Redis; every ``DRIVE_COMMAND_PERIOD_S`` a slightly different
        speed is written and its arrival in the PLC's control DB timed from the moment Redis
        held it (the bridge's Redis -> PLC latency). Straight ahead for
        ``options.drive_distance_m`` of track travel, or with a :class:`DrivePath` (the loop
        closed) until the machine's x over ground reaches the path's end."""
        o = self.options
        self._phase = "drive"
        self.phase_marks.append((self.sim_time, "drive"))
        plc = ControlClient(self._plc_control_port)
        path = self.path
        speed0 = path.speed_m_s if path is not None else o.drive_speed_m_s
        step = SPEED_STEP_M_S[o.plant]
        total = path.distance_m if path is not None else o.drive_distance_m
        progress = Progress(total, label=self.machine)
        sent: list[tuple[float, float]] = []  # (monotonic time, commanded speed)
        start = self.track_distance
        with self._lock:
            x0 = self.joints.get("base_x", 0.0)

        def done() -> float:
            """How far along [m]: over ground on a path, else the tracks' travel."""
            if path is None:
                return self.track_distance - start
            with self._lock:
                return self.joints.get("base_x", x0) - x0

        deadline = time.monotonic() + 10.0 * total / speed0 + 20.0
        k = 0
        while done() < total:
            check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the machine travelled {done():.2f} m of {total:.2f} m in time "
                    f"({o.plant} loop: is {'the plant link' if path else 'plc/wheel_states'} "
                    f"reaching sim_node?); bridge status: "
                    f"{self.redis.get(keys.BRIDGE_STATUS)!r}: "
                    f"{self.redis.get(keys.BRIDGE_DETAIL)!r}")
            speed = speed0 + step * (k % 10)
            sent.append((self._command(speed), speed))
            k += 1
            progress.update(done(), "drive", f"{done():.2f} m")
            time.sleep(DRIVE_COMMAND_PERIOD_S)
        self._command(0.0)
        wait_until_still = time.monotonic() + 10.0
        while time.monotonic() < wait_until_still:
            v = self.velocities
            if abs(v.get("track_left", 0.0)) + abs(v.get("track_right", 0.0)) < 0.01:
                break
            time.sleep(0.05)
        progress.done()
        since = sent[0][0] if sent else 0.0   # the drive's first command [s, monotonic]
        writes = plc.writes(since)
        self.latency_samples = _latency_samples(sent, writes)
        self.not_carried = commands_not_carried(sent, writes, _carries_speed)
        if self.hil is not None:
            self.hil.setpoints = [(w["t"], *_taken_setpoints(w)) for w in writes
                                  if w.get("refused") is None]
            self.hil.modes = plc.modes(since)
        plc.close()

    def _dig(self, check_alive: Callable[[], None]) -> None:
        o = self.options
        with self._lock:
            q0 = np.array([self.joints[n] for n in ACTIVE_JOINTS])
        plan: DigCyclePlan = default_dig_cycle(self.ik, q0, time_scale=o.time_scale)

        def command(t: float) -> str:
            sample = plan.sample(min(t, plan.duration_s))  # then hold the final target
            self._publish_target(sample.tip, sample.pitch)
            return sample.phase

        self._play_session(plan.duration_s, command, check_alive, settle_min_s=1.5,
                           settle_max_s=SETTLE_TIMEOUT_S, phase_starts=plan.phase_starts_s)

    def _play_session(self, duration_s: float, command: Callable[[float], str],
                      check_alive: Callable[[], None], settle_min_s: float,
                      settle_max_s: float, phase_starts: Sequence[float] = ()) -> None:
        """The dig loop of every operator (IK targets, joysticks): every ``TARGET_PERIOD_S``
        ``command(t)`` publishes the input for ``t`` [s of sim time since the start] and names
        its phase (marked in :attr:`phase_marks` when it changes). After ``duration_s +
        settle_min_s`` it ends once the machine has been still for ``STILL_FOR_S`` (a single
        slow sample may be an overshoot's turning point), so the final pose recorded is a
        settled one; at the latest at ``duration_s + settle_max_s``.

        ``phase_starts`` [s from the start]: where the plan's phases begin. An operator starved
        of CPU while the simulation runs on can step over a short phase between two samples;
        the input at every boundary it stepped over is still published, in order, and the
        phase marked at the plan's time, so the path passes every waypoint and the record
        names every phase on any host. ``session_start_s`` holds the start [s of sim time]
        while it runs: ``session_lead_s`` past the simulated time this operator has seen (a
        scheduled session's first input must be stamped ahead of the simulation, which this
        operator may see late when it is starved; ``t`` is negative until then)."""
        progress = Progress(duration_s + max(settle_min_s, STILL_FOR_S), label=self.machine)
        t0 = self.session_start_s = self.sim_time + self.session_lead_s
        prev_t = -math.inf
        still_since = math.inf
        clock = SimClockWatch(what=f"/{self.machine}/sim_node" if self.machine else "sim_node")
        while True:
            check_alive()
            clock.update(self.sim_time, time.monotonic())   # a stopped simulation: an error
            t = self.sim_time - t0
            for t_b in (b for b in phase_starts if prev_t < b < t):
                self._mark_phase(command(t_b), t0 + t_b)
            still_since = min(still_since, t) if self._still() else math.inf
            if t > duration_s + settle_min_s and (t - still_since >= STILL_FOR_S
                                                  or t > duration_s + settle_max_s):
                break
            label = command(t)
            if t >= 0.0:   # (before: a lead's inputs out, no phase begun)
                self._mark_phase(label, self.sim_time)
            prev_t = t
            load = self.loads[-1][1] if self.loads else 0.0
            progress.update(max(t, 0.0), self._phase, f"bucket {load:.3f} m^3")
            time.sleep(TARGET_PERIOD_S)
        progress.done()

    def _mark_phase(self, label: str, sim_time_s: float) -> None:
        if label != self._phase:
            self._phase = label
            self.phase_marks.append((sim_time_s, label))

    def _still(self) -> bool:
        """Every active joint slower than STILL_RAD_S."""
        with self._lock:
            v = [abs(self.velocities.get(n, math.inf)) for n in ACTIVE_JOINTS]
        return max(v) < STILL_RAD_S

    def _publish_target(self, tip: np.ndarray, pitch: float) -> float:
        """Publish an IK target; returns its stamp [s, this node's clock]."""
        msg = PoseStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = f"{self._prefix}base_link"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in tip)
        x, y, z, w = bucket_quaternion(math.atan2(tip[1], tip[0]), pitch)
        o = msg.pose.orientation
        o.x, o.y, o.z, o.w = x, y, z, w
        self.target_pub.publish(msg)
        return float(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)

    # --- results -------------------------------------------------------------------------
    def summary(self) -> DemoSummary:
        s = DemoSummary()
        s.soil_moved_m3 = self.soil_moved_m3()
        s.peak_bucket_load_m3 = max((v for _, v in self.loads), default=0.0)
        s.peak_soil_force_n = max((math.sqrt(x * x + y * y + z * z)
                                   for _, x, y, z in self.wrenches), default=0.0)
        s.track_distance_m = self.track_distance
        first = self.phase_marks[0][0] if self.phase_marks else self.sim_time
        s.sim_time_s = self.sim_time - first
        if self.latency_samples:
            t0 = self.latency_samples[0][0]
            latencies_ms = [ms for _, ms in self.latency_samples]
            s.bridge_latency_p50_ms = float(np.percentile(latencies_ms, 50))
            s.bridge_latency_p99_ms = float(np.percentile(latencies_ms, 99))
            s.bridge_latency_max_ms = float(max(latencies_ms))
            s.bridge_latencies = [(round(t - t0, 4), round(ms, 3))
                                  for t, ms in self.latency_samples]
        s.bridge_not_carried = list(self.not_carried)
        try:
            s.bridge_cycles = int(self.redis.get(keys.counter_key("cycles")) or 0)
            s.bridge_overruns = int(self.redis.get(keys.counter_key("overruns")) or 0)
        except redis.RedisError:
            pass
        s.rejected_targets = self.rejected_targets
        sim, soil = self.sim_status, self.soil_status
        s.lag_ms_p99 = _number(sim.get("lag_ms_p99"))
        s.lag_ms_max = _number(sim.get("lag_ms_max_since_start"))
        s.slipped_s = _number(sim.get("slipped_s"), 0.0)
        s.lag_warnings = self.lag_warnings
        s.real_time_held = self.lag_warnings == 0 and s.slipped_s == 0.0
        s.wrench_age_ms_p50 = _number(sim.get("wrench_age_ms_p50"))
        s.wrench_age_ms_p99 = _number(sim.get("wrench_age_ms_p99"))
        s.wrench_age_ms_max = _number(sim.get("wrench_age_ms_max_since_start"))
        s.wrench_stale_periods = int(_number(sim.get("wrench_stale_periods"), 0.0))
        s.wrench_applied_periods = int(_number(sim.get("wrench_applied_periods"), 0.0))
        s.poses_superseded = int(_number(soil.get("poses_superseded"), 0.0))
        s.sim_commands_dropped = _dropped(sim)
        if self.teleop_status:
            t = self.teleop_status
            s.teleop = {"commands": int(_number(t.get("commands"), 0.0)),
                        "holds": int(_number(t.get("holds"), 0.0)),
                        "joys_dropped": _dropped(t),
                        "last_dropped_age_s": _number(t.get("last_dropped_age_s")),
                        "max_command_age_s": _number(t.get("max_command_age_s")),
                        # the scheduled session (--joystick): Joys that acted later than
                        # their stamp, commands that came past theirs, lockstep waits given up
                        "joys_restamped": int(_number(t.get("joys_restamped"), 0.0)),
                        "commands_past_stamp": int(_number(sim.get("commands_past_stamp"),
                                                           0.0)),
                        "command_lockstep_timeouts": int(_number(
                            sim.get("command_lockstep_timeouts"), 0.0))}
        s.phases = [name for _, name in self.phase_marks]
        s.plant = self.options.plant
        if self.hil is not None and self.path is not None:
            from excavator_hil.demo import hil_record

            gauge, half, limit = self._drive_geometry()
            f = hil_record.figures(self.hil, self.path, limit, gauge, half)
            s.loop_steady_error_pct = list(f.steady_error_pct)
            s.loop_steady_window_s = f.steady_window_s
            s.loop_uphill_error_pct = f.uphill_error_pct
            s.loop_uphill_window_s = f.uphill_window_s
            s.loop_ridge_worst_pct = f.ridge_worst_pct
            s.loop_grade_deg = math.degrees(self.path.steepest_grade_rad)
            s.loop_peak_slip = list(f.peak_slip)
            s.loop_peak_slip_where = f.peak_slip_where
            s.loop_mean_slip = dict(f.mean_slip_by_ground)
            s.loop_steepest_pitch_deg = f.steepest_pitch_deg
            s.loop_saturated_s = f.saturated_s
            s.loop_peak_torque_nm = f.peak_torque_nm
            s.loop_torque_limit_nm = limit
        return s

    def _drive_geometry(self) -> tuple[float, float, float]:
        """(gauge [m], half the contact length [m], the PLC's torque limit [N m])."""
        from excavator_sim.sim_config import load_sim_config
        from plc_bridge.config import load_virtual_plc

        dt = load_sim_config(overrides={"drive_mode": "plant"},
                             machine=self.preset or None).drivetrain
        assert dt is not None
        tracks = dt.params.tracks
        return (tracks.gauge_m, 0.5 * tracks.contact_length_m,
                load_virtual_plc().torque_limit_nm)

    def plot_drive(self, path: Path) -> bool:
        """The closed loop's drive plot (set-point against measured speed per track, slip,
        torque, pitch); False when there is none (standalone, or no drive path)."""
        if self.hil is None or self.path is None:
            return False
        from excavator_hil.demo import hil_record

        gauge, half, limit = self._drive_geometry()
        hil_record.plot(self.hil, self.path, path, gauge, half, limit)
        return True

    def plot_forces(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax_f, ax_l) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        if self.wrenches:
            w = np.array(self.wrenches)
            t = w[:, 0] - w[0, 0]
            for col, label in ((1, "f_x"), (2, "f_y"), (3, "f_z")):
                ax_f.plot(t, w[:, col] / 1000, label=label, lw=0.8)
            ax_f.plot(t, np.linalg.norm(w[:, 1:], axis=1) / 1000, "k", label="|f|", lw=1.2)
            origin = w[0, 0]
        else:
            origin = self.phase_marks[0][0] if self.phase_marks else 0.0
        ax_f.set_ylabel("soil force on bucket [kN]")
        ax_f.legend(loc="upper right", ncol=4)
        if self.loads:
            lo = np.array(self.loads)
            ax_l.plot(lo[:, 0] - origin, lo[:, 1], "tab:brown")
        ax_l.set_ylabel("bucket load [m$^3$]")
        ax_l.set_xlabel("simulated time [s]")
        for t_mark, name in self.phase_marks:
            for ax in (ax_f, ax_l):
                ax.axvline(t_mark - origin, color="0.7", lw=0.6)
            ax_f.annotate(name, (t_mark - origin, 1.0), xycoords=("data", "axes fraction"),
                          fontsize=8, rotation=90, va="top")
        fig.suptitle("Dig cycle: soil force (DiMaio model) and bucket load")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    def render_final(self, path: Path) -> None:
        """Render the machine in its last reported pose on the dug terrain (a MuJoCo model built
        in this process from the same geometry, the soil node's terrain patches applied)."""
        from excavator_hil.render import render_png
        from excavator_kinematics.geometry import default_geometry
        from excavator_kinematics.linkage import Linkage
        from excavator_sim.sim_config import load_sim_config
        from excavator_sim.simulation import ExcavatorSimulation
        from excavator_sim.terrain_patch import flat_to_patch

        with self._lock:
            joints = dict(self.joints)
        # a measured pose may sit a hair past a stroke's end (the oil column's compliance at
        # the end stop, e.g. a bucket curled full: 144.6 deg + 1e-4): clamp it into the range
        # an initial pose must keep, or the picture of a good run is lost
        limits = Linkage(default_geometry()).joint_limits
        for name, (lo, hi) in limits.items():
            if name in joints:
                joints[name] = min(max(joints[name], lo), hi)
        overrides: dict[str, Any] = {**self.sim_overrides,
                                     **{f"initial.{n}_rad": joints[n] for n in ACTIVE_JOINTS}}
        for joint, key in (("base_x", "base_x_m"), ("base_y", "base_y_m"),
                           ("base_yaw", "base_yaw_rad")):
            if joint in joints:
                overrides[f"initial.{key}"] = joints[joint]
        overrides.update(self.render_overrides)
        sim = ExcavatorSimulation(load_sim_config(overrides=overrides,
                                                  machine=self.preset or None))
        for ni, nj, data in self.terrain_patches.kept:
            i0, j0, heights = flat_to_patch(ni, nj, data)
            sim.terrain.set_region(i0, j0, heights)
        # a 2048 px shadow map instead of MuJoCo's 4096: the same picture at 1280 x 720, and
        # ~45 MiB less for the software renderer at the demo's end (issue 32)
        sim.model.vis.quality.shadowsize = RENDER_SHADOW_SIZE
        y = joints.get("base_y", 0.0)
        render_png(sim, path, width=1280, height=720, lookat=(3.0, 2.0 + y, 0.0), distance=13.0,
                   azimuth=-150.0, elevation=-35.0)

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self._command(0.0)
        self.heartbeat.stop()
        self.redis.close()


class TerrainPatches:
    """The terrain patches (``soil/terrain_patch``: ``ni``, ``nj``, ``[i0, j0, heights...]``)
    that replayed in order give the latest terrain: only those since the latest patch that
    covers all the ones kept (the whole grid comes at start and twice a second while it
    changes), so it holds a grid or two (~1 MB) however long the run. Keeping every patch
    grew the demo's process by ~1.6 MB a second of digging (issue 32)."""

    def __init__(self) -> None:
        self.kept: list[tuple[int, int, np.ndarray]] = []
        self._box: tuple[int, int, int, int] | None = None   # i0, i1, j0, j1 of the kept ones

    def add(self, ni: int, nj: int, data: np.ndarray) -> None:
        if data.size < 2:
            return
        i0, j0 = int(data[0]), int(data[1])
        box = (i0, i0 + ni, j0, j0 + nj)
        kept = self._box
        if kept is None or (box[0] <= kept[0] and box[1] >= kept[1] and box[2] <= kept[2]
                            and box[3] >= kept[3]):
            self.kept.clear()   # this patch overwrites everything kept
            self._box = box
        else:
            self._box = (min(box[0], kept[0]), max(box[1], kept[1]),
                         min(box[2], kept[2]), max(box[3], kept[3]))
        self.kept.append((ni, nj, data))


def _latencies(sent: list[tuple[float, float]], writes: list[dict[str, Any]]) -> list[float]:
    """For each commanded speed, the time until a control-DB write carried it [ms]."""
    return [ms for _, ms in _latency_samples(sent, writes)]


CommandT = TypeVar("CommandT")


def _carrying_write(sent: Sequence[tuple[float, CommandT]], i: int, times: Sequence[float],
                    writes: Sequence[dict[str, Any]],
                    carries: Callable[[dict[str, Any], CommandT], bool]) -> float | None:
    """The time [s] of the first write (``times``: the writes' times, in order) that carried
    command ``i`` before the same command was sent again; None: no write carried it."""
    t_sent, command = sent[i]
    until = next((t for t, c in sent[i + 1:] if c == command), math.inf)
    for k in range(bisect.bisect_left(times, t_sent), len(times)):
        if times[k] >= until:
            break
        if carries(writes[k], command):
            return times[k]
    return None


def pair_commands_with_writes(sent: Sequence[tuple[float, CommandT]],
                              writes: Sequence[dict[str, Any]],
                              carries: Callable[[dict[str, Any], CommandT], bool]
                              ) -> list[tuple[float, float]]:
    """(command time [s], time until a control-DB write carried it [ms]) per command that a
    write carried before the same command was sent again.

    The drive's commands repeat every 10 (their 0.1 mm/s steps): a command that never reached
    the PLC (superseded in Redis before a cycle read it, or held by a fail-safe stop) was
    paired with the next one of the same value, and counted 0.5 or 1.0 s late (514 and
    1,062 ms "p99" in two calm-host benches). Such a command has no latency: it is left out."""
    times = [w["t"] for w in writes]
    out = []
    for i, (t_sent, _) in enumerate(sent):
        t_write = _carrying_write(sent, i, times, writes, carries)
        if t_write is not None:
            out.append((t_sent, (t_write - t_sent) * 1000.0))
    return out


def commands_not_carried(sent: Sequence[tuple[float, CommandT]],
                         writes: Sequence[dict[str, Any]],
                         carries: Callable[[dict[str, Any], CommandT], bool]
                         ) -> list[tuple[float, str]]:
    """(command time [s] after the first command, why) per command that no control-DB write
    carried (:func:`pair_commands_with_writes` leaves these out). Why, from the writes made
    while it was the newest command: ``no write`` (no bridge cycle wrote in that time),
    ``refused: <the PLC's reason>`` (every write refused), ``other value`` (the writes carried
    another command: a stop, or a value the bridge read before this one landed in Redis)."""
    times = [w["t"] for w in writes]
    out = []
    for i, (t_sent, _) in enumerate(sent):
        if _carrying_write(sent, i, times, writes, carries) is not None:
            continue
        until = sent[i + 1][0] if i + 1 < len(sent) else math.inf
        window = writes[bisect.bisect_left(times, t_sent):bisect.bisect_left(times, until)]
        if not window:
            why = "no write"
        elif all(w.get("refused") for w in window):
            why = f"refused: {window[0]['refused']}"
        else:
            why = "other value"
        out.append((round(t_sent - sent[0][0], 3), why))
    return out


def _carries_speed(write: dict[str, Any], speed: float) -> bool:
    values = [v for k, v in write.get("values", write).items()
              if isinstance(v, float) and "speed" in k]
    return bool(values) and all(abs(v - speed) < 1e-5 for v in values)


def _latency_samples(sent: list[tuple[float, float]], writes: list[dict[str, Any]]
                     ) -> list[tuple[float, float]]:
    """(command time [s], time until a control-DB write carried it [ms]) per commanded speed
    that a write carried (:func:`pair_commands_with_writes`)."""
    return pair_commands_with_writes(sent, writes, _carries_speed)


def _taken_setpoints(write: dict[str, Any]) -> tuple[float, float]:
    """(left, right) track speed set-points [m/s] a control-DB write the PLC took puts in
    force: 0 when it asks for a stop or does not enable the drives."""
    if write.get("stop") or not write.get("enable", True):
        return 0.0, 0.0
    return float(write.get("speed_sp_left", 0.0)), float(write.get("speed_sp_right", 0.0))


def _number(value: str | None, default: float = math.nan) -> float:
    """A diagnostics value as a float (``default`` when missing or not a number)."""
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def _dropped(values: dict[str, str]) -> int:
    """Commands a node dropped as too old or stamped too far ahead (its CommandAge counters on
    /diagnostics)."""
    return sum(int(_number(values.get(k), 0.0)) for k in ("commands_expired", "commands_ahead"))
