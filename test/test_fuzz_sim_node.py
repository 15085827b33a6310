"""Fuzz sim_node through its real interfaces over DDS: hypothesis-generated ``joint_command``,
``soil/wrench`` and ``track_command`` messages with NaN, inf, huge, tiny and negative-zero
fields, wrong frames and wrong shapes (names and positions/velocities of different lengths),
each burst followed by one valid input (zero wrench, tracks stopped, a joint target).

The process stays up, tracks every valid target, never publishes a non-finite value, and its
simulated time never stops (issue 20: a 2e9 N wrench made MuJoCo unstable, time stood still and
joint states cycled through garbage; 1e8 N threw the base 4.4 m)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, wait_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import JointState

WEIRD = st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, 1e308, -1.7976931348623157e308,
                         2e9, 1e8, -1e30, 5e-324, -5e-324, -0.0, 0.0, 1e-300])
FIELD = st.one_of(WEIRD, st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.lists(FIELD, min_size=0, max_size=5)
JOINTS = st.lists(st.sampled_from(["swing", "boom", "arm", "bucket", "boom_cylinder", "stick",
                                   "", "track_left", "track_right", "base_x"]),
                  min_size=0, max_size=5)
FRAMES = st.sampled_from(["", "world", "bucket", "base_link"])
# Valid targets, alternated: swing, boom, arm, bucket [rad]
TARGETS = ({"swing": 0.0, "boom": 0.55, "arm": -1.2, "bucket": 1.2},
           {"swing": 0.05, "boom": 0.6, "arm": -1.25, "bucket": 1.1})


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                        "-p", "real_time_factor:=2.0", "-p", "use_sim_time:=true",
                        "-p", "publish_rate_hz:=50.0", "-p", "marker_rate_hz:=0.0",
                        "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                        "-p", "terrain.cell_size_m:=0.4"],
                       log_dir=tmp_path_factory.mktemp("sim_fuzz"))
    yield proc
    code = proc.stop()
    assert code == 0, proc.log()


class Channel:
    def __init__(self, probe: RosTestNode):
        self.states: list[JointState] = probe.collect(JointState, "joint_states", 1000)
        self.poses: list[PoseStamped] = probe.collect(PoseStamped, "bucket_pose", 1000)
        self.twists: list[TwistStamped] = probe.collect(TwistStamped, "bucket_twist", 1000)
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                               "/diagnostics", 1000)
        self.command = probe.node.create_publisher(JointState, "joint_command", 100)
        self.wrench = probe.node.create_publisher(WrenchStamped, "soil/wrench", 100)
        self.tracks = probe.node.create_publisher(JointState, "track_command", 100)
        self.sent = 0

    def position(self, name: str) -> float:
        msg = self.states[-1]
        return msg.position[list(msg.name).index(name)]

    def errors(self) -> list[str]:
        return [s.message for d in list(self.diagnostics) for s in d.status
                if s.level == b"\x02" and s.name.startswith("sim_node")]


@pytest.fixture(scope="module")
def channel(sim_process: NodeProcess):
    # 120 s to come up: a fresh clone's first nodes compile their numba kernels (no cache yet)
    # beside the whole-stack tests of the other worker (an empty log after 30 s, ci36)
    probe = RosTestNode("sim_fuzz_probe")
    ch = Channel(probe)
    wait_for(lambda: ch.states and ch.command.get_subscription_count() > 0
             and ch.wrench.get_subscription_count() > 0
             and ch.tracks.get_subscription_count() > 0, 120.0,
             lambda: f"sim_node to come up (alive: {sim_process.alive()}); its log:\n"
                     f"{sim_process.log()}")
    yield ch
    probe.close()


def _joint_state(names: list[str], positions: list[float], velocities: list[float]
                 ) -> JointState:
    msg = JointState()
    msg.name = names
    msg.position = positions
    msg.velocity = velocities
    return msg


def _wrench(frame: str, values: list[float]) -> WrenchStamped:
    msg = WrenchStamped()
    msg.header.frame_id = frame
    f, t = msg.wrench.force, msg.wrench.torque
    f.x, f.y, f.z, t.x, t.y, t.z = values
    return msg


BAD = st.one_of(
    st.tuples(st.just("joint_command"), JOINTS, VALUES, VALUES),
    st.tuples(st.just("soil/wrench"), FRAMES, st.lists(FIELD, min_size=6, max_size=6)),
    st.tuples(st.just("track_command"), JOINTS, VALUES),
)


def _finite_state(msg: JointState) -> bool:
    return all(math.isfinite(v) for v in (*msg.position, *msg.velocity))


def _stamp(msg: JointState) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


@given(bad=st.lists(BAD, min_size=1, max_size=4))
# always among the inputs, whatever the draw: a finite wrench past the plausible limit (issue
# 20's 2e9 N), which the next test expects rejected by name (a draw of 25 examples need not
# hold one: six finite fields in a row are rare among these)
@example(bad=[("soil/wrench", "world", [2e9, 0.0, 0.0, 0.0, 0.0, 0.0])])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bad_inputs_then_a_valid_target_is_tracked(sim_process: NodeProcess, channel: Channel,
                                                   bad: list[tuple]) -> None:
    ch = channel
    for item in bad:
        if item[0] == "joint_command":
            ch.command.publish(_joint_state(item[1], item[2], item[3]))
        elif item[0] == "soil/wrench":
            ch.wrench.publish(_wrench(item[1], item[2]))
        else:
            ch.tracks.publish(_joint_state(item[1], [], item[2]))
    target = TARGETS[ch.sent % 2]
    ch.sent += 1

    def tracked() -> bool:
        if ch.states and all(abs(ch.position(n) - v) < 5e-3 for n, v in target.items()):
            return True
        # not yet: the valid inputs (again), as a sender of commands does every period. A
        # starved host can leave a command in sim_node's queue past max_command_age_s, and
        # sim_node rightly drops it; the next one, taken in time, is tracked
        ch.wrench.publish(_wrench("world", [0.0] * 6))
        ch.tracks.publish(_joint_state(["track_left", "track_right"], [], [0.0, 0.0]))
        ch.command.publish(_joint_state(list(target), list(target.values()), []))
        return False

    wait_for(tracked, EVENT_WAIT_S,
             lambda: f"the valid target {target} after {bad}; now "
             f"{ {n: ch.position(n) for n in target} }; sim_node alive: "
             f"{sim_process.alive()}; log tail:\n{sim_process.log()[-3000:]}", period=0.5)
    assert sim_process.alive()


def test_nothing_published_was_non_finite_and_time_never_stopped(
        sim_process: NodeProcess, channel: Channel) -> None:
    ch = channel
    states = list(ch.states)
    assert ch.sent > 0 and len(states) > 100
    assert all(_finite_state(m) for m in states), "a non-finite joint state was published"
    for pose in list(ch.poses):
        p, o = pose.pose.position, pose.pose.orientation
        assert all(math.isfinite(v) for v in (p.x, p.y, p.z, o.x, o.y, o.z, o.w))
    for tw in list(ch.twists):
        lin, ang = tw.twist.linear, tw.twist.angular
        assert all(math.isfinite(v) for v in (lin.x, lin.y, lin.z, ang.x, ang.y, ang.z))
    stamps = np.array([_stamp(m) for m in states])
    assert np.all(np.diff(stamps) > 0), "simulated time stood still or went back"
    # the base was never thrown: the valid inputs stop the tracks and the wrench each time
    assert abs(ch.position("base_x")) < 0.5 and abs(ch.position("base_y")) < 0.5
    errors = ch.errors()
    assert any("exceeds the plausible limit" in e for e in errors), \
        "no implausible wrench was rejected naming the limit"
    log = sim_process.log()
    assert sim_process.alive() and "Traceback" not in log
