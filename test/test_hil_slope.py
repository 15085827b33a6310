"""A slope on the whole loop (helpers.HilLoop): the PLC holds the commanded speed up a grade its
torque limit allows, and reports saturation on one it does not.

The grade is a test terrain: sim_node's height field set to a plane rising along world x (the
machine's heading) through ``soil/terrain_patch``, the input the soil node uses. The MuJoCo base
is planar (x, y, yaw), so the grade reaches the drive train through the terrain under the
tracks (``excavator_sim.drivetrain.grade``: a plane fitted to the heights under the footprint
gives the attitude; gravity along it loads the tracks) and the IMU reports that attitude; the
base itself stays at z = 0. Terrain contact is off here: on a planar base the rising terrain
would meet the bucket, which on the real machine pitches up with the ground.

The PLC's torque limit is set to 4 kN m a track (a derated drive) so both cases stay on grades
a tracked machine drives: 10 deg needs about 2.3 kN m (grade + 2 % running-gear losses at
8.2 t, r = 0.30 m), 20 deg about 4.35 kN m. Everything is judged on stamped records
(plant/sensors in simulated time, the IMU) and on the PLC's and the bridge's state.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import EVENT_WAIT_S, HilLoop, held_window, wait_for

from excavator_sim.terrain_patch import patch_to_flat
from plc_bridge import redis_keys as keys

SPEED_M_S = 0.5
LIMIT_NM = 4000.0          # the PLC's torque limit in this test [N m at the sprocket]
MASS_KG, RADIUS_M, LOSSES = 8200.0, 0.30, 0.02   # config/sim.yaml's machine and drive
SETTLE_S, WINDOW_S = 6.0, 3.0
NODES, CELL_M, X0_M = 121, 0.4, -24.0             # helpers.SIM_LOOP_ARGS' terrain


def grade_torque_nm(slope_rad: float) -> float:
    """The torque a track needs to hold speed up the slope: half the machine's weight along it
    plus the running gear's losses, at the sprocket."""
    return 0.5 * MASS_KG * 9.81 * RADIUS_M * (math.sin(slope_rad) + LOSSES * math.cos(slope_rad))


@pytest.fixture
def loop(redis_server: Any, spawn: Any, tmp_path: Path, ros_node: Any) -> Iterator[HilLoop]:
    lp = HilLoop(redis_server.url, spawn, tmp_path, ros_node,
                 plc_params={"torque_limit_nm": LIMIT_NM},
                 sim_args=["-p", "terrain.z_min_m:=-15.0", "-p", "terrain.z_max_m:=15.0",
                           "-p", "terrain.contact:=false"])
    try:
        yield lp
    finally:
        lp.close()


def set_slope(lp: HilLoop, probe: Any, slope_deg: float) -> float:
    """The whole height field a plane rising along +x at ``slope_deg``; waits until the IMU
    reads the machine pitched nose up by it (REP-103: negative pitch). Returns the slope [rad]."""
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension

    slope = math.radians(slope_deg)
    x = X0_M + np.arange(NODES) * CELL_M
    heights = np.tile((math.tan(slope) * x)[:, None], (1, NODES))
    (ni, nj), data = patch_to_flat(0, 0, heights)
    msg = Float64MultiArray(data=data)
    msg.layout.dim = [MultiArrayDimension(label="i", size=ni, stride=ni * nj),
                      MultiArrayDimension(label="j", size=nj, stride=nj)]
    msg.layout.data_offset = 2
    pub = probe.node.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
    wait_for(lambda: pub.get_subscription_count() > 0,
             EVENT_WAIT_S, "sim_node on soil/terrain_patch")
    pub.publish(msg)
    wait_for(lambda: lp.record.pitch and abs(lp.record.pitch[max(lp.record.pitch)] + slope)
             < 1e-6, EVENT_WAIT_S, lambda: f"the IMU pitched by {slope_deg} deg\n{lp.logs()}")
    return slope


def test_the_plc_holds_speed_up_a_slope_its_torque_limit_allows(loop: HilLoop,
                                                                ros_node: Any) -> None:
    slope = set_slope(loop, ros_node, 10.0)
    need = grade_torque_nm(slope)
    assert need < 0.7 * LIMIT_NM
    t_start = loop.drive(SPEED_M_S)
    [steady] = wait_for(lambda: held_window(loop.record.since(t_start + SETTLE_S), SPEED_M_S,
                                            0.02, WINDOW_S), 300.0,
                        lambda: f"{WINDOW_S} s with both tracks within 2 % of {SPEED_M_S} m/s "
                                f"up 10 deg (last rows {loop.record.since(0.0)[-3:]})\n"
                                f"{loop.logs()}")
    torques = steady[:, 6:8]
    print(f"10 deg: tracks {steady[:, 1:3].mean(axis=0)} m/s, torque {torques.mean(axis=0)} "
          f"N m (grade + losses {need:.0f} N m, limit {LIMIT_NM:.0f})")
    # the drive train feels the grade: the measured torque carries the machine up it
    assert np.all(torques > grade_torque_nm(slope) - 0.5 * LOSSES * MASS_KG * 9.81 * RADIUS_M)
    assert np.all(torques < LIMIT_NM)
    # the pitch the IMU gave over the window is the slope's (the attitude from the terrain)
    pitches = [loop.record.pitch[t] for t in steady[:, 0] if t in loop.record.pitch]
    assert pitches and np.allclose(pitches, -slope, atol=1e-6)
    # not saturated: the PLC's bit, the Redis key, the bridge's record of the monitor DB, read
    # in a cycle the bridge ran (a starved host's virtual PLC can miss its alive deadline: the
    # bridge then stops for that, and runs again with the next heartbeat edge)
    snap = wait_for(lambda: (s := loop.rig.core.snapshot()).status == "running" and s, EVENT_WAIT_S,
                    lambda: f"a cycle of the bridge running\n{loop.logs()}")
    assert not snap.plc_state["drive_saturated"]
    assert not loop.rig.plc.status()["hil"]["saturated"]  # type: ignore[union-attr]
    assert loop.rig.get(keys.state_key("drive_saturated")) == "false"


# The stops a starved host causes on its own (a virtual PLC, sim_node, Redis or the bridge's
# thread not scheduled in time, the PLC's watchdog on the bridge tripped; each followed by the
# heartbeat edge that re-arms the bridge): any other stop logged while the drives are
# saturated would be one for the saturation
HOST_STOPS = frozenset({"plc_alive_stale", "plc_link_lost", "redis_lost", "plc_plant_lost",
                        "plc_watchdog", "heartbeat_stale", "waiting_heartbeat",
                        "waiting_heartbeat_edge"})


def host_stop(status: str) -> bool:
    """``status`` (a logged status line's text after ``plc_bridge ``) is a starved host's."""
    reason = status.split(" ", 1)[0].removeprefix("stopped:")
    return reason in HOST_STOPS or (reason == "plc_refused" and "watchdog_tripped" in status)


def test_the_plc_reports_saturation_up_a_slope_beyond_its_torque_limit(
        loop: HilLoop, ros_node: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="plc_bridge")
    slope = set_slope(loop, ros_node, 20.0)
    need = grade_torque_nm(slope)
    assert need > 1.05 * LIMIT_NM
    t0 = loop.record.last_t()
    loop.rig.start()
    loop.rig.command(SPEED_M_S, 0.0, 0.0)
    loop.wait_status("running", EVENT_WAIT_S)
    # the PLC's monitor bit, as the bridge publishes it on Redis and keeps it for /diagnostics
    wait_for(lambda: loop.rig.get(keys.state_key("drive_saturated")) == "true", EVENT_WAIT_S,
             lambda: f"drive_saturated on Redis\n{loop.logs()}")
    # saturation is reported, not a stop: a cycle of the bridge (its snapshot: one cycle's
    # status, command and monitor DB) running and commanding the climb while the PLC reports
    # the drives saturated. (Judged on that record, not on the status key at one instant: a
    # starved host's virtual PLC can miss its alive deadline, a stop of its own, after which
    # the bridge runs again with the next heartbeat edge.)
    wait_for(lambda: (s := loop.rig.core.snapshot()).status == "running"
             and s.plc_state.get("drive_saturated")
             and s.commanded.vx == pytest.approx(SPEED_M_S), EVENT_WAIT_S,
             lambda: f"a cycle of the bridge running, commanding {SPEED_M_S} m/s with the "
                     f"drives saturated (last {loop.rig.core.snapshot()})\n{loop.logs()}")
    # the PLC's own record: both drives at the torque limit, saturated
    hil = wait_for(lambda: (h := loop.rig.plc.status()["hil"])["saturated"]  # type: ignore[union-attr]
                   and h, EVENT_WAIT_S, lambda: f"the PLC saturated\n{loop.logs()}")
    assert hil["torques"] == [LIMIT_NM, LIMIT_NM], hil
    # the record: the drives give the limit (their torque follows it first order), and the
    # speed is not held: the machine does not climb at the commanded speed (it rolls back
    # while the torque builds up, then the running gear's losses stall it)
    def at_limit() -> list[Any]:
        rows = loop.record.since(t0)
        full = rows[np.all(np.abs(rows[:, 6:8] - LIMIT_NM) < 0.01 * LIMIT_NM, axis=1)]
        return [full] if len(full) > 100 else []

    [full] = wait_for(at_limit,
                      EVENT_WAIT_S, lambda: f"1 s of rows at the torque limit\n{loop.logs()}")
    # the bridge's record of its statuses (each change logged once): since it first ran, no
    # stop but a starved host's
    statuses = [m.group(1) for r in caplog.records
                if (m := re.match(r"plc_bridge ((running|stopped:\w+).*)", r.getMessage()))]
    first = next((i for i, s in enumerate(statuses) if s.startswith("running")), None)
    assert first is not None, statuses
    others = [s for s in statuses[first:] if not s.startswith("running") and not host_stop(s)]
    assert not others, statuses
    print(f"20 deg: torque {full[:, 6:8].mean(axis=0)} N m (needs {need:.0f}), tracks "
          f"{full[-1, 1:3]} m/s")
    assert np.all(full[:, 1:4] < 0.9 * SPEED_M_S)   # tracks and over ground: it cannot climb
