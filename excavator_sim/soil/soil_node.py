"""soil_node: deformable terrain and bucket-soil forces over ROS 2 (a thin shell over
``terrain.Terrain`` and ``soil_forces.DiMaioForceModel``).

Subscribes
- ``bucket_pose`` (geometry_msgs/PoseStamped, frame ``world``): the bucket frame (origin M, x
  along M->L); each message is one terrain + force update, at most ``update_rate_hz`` in the
  messages' own time (header stamps: simulated time when the simulator sends them).
- ``bucket_twist`` (geometry_msgs/TwistStamped, frame ``world``): velocity of the bucket
  origin [m/s] and angular velocity [rad/s]; the latest one is used.

Publishes
- ``soil/wrench`` (geometry_msgs/WrenchStamped, frame ``world``): force [N] and torque [N m] on
  the bucket about its origin, after every update (stamp = the pose's).
- ``soil/bucket_load`` (std_msgs/Float64): soil volume in the bucket [m^3], after every update.
- ``soil/heightmap`` (visualization_msgs/Marker TRIANGLE_LIST in ``world``): the terrain mesh
  for RViz over every k-th cell centre (k chosen so the mesh has at most 96 x 96 nodes), at
  ``heightmap_rate_hz`` when the terrain changed.
- ``soil/terrain_patch`` (std_msgs/Float64MultiArray): the data topic, in the wire format of
  ``excavator_sim.heightfield`` (what sim_node writes into MuJoCo's height field):
  ``layout.dim = [("i", ni, ni*nj), ("j", nj, nj)]``, ``layout.data_offset = 2``,
  ``data = [i0, j0, h(i0, j0), h(i0, j0+1), ...]`` [m], row-major with x (i) first; cell
  (i, j) of the soil grid (``terrain.*``) has its centre at ``x0 + (i + 0.5) cell_xy_m``.
  After every update that changed the terrain: the changed box; the whole grid once at start
  and, when it changed, at ``heightmap_rate_hz`` (for recorders that join late).
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

import math
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import Point, PoseStamped, TwistStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension
from visualization_msgs.msg import Marker

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.ros_runtime import (
    OK,
    Diagnostics,
    Rejections,
    declare,
    run_node,
    warn_unknown_parameters,
)
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
from excavator_sim.soil.terrain import Box, Terrain

WORLD = "world"
MARKER_MAX_NODES = 96  # per side: the RViz mesh stays < 60k vertices
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
        self.twist = (np.zeros(3), np.zeros(3))
        self.last_stamp: float | None = None
        self.updates = 0
        self.update_time_s = 0.0
        self.last_force = np.zeros(3)
        self._mesh_dirty = True
        g = config.terrain
        self._stride = max(1, math.ceil(max(g.nx, g.ny) / MARKER_MAX_NODES))

        self.wrench_pub = self.create_publisher(WrenchStamped, "soil/wrench", 10)
        self.load_pub = self.create_publisher(Float64, "soil/bucket_load", 10)
        # Latched (transient local): RViz started later still gets the last terrain mesh.
        self.mesh_pub = self.create_publisher(
            Marker, "soil/heightmap",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.patch_pub = self.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        # deep queues: a mesh publish may hold the executor for tens of ms
        self.create_subscription(PoseStamped, "bucket_pose", self.on_pose, 200)
        self.create_subscription(TwistStamped, "bucket_twist", self.on_twist, 200)
        self.diagnostics = Diagnostics(self, f"{self.get_name()}: soil")
        self.rejections = Rejections(self, self.diagnostics, "input")
        self.create_timer(1.0, self.publish_status)
        self.create_timer(1.0 / config.heightmap_rate_hz, self.publish_heightmap)
        self.publish_patch((0, g.nx, 0, g.ny))
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

    def on_pose(self, msg: PoseStamped) -> None:
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
        try:
            pose = BucketPose.from_quaternion((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
            self.plausibility.check_pose(pose, self.terrain.surface_m)  # before any soil moves
            try:
                update = self.terrain.update(pose)
                surface: SurfaceFn = self.terrain.surface_m
            except OutsideGridError as exc:
                self._reject(str(exc))
                surface = _no_ground  # keep the wrench current: only the load weighs
            result = self.forces.step(pose, self.twist[0], self.twist[1], surface,
                                      self.terrain.load_volume_m3)
            self.plausibility.check_wrench(result.force, result.torque)
        except (SoilError, ArithmeticError) as exc:
            self._reject(str(exc))
            return
        self.update_time_s += time.perf_counter() - t0
        self.updates += 1
        self.last_stamp = stamp
        self.last_force = result.force
        wrench = WrenchStamped()
        wrench.header.stamp = msg.header.stamp
        wrench.header.frame_id = WORLD
        f, tq = result.force, result.torque
        wrench.wrench.force.x, wrench.wrench.force.y, wrench.wrench.force.z = map(float, f)
        wrench.wrench.torque.x, wrench.wrench.torque.y, wrench.wrench.torque.z = map(float, tq)
        self.wrench_pub.publish(wrench)
        self.load_pub.publish(Float64(data=float(self.terrain.load_volume_m3)))
        if update is not None and update.changed is not None:
            self._mesh_dirty = True
            self.publish_patch(self.terrain.take_dirty() or update.changed)

    # --- outputs -------------------------------------------------------------------------
    def publish_patch(self, box: Box) -> None:
        """A box of the terrain in the ``soil/terrain_patch`` wire format."""
        i0, i1, j0, j1 = box
        msg = Float64MultiArray()
        ni, nj = i1 - i0, j1 - j0
        msg.layout.dim = [MultiArrayDimension(label="i", size=ni, stride=ni * nj),
                          MultiArrayDimension(label="j", size=nj, stride=nj)]
        msg.layout.data_offset = 2
        msg.data = [float(i0), float(j0), *self.terrain.heights_m(box).ravel().tolist()]
        self.patch_pub.publish(msg)

    def publish_heightmap(self) -> None:
        if not self._mesh_dirty:
            return
        self._mesh_dirty = False
        g = self.config.terrain
        self.publish_patch((0, g.nx, 0, g.ny))
        self.mesh_pub.publish(self._mesh())

    def _mesh(self) -> Marker:
        """TRIANGLE_LIST over every ``stride``-th cell centre (two triangles per quad)."""
        s = self._stride
        xs, ys = self.terrain.cell_centres()
        xs, ys = xs[::s], ys[::s]
        h = self.terrain.heights_m()[::s, ::s]
        a = np.stack(np.meshgrid(xs, ys, indexing="ij"), axis=-1)
        v = np.concatenate((a, h[..., None]), axis=-1)  # (nx, ny, 3)
        q00, q10 = v[:-1, :-1], v[1:, :-1]
        q01, q11 = v[:-1, 1:], v[1:, 1:]
        tris = np.stack((q00, q10, q11, q00, q11, q01), axis=2).reshape(-1, 3)
        marker = Marker()
        marker.header.frame_id = WORLD
        marker.header.stamp = self.get_clock().now().to_msg()
        marker.ns = "soil"
        marker.id = 0
        marker.type = Marker.TRIANGLE_LIST
        marker.action = Marker.ADD
        marker.pose.orientation.w = 1.0
        marker.scale.x = marker.scale.y = marker.scale.z = 1.0
        marker.color.r, marker.color.g, marker.color.b, marker.color.a = 0.55, 0.42, 0.28, 1.0
        marker.points = [Point(x=float(x), y=float(y), z=float(z)) for x, y, z in tris]
        return marker

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
