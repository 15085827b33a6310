"""The Foxglove live view (excavator_hil.foxglove_view): its pure core, and the node over a real
WebSocket with an independent client of the Foxglove protocol.

The client is the protocol's reference client from npm (``@foxglove/ws-protocol`` over ``ws``,
decoding with protobufjs from the schemas the server advertises: test/peers/foxglove, installed
by ``make foxglove-peer``); the live test skips, naming the fix, where node or the peer's
packages are absent. The ROS side is real DDS: the test publishes what the stack would (the
URDF, joint_states, terrain patches, the soil wrench, diagnostics) and a real redis-server holds
the bridge's keys.
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import EVENT_WAIT_S, REPO, STARTUP_TIMEOUT_S, NodeProcess, free_port, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_hil.foxglove_view.core import TerrainTiles, plc_channels, wrench_arrow
from excavator_hil.urdf_tf import UrdfTree, compose, quat_rotate

PEER = REPO / "test" / "peers" / "foxglove"
LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement


# --- core: URDF -> transforms --------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_and_urdf():
    import mujoco

    from excavator_kinematics.geometry import default_geometry
    from excavator_kinematics.linkage import Linkage
    from excavator_sim.model_builder import ModelOptions, build_model
    from excavator_sim.urdf import generate_urdf

    g = default_geometry()
    built = build_model(g, Linkage(g), ModelOptions(terrain_contact=False), 2.6)
    return built.model, mujoco.MjData(built.model), UrdfTree.parse(generate_urdf())


@given(q=st.lists(st.floats(-1.0, 1.0), min_size=7, max_size=7))
@settings(max_examples=30, deadline=None)
def test_urdf_transforms_put_every_link_where_mujoco_has_its_body(model_and_urdf, q):
    """The frames the view sends (composed from world) are the simulation's bodies, for any
    base pose and joint angles: the URDF it serves and its /tf agree with the machine."""
    import mujoco

    model, data, tree = model_and_urdf
    names = ["base_x", "base_y", "base_yaw", "swing", "boom", "arm", "bucket"]
    positions = dict(zip(names, [5 * q[0], 5 * q[1], math.pi * q[2], *q[3:]], strict=True))
    mujoco.mj_resetData(model, data)
    for name, value in positions.items():
        data.qpos[model.joint(name).qposadr[0]] = value
    mujoco.mj_kinematics(model, data)
    transforms = tree.transforms(positions)
    for link in ("base_link", "chassis", "boom", "arm", "bucket"):
        body = "caterpillar" if link == "base_link" else link
        t = compose(transforms, "world", link)
        assert np.allclose(t.translation, data.xpos[model.body(body).id], atol=1e-6), link
        w, x, y, z = data.xquat[model.body(body).id]
        # same rotation: q or -q
        assert min(np.abs(np.subtract(t.rotation, (x, y, z, w))).max(),
                   np.abs(np.add(t.rotation, (x, y, z, w))).max()) < 1e-6, link


@given(rpy=st.tuples(*[st.floats(-math.pi, math.pi)] * 3),
       xyz=st.tuples(*[st.floats(-3.0, 3.0)] * 3), q=st.floats(-2.0, 2.0),
       kind=st.sampled_from(["revolute", "prismatic", "fixed"]))
@settings(max_examples=100, deadline=None)
def test_a_joint_is_its_origin_then_its_motion(rpy, xyz, q, kind):
    """Against scipy's rotations: T = Trans(xyz) Rot(rpy, fixed axes x-y-z) Motion(axis, q)."""
    from scipy.spatial.transform import Rotation

    axis = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    urdf = (f"<robot name='r'><link name='a'/><link name='b'/><joint name='j' type='{kind}'>"
            f"<parent link='a'/><child link='b'/><origin xyz='{' '.join(map(repr, xyz))}' "
            f"rpy='{' '.join(map(repr, rpy))}'/><axis xyz='0.3 -0.5 0.8'/></joint></robot>")
    (t,) = UrdfTree.parse(urdf).transforms({"j": q})
    origin = Rotation.from_euler("xyz", rpy)
    motion = Rotation.from_rotvec(axis * q) if kind == "revolute" else Rotation.identity()
    shift = origin.apply(axis * q) if kind == "prismatic" else np.zeros(3)
    assert np.allclose(t.translation, np.add(xyz, shift), atol=1e-9)
    want = (origin * motion).as_matrix()
    assert np.allclose(Rotation.from_quat(t.rotation).as_matrix(), want, atol=1e-9)


def test_urdf_errors_name_the_problem():
    for text, words in (("not xml", "not XML"), ("<robt/>", "expected <robot>"),
                        ("<robot><joint name='j'><parent link='a'/></joint></robot>",
                         "needs <parent"),
                        ("<robot><joint name='j'><parent link='a'/><child link='b'/>"
                         "<origin xyz='1 x 0'/></joint></robot>", "three numbers")):
        with pytest.raises(ValueError, match=words):
            UrdfTree.parse(text)


def test_the_shipped_layout_is_the_one_the_sdk_model_writes():
    from excavator_hil.foxglove_view.layout import build_layout

    shipped = (REPO / "layouts" / "excavator_foxglove.json").read_text()
    assert shipped == build_layout(), ("layouts/excavator_foxglove.json is out of date: "
                                       "python -m excavator_hil.foxglove_view.layout > "
                                       "layouts/excavator_foxglove.json")
    layout = json.loads(shipped)
    three_d, right = (item["content"] for item in layout["content"]["items"])
    urdf = three_d["config"]["layers"]["excavator-urdf"]
    assert (urdf["layerId"], urdf["sourceType"], urdf["url"]) == (
        "foxglove.Urdf", "url", "package://excavator_hil/robot_description.urdf")
    assert set(three_d["config"]["topics"]) == {"/terrain", "/soil/wrench_arrow"}
    plotted = {p["value"].split(".")[0] for item in right["items"]
               for p in item["content"]["config"].get("paths", [])}
    assert plotted == {"/plc/command", "/plc/measured", "/plc/latency", "/soil/bucket_load",
                       "/soil/force"}
    fleet = json.loads(build_layout(["exc1", "exc2"]))["content"]["items"][0]["content"]
    assert fleet["config"]["followTf"] == "exc1/base_link"
    assert [layer["url"] for layer in fleet["config"]["layers"].values()] == [
        "package://excavator_hil/exc1/robot_description.urdf",
        "package://excavator_hil/exc2/robot_description.urdf"]
    right = json.loads(build_layout(["exc1", "exc2"]))["content"]["items"][1]["content"]
    plotted = {p["value"].split(".")[0] for item in right["items"]
               for p in item["content"]["config"].get("paths", [])}
    assert plotted == {f"/{m}/{c}" for m in ("exc1", "exc2") for c in (
        "plc/command", "plc/measured", "plc/latency", "soil/bucket_load", "soil/force")}


# --- core: terrain tiles -------------------------------------------------------------------------
def _patch(i0: int, j0: int, h: np.ndarray) -> list[float]:
    return [float(i0), float(j0), *h.ravel().tolist()]


def test_a_patch_marks_only_the_tiles_whose_mesh_it_changes():
    tiles = TerrainTiles.from_cells(0.0, 0.0, 0.1, 64, 96, tile=16)
    assert tiles.tiles_shape == (4, 6)
    assert tiles.take_dirty() == []                        # nothing known yet
    tiles.apply_patch(64, 96, _patch(0, 0, np.zeros((64, 96))))
    assert len(tiles.take_dirty()) == 24 and tiles.take_dirty() == []
    tiles.apply_patch(2, 2, _patch(20, 20, np.full((2, 2), -0.3)))
    assert tiles.take_dirty() == [(1, 1)]
    # a cell on a tile's first row/column is also the last of the tile before it
    tiles.apply_patch(1, 1, _patch(32, 48, np.ones((1, 1))))
    assert tiles.take_dirty() == [(1, 2), (1, 3), (2, 2), (2, 3)]
    # the whole grid again (soil_node re-sends it while anything changes): only what changed
    whole = tiles.z.copy()
    whole[5, 90] = 2.0
    tiles.apply_patch(64, 96, _patch(0, 0, whole))
    assert tiles.take_dirty() == [(0, 5)]
    tiles.apply_patch(64, 96, _patch(0, 0, whole))
    assert tiles.take_dirty() == []
    tiles.mark_all()
    assert len(tiles.take_dirty()) == 24
    with pytest.raises(ValueError, match="outside the 64 x 96 grid"):
        tiles.apply_patch(2, 2, _patch(63, 0, np.zeros((2, 2))))


@given(i0=st.integers(0, 40), j0=st.integers(0, 40), ni=st.integers(1, 8),
       nj=st.integers(1, 8))
@settings(max_examples=50, deadline=None)
def test_the_dirty_tiles_meshes_hold_every_changed_height(i0, j0, ni, nj):
    tiles = TerrainTiles.from_cells(-1.0, 2.0, 0.05, 48, 48, tile=8)
    tiles.apply_patch(48, 48, _patch(0, 0, np.zeros((48, 48))))
    tiles.take_dirty()
    h = np.random.default_rng(i0 * 50 + j0).uniform(0.1, 1.0, (ni, nj))
    tiles.apply_patch(ni, nj, _patch(i0, j0, h))
    seen = {}
    for key in tiles.take_dirty():
        points, indices = tiles.mesh(*key)
        assert indices.size % 3 == 0 and indices.max() < len(points)
        for x, y, z in points:
            seen[(round(x, 6), round(y, 6))] = z
    for a in range(ni):
        for b in range(nj):
            x, y = tiles.xs[i0 + a], tiles.ys[j0 + b]
            assert seen[(round(x, 6), round(y, 6))] == h[a, b]


def test_a_late_view_takes_the_terrain_from_the_strided_cloud_until_exact_heights_come():
    from excavator_sim.soil.terrain_messages import heightmap_points

    tiles = TerrainTiles.from_cells(-2.0, 1.0, 0.05, 40, 30, tile=8)
    truth = np.add.outer(np.arange(40) * 0.01, np.arange(30) * -0.02)
    cloud = heightmap_points(tiles.xs, tiles.ys, truth, 3)   # what soil_node latches
    assert tiles.seed_from_cloud(cloud) == 40 * 30 and tiles.complete
    assert len(tiles.take_dirty()) == 5 * 4
    # a sampled cell exactly, the others from their nearest sample (at most 1 cell away in x
    # and 2 in y, at the grid's edge: 0.01 + 2 x 0.02 m here)
    assert tiles.z[3, 6] == pytest.approx(truth[3, 6], abs=1e-6)
    assert np.abs(tiles.z - truth).max() <= 0.05 + 1e-6
    # exact heights are never overwritten by the cloud
    tiles.apply_patch(40, 30, _patch(0, 0, truth))
    assert tiles.seed_from_cloud(cloud + 1.0) == 0 and np.array_equal(tiles.z, truth)


def test_tile_triangles_face_up_and_tiles_join():
    tiles = TerrainTiles.from_cells(0.0, 0.0, 1.0, 10, 10, tile=4)
    tiles.apply_patch(10, 10, _patch(0, 0, np.zeros((10, 10))))
    covered = 0.0
    for key in tiles.take_dirty():
        p, idx = tiles.mesh(*key)
        tri = p[idx.reshape(-1, 3)]
        normal_z = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])[:, 2]
        assert (normal_z > 0).all()
        covered += 0.5 * normal_z.sum()
    # the cell centres span 9 x 9 m: the tiles cover it once, without gap or overlap
    assert covered == pytest.approx(81.0)


# --- core: wrench arrow, PLC channels ------------------------------------------------------------
@given(f=st.tuples(*[st.floats(-1e5, 1e5)] * 3))
@settings(max_examples=100, deadline=None)
def test_the_arrow_points_along_the_force_and_scales_with_it(f):
    mag = math.sqrt(sum(c * c for c in f))
    arrow = wrench_arrow(f, (1.0, 2.0, 3.0), 1e-4)
    if mag < 1e-3:
        return
    assert arrow is not None and arrow.origin == (1.0, 2.0, 3.0)
    assert arrow.length == pytest.approx(mag * 1e-4)
    # 1e-7 (direction within 0.1 urad): the half-angle quaternion loses ~1e-9 near a quarter
    # turn (found: f = (0, 6.1e-05, 1484)), far below anything a 3D panel draws
    assert np.allclose(quat_rotate(arrow.rotation, (1.0, 0.0, 0.0)), np.divide(f, mag),
                       atol=1e-7)


def test_no_arrow_for_no_force():
    assert wrench_arrow((0.0, 0.0, 0.0), (0, 0, 0), 1e-4) is None
    assert wrench_arrow((math.nan, 0.0, 0.0), (0, 0, 0), 1e-4) is None


def test_plc_channels_from_the_bridge_keys():
    out = plc_channels([b"0.5", b"0", b"-0.1"], [b"0.45", b"nan", None], b"7", b"4294967295",
                       0.8)
    assert out["command"] == {"longitudinal": 0.5, "lateral": 0.0, "angular": -0.1}
    assert out["measured"] == {"longitudinal": 0.45, "lateral": None, "angular": None}
    # seq wrapped past 2^32: 8 writes not yet acknowledged
    assert out["latency"] == {"redis_rtt_ms": 0.8, "plc_unacknowledged_writes": 8.0}


# --- the node over a real WebSocket, the reference client ----------------------------------------
def peer_executable() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (Node 20 + npm: the Foxglove protocol's reference "
                    "client runs on it)")
    if not (PEER / "node_modules" / "@foxglove" / "ws-protocol").is_dir():
        pytest.skip("the Foxglove client's npm packages are not installed: make foxglove-peer "
                    "(npm ci in test/peers/foxglove)")
    return node


class Peer:
    """The reference client in its own process; its JSON lines read back as they come
    (test_launch_real.py uses it too)."""

    def __init__(self, node: str, url: str, out: Path, *assets: str):
        self.out = out
        self._file = open(out, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([node, str(PEER / "client.js"), url, "600", *assets],
                                     stdout=self._file, stderr=subprocess.STDOUT, cwd=PEER)
        # read on from where the last call ended: the file grows by a /tf message every 10 ms,
        # and a wait polling it whole parsed megabytes of JSON five times a second (a launch
        # test ran past its 300 s on a loaded host)
        self._read_to = 0
        self._events: list[dict] = []

    def events(self) -> list[dict]:
        self._file.flush()
        with open(self.out, "rb") as f:
            f.seek(self._read_to)
            data = f.read()
        end = data.rfind(b"\n") + 1   # whole lines only: the last may be half written
        self._read_to += end
        for line in data[:end].decode(errors="replace").splitlines():
            try:
                self._events.append(json.loads(line))
            except json.JSONDecodeError:
                self._events.append({"event": "text", "text": line})
        return list(self._events)

    def messages(self, topic: str) -> list[dict]:
        return [e for e in self.events() if e["event"] == "message" and e["topic"] == topic]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(EVENT_WAIT_S)
        self._file.close()


@pytest.mark.slow
def test_the_live_view_over_the_foxglove_protocol(ros_node, redis_server, tmp_path):
    node_exe = peer_executable()
    import redis
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from geometry_msgs.msg import PoseStamped, WrenchStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension, String

    from excavator_sim.soil.config import load_soil_config
    from excavator_sim.urdf import generate_urdf
    from plc_bridge import redis_keys as keys

    port = free_port()
    view = NodeProcess("excavator_hil.foxglove_view.node", [
        "--ros-args", "-p", f"port:={port}", "-p", f"redis_url:={redis_server.url}",
        "-p", "terrain_rate_hz:=10.0"], log_dir=tmp_path)
    peer = None
    try:
        n = ros_node.node
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        urdf = generate_urdf()
        n.create_publisher(String, "robot_description", latched).publish(String(data=urdf))
        joints = n.create_publisher(JointState, "joint_states", 10)
        patches = n.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        wrench = n.create_publisher(WrenchStamped, "soil/wrench", 10)
        pose = n.create_publisher(PoseStamped, "bucket_pose", 10)
        load = n.create_publisher(Float64, "soil/bucket_load", 10)
        diag = n.create_publisher(DiagnosticArray, "/diagnostics", 10)
        db = redis.Redis.from_url(redis_server.url)
        db.mset({keys.LONGITUDINAL: "0.5", keys.LATERAL: "0", keys.ANGULAR: "0.1",
                 keys.MON_LONGITUDINAL: "0.45", keys.MON_LATERAL: "0",
                 keys.MON_ANGULAR: "0.09", keys.BRIDGE_SEQ: "12",
                 keys.STATE_SEQ_ACCEPTED: "11"})

        wait_for(lambda: "Foxglove WebSocket server on" in view.log() or not view.alive(),
                 LIMIT_S, lambda: f"the view's server; log:\n{view.log()}", 0.1)
        assert view.alive(), view.log()
        # the app asks for the URDF when it opens the layout: here once the view has it
        wait_for(lambda: "served as package://" in view.log(), LIMIT_S,
                 lambda: f"the view to get robot_description; log:\n{view.log()}", 0.1)
        peer = Peer(node_exe, f"ws://127.0.0.1:{port}", tmp_path / "peer.jsonl",
                    "package://excavator_hil/robot_description.urdf")

        def text() -> str:
            return f"client:\n{peer.out.read_text()[-3000:]}\nview:\n{view.log()[-3000:]}"

        # channels and their schemas, as the client saw them advertised
        expected = {"/tf": "foxglove.FrameTransforms", "/terrain": "foxglove.SceneUpdate",
                    "/soil/wrench_arrow": "foxglove.SceneUpdate",
                    "/robot_description": "std_msgs/msg/String",
                    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
                    "/soil/bucket_load": "bucket soil load",
                    "/soil/force": "soil force on the bucket",
                    "/plc/command": "", "/plc/measured": "", "/plc/latency": ""}

        def advertised() -> dict[str, dict]:
            return {c["topic"]: c for e in peer.events() if e["event"] == "advertise"
                    for c in e["channels"]}
        wait_for(lambda: set(expected) <= set(advertised()), LIMIT_S,
                 lambda: f"channels {sorted(expected)} advertised\n{text()}", 0.1)
        channels = advertised()
        for topic, schema in expected.items():
            if schema.startswith("foxglove."):
                assert (channels[topic]["encoding"], channels[topic]["schemaEncoding"],
                        channels[topic]["schemaName"]) == ("protobuf", "protobuf", schema)
            elif "/msg/" in schema:
                assert (channels[topic]["encoding"], channels[topic]["schemaEncoding"],
                        channels[topic]["schemaName"]) == ("cdr", "ros2msg", schema)
                assert "================" in channels[topic]["schema"] or \
                    topic == "/robot_description"
            else:
                assert channels[topic]["encoding"] == "json"
        assert not [e for e in peer.events() if e["event"] in ("schemaError", "error")], text()

        # the URDF: as an asset through the SDK's asset handling, and on its channel
        wait_for(lambda: any(e["event"] == "asset" for e in peer.events()), LIMIT_S,
                 lambda: f"the URDF asset\n{text()}", 0.1)
        (asset,) = [e for e in peer.events() if e["event"] == "asset"]
        assert asset["status"] == 0 and asset["text"] == urdf, asset
        wait_for(lambda: peer.messages("/robot_description"), LIMIT_S,
                 lambda: f"/robot_description\n{text()}", 0.1)
        raw = base64.b64decode(peer.messages("/robot_description")[-1]["raw"])
        assert deserialize_message(raw, String).data == urdf

        # transforms from joint_states, updating as the joints move
        def send_joints(swing: float, sec: int) -> None:
            m = JointState(name=["swing", "boom", "arm", "bucket"],
                           position=[swing, 0.2, -0.5, 0.3])
            m.header.stamp.sec = sec
            joints.publish(m)

        def swing_seen() -> set[float]:
            out = set()
            for m in peer.messages("/tf"):
                for t in m["decoded"]["transforms"]:
                    if t["childFrameId"] == "chassis":
                        r = t["rotation"]
                        out.add(round(2 * math.atan2(r["z"], r["w"]), 6))
            return out

        for swing, sec in ((0.0, 1), (0.7, 2)):
            wait_for(lambda s=swing, c=sec: send_joints(s, c) or round(s, 6) in swing_seen(),
                     LIMIT_S, lambda s=swing: f"/tf with swing {s}\n{text()}", 0.05)
        tf = peer.messages("/tf")[-1]["decoded"]["transforms"]
        children = {t["childFrameId"]: t["parentFrameId"] for t in tf}
        assert {"base_link", "chassis", "boom", "arm", "bucket"} <= set(children)
        assert children["chassis"] == "base_link" and children["boom"] == "chassis"
        assert tf[0]["timestamp"]["seconds"] in (1, 2)

        # the terrain: every tile once, then only the tile a patch changed
        grid = load_soil_config().terrain
        tiles = TerrainTiles.from_cells(grid.x0, grid.y0, grid.cell_xy_m, grid.nx, grid.ny, 32)
        n_tiles = tiles.tiles_shape[0] * tiles.tiles_shape[1]

        def patch_msg(i0: int, j0: int, h: np.ndarray) -> Float64MultiArray:
            m = Float64MultiArray()
            m.layout.dim = [MultiArrayDimension(label="i", size=h.shape[0]),
                            MultiArrayDimension(label="j", size=h.shape[1])]
            m.data = _patch(i0, j0, h)
            return m

        def terrain_ids() -> list[list[str]]:
            return [[e["id"] for e in m["decoded"]["entities"]]
                    for m in peer.messages("/terrain")]

        whole = patch_msg(0, 0, np.full((grid.nx, grid.ny), grid.initial_height_m))
        wait_for(lambda: patches.publish(whole) or
                 sum(len(ids) for ids in terrain_ids()) >= n_tiles, LIMIT_S,
                 lambda: f"{n_tiles} terrain tiles\n{text()}", 0.2)
        first = {i for ids in terrain_ids() for i in ids}
        assert len(first) == n_tiles
        before = len(terrain_ids())
        dug = patch_msg(40, 40, np.full((3, 3), grid.initial_height_m - 0.4))
        wait_for(lambda: patches.publish(dug) or any(
            "terrain_1_1" in ids for ids in terrain_ids()[before:]), LIMIT_S,
                 lambda: f"the dug tile\n{text()}", 0.2)
        after = terrain_ids()[before:]
        assert all(ids == ["terrain_1_1"] for ids in after), after
        (entity,) = [e for m in peer.messages("/terrain")[before:]
                     for e in m["decoded"]["entities"]][-1:]
        zs = [p["z"] for p in entity["triangles"][0]["points"]]
        assert min(zs) == pytest.approx(grid.initial_height_m - 0.4)
        assert entity["frameId"] == "world"

        # the soil wrench as an arrow at the bucket, the load and the force as numbers
        def send_soil() -> None:
            p = PoseStamped()
            p.header.frame_id = "world"
            p.pose.position.x, p.pose.position.z = 6.0, 0.5
            pose.publish(p)
            w = WrenchStamped()
            w.header.frame_id = "world"
            w.wrench.force.x, w.wrench.force.z = -3000.0, 4000.0
            wrench.publish(w)
            load.publish(Float64(data=0.12))
        wait_for(lambda: send_soil() or (peer.messages("/soil/wrench_arrow") and
                                         peer.messages("/soil/bucket_load")), LIMIT_S,
                 lambda: f"soil channels\n{text()}", 0.1)
        (arrow_entity,) = peer.messages("/soil/wrench_arrow")[-1]["decoded"]["entities"]
        (arrow,) = arrow_entity["arrows"]
        assert arrow["pose"]["position"] == {"x": 6.0, "y": 0.0, "z": 0.5}
        assert arrow["shaftLength"] + arrow["headLength"] == pytest.approx(5000.0 * 5e-5)
        assert peer.messages("/soil/bucket_load")[-1]["decoded"] == {"volume_m3": 0.12}
        assert peer.messages("/soil/force")[-1]["decoded"]["magnitude_n"] == pytest.approx(5000)

        # the PLC: command vs measured, latency, from the bridge's Redis keys
        wait_for(lambda: peer.messages("/plc/latency"), LIMIT_S, lambda: f"/plc\n{text()}", 0.1)
        assert peer.messages("/plc/command")[-1]["decoded"] == {
            "longitudinal": 0.5, "lateral": 0.0, "angular": 0.1}
        assert peer.messages("/plc/measured")[-1]["decoded"]["longitudinal"] == 0.45
        lat = peer.messages("/plc/latency")[-1]["decoded"]
        assert lat["plc_unacknowledged_writes"] == 1 and lat["redis_rtt_ms"] > 0
        db.set(keys.MON_LONGITUDINAL, "0.3")
        wait_for(lambda: peer.messages("/plc/measured")[-1]["decoded"]["longitudinal"] == 0.3,
                 LIMIT_S, lambda: f"/plc/measured to follow Redis\n{text()}", 0.1)

        # the diagnostics, passed through as ROS messages
        def send_diag() -> None:
            d = DiagnosticArray()
            d.status = [DiagnosticStatus(level=DiagnosticStatus.OK, name="probe: test",
                                         message="fine")]
            diag.publish(d)

        def diag_names() -> set[str]:
            return {s.name for m in peer.messages("/diagnostics")
                    for s in deserialize_message(base64.b64decode(m["raw"]),
                                                 DiagnosticArray).status}
        wait_for(lambda: send_diag() or "probe: test" in diag_names(), LIMIT_S,
                 lambda: f"/diagnostics\n{text()}", 0.1)
        assert "foxglove_view: Foxglove live view" in {
            s for s in diag_names() if "foxglove_view" in s} or wait_for(
            lambda: "foxglove_view: Foxglove live view" in diag_names(), LIMIT_S,
            lambda: f"the view's own status\n{text()}", 0.2)
        assert view.alive(), view.log()
        assert "Traceback" not in view.log(), view.log()
    finally:
        if peer is not None:
            peer.stop()
        ros_node.close()   # before the view leaves (conftest's ros_node: Fast DDS's deadlock)
        assert view.stop() == 0, view.log()


def test_bad_parameters_end_the_view_with_one_message(tmp_path):
    for args, words in ((["-p", "port:=70000"], "port = 70000 is outside 0 .. 65535"),
                        (["-p", "tf_rate:=5.0"], "unknown parameter 'tf_rate'"),
                        (["-p", "machines:=exc1,exc-2"], "exc-2 is not a namespace"),
                        (["-p", "redis_url:=redis://127.0.0.1:1/0", "-p", "redis_db_base:=0"],
                         "redis_db_base = 0 needs machines"),
                        (["-p", "machines:=exc1", "-p", "redis_url:=redis://127.0.0.1:1/0",
                          "-p", "redis_db_base:=0"], "names a database")):
        proc = NodeProcess("excavator_hil.foxglove_view.node", ["--ros-args", *args],
                           log_dir=tmp_path)
        try:
            assert proc.proc.wait(EVENT_WAIT_S) == 2, proc.log()
        finally:
            proc.stop()   # one that did not refuse must not stay on the graph
        assert words in proc.log() and "Traceback" not in proc.log(), proc.log()


@pytest.mark.slow
def test_a_fleet_in_one_scene(ros_node, redis_server, tmp_path):
    """``machines:=exc1,exc2``: each machine's URDF (with its frame prefix) as its own asset and
    channel, both machines' frames on the one /tf, each under its prefix from ``world``; with
    ``redis_db_base`` each machine's PLC channels from its own bridge's database."""
    node_exe = peer_executable()
    import redis
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from excavator_sim.urdf import generate_urdf
    from plc_bridge import redis_keys as keys

    port = free_port()
    server = redis_server.url.rsplit("/", 1)[0]     # the server, as fleet.launch.py gives it
    for k, longitudinal in ((3, "0.2"), (4, "0.7")):  # machine k's bridge: database 3 + k
        redis.Redis.from_url(f"{server}/{k}").mset({
            keys.LONGITUDINAL: longitudinal, keys.LATERAL: "0", keys.ANGULAR: "0",
            keys.MON_LONGITUDINAL: "0", keys.MON_LATERAL: "0", keys.MON_ANGULAR: "0"})
    view = NodeProcess("excavator_hil.foxglove_view.node", [
        "--ros-args", "-p", f"port:={port}", "-p", "machines:=exc1,exc2",
        "-p", f"redis_url:={server}", "-p", "redis_db_base:=3"], log_dir=tmp_path)
    peer = None
    try:
        n = ros_node.node
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        urdfs = {m: generate_urdf(frame_prefix=f"{m}/") for m in ("exc1", "exc2")}
        joints = {}
        for m, urdf in urdfs.items():
            n.create_publisher(String, f"/{m}/robot_description", latched).publish(
                String(data=urdf))
            joints[m] = n.create_publisher(JointState, f"/{m}/joint_states", 10)
        wait_for(lambda: view.log().count("served as package://") == 2 or not view.alive(),
                 LIMIT_S, lambda: f"both URDFs; log:\n{view.log()}", 0.1)
        assert view.alive(), view.log()
        peer = Peer(node_exe, f"ws://127.0.0.1:{port}", tmp_path / "peer.jsonl",
                    *[f"package://excavator_hil/{m}/robot_description.urdf" for m in urdfs])

        def frames() -> set[str]:
            return {t["childFrameId"] for msg in peer.messages("/tf")
                    for t in msg["decoded"]["transforms"]}

        def send() -> None:
            for m, pub in joints.items():
                pub.publish(JointState(name=["base_y", "swing"],
                                       position=[20.0 if m == "exc2" else 0.0, 0.3]))
        wait_for(lambda: send() or {"exc1/chassis", "exc2/chassis"} <= frames(), LIMIT_S,
                 lambda: f"both machines' /tf\n{peer.out.read_text()[-2000:]}", 0.1)
        assets = {e["requestId"]: e for e in peer.events() if e["event"] == "asset"}
        assert {i: (a["status"], a["text"]) for i, a in assets.items()} == {
            1: (0, urdfs["exc1"]), 2: (0, urdfs["exc2"])}
        parents = {t["childFrameId"]: t["parentFrameId"] for msg in peer.messages("/tf")
                   for t in msg["decoded"]["transforms"]}
        assert parents["exc2/base_x_slider"] == parents["exc1/base_x_slider"] == "world"
        y = {t["childFrameId"]: t["translation"]["y"] for msg in peer.messages("/tf")
             for t in msg["decoded"]["transforms"]}
        assert (y["exc1/base_xy_slider"], y["exc2/base_xy_slider"]) == (0.0, 20.0)
        topics = {c["topic"] for e in peer.events() if e["event"] == "advertise"
                  for c in e["channels"]}
        assert {"/exc1/robot_description", "/exc2/robot_description", "/exc2/soil/bucket_load",
                "/exc1/soil/force", "/tf", "/terrain", "/exc1/plc/command",
                "/exc2/plc/latency"} <= topics
        assert not any(t.startswith("/plc/") for t in topics), topics
        # each machine's command from its own bridge's database
        for m, longitudinal in (("exc1", 0.2), ("exc2", 0.7)):
            wait_for(lambda m=m: peer.messages(f"/{m}/plc/command"), LIMIT_S,
                     lambda m=m: f"/{m}/plc/command\n{peer.out.read_text()[-2000:]}", 0.1)
            assert peer.messages(f"/{m}/plc/command")[-1]["decoded"]["longitudinal"] == (
                longitudinal)
    finally:
        if peer is not None:
            peer.stop()
        ros_node.close()   # before the view leaves (conftest's ros_node: Fast DDS's deadlock)
        assert view.stop() == 0, view.log()
