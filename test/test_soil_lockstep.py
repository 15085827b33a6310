"""sim_node in lockstep with the soil over DDS (``soil_lockstep_timeout_s``): the pure rule, then
sim_node in its own process with this test answering its poses as soil_node would: the
simulated time stops at a pose nobody answered, moves on by one period per answer, runs on alone
after the timeout (WARN) and locks again when answers come back."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, WrenchStamped
from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock

from excavator_sim.errors import SimConfigError
from excavator_sim.sim_config import SIM_PARAMETERS
from excavator_sim.soil_lockstep import SoilLockstep

PERIOD_S = 0.01  # config/sim.yaml publish_rate_hz 100
TIMEOUT_S = 5.0  # [s] long enough for the checks of a held period on a loaded host


# --- the rule ------------------------------------------------------------------------------
def test_a_period_waits_for_the_answer_to_the_latest_pose() -> None:
    lock = SoilLockstep(timeout_s=0.5)
    assert lock.may_step(100.0)  # nothing published yet: nothing to wait for
    lock.published(0.01)
    assert not lock.may_step(100.0) and lock.waiting and lock.waits == 1
    assert not lock.may_step(100.3)
    lock.answered(0.0)  # an older pose's answer does not release it
    assert not lock.may_step(100.4)
    lock.answered(0.01)
    assert lock.may_step(100.45) and not lock.waiting
    assert lock.may_step(100.46)  # still answered: the next period needs the next pose first
    assert lock.waits == 1 and lock.timeouts == 0
    assert lock.wait_s.percentiles()[2] == pytest.approx(0.45)


def test_no_answer_costs_one_timeout_then_the_answers_lock_it_again() -> None:
    lock = SoilLockstep(timeout_s=0.5)
    lock.published(0.01)
    assert not lock.may_step(10.0)
    assert lock.may_step(10.5) and lock.detached and lock.timeouts == 1
    for k in range(2, 50):  # the soil is gone: the simulation runs on without waiting
        lock.published(0.01 * k)
        assert lock.may_step(10.5)
    assert lock.values()["soil_lockstep"] == "detached"
    lock.answered(0.20)  # it answers again (an old pose: it was behind)
    assert not lock.detached and not lock.may_step(11.0)  # waits for the latest pose again
    lock.answered(0.49)
    assert lock.may_step(11.01) and lock.timeouts == 1
    assert lock.values()["soil_lockstep"] == "on"


def test_off_never_waits() -> None:
    lock = SoilLockstep(timeout_s=0.0)
    lock.published(5.0)
    assert lock.may_step(0.0) and lock.waits == 0
    assert lock.values() == {"soil_lockstep": "off"}


@pytest.mark.parametrize("other", ["follow_clock", "soil_in_process"])
def test_lockstep_with_a_follower_or_the_in_process_soil_is_refused(other: str) -> None:
    with pytest.raises(SimConfigError) as err:
        SIM_PARAMETERS.validate({"soil_lockstep_timeout_s": 1.0, other: True})
    assert "soil_lockstep_timeout_s = 1 s" in str(err.value) and other in str(err.value)
    assert "set soil_lockstep_timeout_s to 0" in str(err.value)


# --- sim_node over DDS -------------------------------------------------------------------
def lockstep_sim_node(log_dir: Path, lockstep: str) -> NodeProcess:
    """sim_node at real time on a small terrain (sim time on /clock) with ``lockstep`` (a
    ``name:=value`` parameter override)."""
    return NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                        "-p", "use_sim_time:=true", "-p", "real_time_factor:=1.0",
                        "-p", "marker_rate_hz:=0.0", "-p", "terrain.nx:=41",
                        "-p", "terrain.ny:=41", "-p", "terrain.cell_size_m:=0.4",
                        "-p", lockstep], log_dir=log_dir)


def clock_now(clock: list[Clock]) -> float:
    """The latest /clock [s]."""
    c = clock[-1].clock
    return c.sec + 1e-9 * c.nanosec


def running_status(diagnostics: list[DiagnosticArray]) -> tuple[str, dict[str, str]] | None:
    """sim_node's latest running status: (message, values)."""
    for array in reversed(list(diagnostics)):
        for st in array.status:
            if st.name.startswith("sim_node") and st.message.startswith("running"):
                return st.message, {kv.key: kv.value for kv in st.values}
    return None

def time_stands(clock: list[Clock], at: Callable[[], float | None],
                within_s: float = TIMEOUT_S - 2.0) -> float:
    """Wait until /clock stands where the stamps say it must stop, ``at()`` [s] (None: not
    known yet), within ``within_s`` [s of wall time] (inside the lockstep's timeout, or the
    simulation moves on), and return it. Judged on the stamps, not on a pause of /clock: a
    loaded host stops sim_node itself for longer than any pause (a fresh-clone CI run saw
    /clock stand 0.3 s one period short of where it then stopped)."""
    def there() -> bool:
        t = at()
        return t is not None and abs(clock_now(clock) - t) < 1e-9

    wait_for(there, within_s,
             lambda: f"the simulated time to stop at {at()} s (it is at {clock_now(clock)} s)")
    return clock_now(clock)


def stamp_s(pose: PoseStamped) -> float:
    return pose.header.stamp.sec + 1e-9 * pose.header.stamp.nanosec


def runs_alone_then_locks_again(clock: list[Clock], diagnostics: list[DiagnosticArray],
                                name: str, timeouts: int, resume: Callable[[], None]) -> None:
    """With the peer silent: the simulation runs on alone past the timeout and says so (WARN
    naming ``<name>_timeout_s``, ``<name>`` detached, ``timeouts`` in all); then ``resume()``
    (the peer back) and it locks again."""
    words = name.replace("_", " ")
    t_silent = clock_now(clock)
    wait_for(lambda: clock_now(clock) > t_silent + 1.0, TIMEOUT_S + 30.0, "stepping alone")
    message, values = wait_for(
        lambda: (s := running_status(diagnostics)) and words in s[0] and s, EVENT_WAIT_S,
        lambda: f"the lockstep warning: {running_status(diagnostics)}")
    assert values[name] == "detached"
    assert int(values[f"{name}_timeouts"]) == timeouts
    assert f"{name}_timeout_s" in message
    resume()
    wait_for(lambda: (s := running_status(diagnostics)) and s[1][name] == "on"
             and words not in s[0], EVENT_WAIT_S,
             lambda: f"locked again: {running_status(diagnostics)}")


def test_sim_node_steps_only_on_the_soils_answer(tmp_path) -> None:
    proc = lockstep_sim_node(tmp_path, f"soil_lockstep_timeout_s:={TIMEOUT_S}")
    probe = RosTestNode("lockstep_probe")
    clock: list[Clock] = probe.collect(Clock, "/clock", 100)
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
    poses: list[PoseStamped] = []
    wrench = probe.node.create_publisher(WrenchStamped, "soil/wrench", 10)
    answering = [True]
    unanswered: list[PoseStamped] = []  # the simulated time stops at the first of these

    def answer(pose: PoseStamped) -> None:
        poses.append(pose)
        if not answering[0]:
            unanswered.append(pose)
        else:
            msg = WrenchStamped()
            msg.header.stamp, msg.header.frame_id = pose.header.stamp, "world"
            wrench.publish(msg)

    probe.node.create_subscription(PoseStamped, "bucket_pose", answer, 10)
    try:
        # sim_node starts before the probe answers: one timeout, then it locks on the answers
        wait_for(lambda: clock and clock_now(clock) > 1.0, EVENT_WAIT_S, proc.log)
        # (a status from past 1 s of simulated time: the start-up timeout, if any, lies behind)
        _, on = wait_for(lambda: (s := running_status(diagnostics))
                         and s[1]["soil_lockstep"] == "on"
                         and float(s[1]["sim_time_s"]) > 1.0 and s, EVENT_WAIT_S,
                         lambda: f"lockstep on: {running_status(diagnostics)}\n{proc.log()}")

        answering[0] = False  # the soil falls silent: time stops at the pose not answered

        held = time_stands(clock, lambda: stamp_s(unanswered[0]) if unanswered else None)
        time.sleep(1.0)  # well inside the timeout
        assert clock_now(clock) == held, "the simulation stepped past a pose nobody answered"
        assert abs(stamp_s(poses[-1]) - held) < 1e-9  # the latest pose is the one waited on

        for k in range(1, 4):  # each answer releases exactly one period
            # the pose the last step published (it may still be on its way)
            want = held + (k - 1) * PERIOD_S
            pose = wait_for(lambda w=want: next((p for p in reversed(poses)
                                                 if abs(stamp_s(p) - w) < 1e-9), None),
                            EVENT_WAIT_S, f"the bucket_pose at t={want:.3f} s")
            msg = WrenchStamped()
            msg.header.stamp, msg.header.frame_id = pose.header.stamp, "world"
            wrench.publish(msg)
            wait_for(lambda k=k: clock_now(clock) >= held + k * PERIOD_S - 1e-9, EVENT_WAIT_S,
                     "a period after the answer")
            time.sleep(0.3)
            assert clock_now(clock) == pytest.approx(held + k * PERIOD_S, abs=1e-9)

        # no answer for the timeout: it runs on alone, and says so; the soil back: locked again
        runs_alone_then_locks_again(clock, diagnostics, "soil_lockstep",
                                    int(on["soil_lockstep_timeouts"]) + 1,
                                    lambda: answering.__setitem__(0, True))
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()


def test_a_pose_the_soil_missed_is_sent_again(tmp_path) -> None:
    """sim_node waits for the answer to its latest bucket pose; a soil that missed the pose (one
    published before its subscription matched, at either one's start-up: nothing newer comes
    while the simulation waits) gets it again every 0.25 s. Here the soil answers only a pose
    it has seen before: every period steps on a repeated pose, none waits out the timeout
    (before, every start cost the whole soil_lockstep_timeout_s)."""
    proc = lockstep_sim_node(tmp_path, "soil_lockstep_timeout_s:=10.0")
    probe = RosTestNode("lockstep_missed_pose")
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
    wrench = probe.node.create_publisher(WrenchStamped, "soil/wrench", 10)
    seen: set[tuple[int, int]] = set()

    def answer_a_repeat(pose: PoseStamped) -> None:
        stamp = (pose.header.stamp.sec, pose.header.stamp.nanosec)
        if stamp in seen:
            msg = WrenchStamped()
            msg.header.stamp, msg.header.frame_id = pose.header.stamp, "world"
            wrench.publish(msg)
        seen.add(stamp)
    probe.node.create_subscription(PoseStamped, "bucket_pose", answer_a_repeat, 10)
    try:
        _, values = wait_for(lambda: (s := running_status(diagnostics))
                             and float(s[1]["sim_time_s"]) >= 10 * PERIOD_S and s, EVENT_WAIT_S,
                             lambda: f"ten periods stepped on repeated poses: "
                             f"{running_status(diagnostics)}\n{proc.log()}")
        assert values["soil_lockstep"] == "on" and values["soil_lockstep_timeouts"] == "0", \
            values
        assert int(values["soil_poses_resent"]) >= 10, values
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()


def test_a_lockstep_answer_is_complete_with_its_payload(tmp_path) -> None:
    """A soil that sends its load's mass (soil/bucket_payload, the per-cell bucket soil) before
    each wrench: a period steps only once both of its stamp are in, so it never steps on the
    previous load's mass (the payload, coming on its own topic, may arrive after the wrench)."""
    proc = lockstep_sim_node(tmp_path, f"soil_lockstep_timeout_s:={TIMEOUT_S}")
    probe = RosTestNode("lockstep_payload_probe")
    clock: list[Clock] = probe.collect(Clock, "/clock", 100)
    poses: list[PoseStamped] = []
    wrench = probe.node.create_publisher(WrenchStamped, "soil/wrench", 10)
    payload = probe.node.create_publisher(InertiaStamped, "soil/bucket_payload", 10)
    answering = [True]
    unanswered: list[PoseStamped] = []

    def send_payload(pose: PoseStamped) -> None:
        msg = InertiaStamped()
        msg.header.stamp, msg.header.frame_id = pose.header.stamp, "bucket"
        payload.publish(msg)

    def send_wrench(pose: PoseStamped) -> None:
        msg = WrenchStamped()
        msg.header.stamp, msg.header.frame_id = pose.header.stamp, "world"
        wrench.publish(msg)

    def answer(pose: PoseStamped) -> None:
        poses.append(pose)
        if not answering[0]:
            unanswered.append(pose)
        else:
            send_payload(pose)
            send_wrench(pose)

    probe.node.create_subscription(PoseStamped, "bucket_pose", answer, 10)
    try:
        wait_for(lambda: clock and clock_now(clock) > 1.0, EVENT_WAIT_S, proc.log)
        answering[0] = False

        held = time_stands(clock, lambda: stamp_s(unanswered[0]) if unanswered else None)
        pose = unanswered[0]
        send_wrench(pose)   # the wrench alone: the answer is not complete
        time.sleep(1.0)     # well inside the timeout
        assert clock_now(clock) == held, "stepped on a wrench whose payload had not arrived"
        send_payload(pose)  # now it is: one period
        wait_for(lambda: clock_now(clock) >= held + PERIOD_S - 1e-9,
                 EVENT_WAIT_S, "the period after it")
        time.sleep(0.3)
        assert clock_now(clock) == pytest.approx(held + PERIOD_S, abs=1e-9)
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()


def test_sim_node_refuses_lockstep_as_a_follower_at_start_up(tmp_path) -> None:
    proc = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "-p", "soil_lockstep_timeout_s:=2.0",
                        "-p", "follow_clock:=true"], log_dir=tmp_path)
    code = proc.proc.wait(EVENT_WAIT_S)
    log = proc.log()
    assert code == 2, log
    assert "Traceback" not in log
    assert "soil_lockstep_timeout_s = 2 s needs follow_clock false" in log, log
