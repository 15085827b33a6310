"""sim_node: the MuJoCo excavator over ROS 2 (a thin rclpy shell over ExcavatorSimulation).

Subscribes
- ``joint_command`` (sensor_msgs/JointState): positions [rad] of any of swing/boom/arm/bucket,
  optional velocities [rad/s] (same order; approach speed caps). Cylinder names
  (``*_cylinder``, as the ik_node adds them) are accepted and ignored: the joint targets define
  them. NaN, unknown names and out-of-range targets are rejected (logged + ``/diagnostics``);
  the machine keeps its last valid setpoint.
- ``soil/wrench`` (geometry_msgs/WrenchStamped, frame ``world``): force/torque on the bucket at
  its origin M, held until the next message. Beyond the machine's plausible wrench
  (``excavator_sim.plausibility``: 3 x its maximum digging force) it is rejected and the last
  valid one is kept. A physics step that diverges anyway is undone by the core (last good
  state, wrench dropped, clock running) and reported as ERROR on ``/diagnostics``.
- ``track_command`` (sensor_msgs/JointState): ``velocity`` [m/s] of ``track_left`` /
  ``track_right``.
- ``soil/terrain_patch`` (std_msgs/Float64MultiArray): a changed rectangle of the terrain,
  written into MuJoCo's height field (format: :mod:`excavator_sim.heightfield`, dims ``i``,
  ``j``, data ``[i0, j0, heights...]`` [m]); the grids must match (``terrain.*`` parameters).

Publishes (at ``publish_rate``): ``joint_states`` (every named joint, cylinders and passive
joints included; tracks: position = travelled distance [m], velocity [m/s]; the base's
``base_x``, ``base_y`` [m] and ``base_yaw`` [rad] in ``world``: with them every movable joint
of the URDF, so robot_state_publisher poses the machine in ``world``), ``/clock`` (only
when the node's ``use_sim_time`` parameter is true at start-up: with it false nothing follows
simulated time, and two simulators on one graph would interleave their clocks),
``bucket_pose`` / ``bucket_twist`` (frame ``world``), ``markers`` (the machine in ``world``, at
``marker_rate`` in wall time: they are for RViz), ``robot_description`` once (transient local;
the URDF of the model this node simulates, rooted at ``world``, its other links prefixed with
the ``frame_prefix`` parameter, e.g. ``exc1/``, for a fleet), ``/diagnostics`` at 1 Hz. Poses,
twists and markers are in ``world``, the frame the machines of a fleet share.
Header stamps are simulated time (the time on ``/clock``, whether or not it is published).
"""

from __future__ import annotations

import time

import mujoco
import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.clock import Clock as RosClock
from rclpy.clock_type import ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import Marker, MarkerArray

from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.ros_runtime import (
    ERROR,
    OK,
    WARN,
    Diagnostics,
    Rejections,
    declare,
    run_node,
    warn_unknown_parameters,
)
from excavator_sim.errors import CommandError, HeightFieldError, SimConfigError
from excavator_sim.heightfield import flat_to_patch
from excavator_sim.model_builder import CYLINDER_JOINTS
from excavator_sim.sim_config import PARAMETERS, config_from_flat
from excavator_sim.simulation import TRACK_JOINTS, ExcavatorSimulation
from excavator_sim.urdf import check_frame_prefix, urdf_from_model

WORLD = "world"
# Free run (real_time_factor 0): wall time spent simulating before serving callbacks [s].
_FREE_RUN_SLICE_S = 0.005
_MARKER_TYPES = {int(mujoco.mjtGeom.mjGEOM_BOX): Marker.CUBE,
                 int(mujoco.mjtGeom.mjGEOM_CAPSULE): Marker.CYLINDER,
                 int(mujoco.mjtGeom.mjGEOM_CYLINDER): Marker.CYLINDER}


def _stamp(seconds: float) -> Time:
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__("sim_node")
        values = {p.name: declare(self, p.name, p.default, p.description, low=p.low,
                                  high=p.high) for p in PARAMETERS}
        geometry_file = declare(self, "geometry_file", "", "excavator geometry YAML; empty = "
                                "the package's config/excavator.yaml")
        self.marker_rate = declare(self, "marker_rate", 20.0, "markers publish rate", low=0.0,
                                   high=1000.0, unit="Hz")
        publish_description = declare(self, "publish_robot_description", True,
                                      "publish the generated URDF on robot_description")
        frame_prefix = declare(self, "frame_prefix", "", "TF prefix of this machine's URDF "
                               "links, e.g. 'exc1/' in a fleet ('world' is shared)")
        try:
            check_frame_prefix(frame_prefix)
        except ValueError as exc:
            raise SimConfigError(str(exc)) from None
        config = config_from_flat(values, source="sim_node parameters")
        geometry = (ExcavatorGeometry.from_yaml(geometry_file) if geometry_file
                    else default_geometry())
        self.sim = ExcavatorSimulation(config, geometry)
        self.config = config
        self.steps_per_publish = max(1, round(1.0 / (config.publish_rate * config.timestep)))

        # use_sim_time (declared by rclpy): this node is then the source of /clock. Read once at
        # start-up; without it no /clock publisher exists at all.
        self.publishes_clock = bool(self.get_parameter("use_sim_time").value)
        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.clock_pub = (self.create_publisher(Clock, "/clock", 10) if self.publishes_clock
                          else None)
        self.pose_pub = self.create_publisher(PoseStamped, "bucket_pose", 10)
        self.twist_pub = self.create_publisher(TwistStamped, "bucket_twist", 10)
        self.marker_pub = self.create_publisher(MarkerArray, "markers", 10)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        if publish_description:
            self.description_pub = self.create_publisher(String, "robot_description", latched)
            self.description_pub.publish(String(data=urdf_from_model(self.sim.model,
                                                                     frame_prefix=frame_prefix)))
        self.create_subscription(JointState, "joint_command", self.on_joint_command, 10)
        self.create_subscription(WrenchStamped, "soil/wrench", self.on_wrench, 10)
        self.create_subscription(JointState, "track_command", self.on_track_command, 10)
        self.create_subscription(Float64MultiArray, "soil/terrain_patch", self.on_terrain_patch,
                                 10)
        self.terrain_patches = 0
        self.diagnostics = Diagnostics(self, f"{self.get_name()}: simulation")
        self.rejections = Rejections(self, self.diagnostics, "command")
        self._divergences_reported = 0
        self._divergence_in_period = False
        # Timers on the wall (steady) clock: with use_sim_time the node clock follows the /clock
        # this node publishes itself, and sim-time timers would never fire.
        self.wall_clock = RosClock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(1.0, self.publish_status, clock=self.wall_clock)

        self._clock_msg = Clock()
        self._joint_msg = JointState()
        self._joint_msg.name = list(self.sim.joint_state().names)
        self._pose_msg = PoseStamped()
        self._pose_msg.header.frame_id = WORLD
        self._twist_msg = TwistStamped()
        self._twist_msg.header.frame_id = WORLD
        self._wall_start = time.monotonic()
        self._sim_start = self.sim.time
        self._markers = self._make_markers()
        if self.marker_rate > 0:
            # Markers are for people watching RViz: paced by the wall clock, not sim time.
            self.create_timer(1.0 / self.marker_rate, self.publish_markers,
                              clock=self.wall_clock)
        period = 1.0 / config.publish_rate
        # real_time_factor 0: tick as fast as possible; else the wall period of one publish.
        self.timer = self.create_timer(period / config.real_time_factor
                                       if config.real_time_factor > 0 else 1e-4, self.tick,
                                       clock=self.wall_clock)
        g = config.terrain
        warn_unknown_parameters(self)
        self.get_logger().info(
            f"ready: dt {config.timestep} s, real_time_factor {config.real_time_factor}, "
            f"publish_rate {config.publish_rate} Hz, /clock "
            f"{'on (use_sim_time)' if self.publishes_clock else 'off (use_sim_time false)'}, "
            f"{self.sim.model.nv} dof, terrain "
            f"{g.nx} x {g.ny} nodes from ({g.x0}, {g.y0}) m every {g.cell_size} m")

    # --- inputs --------------------------------------------------------------------------
    def _reject(self, message: str) -> None:
        self.rejections.reject(message, {})

    def on_joint_command(self, msg: JointState) -> None:
        names = list(msg.name)
        if len(msg.position) != len(names):
            self._reject(f"joint_command has {len(names)} names but {len(msg.position)} "
                         "positions: send one position per name")
            return
        if msg.velocity and len(msg.velocity) != len(names):
            self._reject(f"joint_command has {len(names)} names but {len(msg.velocity)} "
                         "velocities: send none or one per name")
            return
        positions, velocities = {}, {}
        for k, name in enumerate(names):
            if name in CYLINDER_JOINTS:
                continue  # implied by the joint targets (the ik_node sends them too)
            positions[name] = msg.position[k]
            if msg.velocity:
                velocities[name] = msg.velocity[k]
        try:
            self.sim.set_joint_targets(positions, velocities or None)
        except CommandError as exc:
            self._reject(str(exc))

    def on_wrench(self, msg: WrenchStamped) -> None:
        if msg.header.frame_id not in ("", WORLD):
            self._reject(f"soil/wrench in frame {msg.header.frame_id!r}: send it in 'world'")
            return
        f, t = msg.wrench.force, msg.wrench.torque
        try:
            self.sim.apply_bucket_wrench([f.x, f.y, f.z], [t.x, t.y, t.z])
        except CommandError as exc:
            self._reject(str(exc))

    def on_track_command(self, msg: JointState) -> None:
        speeds = dict(zip(msg.name, msg.velocity, strict=False))
        unknown = sorted(set(msg.name) - set(TRACK_JOINTS))
        if unknown or len(msg.velocity) != len(msg.name):
            self._reject(f"track_command needs velocities [m/s] for {list(TRACK_JOINTS)}; got "
                         f"names {list(msg.name)} with {len(msg.velocity)} velocities")
            return
        left = speeds.get("track_left", 0.0)
        right = speeds.get("track_right", 0.0)
        try:
            self.sim.set_track_speeds(left, right)
        except CommandError as exc:
            self._reject(str(exc))

    def on_terrain_patch(self, msg: Float64MultiArray) -> None:
        dims = [(d.label, d.size) for d in msg.layout.dim]
        if len(dims) != 2 or msg.layout.data_offset != 2:
            self._reject(f"soil/terrain_patch layout {dims} (data_offset "
                         f"{msg.layout.data_offset}): expected dims i, j and data_offset 2")
            return
        try:
            i0, j0, heights = flat_to_patch(dims[0][1], dims[1][1], msg.data)
            self.sim.terrain.set_region(i0, j0, heights)
        except HeightFieldError as exc:
            self._reject(f"soil/terrain_patch: {exc}")
            return
        self.terrain_patches += 1

    # --- stepping and outputs ------------------------------------------------------------
    def tick(self) -> None:
        """One publish period of simulated time; as fast as possible (real_time_factor 0):
        several periods per call, returning to the executor every few ms for commands."""
        deadline = time.monotonic() + (_FREE_RUN_SLICE_S if self.config.real_time_factor == 0
                                       else 0.0)
        while True:
            self.sim.step(self.steps_per_publish)
            if self.sim.divergence_count != self._divergences_reported:
                self.report_divergence()
            self.publish_state()
            if time.monotonic() >= deadline:
                break

    def publish_state(self) -> None:
        # Messages are built once and refilled: at real_time_factor 0 this runs thousands of
        # times per second and message construction would cost more than the physics.
        sim = self.sim
        stamp = self._clock_msg.clock
        ns = round(sim.time * 1e9)
        stamp.sec, stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
        if self.clock_pub is not None:
            self.clock_pub.publish(self._clock_msg)
        js = sim.joint_state()
        msg = self._joint_msg
        msg.header.stamp = stamp
        msg.position = js.positions.tolist()
        msg.velocity = js.velocities.tolist()
        self.joint_pub.publish(msg)
        pos, quat = sim.bucket_pose()
        pose = self._pose_msg
        pose.header.stamp = stamp
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = pos.tolist()
        o = pose.pose.orientation
        o.w, o.x, o.y, o.z = quat.tolist()
        self.pose_pub.publish(pose)
        lin, ang = sim.bucket_twist()
        twist = self._twist_msg
        twist.header.stamp = stamp
        twist.twist.linear.x, twist.twist.linear.y, twist.twist.linear.z = lin.tolist()
        twist.twist.angular.x, twist.twist.angular.y, twist.twist.angular.z = ang.tolist()
        self.twist_pub.publish(twist)

    def _make_markers(self) -> tuple[MarkerArray, list[int]]:
        """One marker per machine geom (built once; poses updated on publish)."""
        m = self.sim.model
        out, geoms = MarkerArray(), []
        for gid in range(m.ngeom):
            if int(m.geom_type[gid]) not in _MARKER_TYPES or m.geom_bodyid[gid] == 0:
                continue
            marker = Marker()
            marker.header.frame_id = WORLD
            marker.ns = "excavator"
            marker.id = gid
            marker.type = _MARKER_TYPES[int(m.geom_type[gid])]
            marker.action = Marker.ADD
            size = m.geom_size[gid]
            if marker.type == Marker.CUBE:
                marker.scale.x, marker.scale.y, marker.scale.z = (2.0 * size).tolist()
            else:  # capsule drawn as a cylinder of its radius and segment length
                marker.scale.x = marker.scale.y = 2.0 * float(size[0])
                marker.scale.z = 2.0 * float(size[1])
            r, g, b, a = m.geom_rgba[gid].tolist()
            marker.color.r, marker.color.g, marker.color.b, marker.color.a = r, g, b, a
            out.markers.append(marker)
            geoms.append(gid)
        return out, geoms

    def publish_markers(self) -> None:
        d = self.sim.data
        stamp = _stamp(self.sim.time)
        markers, geoms = self._markers
        quat = np.zeros(4)
        for marker, gid in zip(markers.markers, geoms, strict=True):
            marker.header.stamp = stamp
            p = marker.pose.position
            p.x, p.y, p.z = d.geom_xpos[gid].tolist()
            mujoco.mju_mat2Quat(quat, d.geom_xmat[gid])
            o = marker.pose.orientation
            o.w, o.x, o.y, o.z = quat.tolist()
        self.marker_pub.publish(markers)

    def report_divergence(self) -> None:
        """The core undid a diverged physics step (``ExcavatorSimulation.step``): ERROR on
        /diagnostics with the cause and what was dropped; the state published is the restored
        good one."""
        self._divergences_reported = self.sim.divergence_count
        if self._divergence_in_period:
            return  # one report per status period: a persistent fault must not flood
        self._divergence_in_period = True
        d = self.sim.divergences[-1]
        message = (f"simulation diverged at t={d.time_s:.3f} s: {d.cause}; restored the last "
                   f"good state" + (f", dropped {d.dropped}" if d.dropped else ""))
        self.get_logger().error(message)
        self.diagnostics.publish(ERROR, message, {"divergences": self.sim.divergence_count,
                                                  "sim_time_s": f"{self.sim.time:.3f}"})

    def publish_status(self) -> None:
        wall = time.monotonic() - self._wall_start
        rtf = (self.sim.time - self._sim_start) / wall if wall > 0 else 0.0
        residual = self.sim.constraint_residual()
        level = OK if residual < 1e-3 else WARN
        values = {"sim_time_s": f"{self.sim.time:.3f}", "achieved_real_time_factor": f"{rtf:.2f}",
                  "loop_residual_m": f"{residual:.2e}", "rejected": self.rejections.count,
                  "terrain_patches": self.terrain_patches,
                  "last_error": self.rejections.last,
                  **{f"target_{n}": f"{v:.4f}" for n, v in self.sim.targets.items()}}
        message = "running" if level == OK else f"loop residual {residual:.2e} m > 1 mm"
        values["divergences"] = self.sim.divergence_count
        if self._divergence_in_period:  # stays ERROR for the status period it happened in
            self._divergence_in_period = False
            d = self.sim.divergences[-1]
            level, message = ERROR, f"simulation diverged at t={d.time_s:.3f} s: {d.cause}"
        self.diagnostics.publish(level, message, values)


def main(args: list[str] | None = None) -> int:
    """Console entry point (``ros2 run excavator_hil sim_node``)."""
    return run_node(SimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
