"""The demo's operator starts digging on a live soil loop, or late on a host too busy for it."""

from __future__ import annotations

import math

import pytest


def test_the_dig_starts_on_a_live_soil_loop_or_late_once_soil_node_answered_long_enough(
) -> None:
    """demo/soil_coupling: a wrench answering a pose at most 0.05 s old (simulated time) starts
    the run at once; answers that are always later start it only after 20 s of them (a host
    too busy for the coupling in real time); no answer, or no /clock yet, never."""
    from excavator_hil.demo.soil_coupling import SoilCoupling

    fresh = SoilCoupling()
    fresh.on_wrench(stamp_s=5.0, clock_s=math.nan, wall_s=0.0)   # no /clock: not judged
    assert not fresh.ready(1e6)
    fresh.on_wrench(stamp_s=5.0, clock_s=5.04, wall_s=1.0)
    assert fresh.ready(1.0) and not fresh.late(100.0)

    slow = SoilCoupling()
    for k in range(200):                                          # 0.9 s behind, for 20 s
        slow.on_wrench(stamp_s=0.1 * k, clock_s=0.1 * k + 0.9, wall_s=3.0 + 0.1 * k)
        assert slow.ready(3.0 + 0.1 * k) == (0.1 * k >= 20.0 - 1e-9), k
    assert slow.late(23.0) and slow.lag_s == pytest.approx(0.9)
    slow.on_wrench(stamp_s=30.0, clock_s=30.01, wall_s=30.0)     # live after all: not late
    assert slow.ready(30.0) and not slow.late(30.0)
    assert not SoilCoupling().ready(1e6)                          # soil_node never answered
