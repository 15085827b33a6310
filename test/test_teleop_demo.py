"""``excavator-hil demo --joystick``: the whole demo stack (virtual PLC, bridge, simulation,
soil, IK and teleop nodes, each in its own process) with the dig done by a scripted joystick
session through teleop_node instead of IK targets."""

from __future__ import annotations

from pathlib import Path

from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.run import run_demo


def test_the_demo_digs_and_dumps_with_a_scripted_joystick(tmp_path: Path) -> None:
    # standalone: a 0.3 m drive before the dig (the closed loop drives its 21 m course
    # whatever drive_distance_m says: test_demo's subject, half a minute of simulated time)
    options = DemoOptions(output_dir=tmp_path / "out", quick=True, joystick=True,
                          drive_distance_m=0.3, time_scale=0.6, plant="standalone")
    summary = run_demo(options)
    assert summary.phases[:3] == ["drive", "approach", "dig"]
    assert "dump" in summary.phases and "return" in summary.phases
    # (the summary names the commands lost on the way, if the bucket never reached the soil)
    assert summary.peak_bucket_load_m3 > 0.05, summary.text()
    assert summary.soil_moved_m3 > 0.05, summary.text()  # carried out of the trench, dumped
    assert summary.teleop["commands"] > 0, summary.teleop
    # scheduled: the session acted at its stamps, however the host delivered it (answered on
    # arrival, a loaded host cut its moves short: ci73 dug half the depth)
    assert summary.teleop["joys_restamped"] == 0, summary.text()
    assert summary.teleop["commands_past_stamp"] == 0, summary.text()
    assert summary.teleop["command_lockstep_timeouts"] == 0, summary.text()
    assert summary.track_distance_m > 0.25
    assert (tmp_path / "out" / "summary.json").is_file()
    # the bucket ends curled to its stroke's end: the final pose still renders (it was lost
    # when the measured angle sat 1e-4 rad past the limit)
    assert (tmp_path / "out" / "final_pose.png").is_file(), summary.outputs
