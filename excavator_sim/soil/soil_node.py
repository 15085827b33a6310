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
- ``soil/heightmap`` (sensor_msgs/PointCloud2 in ``world``, fields x, y, z FLOAT32 [m]): the
  terrain surface for RViz at every k-th cell centre (k chosen so there are at most 160 x 160
  points), at ``heightmap_rate_hz`` when the terrain changed; built from numpy in the node's own
  visualisation thread, off the control path (``excavator_sim.soil.terrain_messages``).
- ``soil/terrain_patch`` (std_msgs/Float64MultiArray): the data topic, in the wire format of
  ``excavator_sim.heightfield`` (what sim_node writes into MuJoCo's height field):
  ``layout.dim = [("i", ni, ni*nj), ("j", nj, nj)]``, ``layout.data_offset = 2``,
  ``data = [i0, j0, h(i0, j0), h(i0, j0+1), ...]`` [m], row-major with x (i) first; cell
  (i, j) of the soil grid (``terrain.*``) has its centre at ``x0 + (i + 0.5) cell_xy_m``.
  After every update that changed the terrain: the changed box; the whole grid once at start
  and, when it changed, at ``heightmap_rate_hz`` (for recorders that join late; from the
  visualisation thread, under the terrain lock so it never overtakes a newer changed box).
- ``/diagnostics``: at 1 Hz; updates, mean update time, load, mass drift (always 0), rejected
  messages with the last reason (NaN, wrong frame, bucket outside the grid). A bucket outside
  the grid is reported as an error and the terrain is left alone, but the wrench is still
  published, computed over no ground (only the load's weight), so the simulator never holds a
  stale cutting force. Implausible input (``excavator_sim.soil.plausibility``: a pose beyond
  the grid plus the machine's reach or deeper under the surface than it can dig, a twist
  faster than the machine moves, NaN/inf) is rejected before any soil moves, with the limit;
  a rejected twist keeps the last valid one, so later poses are still served.

Parameters: ``config/soil.yaml`` (every key declared with its unit and range), plus the keys of
every preset defined only in the node's parameter overrides (``--params-file``, ``-p``):
``presets.<name>.*`` there is a preset that ``preset`` can select. Every preset must be complete
and in range (``excavator_sim.soil.config``: the ranges and messages); otherwise the node exits
with code 2 naming the parameter, its range and the fix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension

from excavator_common import realtime
from excavator_common.ros_runtime import (
    OK,
    Diagnostics,
    Rejections,
    declare,
    run_node,
    warn_unknown_parameters,
)
from excavator_kinematics.geometry import default_geometry
from excavator_sim.plausibility import shipped_machine_envelope
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import (
    check_parameter,
    is_parameter,
    parameters_from_yaml,
    soil_config_from_parameters,
    spec_for,
)
from excavator_sim.soil.errors import OutsideGridError, SoilError
from excavator_sim.soil.forces import DiMaioForceModel, SurfaceFn
from excavator_sim.soil.plausibility import SoilPlausibility
from excavator_sim.soil.scenarios import warm_up
from excavator_sim.soil.terrain import Box, Terrain
from excavator_sim.soil.terrain_messages import (
    XYZ_FIELDS,
    cloud_layout,
    heightmap_points,
    patch_array,
    stride_for,
)

WORLD = "world"
HEIGHTMAP_MAX_NODES = 160  # points per side of soil/heightmap (<= 25,600 points, 307 kB)
# Latest wins: one pose waiting at most; a newer one replaces it (no backlog of stale poses).
LATEST_ONLY = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                         reliability=ReliabilityPolicy.RELIABLE)
SOURCE = "soil_node parameters"
# Declared by rclpy itself (TimeSource, type description service), not overrides to take back.
RCLPY_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})


class SoilNode(Node):
    def __init__(self) -> None:
        # rclpy declares every override (parameter file, -p) at once: its public way to show a
        # node their names, so presets that exist only in the user's file are found.
        super().__init__("soil_node", automatically_declare_parameters_from_overrides=True)
        overrides = self._take_back_overrides()
        values = self._declare_all(overrides)
        # before the completeness check: a misspelt key is the usual cause of a missing one
        warn_unknown_parameters(self)
        config = soil_config_from_parameters(values, SOURCE)   # SoilConfigError: exit 2
        self.config = config
        self.bucket = BucketPrism.from_geometry(default_geometry())
        self.terrain = Terrain(config.terrain, self.bucket)
        self.forces = DiMaioForceModel(config.dimaio, self.bucket)
        self.plausibility = SoilPlausibility(config.terrain, self.bucket,
                                             shipped_machine_envelope().soil_limits())
        self.start_units = self.terrain.total_units
        # Load the numba kernels before the first pose arrives (a throwaway dig cycle): else
        # the first wrench answers a pose 1-3 s old on a 2-core host.
        warm_up(config.terrain, config.dimaio, self.bucket)
        self.twist = (np.zeros(3), np.zeros(3))
        self.last_stamp: float | None = None
        self.updates = 0
        self.update_time_s = 0.0
        self.last_force = np.zeros(3)
        self.poses_superseded = 0  # poses replaced by a newer one before they were processed
        self._last_sequence: dict[bytes, int] = {}  # per publisher (gid)
        self._mesh_dirty = True
        g = config.terrain
        self._stride = stride_for(g.nx, g.ny, HEIGHTMAP_MAX_NODES)
        # The control path (on_pose, executor thread) and the visualisation thread share the
        # terrain: the lock covers an update and a snapshot copy, never a message build.
        self._terrain_lock = threading.Lock()
        self._stop = threading.Event()

        self.wrench_pub = self.create_publisher(WrenchStamped, "soil/wrench", 10)
        self.load_pub = self.create_publisher(Float64, "soil/bucket_load", 10)
        # Latched (transient local): RViz started later still gets the last terrain.
        self.mesh_pub = self.create_publisher(
            PointCloud2, "soil/heightmap",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.patch_pub = self.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        # twist first: when both are ready the executor takes them in this order, so a pose
        # is processed with the twist of its own instant (sim_node sends the twist first)
        self.create_subscription(TwistStamped, "bucket_twist", self.on_twist, LATEST_ONLY)
        self.create_subscription(PoseStamped, "bucket_pose", self.on_pose, LATEST_ONLY)
        self.diagnostics = Diagnostics(self, f"{self.get_name()}: soil")
        self.rejections = Rejections(self, self.diagnostics, "input")
        self.create_timer(1.0, self.publish_status)
        self.publish_patch((0, g.nx, 0, g.ny))
        # Visualisation (heightmap cloud, periodic full grid) in its own thread: never in the
        # executor that runs on_pose.
        self._viz_thread = threading.Thread(target=self._visualisation_loop,
                                            name="soil_heightmap", daemon=True)
        self._viz_thread.start()
        self.get_logger().info(
            f"ready: preset {config.preset} (of {', '.join(config.presets)}), grid {g.nx} x "
            f"{g.ny} cells of {g.cell_xy_m} m from x0={g.x0:.2f}, y0={g.y0:.2f} m")

    def _take_back_overrides(self) -> dict[str, Any]:
        """The override values by name; undeclares what rclpy declared automatically (no
        description, no range), so that ``_declare_all`` declares the soil keys properly and
        ``warn_unknown_parameters`` still reports the rest (misspelt keys) as unknown."""
        overrides = {name: p.value for name, p in self.get_parameters_by_prefix("").items()
                     if name not in RCLPY_PARAMETERS}
        for name in overrides:
            self.undeclare_parameter(name)
        return overrides

    def _declare_all(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Declare every key of config/soil.yaml (defaults from it) and every soil key of the
        overrides (``presets.<name>.*`` of a user's preset: no default, the override is its
        value); return the values. Each value is checked against soil_config's range first, so
        an out-of-range one fails with its message; the declared range is the same."""
        defaults = parameters_from_yaml()
        for name, value in overrides.items():
            if name not in defaults and is_parameter(name):
                defaults[name] = value  # a key of a user preset
        values: dict[str, Any] = {}
        for name, default in defaults.items():
            check_parameter(name, overrides.get(name, default), SOURCE)
            spec = spec_for(name)
            if spec is None:  # 'preset'
                values[name] = declare(self, name, str(default), "soil preset: one of presets.*")
                continue
            values[name] = declare(self, name, spec.kind(default), spec.description,
                                   low=spec.lo, high=spec.hi)
        return values

    # --- inputs --------------------------------------------------------------------------
    def on_twist(self, msg: TwistStamped) -> None:
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
        self.twist = twist

    def on_pose(self, msg: PoseStamped, info: MessageInfo | None) -> None:
        self._count_superseded(info)
        if msg.header.frame_id not in ("", WORLD):
            self._reject(f"bucket_pose in frame {msg.header.frame_id!r}: send it in 'world'")
            return
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if (self.last_stamp is not None and stamp > self.last_stamp
                and stamp - self.last_stamp < 1.0 / self.config.update_rate_hz - 1e-6):
            return  # faster than update_rate_hz (in the messages' time): skip
        p, o = msg.pose.position, msg.pose.orientation
        t0 = time.perf_counter()
        update = None
        outside: str | None = None
        try:
            pose = BucketPose.from_quaternion((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
            with self._terrain_lock:
                self.plausibility.check_pose(pose, self.terrain.surface_m)  # before soil moves
                try:
                    update = self.terrain.update(pose)
                    surface: SurfaceFn = self.terrain.surface_m
                except OutsideGridError as exc:
                    outside = str(exc)
                    surface = _no_ground  # keep the wrench current: only the load weighs
                result = self.forces.step(pose, self.twist[0], self.twist[1], surface,
                                          self.terrain.load_volume_m3)
                load = float(self.terrain.load_volume_m3)
            self.plausibility.check_wrench(result.force, result.torque)
        except (SoilError, ArithmeticError) as exc:
            self._reject(str(exc))
            return
        # The wrench first: the simulator is waiting for it; everything else comes after.
        wrench = WrenchStamped()
        wrench.header.stamp = msg.header.stamp
        wrench.header.frame_id = WORLD
        f, tq = result.force, result.torque
        wrench.wrench.force.x, wrench.wrench.force.y, wrench.wrench.force.z = map(float, f)
        wrench.wrench.torque.x, wrench.wrench.torque.y, wrench.wrench.torque.z = map(float, tq)
        self.wrench_pub.publish(wrench)
        self.update_time_s += time.perf_counter() - t0
        self.updates += 1
        self.last_stamp = stamp
        self.last_force = result.force
        self.load_pub.publish(Float64(data=load))
        if outside is not None:
            self._reject(outside)
        if update is not None and update.changed is not None:
            with self._terrain_lock:
                self._mesh_dirty = True
                self.publish_patch(self.terrain.take_dirty() or update.changed)

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
        period = 1.0 / self.config.heightmap_rate_hz
        next_due = time.monotonic()
        while not self._stop.wait(max(0.0, next_due - time.monotonic())):
            next_due += period
            try:
                self.publish_heightmap()
            except Exception as exc:  # noqa: BLE001 - rclpy shutting down under the thread
                if not self._stop.is_set() and self.context.ok():  # not shutting down
                    self.get_logger().error(f"heightmap publish failed: {exc}")
                return

    def publish_heightmap(self) -> None:
        g = self.config.terrain
        with self._terrain_lock:
            if not self._mesh_dirty:
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

    def destroy_node(self) -> None:
        self._stop.set()
        if self._viz_thread.is_alive():
            self._viz_thread.join(5.0)
        super().destroy_node()

    def _reject(self, reason: str) -> None:
        self.rejections.reject(reason, self._counters())

    def _counters(self) -> dict[str, object]:
        mean_ms = 1e3 * self.update_time_s / self.updates if self.updates else 0.0
        return {
            "updates": self.updates,
            "mean_update_ms": f"{mean_ms:.3f}",
            "bucket_load_m3": f"{self.terrain.load_volume_m3:.5f}",
            "bucket_load_kg": f"{self.terrain.load_mass_kg:.1f}",
            "force_n": f"{np.linalg.norm(self.last_force):.1f}",
            "poses_superseded": self.poses_superseded,
            "mass_drift_units": self.terrain.total_units - self.start_units,
            "preset": self.config.preset,
            "rejected": self.rejections.count,
            "last_error": self.rejections.last,
        }

    def publish_status(self) -> None:
        self.diagnostics.publish(OK, "running", self._counters())


def _no_ground(x: np.ndarray | float, _y: np.ndarray | float) -> np.ndarray:
    return np.full(np.shape(x), -np.inf)


def main(args: list[str] | None = None) -> int:
    return run_node(SoilNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
