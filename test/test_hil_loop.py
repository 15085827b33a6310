"""The closed loop of issue 27 end to end, every part real and in its own process but the bridge:

    Redis velocity command -> bridge (BridgeCore in this process) -> control DB -> virtual PLC
    (plant_mode external: PI speed loops) -> plant_out -> plant link -> plant/actuation ->
    sim_node (drive_mode plant: drive train + Janosi-Hanamoto traction) -> plant/sensors + imu
    -> plant link -> plant_in -> PLC -> monitor DB -> bridge -> Redis monitor keys.

On flat, firm ground the PLC's speed loops must hold the commanded track speed (steady-state
error <= 2 % per track) on the simulated machine's *measured* speeds, and the Redis monitor keys
must report that measurement (what the simulation measured, not the set-point the bridge
wrote). Every figure is read from stamped records (plant/sensors in simulated time, Redis), never
from this process's clock; waits are generous for a loaded host.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import EVENT_WAIT_S, HilLoop, held_window, wait_for

from plc_bridge import redis_keys as keys

SPEED_M_S = 0.5    # the commanded forward speed [m/s]
SETTLE_S = 6.0     # simulated time after the command before the steady state is judged [s]
WINDOW_S = 3.0     # the steady-state window [s of simulated time]


@pytest.fixture
def loop(redis_server: Any, spawn: Any, tmp_path: Path, ros_node: Any) -> Iterator[HilLoop]:
    lp = HilLoop(redis_server.url, spawn, tmp_path, ros_node)
    try:
        yield lp
    finally:
        lp.close()


def test_the_plc_holds_the_commanded_track_speed_on_the_simulated_machine(
        loop: HilLoop) -> None:
    rig, sensors, sim = loop.rig, loop.record, loop.sim
    rig.start()
    rig.command(SPEED_M_S, 0.0, 0.0)
    wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
             lambda: f"bridge running (now {rig.get(keys.BRIDGE_STATUS)}: "
                     f"{rig.get(keys.BRIDGE_DETAIL)}); sim_node:\n{sim.log()[-2000:]}")
    # the machine starts moving: the simulated tracks answer the PLC's torque
    moving = wait_for(lambda: (s := sensors.since(0.0)).size and s[-1, 1] > 0.1 * SPEED_M_S
                      and s[-1, 0], EVENT_WAIT_S, "the simulated tracks moving")
    t_start = float(moving)

    # the first WINDOW_S of simulated time, at least SETTLE_S after the start, with both
    # tracks within 2 % of the command (searched for, not taken at a fixed time: see
    # helpers.held_window)
    def steady_window() -> list[np.ndarray]:
        return held_window(sensors.since(t_start + SETTLE_S), SPEED_M_S, 0.02, WINDOW_S)

    [steady] = wait_for(steady_window, 300.0,
                        lambda: f"{WINDOW_S} s of simulated time with both tracks within 2 % "
                                f"of {SPEED_M_S} m/s, {SETTLE_S} s after the start; last "
                                f"samples {sensors.since(0.0)[-3:]}; sim_node:\n"
                                f"{sim.log()[-2000:]}")
    assert len(steady) > 50, f"{len(steady)} sensor samples in the window"
    print(f"steady state from {steady[0, 0] - t_start:.2f} s: tracks {np.mean(steady[:, 1]):.5f}"
          f" / {np.mean(steady[:, 2]):.5f} m/s, ground {np.mean(steady[:, 3]):.5f} m/s for "
          f"{SPEED_M_S} m/s commanded")
    # over ground at the tracks' speed but for a small slip, either way: on firm clay the
    # compaction resistance the slip carries at steady state (~1e-5) is of the order of the
    # inertial force of the PI loop still settling, so the mean slip's sign is which side the
    # loop settles from (ci49: 8.5e-10 m/s of braking slip while it came down from 0.500024
    # m/s; where the sign belongs, in a steady state under a known load, test_drivetrain
    # holds the slip to the Janosi-Hanamoto closed form)
    tracks = steady[:, 1:3].mean(axis=1)
    assert np.all(steady[:, 3] <= 1.001 * tracks) and np.all(steady[:, 3] >= 0.95 * tracks)
    # the monitor keys carry the simulated machine's measurement: each Redis value is one the
    # simulation measured (REAL rounding), not the 0.5 set-point the bridge wrote
    def key_is_a_measurement() -> bool:
        v = rig.get(keys.wheel_speed_key("left"))
        measured = sensors.since(t_start)[:, 1]
        return v is not None and float(v) != SPEED_M_S and bool(
            np.any(np.abs(measured - float(v)) <= 1e-6 * max(1.0, abs(float(v)))))

    wait_for(key_is_a_measurement, EVENT_WAIT_S,
             lambda: f"plc.monitor wheel_left.speed {rig.get(keys.wheel_speed_key('left'))} "
                     "among the simulation's measured speeds")
    longitudinal = float(rig.get(keys.MON_LONGITUDINAL))
    assert math.isfinite(longitudinal) and abs(longitudinal - SPEED_M_S) <= 0.05 * SPEED_M_S
