"""The nodes' parameters as a ROS user meets them, over real DDS (node processes, the parameter
services `ros2 param describe/get/set` use): descriptors with unit, range and read_only from the
one spec; a dynamic parameter set at run time changes what the node does (measured); a read-only
one, an out-of-range and a NaN value are refused with the reason; a deprecated name given at
start-up is used, with a warning naming the new one."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Iterator

import numpy as np
import pytest
from geometry_msgs.msg import PointStamped, PoseStamped, TwistStamped, WrenchStamped
from helpers import (
    EVENT_WAIT_S,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RosTestNode,
    describe_parameters,
    get_parameters,
    publish_until,
    send_bucket_state,
    set_parameters,
    wait_for,
)
from rcl_interfaces.msg import ParameterType
from sensor_msgs.msg import JointState
from visualization_msgs.msg import MarkerArray

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics
from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.scenarios import pitch_for_attack, pose_for_tip

# Each node in a namespace of its own in this run: neither another test run on the machine
# (a colliding domain id) nor this module's other nodes (sim_node's bucket_pose would reach
# soil_node) answer or disturb it.
NS = f"/params{os.getpid()}"
SIM, SOIL, IK_NODE, TELEOP = (f"{NS}_{n.split('_')[0]}/{n}" for n in (
    "sim_node", "soil_node", "ik_node", "teleop_node"))


def _remap(node: str) -> list[str]:
    return ["-r", f"__ns:={node.rsplit('/', 1)[0]}"]


def _topic(node: str, name: str) -> str:
    return f"{node.rsplit('/', 1)[0]}/{name}"


@pytest.fixture(scope="module")
def probe() -> Iterator[RosTestNode]:
    node = RosTestNode("parameter_probe")
    yield node
    node.close()


def _stop(proc: NodeProcess) -> None:
    code = proc.stop()
    assert code == 0, proc.log()


def _seconds(stamp: object) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec  # type: ignore[attr-defined]


# --- sim_node ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    # publish_rate and marker_rate: the former names, still accepted for one release
    proc = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", *_remap(SIM), "-p", "publish_rate:=20.0",
                        "-p", "marker_rate:=0.0", "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                        "-p", "terrain.cell_size_m:=0.4"],
                       log_dir=tmp_path_factory.mktemp("sim_node"))
    yield proc
    _stop(proc)


def _periods(states: list[JointState], n: int, timeout: float = EVENT_WAIT_S) -> list[float]:
    """Simulated time between ``n`` consecutive joint_states received from now on [s]."""
    start = len(states)
    wait_for(lambda: len(states) >= start + n + 1, timeout, f"{n + 1} joint_states")
    stamps = [_seconds(m.header.stamp) for m in states[start:start + n + 1]]
    return list(np.diff(stamps))


def _published_after(timed: list[tuple[float, float]], after: float
                     ) -> list[tuple[float, float]]:
    """The (stamp, source time) of ``timed`` published after ``after`` [s], in publication
    order."""
    return sorted((m for m in list(timed) if m[1] > after), key=lambda m: m[1])


def _sim_per_wall(timed: list[tuple[float, float]], after: float, span_s: float = 2.0) -> float:
    """Simulated time per second of sim_node's wall clock over ``span_s`` of the latter: from
    ``timed`` ((stamp, source time) of joint_states, both sim_node's: the header's simulated
    time and the time it published, CLOCK_REALTIME), those published after ``after``
    [s, time.time()]. Nothing of this process's clock or of its delivery delays enters."""
    got = wait_for(lambda: (w := _published_after(timed, after)) and w[-1][1] - w[0][1] >= span_s
                   and w, EVENT_WAIT_S,
                   f"{span_s} s of joint_states published after the change")
    (s0, w0), (s1, w1) = got[0], got[-1]
    return (s1 - s0) / (w1 - w0)


def _fastest_sim_per_wall(timed: list[tuple[float, float]], after: float, span_s: float
                          ) -> float:
    """The most simulated time per second of sim_node's wall clock over any ``span_s`` of the
    latter among the joint_states of ``timed`` published after ``after`` (as
    :func:`_sim_per_wall`); 0 before there are ``span_s`` of them."""
    w = _published_after(timed, after)
    best, j = 0.0, 0
    for i in range(len(w)):
        while j < len(w) and w[j][1] - w[i][1] < span_s:
            j += 1
        if j == len(w):
            break
        best = max(best, (w[j][0] - w[i][0]) / (w[j][1] - w[i][1]))
    return best


def test_sim_node_describes_its_parameters_from_the_spec(sim: NodeProcess,
                                                         probe: RosTestNode) -> None:
    d = describe_parameters(probe, SIM, ["publish_rate_hz", "timestep_s", "terrain.nx",
                                                 "frame_prefix"])
    rate = d["publish_rate_hz"]
    assert rate.type == ParameterType.PARAMETER_DOUBLE and not rate.read_only
    assert "[Hz]" in rate.description and "joint_states" in rate.description
    assert (rate.floating_point_range[0].from_value, rate.floating_point_range[0].to_value) == \
        (1.0, 1000.0)
    assert "formerly publish_rate" in rate.additional_constraints
    step = d["timestep_s"]
    assert step.read_only and "[s]" in step.description
    assert "read at start-up: restart sim_node" in step.additional_constraints
    nx = d["terrain.nx"]
    assert nx.type == ParameterType.PARAMETER_INTEGER and nx.read_only
    assert (nx.integer_range[0].from_value, nx.integer_range[0].to_value) == (2, 4000)
    assert d["frame_prefix"].type == ParameterType.PARAMETER_STRING


def test_sim_node_takes_a_deprecated_name_with_a_warning(sim: NodeProcess,
                                                         probe: RosTestNode) -> None:
    wait_for(lambda: "ready:" in sim.log(), STARTUP_TIMEOUT_S, sim.log)
    assert "parameter 'publish_rate' is deprecated" in sim.log()
    assert "rename it 'publish_rate_hz'" in sim.log()
    assert get_parameters(probe, SIM, ["publish_rate_hz", "marker_rate_hz"]) == \
        {"publish_rate_hz": 20.0, "marker_rate_hz": 0.0}
    assert "is not a parameter of sim_node" not in sim.log()


def test_publish_rate_hz_changes_the_joint_states_rate_at_run_time(sim: NodeProcess,
                                                                   probe: RosTestNode) -> None:
    states: list[JointState] = probe.collect(JointState, _topic(SIM, "joint_states"), 1000)
    # 20 Hz from the start-up value (given under its former name): 0.05 s of simulated time
    # between messages, exactly (the stamps are simulated time: no machine speed involved)
    # (messages per second of wall time, a loaded host's figure, are not counted: at a paced
    # real time factor the simulated period is the rate)
    assert statistics.median(_periods(states, 10)) == pytest.approx(0.05, abs=1e-9)
    assert set_parameters(probe, SIM, {"publish_rate_hz": 100.0}) == [(True, "")]
    try:
        wait_for(lambda: len(states) >= 2 and _seconds(states[-1].header.stamp)
                 - _seconds(states[-2].header.stamp) < 0.02, EVENT_WAIT_S, "the new rate")
        assert statistics.median(_periods(states, 20)) == pytest.approx(0.01, abs=1e-9)
        assert get_parameters(probe, SIM, ["publish_rate_hz"]) == \
            {"publish_rate_hz": 100.0}
    finally:
        set_parameters(probe, SIM, {"publish_rate_hz": 20.0})


def test_sim_node_refuses_read_only_out_of_range_and_nan_with_the_reason(
        sim: NodeProcess, probe: RosTestNode) -> None:
    [(ok, reason)] = set_parameters(probe, SIM, {"timestep_s": 0.002})
    assert not ok and "read-only" in reason and "timestep_s" in reason
    [(ok, reason)] = set_parameters(probe, SIM, {"publish_rate_hz": 5000.0})
    assert not ok and "out of range" in reason and "1000" in reason
    [(ok, reason)] = set_parameters(probe, SIM, {"publish_rate_hz": math.nan})
    assert not ok and reason
    [(ok, reason)] = set_parameters(probe, SIM, {"publish_rate_hz": 50})
    assert not ok and "type" in reason.lower()
    assert get_parameters(probe, SIM, ["publish_rate_hz", "timestep_s"]) == \
        {"publish_rate_hz": 20.0, "timestep_s": 0.001}


def test_sim_node_markers_and_pacing_change_at_run_time(sim: NodeProcess,
                                                        probe: RosTestNode) -> None:
    """marker_rate_hz from 0 (off at start-up: no marker thread) starts the markers;
    real_time_factor 0 switches the pacing to free run (simulated time outruns the wall clock)
    and back."""
    markers: list[MarkerArray] = probe.collect(MarkerArray, _topic(SIM, "markers"), 10)
    timed: list[tuple[float, float]] = []
    probe.node.create_subscription(
        JointState, _topic(SIM, "joint_states"),
        lambda m, info: timed.append((_seconds(m.header.stamp),
                                      info["source_timestamp"] * 1e-9)), 1000)
    time.sleep(1.0)
    assert not markers
    assert set_parameters(probe, SIM, {"marker_rate_hz": 5.0}) == [(True, "")]
    wait_for(lambda: len(markers) >= 2, EVENT_WAIT_S, "markers after marker_rate_hz 5")

    # the rate of simulated time on sim_node's own clock (stamp and publication time), over the
    # joint_states published after the set was answered (it is applied before): a backlog of
    # free-run messages still on its way to this process is not counted
    try:
        assert set_parameters(probe, SIM, {"real_time_factor": 0.0}) == [(True, "")]
        # as fast as it can: many times real time, where the host gives it the CPU; a paced
        # node never gets past 1.26 over 2 s (below), a starved free-running one can (fresh8:
        # 0.57 over the first 2 s with one core busy and a whole stack on the other): the
        # pacing is judged on any 2 s of its own clock within a minute, not on the host's speed
        after = time.time()
        free = wait_for(lambda: (f := _fastest_sim_per_wall(timed, after, 2.0)) > 1.5 and f,
                        EVENT_WAIT_S,
                        lambda: "simulated time outrunning the wall clock in free run: "
                        f"at most {_fastest_sim_per_wall(timed, after, 2.0):.2f} x over 2 s", 0.5)
        assert free > 1.5, free
    finally:
        assert set_parameters(probe, SIM, {"real_time_factor": 1.0,
                                                   "marker_rate_hz": 0.0}) == [(True, "")] * 2
    paced = _sim_per_wall(timed, time.time())
    # paced again: never ahead of the wall clock; over 2 s at most the pacer's 0.5 s catch-up
    # (max_behind_s) and a period more: < 1.26
    assert paced < 1.3, paced


# --- soil_node ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def soil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess("excavator_sim.soil.soil_node",
                       ["--ros-args", *_remap(SOIL), "-p", "terrain.size_x_m:=8.0",
                        "-p", "terrain.size_y_m:=6.0", "-p", "terrain.centre_x_m:=4.0"],
                       log_dir=tmp_path_factory.mktemp("soil_node"))
    yield proc
    _stop(proc)


def _skipped_in_between(probe: RosTestNode, wrenches: list[WrenchStamped], t0: float,
                        expect_update: bool, trials: int = 5) -> int:
    """How many of ``trials`` poses stamped 10 ms (simulated time) after an answered pose got
    a wrench: each trial sends a pose at t (resent until answered), one at t + 0.01 s, then
    one at t + 0.06 s (resent until answered). At update_rate_hz 100 the middle pose is an
    update (``expect_update``: its wrench is waited for before the next pose, which would
    otherwise supersede it on a node a loaded host holds back), at 20 Hz it is skipped
    (faster than the rate in the poses' own time)."""
    bucket = BucketPrism.from_geometry(default_geometry())
    pose = pose_for_tip(bucket, np.array([5.0, 0.0, 1.0]),
                        pitch_for_attack(bucket, math.radians(30.0)), 0.0)
    pose_pub = probe.node.create_publisher(PoseStamped, _topic(SOIL, "bucket_pose"), 10)
    twist_pub = probe.node.create_publisher(TwistStamped, _topic(SOIL, "bucket_twist"), 10)

    def answered(t: float) -> bool:
        return any(abs(_seconds(w.header.stamp) - t) < 1e-6 for w in list(wrenches))

    def until_answered(t: float) -> None:
        def sent() -> bool:  # resent: a message sent before discovery completes is lost
            send_bucket_state(pose_pub, twist_pub, pose, np.zeros(3), t)
            return answered(t)
        wait_for(sent, EVENT_WAIT_S, f"the wrench of the pose at {t} s", period=0.5)

    try:
        count = 0
        for k in range(trials):
            t = t0 + k
            until_answered(t)
            send_bucket_state(pose_pub, twist_pub, pose, np.zeros(3), t + 0.01)
            if expect_update:   # the node keeps only the latest pose: it takes this one first
                wait_for(lambda t=t: answered(t + 0.01),
                         EVENT_WAIT_S, f"the wrench at {t + 0.01} s")
            else:               # (its absence cannot be waited for: a window to answer in)
                time.sleep(0.3)
            until_answered(t + 0.06)
            count += answered(t + 0.01)
        return count
    finally:
        probe.node.destroy_publisher(pose_pub)
        probe.node.destroy_publisher(twist_pub)


def test_soil_node_update_rate_hz_applies_at_run_time(soil: NodeProcess,
                                                      probe: RosTestNode) -> None:
    d = describe_parameters(probe, SOIL, ["update_rate_hz", "heightmap_rate_hz",
                                                  "terrain.cell_xy_m",
                                                  "presets.wet_clay.density_kg_m3"])
    assert not d["update_rate_hz"].read_only and not d["heightmap_rate_hz"].read_only
    assert d["terrain.cell_xy_m"].read_only and "[m]" in d["terrain.cell_xy_m"].description
    assert d["presets.wet_clay.density_kg_m3"].read_only
    wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, _topic(SOIL, "soil/wrench"),
                                                  1000)
    # 100 Hz (the default): a pose 10 ms after the last update is an update
    at_100 = _skipped_in_between(probe, wrenches, 100.0, expect_update=True)
    assert set_parameters(probe, SOIL, {"update_rate_hz": 20.0}) == [(True, "")]
    # 20 Hz: it is skipped (no wrench), the one 60 ms after is an update
    at_20 = _skipped_in_between(probe, wrenches, 200.0, expect_update=False)
    assert at_100 == 5, (at_100, soil.log())
    assert at_20 == 0, at_20
    [(ok, reason)] = set_parameters(probe, SOIL, {"update_rate_hz": 0.5})
    assert not ok and "out of range" in reason
    [(ok, reason)] = set_parameters(probe, SOIL, {"preset": "wet_clay"})
    assert not ok and "read-only" in reason
    assert set_parameters(probe, SOIL, {"heightmap_rate_hz": 10.0}) == [(True, "")]


# --- ik_node -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ik(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess("excavator_kinematics.ik_node",
                       # bucket_pitch: the former name of bucket_pitch_rad
                       ["--ros-args", *_remap(IK_NODE), "-p", "bucket_pitch:=0.3"],
                       log_dir=tmp_path_factory.mktemp("ik_node"))
    yield proc
    _stop(proc)


def test_ik_node_bucket_pitch_rad_changes_the_next_command(ik: NodeProcess,
                                                           probe: RosTestNode) -> None:
    wait_for(lambda: "ready:" in ik.log(), STARTUP_TIMEOUT_S, ik.log)
    assert "parameter 'bucket_pitch' is deprecated" in ik.log()
    assert "rename it 'bucket_pitch_rad'" in ik.log()
    solver = InverseKinematics(default_geometry())
    commands: list[JointState] = probe.collect(JointState, _topic(IK_NODE, "joint_command"), 100)
    target_pub = probe.node.create_publisher(PointStamped, _topic(IK_NODE, "target"), 10)
    wait_for(lambda: target_pub.get_subscription_count() > 0,
             EVENT_WAIT_S, "ik_node's subscription")

    def answers_with(pitch: float) -> bool:
        """ik_node answers the target with the IK at bucket pitch ``pitch`` [rad] (the target
        sent until it does: helpers.publish_until)."""
        expected = solver.solve((5.0, 0.0, 0.5), pitch).q
        msg = PointStamped()
        msg.header.frame_id = "base_link"
        msg.point.x, msg.point.y, msg.point.z = 5.0, 0.0, 0.5

        def newest() -> str:
            return str(list(commands[-1].position)[:4]) if commands else "none"
        publish_until(target_pub, msg, lambda: commands and np.allclose(
            list(commands[-1].position)[:4], expected, atol=1e-9), 20.0,
            lambda: f"a joint_command at bucket pitch {pitch} rad ({expected}; the newest: "
            f"{newest()})")
        return True

    assert answers_with(0.3)
    assert set_parameters(probe, IK_NODE, {"bucket_pitch_rad": 0.8}) == [(True, "")]
    assert answers_with(0.8)
    # the former name at run time: sets the new one too, with a warning
    assert set_parameters(probe, IK_NODE, {"bucket_pitch": 0.6}) == [(True, "")]
    assert get_parameters(probe, IK_NODE, ["bucket_pitch_rad", "bucket_pitch"]) == \
        {"bucket_pitch_rad": 0.6, "bucket_pitch": 0.6}
    assert answers_with(0.6)
    wait_for(lambda: "set 'bucket_pitch_rad' instead" in ik.log(), EVENT_WAIT_S, ik.log)
    assert set_parameters(probe, IK_NODE, {"bucket_pitch_rad": 0.7}) == [(True, "")]
    assert get_parameters(probe, IK_NODE, ["bucket_pitch"]) == {"bucket_pitch": 0.7}
    d = describe_parameters(probe, IK_NODE, ["bucket_pitch_rad", "geometry_file",
                                             "bucket_pitch"])
    assert d["bucket_pitch"].description.startswith("DEPRECATED")
    assert not d["bucket_pitch_rad"].read_only and d["geometry_file"].read_only
    [(ok, reason)] = set_parameters(probe, IK_NODE, {"bucket_pitch_rad": 4.0})
    assert not ok and "out of range" in reason
    [(ok, reason)] = set_parameters(probe, IK_NODE, {"geometry_file": "/tmp/other.yaml"})
    assert not ok and "read-only" in reason


# --- teleop_node -------------------------------------------------------------------------------
def test_teleop_node_parameters(tmp_path, probe: RosTestNode) -> None:
    proc = NodeProcess("excavator_kinematics.teleop_node",
                       ["--ros-args", *_remap(TELEOP), "-p", "joy_timeout:=0.3",
                        "-p", "coordinated.damping:=0.07"], log_dir=tmp_path)
    try:
        wait_for(lambda: "ready:" in proc.log(), STARTUP_TIMEOUT_S, proc.log)
        assert "'joy_timeout' is deprecated" in proc.log()
        assert "rename it 'coordinated.damping_m'" in proc.log()
        got = get_parameters(probe, TELEOP, ["joy_timeout_s", "coordinated.damping_m"])
        assert got == {"joy_timeout_s": 0.3, "coordinated.damping_m": 0.07}
        d = describe_parameters(probe, TELEOP, ["shaping.dead_band", "control_rate_hz", "mode"])
        assert not d["shaping.dead_band"].read_only and d["control_rate_hz"].read_only
        assert "one of joystick, coordinated, impedance" in d["mode"].additional_constraints
        [(ok, reason)] = set_parameters(probe, TELEOP, {"mode": "fly"})
        assert not ok and "mode = 'fly' is not one of joystick" in reason
        [(ok, reason)] = set_parameters(probe, TELEOP, {"control_rate_hz": 10.0})
        assert not ok and "read-only" in reason
        assert set_parameters(probe, TELEOP, {"shaping.dead_band": 0.2}) == [(True, "")]
        wait_for(lambda: "parameters changed: shaping.dead_band=0.2" in proc.log(), EVENT_WAIT_S,
                 proc.log)
    finally:
        _stop(proc)
