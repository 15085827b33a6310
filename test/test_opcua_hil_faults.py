"""The plant link on OPC UA under the faults test_hil_faults.py makes for S7, on the whole loop
(helpers.OpcUaHilLoop: the plant link talks to the virtual PLC's OPC UA server over
Basic256Sha256 SignAndEncrypt with a user login; the bridge stays on S7): the PLC killed and a
new one started, the plant link's cable cut and plugged back. The simulated drives brake to a
standstill, no actuation outlives its timeout, the plant link reports link_lost, and nothing
the PLC wrote before the fault acts after it; the loop recovers. The same records and checks
as test_hil_faults.py (nothing timed on this process's clock)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import HilLoop, OpcUaHilLoop, wait_for
from test_hil_faults import (
    SPEED_M_S,
    TIMEOUT_S,
    WATCHDOG_S,
    braked_to_a_standstill,
    no_actuation_outlived_its_timeout,
    nothing_from_before_acts,
    plant_lost_on_redis,
    recovered,
    sim_timeouts,
)


@pytest.fixture
def make_loop(redis_server: Any, spawn: Any, tmp_path: Path,
              ros_node: Any) -> Iterator[Callable[..., HilLoop]]:
    loops: list[HilLoop] = []

    def make(**kw: Any) -> HilLoop:
        lp = OpcUaHilLoop(redis_server.url, spawn, tmp_path, ros_node,
                          actuation_timeout_s=TIMEOUT_S, **kw)
        loops.append(lp)
        return lp

    yield make
    for lp in loops:
        lp.close()


def _link_lost(lp: HilLoop) -> None:
    wait_for(lambda: lp.record.last("plant_link")[2].get("status") == "link_lost", 30.0,
             lambda: f"plant link link_lost ({lp.record.last('plant_link')})")
    assert lp.record.last("plant_link")[0] == 2      # ERROR


def test_a_killed_plc_brakes_the_drives_over_opcua_and_nothing_old_acts_after_it(
        make_loop: Callable[..., HilLoop]) -> None:
    lp = make_loop()
    rig = lp.rig
    lp.drive(SPEED_M_S)
    timeouts = sim_timeouts(lp)
    t0 = lp.record.last_t()
    rig.kill_plc()
    fault = time.monotonic()            # the PLC wrote nothing after this
    try:
        _, t_rest = braked_to_a_standstill(lp, t0)
        no_actuation_outlived_its_timeout(lp, timeouts, t_rest)
        _link_lost(lp)
        assert "opc.tcp://" in str(lp.record.last("plant_link")[1])
        lp.wait_status("stopped:plc_link_lost", 30.0)
        time.sleep(1.0)   # the fault lasts a while (not a measurement: the PLC is away)
    finally:
        back = time.monotonic()
        rig.start_plc()                  # a new PLC on the same ports, OPC UA served again
    recovered(lp)
    nothing_from_before_acts(rig, back, fault)


def test_a_cut_opcua_plant_link_cable_brakes_and_nothing_old_acts_after_it(
        make_loop: Callable[..., HilLoop]) -> None:
    lp = make_loop(plant_watchdog_s=WATCHDOG_S, via_proxy=True)
    assert lp.proxy is not None
    lp.drive(SPEED_M_S)
    timeouts = sim_timeouts(lp)
    t0 = lp.record.last_t()
    lp.proxy.cut()
    fault = time.monotonic()
    try:
        _, t_rest = braked_to_a_standstill(lp, t0)
        no_actuation_outlived_its_timeout(lp, timeouts, t_rest)
        _link_lost(lp)
        # the PLC's plant_in is no longer written: its plant watchdog, the cause on Redis
        plant_lost_on_redis(lp)
    finally:
        back = time.monotonic()
        lp.proxy.restore()
    recovered(lp)
    # blocks the PLC wrote during the cut never reached the simulation
    nothing_from_before_acts(lp.rig, back, fault)
