"""``foxglove_view``: the machine as the Foxglove app shows it, live (a thin rclpy shell over
:mod:`excavator_hil.foxglove_view.core` and foxglove-sdk's WebSocket server).

Off the control path: its own process, it only subscribes (best effort where it may miss a
message) and reads Redis; nothing of the stack waits for it. Open the Foxglove app, "Open
connection" -> Foxglove WebSocket -> ``ws://127.0.0.1:8765`` (the server's default address, the
``host``/``port`` parameters), then import ``layouts/excavator_foxglove.json`` (docs/foxglove.md).

Channels (Foxglove schemas, protobuf; ROS 2 messages passed through as CDR):

- ``/tf`` (foxglove.FrameTransforms): every joint of ``robot_description`` at the positions of
  ``joint_states`` (what robot_state_publisher computes), at most ``tf_rate_hz``;
- ``/robot_description`` (std_msgs/msg/String, CDR): the URDF, also served as the asset
  ``package://excavator_hil/robot_description.urdf`` (the layout's URDF layer loads it so);
- ``/terrain`` (foxglove.SceneUpdate): the soil grid as triangle-list tiles; only the tiles a
  ``soil/terrain_patch`` changed are sent, at most ``terrain_rate_hz``; all of them once for
  each new subscriber;
- ``/soil/wrench_arrow`` (foxglove.SceneUpdate): the soil force at the bucket as an arrow;
- ``/soil/bucket_load`` (JSON ``{"volume_m3"}``), ``/soil/force`` (JSON ``{"fx_n", ...}``);
- ``/plc/command``, ``/plc/measured`` (JSON ``{"longitudinal", "lateral", "angular"}``
  [m/s, m/s, rad/s]) and ``/plc/latency`` (JSON ``{"redis_rtt_ms",
  "plc_unacknowledged_writes"}``) from the bridge's Redis keys, when ``redis_url`` is set; for
  a fleet (``machines`` and ``redis_db_base`` >= 0) each machine's, ``/<ns>/plc/*``, from its
  bridge's database ``redis_db_base + k``;
- ``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray, CDR): every node's, as it comes.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState, PointCloud2
from std_msgs.msg import Float64, Float64MultiArray, String

from excavator_common import hang_watchdog
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_node import NodeParameters
from excavator_common.ros_runtime import OK, WARN, Diagnostics, run_node, steady_timer
from excavator_hil.errors import HilConfigError
from excavator_hil.foxglove_view.core import (
    TerrainTiles,
    height_colors,
    plc_channels,
    wrench_arrow,
)
from excavator_hil.foxglove_view.parameters import FOXGLOVE_VIEW
from excavator_hil.urdf_tf import UrdfTree

URDF_ASSET = "package://excavator_hil/robot_description.urdf"
WORLD = "world"


def urdf_asset(machine: str) -> str:
    """The asset URI of a machine's URDF (``""``: the view's own namespace)."""
    return URDF_ASSET if not machine else f"package://excavator_hil/{machine}/robot_description.urdf"


def machine_topic(machine: str, name: str) -> str:
    """ROS topic (and Foxglove channel) ``name`` of a machine: relative for the view's own
    namespace, ``/<machine>/<name>`` for a fleet's."""
    return name if not machine else f"/{machine}/{name}"


def _channel(machine: str, name: str) -> str:
    return "/" + name if not machine else f"/{machine}/{name}"


class Machine:
    """What the view keeps of one machine: its URDF, the last /tf time, the bucket origin."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.urdf: str | None = None
        self.urdf_raw: bytes | None = None
        self.tree: UrdfTree | None = None
        self.last_tf_s = -math.inf
        self.bucket_origin: tuple[float, float, float] | None = None
        self.channels: dict[str, Any] = {}


def _ros2_schema(msgtype: str) -> Any:
    """The foxglove Schema of a ROS 2 message type (its concatenated .msg definition)."""
    import foxglove

    from excavator_hil.bags.io import TYPESTORE

    text, _ = TYPESTORE.generate_msgdef(msgtype, ros_version=2)
    return foxglove.Schema(name=msgtype, encoding="ros2msg", data=text.encode())


def _json_schema(title: str, fields: dict[str, str]) -> dict[str, Any]:
    return {"title": title, "type": "object",
            "properties": {k: {"type": ["number", "null"], "description": d}
                           for k, d in fields.items()}}


class FoxgloveView(Node):
    def __init__(self) -> None:
        super().__init__("foxglove_view")
        import foxglove
        from foxglove.channels import FrameTransformsChannel, SceneUpdateChannel
        from foxglove.websocket import ServerListener

        self.params = NodeParameters(self, FOXGLOVE_VIEW, warn_unknown=False)
        if self.params.unknown:   # a misspelt name would silently keep a default
            raise HilConfigError(FOXGLOVE_VIEW.unknown_message(
                self.params.unknown, f"{self.get_name()} parameters"))
        v = self.params.values
        self._lock = threading.Lock()
        names = [m.strip().strip("/") for m in str(v["machines"]).split(",") if m.strip()]
        bad = [m for m in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", m)]
        if bad or len(set(names)) != len(names):
            raise HilConfigError(
                f"foxglove_view: machines = {v['machines']!r}: "
                + (f"{', '.join(bad)} is not a namespace (letters, digits, _)" if bad
                   else "a namespace is named twice")
                + "; give the fleet's namespaces, e.g. exc1,exc2")
        self.machines = {m: Machine(m) for m in (names or [""])}
        self._tf_period_s = 1.0 / float(v["tf_rate_hz"])
        self._force_scale = float(v["force_scale_m_per_n"])
        self.counters = {"joint_states": 0, "tf_sent": 0, "terrain_patches": 0,
                         "terrain_tiles_sent": 0, "terrain_errors": 0, "urdf_errors": 0,
                         "plc_reads": 0, "plc_read_errors": 0}
        self.last_error = ""

        from excavator_sim.soil.config import load_soil_config

        try:
            grid = load_soil_config(str(v["soil_params"]) or None).terrain
        except Exception as exc:
            raise HilConfigError(f"foxglove_view: soil_params {v['soil_params']!r}: "
                                 f"{exc}") from exc
        self.terrain = TerrainTiles.from_cells(grid.x0, grid.y0, grid.cell_xy_m, grid.nx,
                                               grid.ny, int(v["terrain_tile_cells"]))
        self._ground_m = float(grid.initial_height_m)

        # --- the server and its channels (the SDK's own context: nothing else logs to it)
        self.fox = foxglove.Context()
        self.tf_channel = FrameTransformsChannel("/tf", context=self.fox)
        self.terrain_channel = SceneUpdateChannel("/terrain", context=self.fox)
        self.arrow_channel = SceneUpdateChannel("/soil/wrench_arrow", context=self.fox)
        string_schema = _ros2_schema("std_msgs/msg/String")
        self.diag_channel = foxglove.Channel(
            "/diagnostics", schema=_ros2_schema("diagnostic_msgs/msg/DiagnosticArray"),
            message_encoding="cdr", context=self.fox)
        for m in self.machines.values():
            m.channels["urdf"] = foxglove.Channel(
                _channel(m.name, "robot_description"), schema=string_schema,
                message_encoding="cdr", context=self.fox)
            m.channels["load"] = foxglove.Channel(
                _channel(m.name, "soil/bucket_load"), schema=_json_schema(
                    "bucket soil load", {"volume_m3": "soil in the bucket [m^3]"}),
                context=self.fox)
            m.channels["force"] = foxglove.Channel(
                _channel(m.name, "soil/force"), schema=_json_schema(
                    "soil force on the bucket", {"fx_n": "[N] world x", "fy_n": "[N] world y",
                                                 "fz_n": "[N] world z", "magnitude_n": "[N]"}),
                context=self.fox)
        velocity = {"longitudinal": "[m/s]", "lateral": "[m/s]", "angular": "[rad/s]"}
        redis_url = str(v["redis_url"])
        # the bridges read: (Redis URL, its channels); one, or one per machine of a fleet
        self.plc_readers: list[tuple[str, dict[str, Any]]] = []
        for url, base in self._plc_sources(redis_url, int(v["redis_db_base"]), names):
            channels: dict[str, Any] = {}
            for name, title in (("command", "PLC bridge command (Redis control keys)"),
                                ("measured", "PLC measured velocities (Redis monitor keys)")):
                channels[name] = foxglove.Channel(
                    f"{base}/plc/{name}", schema=_json_schema(title, velocity),
                    context=self.fox)
            channels["latency"] = foxglove.Channel(f"{base}/plc/latency", schema=_json_schema(
                "PLC bridge latency", {
                    "redis_rtt_ms": "round trip of this view's read of the bridge's keys [ms]",
                    "plc_unacknowledged_writes": "bridge writes the PLC has not acknowledged "
                                                 "yet (plc.bridge.seq - seq_accepted)"}),
                context=self.fox)
            self.plc_readers.append((url, channels))

        view = self

        class Listener(ServerListener):
            def on_subscribe(self, client: Any, channel: Any) -> None:
                # a new viewer of the terrain gets every tile once; of the URDF, the URDF
                if channel.topic == "/terrain":
                    with view._lock:
                        view.terrain.mark_all()
                elif channel.topic.endswith("/robot_description"):
                    view._republish_urdf()

        self.server = foxglove.start_server(
            name="excavator_hil", host=str(v["host"]), port=int(v["port"]),
            asset_handler=self._asset, server_listener=Listener(), context=self.fox)

        # --- ROS side: raw where a message is often skipped (decoded only when used)
        latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        for m in self.machines.values():
            def topic(name: str, m: Machine = m) -> str:
                return machine_topic(m.name, name)
            self.create_subscription(String, topic("robot_description"), functools.partial(
                self._on_description, m), latched, raw=True)
            self.create_subscription(JointState, topic("joint_states"), functools.partial(
                self._on_joints, m), latest, raw=True)
            self.create_subscription(PoseStamped, topic("bucket_pose"), functools.partial(
                self._on_bucket_pose, m), latest)
            self.create_subscription(WrenchStamped, topic("soil/wrench"), functools.partial(
                self._on_wrench, m), latest)
            self.create_subscription(Float64, topic("soil/bucket_load"), functools.partial(
                self._on_load, m), latest)
        # best effort, as the dashboard: a reliable reader that falls behind (this one runs at
        # nice 10) makes soil_node, which is in the control loop, keep and resend samples for
        # it; a lost patch is repaired by the next whole grid (soil_node's heightmap_rate_hz
        # while the terrain changes), whose changed cells are marked like a patch's
        self.create_subscription(Float64MultiArray, "soil/terrain_patch", self._on_patch,
                                 QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
        # soil_node's latched cloud: the terrain for a view that joined after its whole grid
        self.create_subscription(PointCloud2, "soil/heightmap", self._on_heightmap, latched)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50,
                                 raw=True)
        steady_timer(self, 1.0 / float(v["terrain_rate_hz"]), self._send_terrain)
        self.diagnostics = Diagnostics(self, self._status_name())
        steady_timer(self, 1.0, self._publish_status)

        self._stop = threading.Event()
        self._redis_thread: threading.Thread | None = None
        if self.plc_readers:
            self._redis_thread = threading.Thread(
                target=self._read_plc, args=(1.0 / float(v["plc_rate_hz"]),),
                name="foxglove-plc", daemon=True)
            self._redis_thread.start()
        self.get_logger().info(
            f"Foxglove WebSocket server on ws://{v['host']}:{self.server.port}: open it in the "
            "Foxglove app (Open connection -> Foxglove WebSocket) with the layout "
            + ("layouts/excavator_foxglove.json" if list(self.machines) == [""] else
               "layouts/excavator_foxglove_fleet.json (exc1,exc2; others: python -m "
               "excavator_hil.foxglove_view.layout --machines ...)") + "; terrain "
            f"{self.terrain.z.shape[0]} x {self.terrain.z.shape[1]} cells in "
            f"{self.terrain.tiles_shape[0] * self.terrain.tiles_shape[1]} tiles"
            + (f", PLC channels from {', '.join(url for url, _ in self.plc_readers)}"
               if self.plc_readers else ", no PLC channels (redis_url empty)")
            + (f"; machines {', '.join(self.machines)}" if list(self.machines) != [""] else ""))

    @staticmethod
    def _plc_sources(url: str, db_base: int, machines: list[str]) -> list[tuple[str, str]]:
        """(Redis URL, channel prefix) of each bridge read: ``url``'s on /plc/*, or with
        ``db_base`` >= 0 machine k's database ``db_base + k`` of the server ``url`` on
        /<ns>/plc/*. HilConfigError naming the fix for a combination that cannot be meant."""
        if not url:
            return []
        if db_base < 0:
            return [(url, "")]
        if not machines:
            raise HilConfigError(f"foxglove_view: redis_db_base = {db_base} needs machines "
                                 "(a fleet's namespaces, e.g. exc1,exc2), or set it to -1")
        server = url.rstrip("/")
        if re.search(r"/\d+$", server.split("@")[-1].split("//", 1)[-1]):
            raise HilConfigError(f"foxglove_view: redis_url = {url!r} names a database: with "
                                 f"redis_db_base = {db_base} give the server only (machine k "
                                 "uses database redis_db_base + k)")
        return [(f"{server}/{db_base + k}", f"/{m}") for k, m in enumerate(machines)]

    def _status_name(self) -> str:
        ns = self.get_namespace().strip("/")
        return f"{ns + '/' if ns else ''}{self.get_name()}: Foxglove live view"

    # --- assets ----------------------------------------------------------------------------------
    def _asset(self, uri: str) -> bytes | None:
        """A machine's URDF for the 3D panel's URDF layer (its geometry is primitives: no
        meshes)."""
        for m in self.machines.values():
            if uri == urdf_asset(m.name) and m.urdf is not None:
                return m.urdf.encode()
        return None

    # --- ROS callbacks ---------------------------------------------------------------------------
    def _on_description(self, m: Machine, raw: bytes) -> None:
        text = deserialize_message(raw, String).data
        try:
            tree = UrdfTree.parse(text)
        except ValueError as exc:
            self.counters["urdf_errors"] += 1
            self.last_error = str(exc)
            self.get_logger().error(f"robot_description not used: {exc}")
            return
        with self._lock:
            m.urdf, m.tree, m.urdf_raw = text, tree, raw
        m.channels["urdf"].log(raw)
        self.get_logger().info(f"{machine_topic(m.name, 'robot_description')}: "
                               f"{len(tree.joints)} joints, {len(tree.links)} links; served as "
                               f"{urdf_asset(m.name)}")

    def _republish_urdf(self) -> None:
        for m in self.machines.values():
            if m.urdf_raw is not None:
                m.channels["urdf"].log(m.urdf_raw)

    def _on_joints(self, m: Machine, raw: bytes) -> None:
        self.counters["joint_states"] += 1
        now = time.monotonic()
        tree = m.tree
        if now - m.last_tf_s < self._tf_period_s or tree is None:
            return
        m.last_tf_s = now
        from foxglove.messages import (
            FrameTransform,
            FrameTransforms,
            Quaternion,
            Timestamp,
            Vector3,
        )

        msg = deserialize_message(raw, JointState)
        stamp = Timestamp(sec=msg.header.stamp.sec, nsec=msg.header.stamp.nanosec)
        positions = dict(zip(msg.name, msg.position, strict=False))
        transforms = tree.transforms(positions)
        self.tf_channel.log(FrameTransforms(transforms=[FrameTransform(
            timestamp=stamp, parent_frame_id=t.parent, child_frame_id=t.child,
            translation=Vector3(x=t.translation[0], y=t.translation[1], z=t.translation[2]),
            rotation=Quaternion(x=t.rotation[0], y=t.rotation[1], z=t.rotation[2],
                                w=t.rotation[3])) for t in transforms]),
            log_time=self._log_time(msg.header.stamp))
        self.counters["tf_sent"] += 1

    def _log_time(self, stamp: Any) -> int | None:
        ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
        return ns if ns > 0 else None

    def _on_bucket_pose(self, m: Machine, msg: PoseStamped) -> None:
        p = msg.pose.position
        m.bucket_origin = (p.x, p.y, p.z)

    def _on_wrench(self, m: Machine, msg: WrenchStamped) -> None:
        from foxglove.messages import (
            ArrowPrimitive,
            Color,
            Pose,
            Quaternion,
            SceneEntity,
            SceneUpdate,
            Timestamp,
            Vector3,
        )

        f = msg.wrench.force
        mag = math.sqrt(f.x * f.x + f.y * f.y + f.z * f.z)
        m.channels["force"].log({"fx_n": f.x, "fy_n": f.y, "fz_n": f.z, "magnitude_n": mag},
                                log_time=self._log_time(msg.header.stamp))
        origin = m.bucket_origin
        entity_id = "soil_force" + (f"_{m.name}" if m.name else "")
        if origin is None:
            return
        arrow = wrench_arrow((f.x, f.y, f.z), origin, self._force_scale)
        stamp = Timestamp(sec=msg.header.stamp.sec, nsec=msg.header.stamp.nanosec)
        if arrow is None:
            self.arrow_channel.log(SceneUpdate(entities=[SceneEntity(
                timestamp=stamp, frame_id=WORLD, id=entity_id)]))
            return
        head = min(0.3, 0.3 * arrow.length)
        pose = Pose(position=Vector3(x=arrow.origin[0], y=arrow.origin[1], z=arrow.origin[2]),
                    orientation=Quaternion(x=arrow.rotation[0], y=arrow.rotation[1],
                                           z=arrow.rotation[2], w=arrow.rotation[3]))
        self.arrow_channel.log(SceneUpdate(entities=[SceneEntity(
            timestamp=stamp, frame_id=WORLD, id=entity_id, arrows=[ArrowPrimitive(
                pose=pose, shaft_length=max(0.0, arrow.length - head), shaft_diameter=0.06,
                head_length=head, head_diameter=0.15,
                color=Color(r=0.9, g=0.1, b=0.1, a=1.0))])]))

    def _on_load(self, m: Machine, msg: Float64) -> None:
        m.channels["load"].log({"volume_m3": msg.data})

    def _on_patch(self, msg: Float64MultiArray) -> None:
        self.counters["terrain_patches"] += 1
        if len(msg.layout.dim) != 2:
            return
        try:
            with self._lock:
                self.terrain.apply_patch(msg.layout.dim[0].size, msg.layout.dim[1].size,
                                         msg.data)
        except ValueError as exc:
            self.counters["terrain_errors"] += 1
            if str(exc) != self.last_error:
                self.get_logger().error(f"soil/terrain_patch not shown: {exc}")
            self.last_error = str(exc)

    def _on_heightmap(self, msg: PointCloud2) -> None:
        if self.terrain.complete:
            return
        from excavator_sim.soil.terrain_messages import cloud_points

        try:
            points = cloud_points(msg.data, msg.width, msg.height, msg.point_step)
        except ValueError as exc:
            self.counters["terrain_errors"] += 1
            self.last_error = f"soil/heightmap: {exc}"
            return
        with self._lock:
            self.terrain.seed_from_cloud(points)

    def _on_diagnostics(self, raw: bytes) -> None:
        self.diag_channel.log(raw)

    # --- terrain ---------------------------------------------------------------------------------
    def _send_terrain(self) -> None:
        from foxglove.messages import Color, Point3, SceneEntity, SceneUpdate, TriangleListPrimitive

        with self._lock:
            tiles = self.terrain.take_dirty()
            meshes = [(key, *self.terrain.mesh(*key)) for key in tiles]
        if not meshes:
            return
        entities = []
        for (ti, tj), points, indices in meshes:
            colors = height_colors(points[:, 2], self._ground_m)
            entities.append(SceneEntity(frame_id=WORLD, id=f"terrain_{ti}_{tj}", triangles=[
                TriangleListPrimitive(
                    points=[Point3(x=float(x), y=float(y), z=float(z)) for x, y, z in points],
                    colors=[Color(r=float(r), g=float(g), b=float(b), a=1.0)
                            for r, g, b, _ in colors],
                    indices=[int(i) for i in indices])]))
        self.terrain_channel.log(SceneUpdate(entities=entities))
        self.counters["terrain_tiles_sent"] += len(entities)

    # --- PLC bridge (Redis, read only, its own thread) -------------------------------------------
    def _read_plc(self, period_s: float) -> None:
        """Every bridge's keys (one MGET each) every ``period_s``, onto its channels."""
        import redis

        from plc_bridge import redis_keys as keys

        names = [keys.LONGITUDINAL, keys.LATERAL, keys.ANGULAR, keys.MON_LONGITUDINAL,
                 keys.MON_LATERAL, keys.MON_ANGULAR, keys.BRIDGE_SEQ, keys.STATE_SEQ_ACCEPTED]
        clients = [(url, redis.Redis.from_url(url, socket_timeout=1.0,
                                              socket_connect_timeout=1.0), channels)
                   for url, channels in self.plc_readers]
        next_s = time.monotonic()
        while not self._stop.is_set():
            for url, client, channels in clients:
                t0 = time.monotonic()
                try:
                    values = client.mget(names)
                except redis.RedisError as exc:
                    self.counters["plc_read_errors"] += 1
                    self.last_error = f"Redis {url}: {exc}"
                    continue
                rtt_ms = 1e3 * (time.monotonic() - t0)
                out = plc_channels(values[0:3], values[3:6], values[6], values[7], rtt_ms)
                for name, fields in out.items():
                    channels[name].log(fields)
                self.counters["plc_reads"] += 1
            next_s = max(next_s + period_s, time.monotonic())
            self._stop.wait(next_s - time.monotonic())
        for _, client, _ in clients:
            client.close()

    # --- status ----------------------------------------------------------------------------------
    def _publish_status(self) -> None:
        waiting = [machine_topic(m.name, "robot_description") for m in self.machines.values()
                   if m.tree is None]
        level = WARN if waiting else OK
        message = (f"waiting for {', '.join(waiting)}" if waiting
                   else f"serving ws://{self.params.values['host']}:{self.server.port}")
        self.diagnostics.publish(level, message, {**self.counters,
                                                  "last_error": self.last_error})

    def close(self) -> None:
        self._stop.set()
        if self._redis_thread is not None:
            self._redis_thread.join(2.0)
        self.server.stop()


USAGE = NodeUsage(
    "foxglove_view", "The Foxglove live view: the machine (URDF + /tf from joint_states), the "
    "terrain as it is dug, the soil force and load, the PLC's command vs measured velocities "
    "and the bridge's latency, and the diagnostics, on a Foxglove WebSocket server (loopback "
    "ws://127.0.0.1:8765 by default; its channels: docs/foxglove.md). Off the control path: "
    "it only subscribes and reads Redis.",
    subscribes=("robot_description (std_msgs/String)", "joint_states (sensor_msgs/JointState)",
                "bucket_pose (geometry_msgs/PoseStamped)",
                "soil/wrench (geometry_msgs/WrenchStamped)", "soil/bucket_load (std_msgs/Float64)",
                "soil/terrain_patch (std_msgs/Float64MultiArray)",
                "soil/heightmap (sensor_msgs/PointCloud2)",
                "/diagnostics (diagnostic_msgs/DiagnosticArray)"),
    publishes=("/diagnostics",),
    params_file="foxglove_view.yaml", docs="docs/foxglove.md")


def main(args: list[str] | None = None) -> int:
    # Twice in fresh-clone CI runs (one core busy) this view did not end on ros2 launch's Ctrl-C
    # nor on its SIGTERM 20 s later, after a client's connection broke mid-send; not reproduced
    # here (18 runs). SIGTERM prints where each thread stands (faulthandler: C level, so it
    # works while a thread holds the GIL) and then ends the process (the default action, after
    # rclpy's handler): a view has nothing to save.
    hang_watchdog.dump_stacks_on_sigterm()
    return run_node(FoxgloveView, args, cleanup=lambda n: n.close(), usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
