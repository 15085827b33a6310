"""sim_node in its own process over real DDS: it publishes ``/clock`` exactly when its
``use_sim_time`` parameter is true (architecture.md, topics table); ``joint_states`` flow (with
simulated-time stamps) either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

STATES = 100  # joint_states to see before judging /clock: 0.5 s at 100 Hz and rtf 2


def _seconds(stamp: object) -> float:
    return stamp.sec + stamp.nanosec * 1e-9  # type: ignore[attr-defined]


@pytest.mark.parametrize("use_sim_time", [True, False], ids=["use_sim_time", "wall_time"])
def test_clock_is_published_exactly_with_use_sim_time(use_sim_time: bool, tmp_path: Path
                                                      ) -> None:
    # A fresh probe per case: its graph holds only the sim_node of this case.
    probe = RosTestNode("clock_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 200)
    clocks: list[Clock] = probe.collect(Clock, "/clock", 200)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", f"use_sim_time:={'true' if use_sim_time else 'false'}",
                       "-p", "real_time_factor:=2.0", "-p", "marker_rate_hz:=0.0",
                       "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                       "-p", "terrain.cell_size_m:=0.4"], log_dir=tmp_path)
    try:
        wait_for(lambda: len(states) >= STATES, EVENT_WAIT_S,
                 lambda: f"{STATES} joint_states from sim_node; its log:\n{sim.log()}")
        if use_sim_time:
            wait_for(lambda: len(clocks) > 20, EVENT_WAIT_S, "/clock messages")
        publishers = (probe.wait_endpoints("publishers", "/clock", [("/", "sim_node")])
                      if use_sim_time else probe.endpoints("publishers", "/clock"))
        received = list(clocks)
        stamps = [_seconds(m.header.stamp) for m in list(states)]
    finally:
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
    # joint_states carry simulated time either way, advancing.
    assert stamps[-1] > stamps[0] + 0.2, (stamps[0], stamps[-1])
    if use_sim_time:
        assert publishers == [("/", "sim_node")]
        times = [_seconds(m.clock) for m in received]
        assert times == sorted(times) and times[-1] > times[0] + 0.1, times[:3] + times[-3:]
        assert "/clock on (use_sim_time)" in sim.log()
    else:
        assert publishers == []
        assert received == []
        assert "/clock off (use_sim_time false)" in sim.log()
