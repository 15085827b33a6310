"""sim_node with ``soil_in_process``: the soil core inside the simulation step (issue 12 item
3), over real DDS. The machine digs a scoop: the load rises, the soil pushes back, the trench is
in MuJoCo's height field, and every wrench answers the pose of its own instant (age 0, no stale
period), published on soil_node's topics."""

from __future__ import annotations

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, WrenchStamped
from helpers import (
    EVENT_WAIT_S,
    REPO,
    NodeProcess,
    RosTestNode,
    not_shown,
    reach_in_turn,
    stamp_ns,
    wait_for,
)
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState, PointCloud2
from std_msgs.msg import Float64
from visualization_msgs.msg import Marker

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics
from excavator_sim.soil.config import load_soil_config

JOINTS = ["swing", "boom", "arm", "bucket"]
DIG = [((6.0, 0.0, 0.3), 0.6), ((5.8, 0.0, -0.25), 0.5), ((5.0, 0.0, -0.25), 0.2),
       ((5.0, 0.0, -0.25), -0.4)]
# then the carry (test_soil_coupling's): arm in, the opening level [rad]
CARRY = [0.0, 0.52, -2.0, 0.1]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("soil_in_process")
    # the shipped soil file, whose per-cell bucket soil (the default) is tested here: its
    # payload and marker
    soil_file = REPO / "config" / "soil.yaml"
    assert "bucket_soil_model: cells" in soil_file.read_text()
    node = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                        "-p", "terrain.contact:=false", "-p", "soil_in_process:=true",
                        "-p", f"soil_params_file:={soil_file}"],
                       log_dir=logs)
    yield node
    assert node.stop() == 0, node.log()



def _sim_values(diagnostics: list[DiagnosticArray]) -> dict[str, str]:
    for array in reversed(list(diagnostics)):
        for st in array.status:
            if st.name.startswith("sim_node") and st.message.startswith("running"):
                return {kv.key: kv.value for kv in st.values}
    return {}


def test_sim_node_digs_a_scoop_with_the_soil_in_process(sim: NodeProcess) -> None:
    probe = RosTestNode("soil_in_process_probe")
    try:
        states: list[JointState] = probe.collect(JointState, "joint_states", 50)
        poses: list[PoseStamped] = probe.collect(PoseStamped, "bucket_pose", 10_000)
        wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, "soil/wrench", 10_000)
        loads: list[Float64] = probe.collect(Float64, "soil/bucket_load", 10_000)
        clouds: list[PointCloud2] = probe.collect(
            PointCloud2, "soil/heightmap",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        markers: list[Marker] = probe.collect(
            Marker, "soil/bucket_soil",
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        payloads: list[InertiaStamped] = probe.collect(InertiaStamped, "soil/bucket_payload",
                                                       10_000)
        diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics",
                                                           100)
        command = probe.node.create_publisher(JointState, "joint_command", 10)
        wait_for(lambda: states and wrenches and command.get_subscription_count() > 0, EVENT_WAIT_S,
                 lambda: f"sim_node up with its soil; log:\n{sim.log()}")
        ik = InverseKinematics(default_geometry())

        def send(q: list[float]) -> None:
            msg = JointState()
            msg.name, msg.position = JOINTS, q
            command.publish(msg)
        targets = [[float(v) for v in ik.solve(np.array(target), pitch).q]
                   for target, pitch in DIG]
        windows = reach_in_turn(send, states, JOINTS, [*targets, CARRY], 0.01, 40.0,
                                lambda k: f"waypoint {k}:\n{sim.log()}")
        n_status = len(diagnostics)
        wait_for(lambda: len(diagnostics) > n_status, EVENT_WAIT_S, "a status after the scoop")
        wait_for(lambda: clouds, EVENT_WAIT_S, "the heightmap cloud")
        # the carry: the per-cell soil drawn (boxes holding the carried volume exactly) and
        # its mass on the bucket body (sim_node's status), the wrench without its weight
        carried = loads[-1].data
        density = load_soil_config().terrain.density_kg_m3
        wait_for(lambda: markers and markers[-1].action == Marker.ADD
                 and abs(_marker_volume(markers[-1]) - carried) < 1e-9, EVENT_WAIT_S,
                 lambda: f"a soil/bucket_soil marker of the {carried:.4f} m^3 carried")
        n_status = len(diagnostics)
        wait_for(lambda: len(diagnostics) > n_status + 1, EVENT_WAIT_S, "a status after the carry")
    finally:
        probe.close()

    # the soil worked: load carried out of the ground, force while dragging
    assert max(m.data for m in loads) > 0.03
    # (the drag from the 2nd waypoint to the 3rd told by the wrenches' stamps, not by when
    # this thread saw the waypoints reached)
    start, end = windows[2]
    drag = np.array([[w.wrench.force.x, w.wrench.force.y, w.wrench.force.z]
                     for w in wrenches if start <= stamp_ns(w) <= end])
    assert np.mean(np.linalg.norm(drag, axis=1)) > 500.0
    # exact coupling: each wrench carries the stamp of a pose sim_node published (the state
    # it was computed from), and none was too old to act (a pose this probe missed, a loaded
    # host's dropped sample, leaves its wrench unjudged; config/sim.yaml: a pose every 10 ms)
    pose_stamps = {stamp_ns(p) for p in poses}
    answered = [stamp_ns(w) for w in wrenches
                if poses and stamp_ns(poses[0]) <= stamp_ns(w) <= stamp_ns(poses[-1])]
    assert answered and not not_shown(answered, pose_stamps, 10_000_000)
    values = _sim_values(diagnostics)
    assert values["soil_in_process"] == "true"
    assert int(values["soil_updates"]) > 100
    assert float(values["wrench_age_ms_max_since_start"]) == 0.0
    assert int(values["wrench_stale_periods"]) == 0
    assert int(values["terrain_patches"]) > 10   # the trench went into the height field
    assert clouds[-1].width * clouds[-1].height > 1000
    assert carried > 0.02
    assert payloads[-1].inertia.m == pytest.approx(carried * density)
    assert float(values["bucket_payload_kg"]) == pytest.approx(carried * density, abs=0.06)
    carry = [w for w in wrenches if stamp_ns(w) > windows[-1][1]]
    assert carry and all(w.wrench.force.z == 0.0 for w in carry[-5:])


def _marker_volume(marker: Marker) -> float:
    from test_bucket_soil import mesh_volume

    return mesh_volume(np.array([[q.x, q.y, q.z] for q in marker.points]).reshape(-1, 3))


def test_a_bad_soil_params_file_is_one_message_and_exit_2(tmp_path) -> None:
    node = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "-p", "soil_in_process:=true",
                        "-p", f"soil_params_file:={tmp_path / 'missing.yaml'}"], log_dir=tmp_path)
    try:
        wait_for(lambda: not node.alive(), EVENT_WAIT_S, node.log)
    finally:
        code = node.stop()
    assert code == 2, node.log()
    assert "[FATAL]" in node.log() and "missing.yaml" in node.log()
    assert "Traceback" not in node.log()


def test_soil_coupling_update_outside_the_grid_keeps_the_terrain_and_the_load_weighs() -> None:
    """The pure update the in-process soil runs: a bucket beyond the grid moves no soil and,
    with ``outside_ok`` (soil_node's behaviour), still gets a wrench; without it, raises."""
    from excavator_sim.plausibility import shipped_machine_envelope
    from excavator_sim.soil.bucket_prism import BucketPrism
    from excavator_sim.soil.config import load_soil_config
    from excavator_sim.soil.coupling import SoilCoupling
    from excavator_sim.soil.errors import OutsideGridError

    config = load_soil_config()
    coupling = SoilCoupling(config, BucketPrism.from_geometry(default_geometry()),
                            shipped_machine_envelope().soil_limits())
    ident, zero = (1.0, 0.0, 0.0, 0.0), np.zeros(3)
    # into the soil in front of the machine: soil moves, the box and its heights come back
    inside = coupling.update((5.5, 0.0, -0.1), ident, zero, zero)
    assert inside.changed is not None and inside.heights is not None
    i0, i1, j0, j1 = inside.changed
    assert inside.heights.shape == (i1 - i0, j1 - j0)
    np.testing.assert_array_equal(inside.heights, coupling.terrain.heights_m(inside.changed))
    before = coupling.terrain.heights_m()
    g = config.terrain
    far = (g.centre_x_m + g.size_x_m / 2 + 1.0, 0.0, 0.5)   # 1 m beyond the grid
    try:
        coupling.update(far, ident, zero, zero)
    except OutsideGridError:
        pass
    else:
        raise AssertionError("a bucket outside the grid must raise without outside_ok")
    out = coupling.update(far, ident, zero, zero, outside_ok=True)
    assert "leaves the terrain grid" in out.outside and out.changed is None
    np.testing.assert_array_equal(coupling.terrain.heights_m(), before)
    assert np.all(np.isfinite(out.forces.force))


def test_a_soil_grid_that_does_not_fit_the_height_field_is_one_message_and_exit_2(
        tmp_path) -> None:
    node = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "-p", "soil_in_process:=true", "-p", "terrain.nx:=100"],
                       log_dir=tmp_path)
    try:
        wait_for(lambda: not node.alive(), EVENT_WAIT_S, node.log)
    finally:
        code = node.stop()
    assert code == 2, node.log()
    assert "does not fit the height field" in node.log() and "terrain.*" in node.log()
    assert "Traceback" not in node.log()
