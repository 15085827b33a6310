"""The soil model inside sim_node's step (sim_node parameter ``soil_in_process``, issue 12).

The same core soil_node runs (``Terrain``, ``DiMaioForceModel``, ``SoilPlausibility``, from
``config/soil.yaml`` or ``soil_params_file``; through the pure ``SoilCoupling.update``, with
soil_node's handling of a bucket outside the grid), called by sim_node at the start of every publish
period with the bucket pose and twist of that instant: the wrench acts during the period that
follows (age 0, exact coupling, nothing lost when the host is busy), and the changed box of the
terrain is written straight into MuJoCo's height field. Topics, as soil_node publishes them (so
recorders, RViz and the dashboard see no difference): ``soil/wrench`` (stamped with the pose's
simulated time), ``soil/bucket_load``, ``soil/bucket_payload`` (per-cell bucket soil: the
load as mass, set on the simulator's bucket body here), ``soil/bucket_soil`` (the marker, at
10 Hz when it changed), ``soil/terrain_patch`` (the changed
box after each update; the whole grid at start and at ``heightmap_rate_hz`` when it changed) and
``soil/heightmap`` (PointCloud2, latched), the last three built in their own thread, off the
control path. Every period is an update (``update_rate_hz`` does not apply: the coupling is the
simulation's own rate). soil_node stays the standard, separately launched node; run one or the
other, never both (two sources of the same topics).

Cost: the soil update runs in sim_node's thread (about 0.4 ms a period for update and forces on
the shipped grid, measured alone on the 2-core machine; ``soil_mean_update_ms`` on sim_node's
status), instead of a second process and two DDS hops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import InertiaStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension
from visualization_msgs.msg import Marker

from excavator_common import realtime
from excavator_sim.plausibility import shipped_machine_envelope
from excavator_sim.soil.bucket_markers import bucket_soil_marker
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.bucket_soil import columns_to_triangles, soil_columns
from excavator_sim.soil.config import SoilConfig
from excavator_sim.soil.coupling import SoilCoupling
from excavator_sim.soil.errors import SoilError
from excavator_sim.soil.payload import BucketPayload
from excavator_sim.soil.payload_messages import payload_message
from excavator_sim.soil.scenarios import warm_up
from excavator_sim.soil.terrain import Box
from excavator_sim.soil.terrain_messages import (
    XYZ_FIELDS,
    cloud_layout,
    heightmap_points,
    patch_array,
    stride_for,
)

WORLD = "world"
HEIGHTMAP_MAX_NODES = 160  # as soil_node: at most 160 x 160 points
BUCKET_SOIL_RATE_HZ = 10.0  # soil/bucket_soil at most this often (wall clock), as soil_node


@dataclass
class SoilStep:
    """What one update gives sim_node: the wrench for the coming period (None: the input was
    rejected, no soil force this period), the changed box and its heights [m] for the height
    field, and the reason of a rejection."""

    force: np.ndarray | None = None
    torque: np.ndarray | None = None
    changed: Box | None = None
    heights: np.ndarray | None = None
    rejected: str = ""
    # the load as a rigid body on the bucket (per-cell bucket soil; None: closed form)
    payload: BucketPayload | None = None


class InProcessSoil:
    """The soil core and its topics, driven by the owning node's simulation step."""

    def __init__(self, node: Node, config: SoilConfig, bucket: BucketPrism) -> None:
        self.node = node
        self.config = config
        # soil_node's core with its plausibility checks (the pure in-process coupling)
        self.coupling = SoilCoupling(config, bucket, shipped_machine_envelope().soil_limits())
        self.terrain = self.coupling.terrain
        warm_up(config.terrain, config.dimaio, bucket)   # numba kernels loaded now
        self.updates = 0
        self.update_time_s = 0.0
        self._lock = threading.Lock()   # the step (executor) and the visualisation thread
        self._dirty = True
        g = config.terrain
        self._stride = stride_for(g.nx, g.ny, HEIGHTMAP_MAX_NODES)
        self.wrench_pub = node.create_publisher(WrenchStamped, "soil/wrench", 10)
        self.load_pub = node.create_publisher(Float64, "soil/bucket_load", 10)
        self.payload_pub = (node.create_publisher(InertiaStamped, "soil/bucket_payload", 10)
                            if self.terrain.load_on_body else None)
        self.cloud_pub = node.create_publisher(
            PointCloud2, "soil/heightmap",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.patch_pub = node.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        self.bucket_soil_pub = node.create_publisher(
            Marker, "soil/bucket_soil",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        # the pose, load and (per-cell bucket soil) columns of the last update, for the marker
        self._bucket_state: tuple[BucketPose, float, bytes] | None = None
        self._bucket_shown: tuple[BucketPose, float, bytes] | None = None
        self._wrench = WrenchStamped()
        self._wrench.header.frame_id = WORLD
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._visualisation_loop,
                                        name="soil_heightmap", daemon=True)
        self._thread.start()

    def full_grid(self) -> tuple[Box, np.ndarray]:
        """The whole terrain (box and heights [m]), e.g. for the height field at start."""
        g = self.config.terrain
        box = (0, g.nx, 0, g.ny)
        with self._lock:
            return box, self.terrain.heights_m(box)

    def step(self, stamp: Time, position: np.ndarray, quat_wxyz: np.ndarray,
             linear: np.ndarray, angular: np.ndarray) -> SoilStep:
        """One update for the bucket pose (origin M [m], orientation as w, x, y, z) and twist
        ([m/s], [rad/s]) of the instant ``stamp``; publishes the wrench first, then the load and
        the changed patch."""
        t0 = time.perf_counter()
        try:
            with self._lock:
                update = self.coupling.update(position, quat_wxyz, linear, angular,
                                              outside_ok=True,
                                              time_s=stamp.sec + 1e-9 * stamp.nanosec)
                if update.changed is not None:
                    self._dirty = True
                body = self.terrain.body
                self._bucket_state = (update.pose, update.load_m3,
                                      body.units.tobytes() if body is not None else b"")
        except (SoilError, ArithmeticError) as exc:
            return SoilStep(rejected=f"in-process soil: {exc}")
        if self.payload_pub is not None and update.payload is not None:
            self.payload_pub.publish(payload_message(update.payload, stamp))
        msg = self._wrench
        msg.header.stamp = stamp
        f, tq = update.forces.force, update.forces.torque
        msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = map(float, f)
        msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = map(float, tq)
        self.wrench_pub.publish(msg)
        self.load_pub.publish(Float64(data=update.load_m3))
        if update.changed is not None and update.heights is not None:
            self.patch_pub.publish(_patch_message(update.changed, update.heights))
        self.updates += 1
        self.update_time_s += time.perf_counter() - t0
        return SoilStep(np.asarray(f, dtype=float), np.asarray(tq, dtype=float),
                        update.changed, update.heights,
                        f"in-process soil: {update.outside}" if update.outside else "",
                        update.payload)

    def counters(self) -> dict[str, str | int]:
        mean_ms = 1e3 * self.update_time_s / self.updates if self.updates else 0.0
        return {"soil_in_process": "true", "soil_updates": self.updates,
                "soil_mean_update_ms": f"{mean_ms:.3f}",
                "bucket_load_m3": f"{self.terrain.load_volume_m3:.5f}"}

    # --- visualisation (own thread) --------------------------------------------------------
    def _visualisation_loop(self) -> None:
        realtime.name_thread("soil_heightmap")
        period = 1.0 / self.config.heightmap_rate_hz
        next_due = next_marker = time.monotonic()
        while not self._stop.wait(max(0.0, min(next_due, next_marker) - time.monotonic())):
            now = time.monotonic()
            try:
                if now >= next_marker:
                    next_marker += 1.0 / BUCKET_SOIL_RATE_HZ
                    self.publish_bucket_soil()
                if now >= next_due:
                    next_due += period
                    self.publish_heightmap()
            except Exception as exc:  # noqa: BLE001 - rclpy shutting down under the thread
                if not self._stop.is_set() and self.node.context.ok():
                    self.node.get_logger().error(f"heightmap publish failed: {exc}")
                return

    def publish_bucket_soil(self) -> None:
        """The bucket's soil on ``soil/bucket_soil`` when it or the pose changed (soil_node's
        marker: the per-cell columns, or the closed form's shape)."""
        with self._lock:
            state = self._bucket_state
        if state is None or state == self._bucket_shown:
            return
        pose, load, cells = state
        body = self.terrain.body
        if body is not None and cells:
            units = np.frombuffer(cells, dtype=body.units.dtype).reshape(body.units.shape)
            triangles = body.cell_triangles(pose, units)
        else:
            t = self.config.terrain
            triangles = columns_to_triangles(soil_columns(
                self.terrain.bucket, pose, load, t.repose_angle_rad, t.cell_xy_m))
        self.bucket_soil_pub.publish(bucket_soil_marker(
            triangles, self.node.get_clock().now().to_msg()))
        self._bucket_shown = state

    def publish_heightmap(self) -> None:
        """When the terrain changed: the whole grid on ``soil/terrain_patch`` (for late
        joiners) and the cloud on ``soil/heightmap``."""
        g = self.config.terrain
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            box = (0, g.nx, 0, g.ny)
            heights = self.terrain.heights_m(box)   # a copy: messages built outside the lock
            # under the lock: a newer changed box cannot be published before this full grid
            self.patch_pub.publish(_patch_message(box, heights))
        xs, ys = self.terrain.cell_centres()
        layout = cloud_layout(heightmap_points(xs, ys, heights, self._stride))
        cloud = PointCloud2()
        cloud.header.frame_id = WORLD
        cloud.header.stamp = self.node.get_clock().now().to_msg()
        cloud.fields = [PointField(name=f.name, offset=f.offset, datatype=f.datatype,
                                   count=f.count) for f in XYZ_FIELDS]
        cloud.height, cloud.width = layout.height, layout.width
        cloud.point_step, cloud.row_step = layout.point_step, layout.row_step
        cloud.is_bigendian, cloud.is_dense = layout.is_bigendian, layout.is_dense
        cloud.data = layout.data
        self.cloud_pub.publish(cloud)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)


def _patch_message(box: Box, heights: np.ndarray) -> Float64MultiArray:
    """A box of the terrain in the ``soil/terrain_patch`` wire format (soil_node's)."""
    i0, i1, j0, j1 = box
    ni, nj = i1 - i0, j1 - j0
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label="i", size=ni, stride=ni * nj),
                      MultiArrayDimension(label="j", size=nj, stride=nj)]
    msg.layout.data_offset = 2
    msg.data = patch_array(i0, j0, heights)
    return msg

