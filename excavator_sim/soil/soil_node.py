"""soil_node: deformable terrain and bucket-soil forces over ROS 2 (a thin shell over
``terrain.Terrain`` and ``soil_forces.DiMaioForceModel``).

Subscribes
- ``bucket_pose`` (geometry_msgs/PoseStamped, frame ``world``): the bucket frame (origin M, x
  along M->L); each message is one terrain + force update, at most ``update_rate_hz`` in the
  messages' own time (header stamps: simulated time when the simulator sends them). **Latest
  wins**: the subscription keeps one message (depth 1), so after a slow update the node goes on
  with the newest pose, never through a backlog of stale ones; poses superseded that way are
  counted (``poses_superseded`` on ``/diagnostics``, from the publisher's sequence numbers).
- ``bucket_twist`` (geometry_msgs/TwistStamped, frame ``world``): velocity of the bucket
  origin [m/s] and angular velocity [rad/s]; the latest one is used (depth 1; sim_node sends
  it just before the pose of the same instant).

Publishes
- ``soil/wrench`` (geometry_msgs/WrenchStamped, frame ``world``): force [N] and torque [N m] on
  the bucket about its origin, after every update, before anything else the node does for that
  pose; its stamp is the pose's, so the simulator knows how old the force is.
- ``soil/bucket_load`` (std_msgs/Float64): soil volume in the bucket [m^3], after every update.
- ``soil/bucket_payload`` (geometry_msgs/InertiaStamped, frame ``bucket``; only with
  ``terrain.bucket_soil_model: cells``): the carried soil as a rigid body (mass [kg], centre
  [m] and inertia [kg m^2] about it, in the bucket frame), before the wrench of the same
  update; sim_node puts it on its bucket body, and the wrench leaves the load's weight out.
- ``soil/heightmap`` (sensor_msgs/PointCloud2 in ``world``, fields x, y, z FLOAT32 [m]): the
  terrain surface for RViz at every k-th cell centre (k chosen so there are at most 160 x 160
  points), at ``heightmap_rate_hz`` when the terrain changed; built from numpy in the node's own
  visualisation thread, off the control path (``excavator_sim.soil.terrain_messages``).
- ``soil/bucket_soil`` (visualization_msgs/Marker TRIANGLE_LIST in ``world``): the soil in the
  bucket for RViz and Foxglove: with the per-cell bucket soil (the default) its columns, each a
  box in the bucket's frame over its cell (``BucketBody.cell_triangles``, the carried volume
  exactly, at any tilt); with the closed form its shape heaped as columns one soil cell
  (``terrain.cell_xy_m``) wide over the bucket's floor (``excavator_sim.soil.bucket_soil``);
  at 10 Hz (wall clock) when the load, its cells or the pose changed, from its own thread (off
  the control path); DELETE when the bucket empties.
- ``soil/terrain_patch`` (std_msgs/Float64MultiArray): the data topic, in the wire format of
  ``excavator_sim.heightfield`` (what sim_node writes into MuJoCo's height field):
  ``layout.dim = [("i", ni, ni*nj), ("j", nj, nj)]``, ``layout.data_offset = 2``,
  ``data = [i0, j0, h(i0, j0), h(i0, j0+1), ...]`` [m], row-major with x (i) first; cell
  (i, j) of the soil grid (``terrain.*``) has its centre at ``x0 + (i + 0.5) cell_xy_m``.
  After every update that changed the terrain: the changed box; the whole grid once at start
  and, when it changed, at ``heightmap_rate_hz`` (for recorders that join late; from the
  visualisation thread, under the terrain lock so it never overtakes a newer changed box); and
  at the next of those periods after a subscriber joined (a simulator started after this node
  gets the ground as it is, e.g. ``terrain.ridge_*``, not only what changes from then on).
- ``/diagnostics``: at 1 Hz; updates, mean update time, load, mass drift (always 0), rejected
  messages with the last reason (NaN, wrong frame, bucket outside the grid). A bucket outside
  the grid is reported as an error and the terrain is left alone, but the wrench is still
  published, computed over no ground (only the load's weight), so the simulator never holds a
  stale cutting force. Implausible input (``excavator_sim.soil.plausibility``: a pose beyond
  the grid plus the machine's reach or deeper under the surface than it can dig, a twist
  faster than the machine moves, NaN/inf) is rejected before any soil moves, with the limit;
  a rejected twist keeps the last valid one, so later poses are still served.

One terrain for a fleet: with ``machines`` (comma-separated namespaces, e.g. ``exc1,exc2``) the
node serves every machine from one grid (:mod:`excavator_sim.soil.shared_terrain`): per machine
``<ns>/bucket_pose`` and ``<ns>/bucket_twist`` in, ``<ns>/soil/wrench`` and
``<ns>/soil/bucket_load`` out (relative to the node's namespace), its own bucket load and force
state; ``soil/terrain_patch`` and ``soil/heightmap`` once for the shared grid (remap every
machine's sim_node to it). Empty (the default): one machine, the topics above.

Parameters: ``excavator_sim.soil.config.SOIL_PARAMETERS`` (``config/soil.yaml``; every key
declared with its unit and range, read-only but ``update_rate_hz`` and ``heightmap_rate_hz``,
which apply at run time), plus the keys of every preset defined only in the node's parameter
overrides (``--params-file``, ``-p``): ``presets.<name>.*`` there is a preset that ``preset``
can select. Every preset must be complete and in range; otherwise the node exits with code 2
naming the parameter, its range and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension
from visualization_msgs.msg import Marker

from excavator_common import realtime
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_node import NodeParameters
from excavator_common.ros_runtime import (
    OK,
    RECORDED_STREAM_DEPTH,
    Diagnostics,
    Rejections,
    run_node,
    steady_timer,
)
from excavator_kinematics.geometry import default_geometry
from excavator_sim.plausibility import shipped_machine_envelope
from excavator_sim.soil.bucket_body import AccelerationEstimate, BucketBody, UpdateInterval
from excavator_sim.soil.bucket_markers import bucket_soil_marker
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.bucket_soil import columns_to_triangles, soil_columns
from excavator_sim.soil.config import INSTANCES, SOIL_PARAMETERS, soil_config_from_parameters
from excavator_sim.soil.errors import OutsideGridError, SoilConfigError, SoilError
from excavator_sim.soil.forces import DiMaioForceModel, SurfaceFn
from excavator_sim.soil.payload_messages import payload_message
from excavator_sim.soil.plausibility import SoilPlausibility
from excavator_sim.soil.scenarios import warm_up
from excavator_sim.soil.shared_terrain import SharedTerrain
from excavator_sim.soil.terrain import Box, Terrain
from excavator_sim.soil.terrain_messages import (
    XYZ_FIELDS,
    cloud_layout,
    heightmap_points,
    patch_array,
    stride_for,
)

WORLD = "world"
BUCKET_SOIL_RATE_HZ = 10.0  # soil/bucket_soil marker rate (wall clock), when it changed
HEIGHTMAP_MAX_NODES = 160  # points per side of soil/heightmap (<= 25,600 points, 307 kB)
# Latest wins: one pose waiting at most; a newer one replaces it (no backlog of stale poses).
LATEST_ONLY = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                         reliability=ReliabilityPolicy.RELIABLE)
SOURCE = "soil_node parameters"
# A pose waits up to twist_wait_s [s, wall] for the twist of its own instant before it is
# answered with the latest twist (a sender that stopped sending twists): sim_node sends the
# twist first, but on its own topic; a twist sample lost in the transport arrives after its
# pose, once the writer repaired it (0.1 s with the project's Fast DDS profile,
# config/fastdds_default.xml). Answered with the twist before, the pose's force differs from
# the replay's of the same session (test_teleop_impedance_replay).
# After this many poses in a row whose twist never came (a sender whose twists are stamped on
# another clock, or not with the poses) poses stop waiting for it until a twist of a pose's
# instant comes again; said in the log.
TWISTS_MISSED_OFF = 3


@dataclass
class _Machine:
    """One machine the node serves: its bucket state in the terrain, its forces, its topics."""

    name: str  # namespace relative to the node's; "" = the node's own
    terrain: Terrain
    forces: DiMaioForceModel
    wrench_pub: Any
    load_pub: Any
    payload_pub: Any  # soil/bucket_payload (per-cell bucket soil), else None
    twist: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(3), np.zeros(3)))
    last_stamp: float | None = None
    # the answer to last_stamp's pose (payload or None, wrench, load [m^3]): sent again for a
    # pose of that stamp sent again (sim_node's lockstep repeats a pose it got no answer to)
    last_answer: tuple[Any, WrenchStamped, float] | None = None
    # the bucket's acceleration from the twists' stamps (per-cell bucket soil)
    acceleration: AccelerationEstimate = field(default_factory=AccelerationEstimate)
    acceleration_now: np.ndarray | None = None
    # the poses' time between updates: how far the soil in the bucket slides (per-cell)
    interval: UpdateInterval = field(default_factory=UpdateInterval)
    updates: int = 0
    answers_repeated: int = 0   # poses of an answered stamp, answered again (last_answer)
    twist_stamp: float | None = None   # the latest twist's [s]
    # a pose whose twist has not arrived yet, and when it came [s, monotonic]
    pending: tuple[PoseStamped, float] | None = None
    poses_waited_for_twist: int = 0     # answered once their own twist came
    poses_without_twist: int = 0        # answered after twist_wait_s with the latest twist
    overdue_in_a_row: int = 0           # TWISTS_MISSED_OFF of them: poses stop waiting
    update_time_s: float = 0.0
    last_force: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def topic(self, name: str) -> str:
        return f"{self.name}/{name}" if self.name else name


class SoilNode(Node):
    def __init__(self) -> None:
        super().__init__("soil_node")
        # One spec (excavator_sim.soil.config.SOIL_PARAMETERS, the shipped presets as
        # defaults): every key declared with its descriptor; the keys of a preset that only the
        # overrides define (presets.<name>.*) too, so ``preset`` can select it. Misspelt keys
        # are logged with the closest name before the completeness check fails on them.
        self.parameters = NodeParameters(self, SOIL_PARAMETERS, self.apply_parameters,
                                         instances=INSTANCES)
        config = soil_config_from_parameters(self.parameters.values, SOURCE)
        machines = str(self.parameters.values["machines"])
        self.config = config
        self.bucket = BucketPrism.from_geometry(default_geometry())
        names = _machine_names(machines)
        self.shared = SharedTerrain(config.terrain, self.bucket, names)
        self.terrain = self.shared.grid  # the grid (every machine's heights)
        self.plausibility = SoilPlausibility(config.terrain, self.bucket,
                                             shipped_machine_envelope().soil_limits())
        self.start_units = self.shared.total_units
        # Load the numba kernels before the first pose arrives (a throwaway dig cycle): else
        # the first wrench answers a pose 1-3 s old on a 2-core host.
        warm_up(config.terrain, config.dimaio, self.bucket)
        self.poses_superseded = 0  # poses replaced by a newer one before they were processed
        self.poses_rate_skipped = 0  # poses closer to the last update than update_rate_hz
        self._last_sequence: dict[bytes, int] = {}  # per publisher (gid)
        self._mesh_dirty = True
        # (pose, load m^3) after the last update, for the bucket-soil marker thread
        # per machine (namespace): the pose and load of its last update, for the marker thread
        # (and with the per-cell bucket soil a copy of its columns, bytes: b"" for the closed form)
        self._bucket_state: dict[str, tuple[BucketPose, float, bytes]] = {}
        g = config.terrain
        self._stride = stride_for(g.nx, g.ny, HEIGHTMAP_MAX_NODES)
        # The control path (on_pose, executor thread) and the visualisation thread share the
        # terrain: the lock covers an update and a snapshot copy, never a message build.
        self._terrain_lock = threading.Lock()
        self._stop = threading.Event()

        self.machines = [_Machine(
            name, self.shared.terrains[name], DiMaioForceModel(config.dimaio, self.bucket),
            self.create_publisher(WrenchStamped, _topic(name, "soil/wrench"),
                                  RECORDED_STREAM_DEPTH),
            self.create_publisher(Float64, _topic(name, "soil/bucket_load"),
                                  RECORDED_STREAM_DEPTH),
            self.create_publisher(InertiaStamped, _topic(name, "soil/bucket_payload"),
                                  RECORDED_STREAM_DEPTH)
            if self.shared.terrains[name].load_on_body else None)
            for name in names]
        # Latched (transient local): RViz started later still gets the last terrain.
        self.mesh_pub = self.create_publisher(
            PointCloud2, "soil/heightmap",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.patch_pub = self.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        self.bucket_soil_pub = self.create_publisher(
            Marker, "soil/bucket_soil",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        # twist first: when both are ready the executor takes them in this order, so a pose
        # is processed with the twist of its own instant (sim_node sends the twist first)
        for m in self.machines:
            self.create_subscription(TwistStamped, m.topic("bucket_twist"),
                                     functools.partial(self.on_twist, machine=m), LATEST_ONLY)
            self.create_subscription(PoseStamped, m.topic("bucket_pose"),
                                     functools.partial(self.on_pose, machine=m), LATEST_ONLY)
        self.diagnostics = Diagnostics(self, f"{self.get_name()}: soil")
        self.rejections = Rejections(self, self.diagnostics, "input")
        steady_timer(self, 1.0, self.publish_status)
        steady_timer(self, 0.05, self._answer_overdue)   # poses whose twist never came
        self.publish_patch((0, g.nx, 0, g.ny))
        # subscribers of soil/terrain_patch last seen: one that joins later (a simulator
        # started after this node) gets the whole grid at the next visualisation period, not
        # only what changes from then on (the initial ground may have a ridge)
        self._patch_subscribers = self.patch_pub.get_subscription_count()
        # Visualisation (heightmap cloud, periodic full grid) in its own thread: never in the
        # executor that runs on_pose.
        self._viz_thread = threading.Thread(target=self._visualisation_loop,
                                            name="soil_heightmap", daemon=True)
        self._viz_thread.start()
        self._bucket_thread = threading.Thread(target=self._bucket_soil_loop,
                                               name="soil_bucket_marker", daemon=True)
        self._bucket_thread.start()
        self.get_logger().info(
            f"ready: preset {config.preset} (of {', '.join(config.presets)}), grid {g.nx} x "
            f"{g.ny} cells of {g.cell_xy_m} m from x0={g.x0:.2f}, y0={g.y0:.2f} m"
            + (f", shared by {', '.join(names)}" if len(names) > 1 or names[0] else ""))

    def apply_parameters(self, changed: dict[str, Any]) -> None:
        """Post-set: the validated rates take effect at once (on_pose and the visualisation
        thread read them from ``self.config``)."""
        self.config = dataclasses.replace(
            self.config,
            update_rate_hz=float(changed.get("update_rate_hz", self.config.update_rate_hz)),
            heightmap_rate_hz=float(changed.get("heightmap_rate_hz",
                                                self.config.heightmap_rate_hz)),
            twist_wait_s=float(changed.get("twist_wait_s", self.config.twist_wait_s)))

    # --- inputs --------------------------------------------------------------------------
    def on_twist(self, msg: TwistStamped, machine: _Machine) -> None:
        if msg.header.frame_id not in ("", WORLD):
            self._reject(f"bucket_twist in frame {msg.header.frame_id!r}: send it in 'world'")
            return
        lin, ang = msg.twist.linear, msg.twist.angular
        twist = (np.array([lin.x, lin.y, lin.z]), np.array([ang.x, ang.y, ang.z]))
        try:
            self.plausibility.check_twist(*twist)
        except SoilError as exc:  # NaN/inf or faster than the machine: keep the last good one
            self._reject(str(exc))
            return
        machine.twist = twist
        stamp = _stamp_s(msg)
        machine.twist_stamp = stamp
        machine.acceleration_now = machine.acceleration.update(stamp, twist[0])
        pending = machine.pending
        if pending is not None and _stamp_s(pending[0]) <= stamp:
            machine.pending = None
            machine.poses_waited_for_twist += 1
            machine.overdue_in_a_row = 0
            self._answer(pending[0], machine)

    def on_pose(self, msg: PoseStamped, info: MessageInfo | None, machine: _Machine) -> None:
        self._count_superseded(info)
        if msg.header.frame_id not in ("", WORLD):
            self._reject(f"bucket_pose in frame {msg.header.frame_id!r}: send it in 'world'")
            return
        stamp = _stamp_s(msg)
        m = machine
        if stamp == m.last_stamp and m.last_answer is not None:
            # answered already: the answer again, not a second update of the soil at one pose
            payload_msg, wrench_msg, load_m3 = m.last_answer
            if m.payload_pub is not None and payload_msg is not None:
                m.payload_pub.publish(payload_msg)
            m.wrench_pub.publish(wrench_msg)
            m.load_pub.publish(Float64(data=load_m3))
            m.answers_repeated += 1
            return
        if (m.last_stamp is not None and stamp > m.last_stamp
                and stamp - m.last_stamp < 1.0 / self.config.update_rate_hz - 1e-6):
            self.poses_rate_skipped += 1
            return  # faster than update_rate_hz (in the messages' time): skip
        if m.twist_stamp is not None and m.twist_stamp >= stamp:
            m.overdue_in_a_row = 0   # its twist came first: the streams match
        elif (m.twist_stamp is not None and m.overdue_in_a_row < TWISTS_MISSED_OFF
              and self.config.twist_wait_s > 0.0):
            # the twist of this instant is still on its way (its own topic): answered with
            # it, as a replay of the same poses is, not with the one before (a newer pose
            # replaces a waiting one: latest wins)
            since = time.monotonic()
            if m.pending is not None:
                if _stamp_s(m.pending[0]) == stamp:
                    since = m.pending[1]   # a pose sent again waits from its first arrival
                else:
                    self.poses_superseded += 1   # a newer pose replaces the waiting one
            m.pending = (msg, since)
            return
        if m.pending is not None:   # an older pose still waiting: this one is newer
            m.pending = None
            self.poses_superseded += 1
        self._answer(msg, m)

    def _answer_overdue(self) -> None:
        """Timer: a pose that waited twist_wait_s for its twist is answered with the latest."""
        now = time.monotonic()
        for m in self.machines:
            if m.pending is not None and now - m.pending[1] >= self.config.twist_wait_s:
                msg = m.pending[0]
                m.pending = None
                m.poses_without_twist += 1
                m.overdue_in_a_row += 1
                if m.overdue_in_a_row == TWISTS_MISSED_OFF:
                    self.get_logger().warning(
                        f"{TWISTS_MISSED_OFF} bucket poses in a row got no bucket_twist of "
                        f"their stamp within twist_wait_s = {self.config.twist_wait_s:g} s: "
                        "answering poses with the latest twist without waiting until one "
                        "matches again; stamp each "
                        "twist with its pose's stamp (as sim_node does)")
                self._answer(msg, m)

    def _answer(self, msg: PoseStamped, m: _Machine) -> None:
        """Update the soil for the pose ``msg`` with the machine's twist now; publish the
        answer (payload, wrench, load) and the changed terrain."""
        stamp = _stamp_s(msg)
        p, o = msg.pose.position, msg.pose.orientation
        t0 = time.perf_counter()
        update = None
        outside: str | None = None
        try:
            pose = BucketPose.from_quaternion((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
            with self._terrain_lock:
                self.plausibility.check_pose(pose, m.terrain.surface_m)  # before soil moves
                try:
                    update = m.terrain.update(pose, acceleration_m_s2=m.acceleration_now,
                                              elapsed_s=m.interval.elapsed(stamp))
                    surface: SurfaceFn = m.terrain.surface_m
                except OutsideGridError as exc:
                    outside = str(exc)
                    surface = _no_ground  # keep the wrench current: only the load weighs
                result = m.forces.step(pose, m.twist[0], m.twist[1], surface,
                                       m.terrain.load_volume_m3,
                                       weight_on_body=m.terrain.load_on_body)
                load = float(m.terrain.load_volume_m3)
                payload = m.terrain.load_payload()
                body = m.terrain.body
                self._bucket_state[m.name] = (pose, load,
                                              body.units.tobytes() if body is not None else b"")
            self.plausibility.check_wrench(result.force, result.torque)
        except (SoilError, ArithmeticError) as exc:
            self._reject(str(exc))
            return
        # The payload (the load's mass, which the wrench leaves out), then the wrench: the
        # simulator is waiting for it; everything else comes after.
        payload_msg = (payload_message(payload, msg.header.stamp)
                       if m.payload_pub is not None and payload is not None else None)
        if m.payload_pub is not None and payload_msg is not None:
            m.payload_pub.publish(payload_msg)
        wrench = WrenchStamped()
        wrench.header.stamp = msg.header.stamp
        wrench.header.frame_id = WORLD
        f, tq = result.force, result.torque
        wrench.wrench.force.x, wrench.wrench.force.y, wrench.wrench.force.z = map(float, f)
        wrench.wrench.torque.x, wrench.wrench.torque.y, wrench.wrench.torque.z = map(float, tq)
        m.wrench_pub.publish(wrench)
        m.update_time_s += time.perf_counter() - t0
        m.updates += 1
        m.last_stamp = stamp
        m.last_answer = (payload_msg, wrench, load)
        m.last_force = result.force
        m.load_pub.publish(Float64(data=load))
        if outside is not None:
            self._reject(outside)
        if update is not None and update.changed is not None:
            with self._terrain_lock:
                self._mesh_dirty = True
                self.publish_patch(self.shared.take_dirty() or update.changed)

    def _count_superseded(self, info: Mapping[str, Any] | None) -> None:
        """Count poses the depth-1 queue replaced: gaps in each publisher's sequence numbers
        (when the middleware reports them, as Fast DDS does)."""
        seq = (info or {}).get("publication_sequence_number")
        if not seq:
            return
        gid = (info or {}).get("publisher_gid") or {}
        key = bytes(gid.get("data", b"")) if isinstance(gid, dict) else b""
        last = self._last_sequence.get(key)
        self._last_sequence[key] = int(seq)
        if last is not None and seq > last + 1:
            self.poses_superseded += int(seq - last - 1)

    # --- outputs -------------------------------------------------------------------------
    def publish_patch(self, box: Box) -> None:
        """A box of the terrain in the ``soil/terrain_patch`` wire format (caller holds the
        terrain lock, or is the constructor)."""
        i0, i1, j0, j1 = box
        msg = Float64MultiArray()
        ni, nj = i1 - i0, j1 - j0
        msg.layout.dim = [MultiArrayDimension(label="i", size=ni, stride=ni * nj),
                          MultiArrayDimension(label="j", size=nj, stride=nj)]
        msg.layout.data_offset = 2
        msg.data = patch_array(i0, j0, self.terrain.heights_m(box))
        self.patch_pub.publish(msg)

    def _visualisation_loop(self) -> None:
        """Own thread: at ``heightmap_rate_hz`` (wall clock), when the terrain changed, the full
        grid on the data topic and the heightmap cloud for RViz."""
        realtime.name_thread("soil_heightmap")
        next_due = time.monotonic()
        while not self._stop.wait(max(0.0, next_due - time.monotonic())):
            # heightmap_rate_hz may change at run time: the next period takes the new value
            next_due = max(next_due + 1.0 / self.config.heightmap_rate_hz,
                           time.monotonic() - 1.0)
            try:
                self.publish_heightmap()
            except Exception as exc:  # noqa: BLE001 - rclpy shutting down under the thread
                if not self._stop.is_set() and self.context.ok():  # not shutting down
                    self.get_logger().error(f"heightmap publish failed: {exc}")
                return

    def publish_heightmap(self) -> None:
        g = self.config.terrain
        subscribers = self.patch_pub.get_subscription_count()
        joined = subscribers > self._patch_subscribers
        self._patch_subscribers = subscribers
        with self._terrain_lock:
            if not self._mesh_dirty:
                if joined:   # a late subscriber: the whole grid, as it is now
                    self.publish_patch((0, g.nx, 0, g.ny))
                return
            self._mesh_dirty = False
            self.publish_patch((0, g.nx, 0, g.ny))
            heights = self.terrain.heights_m()  # a copy: the cloud is built outside the lock
        self.mesh_pub.publish(self._cloud(heights))

    def _cloud(self, heights: np.ndarray) -> PointCloud2:
        """The terrain surface as an unordered xyz cloud at every ``stride``-th cell centre."""
        xs, ys = self.terrain.cell_centres()
        layout = cloud_layout(heightmap_points(xs, ys, heights, self._stride))
        msg = PointCloud2()
        msg.header.frame_id = WORLD
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.fields = [PointField(name=f.name, offset=f.offset, datatype=f.datatype,
                                 count=f.count) for f in XYZ_FIELDS]
        msg.height, msg.width = layout.height, layout.width
        msg.point_step, msg.row_step = layout.point_step, layout.row_step
        msg.is_bigendian, msg.is_dense = layout.is_bigendian, layout.is_dense
        msg.data = layout.data
        return msg

    def _bucket_soil_loop(self) -> None:
        """Own thread: each machine's bucket soil as a marker at BUCKET_SOIL_RATE_HZ when it
        changed."""
        period = 1.0 / BUCKET_SOIL_RATE_HZ
        shown: dict[str, tuple[BucketPose, float, bytes]] = {}
        index = {m.name: i for i, m in enumerate(self.machines)}
        while not self._stop.wait(period):
            with self._terrain_lock:
                states = dict(self._bucket_state)
            for name, state in states.items():
                if shown.get(name) == state:
                    continue
                try:
                    body = self.machines[index[name]].terrain.body
                    self.bucket_soil_pub.publish(self.bucket_soil_marker(
                        *state, marker_id=index[name], body=body))
                except Exception as exc:  # noqa: BLE001 - rclpy shutting down under the thread
                    if not self._stop.is_set() and self.context.ok():
                        self.get_logger().error(f"bucket soil publish failed: {exc}")
                    return
                shown[name] = state

    def bucket_soil_marker(self, pose: BucketPose, load_m3: float, cells: bytes = b"",
                           marker_id: int = 0, body: BucketBody | None = None) -> Marker:
        """The soil in the bucket as a TRIANGLE_LIST in world; DELETE for an empty bucket.
        With the per-cell bucket soil (``body`` and a copy of its columns ``cells``) its
        columns as boxes in the bucket frame (``BucketBody.cell_triangles``: the carried
        volume exactly), else the closed form's shape filled to ``load_m3`` (columns one soil
        cell wide). ``marker_id``: the machine's index in a fleet."""
        if body is not None and cells:
            units = np.frombuffer(cells, dtype=body.units.dtype).reshape(body.units.shape)
            triangles = body.cell_triangles(pose, units)
        else:
            triangles = columns_to_triangles(soil_columns(
                self.bucket, pose, load_m3, self.config.terrain.repose_angle_rad,
                self.config.terrain.cell_xy_m))
        return bucket_soil_marker(triangles, self.get_clock().now().to_msg(), marker_id)

    def destroy_node(self) -> None:
        # also called by rclpy's context clean-up on a node whose constructor failed
        if hasattr(self, "_stop"):
            self._stop.set()
        for name in ("_viz_thread", "_bucket_thread"):
            thread = getattr(self, name, None)
            if thread is not None and thread.is_alive():
                thread.join(5.0)
        super().destroy_node()

    def _reject(self, reason: str) -> None:
        self.rejections.reject(reason, self._counters())

    def _counters(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for m in self.machines:  # one machine: the plain keys; a fleet: "<ns>/<key>"
            key = f"{m.name}/" if m.name else ""
            mean_ms = 1e3 * m.update_time_s / m.updates if m.updates else 0.0
            out |= {
                f"{key}updates": m.updates,
                f"{key}answers_repeated": m.answers_repeated,
                f"{key}poses_waited_for_twist": m.poses_waited_for_twist,
                f"{key}poses_without_twist": m.poses_without_twist,
                f"{key}mean_update_ms": f"{mean_ms:.3f}",
                f"{key}bucket_load_m3": f"{m.terrain.load_volume_m3:.5f}",
                f"{key}bucket_load_kg": f"{m.terrain.load_mass_kg:.1f}",
                f"{key}force_n": f"{np.linalg.norm(m.last_force):.1f}",
            }
        return {
            **out,
            "poses_superseded": self.poses_superseded,
            "poses_rate_skipped": self.poses_rate_skipped,
            "mass_drift_units": self.shared.total_units - self.start_units,
            "preset": self.config.preset,
            "rejected": self.rejections.count,
            "last_error": self.rejections.last,
        }

    def publish_status(self) -> None:
        self.diagnostics.publish(OK, "running", self._counters())


def _stamp_s(msg: PoseStamped | TwistStamped) -> float:
    """A stamped message's header stamp [s]."""
    return float(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)


def _topic(machine: str, name: str) -> str:
    return f"{machine}/{name}" if machine else name


def _machine_names(machines: str) -> list[str]:
    """The ``machines`` parameter as names ([""]: one machine, the node's own topics);
    SoilConfigError naming a bad one."""
    names = [n.strip().strip("/") for n in machines.split(",") if n.strip()]
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*", n):
            raise SoilConfigError(f"machines: {n!r} is not a ROS namespace (letters, digits, "
                                  "'_', not starting with a digit), e.g. 'exc1,exc2'")
    if len(set(names)) != len(names):
        raise SoilConfigError(f"machines: {names} has duplicates; name each machine once")
    return names or [""]


def _no_ground(x: np.ndarray | float, _y: np.ndarray | float) -> np.ndarray:
    return np.full(np.shape(x), -np.inf)


USAGE = NodeUsage(
    "soil_node", "Deformable terrain and the bucket-soil force: each bucket pose cuts, carries "
    "and dumps soil (its mass kept exactly) and answers with the wrench on the bucket.",
    subscribes=("bucket_pose (geometry_msgs/PoseStamped)",
                "bucket_twist (geometry_msgs/TwistStamped)"),
    publishes=("soil/wrench (geometry_msgs/WrenchStamped)", "soil/bucket_load (std_msgs/Float64)",
               "soil/bucket_payload (geometry_msgs/InertiaStamped)",
               "soil/terrain_patch (std_msgs/Float64MultiArray)",
               "soil/heightmap (sensor_msgs/PointCloud2)",
               "soil/bucket_soil (visualization_msgs/Marker)", "/diagnostics"),
    params_file="soil.yaml", docs="docs/soil.md")


def main(args: list[str] | None = None) -> int:
    return run_node(SoilNode, args, usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
