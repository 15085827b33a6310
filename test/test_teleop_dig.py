"""The operator digs a trench with two joysticks, end to end over real DDS: a scripted joystick
session (sensor_msgs/Joy, ISO pattern) -> teleop_node -> sim_node <-> soil_node, each in its own
process. The script is played against the simulation's /clock, so a slow machine changes the
wall time of the run, not the dig."""

from __future__ import annotations

import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers import REPO, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, latest_statuses, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Float64, Float64MultiArray

from excavator_kinematics.teleop.joy_script import dig_script

NX = NY = 320  # config/soil.yaml terrain: 16 m x 16 m at 0.05 m centred at (4, 0)
CELL = 0.05


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("teleop_dig")
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "terrain.contact:=false", "-p", "use_sim_time:=true"],
                      log_dir=logs)
    soil = NodeProcess("excavator_sim.soil.soil_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "soil.yaml")],
                       log_dir=logs)
    teleop = NodeProcess("excavator_kinematics.teleop_node",
                         ["--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
                          "-p", "joy_timeout_s:=2.0"], log_dir=logs)
    yield sim, soil, teleop
    codes = (sim.stop(), soil.stop(), teleop.stop())
    assert codes == (0, 0, 0), sim.log() + soil.log() + teleop.log()


def test_a_scripted_joystick_session_digs_a_trench(nodes) -> None:
    sim, soil, teleop = nodes
    probe = RosTestNode("teleop_dig_probe")
    try:
        states: list[JointState] = probe.collect(JointState, "joint_states", 50)
        clock: list[Clock] = probe.collect(Clock, "/clock", 50)
        loads: list[Float64] = probe.collect(Float64, "soil/bucket_load", 5000)
        patches: list[Float64MultiArray] = probe.collect(Float64MultiArray,
                                                        "soil/terrain_patch", 5000)
        statuses: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics", 500)
        joy = probe.node.create_publisher(Joy, "joy", 10)
        wait_for(lambda: states and clock and loads and joy.get_subscription_count() > 0,
                 STARTUP_TIMEOUT_S,
                 lambda: f"the three nodes; logs:\n{sim.log()}\n{soil.log()}\n{teleop.log()}")

        def now() -> float:
            c = clock[-1].clock
            return c.sec + c.nanosec * 1e-9

        script = dig_script("iso")
        t0 = now()
        deadline = time.monotonic() + 300.0
        while (t := now() - t0) < script.duration + 0.5:
            assert time.monotonic() < deadline, "the simulation stopped advancing"
            axes, buttons = script.sample(t)
            msg = Joy()
            msg.axes, msg.buttons = axes, buttons
            joy.publish(msg)
            time.sleep(0.05)  # 20 Hz, as the joy driver repeats
        time.sleep(1.0)
    finally:
        probe.close()

    from excavator_sim.terrain_patch import flat_to_patch

    grid = np.zeros((NX, NY))
    for p in patches:
        i0, j0, h = flat_to_patch(p.layout.dim[0].size, p.layout.dim[1].size, p.data)
        grid[i0:i0 + h.shape[0], j0:j0 + h.shape[1]] = h
    xs = -4.0 + (np.arange(NX) + 0.5) * CELL
    ys = -8.0 + (np.arange(NY) + 0.5) * CELL
    # in front of the machine, within its reach (the geometry's, not a fixed window: the
    # default linkage reaches 7.46 m since issue 30), away from the dump at 90 deg
    from excavator_kinematics.geometry import default_geometry
    from excavator_kinematics.working_ranges import working_ranges

    reach = working_ranges(default_geometry()).reach_at_ground_m
    trench = grid[(xs > 2.0) & (xs < reach + 0.5)][:, np.abs(ys) < 0.6]
    removed_m3 = float(np.clip(-trench, 0.0, None).sum() * CELL * CELL)
    load = max(m.data for m in loads)
    print(f"teleop dig: trench min {trench.min():.3f} m, removed {removed_m3:.3f} m^3, "
          f"bucket load max {load:.3f} m^3")
    # what each node counted (commands taken and dropped, soil updates), for a run that fails
    said = (f"{len(patches)} terrain patches, bucket load max {load:.3f} m^3\n"
            + latest_statuses(statuses)
            + f"\n{sim.log()[-3000:]}\n{soil.log()[-3000:]}\n{teleop.log()[-3000:]}")
    assert trench.min() < -0.15, said
    assert removed_m3 > 0.05, said
    assert load > 0.03, said
