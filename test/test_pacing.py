"""The pure pacing and wrench-freshness logic of sim_node (excavator_sim.pacing), without ROS."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_sim.pacing import Pacer, Window, WrenchGate

P = 0.01  # publish period [s]


def _run(pacer: Pacer, wakeups: list[float]) -> tuple[float, list[float]]:
    """Step what is due at each wall-clock wake-up; returns the final sim time and the lags."""
    sim = 0.0
    lags = []
    for wall in wakeups:
        sim += P * pacer.due(wall, sim)
        lags.append(pacer.lag(wall, sim))
    return sim, lags


def test_the_schedule_is_absolute_so_late_wakeups_are_caught_up_not_lost() -> None:
    pacer = Pacer(P, 1.0)
    # wakes every 10 ms, but one wake-up comes 45 ms late
    wakeups = [0.01 * k for k in range(50)] + [0.545] + [0.55 + 0.01 * k for k in range(50)]
    sim, lags = _run(pacer, wakeups)
    # a sleep-per-step loop would have lost the 45 ms; the absolute schedule makes them up
    assert sim == pytest.approx(1.05, abs=P)
    assert max(lags) <= 1e-9  # never behind after stepping (ahead by at most one period)
    assert min(lags) >= -P - 1e-9
    assert pacer.slips == 0


@given(rtf=st.floats(0.1, 10.0), jitter=st.lists(st.floats(0.0, 0.02), min_size=5,
                                                   max_size=200))
@settings(max_examples=60, deadline=None)
def test_sim_time_follows_the_wall_clock_times_the_factor(rtf: float, jitter: list[float]
                                                           ) -> None:
    pacer = Pacer(P, rtf, max_behind_s=10.0)
    wall, wakeups = 0.0, []
    for j in jitter:
        wall += j
        wakeups.append(wall)
    sim, _ = _run(pacer, wakeups)
    # after the last wake-up: at the schedule's target, ahead by less than one period
    assert pacer.target(wall) - 1e-9 <= sim < pacer.target(wall) + P + 1e-9
    # the schedule starts at the first wake-up
    assert math.isclose(pacer.target(wall), rtf * (wall - wakeups[0]), abs_tol=1e-9)


def test_a_deficit_beyond_the_catch_up_limit_slips_and_is_reported() -> None:
    pacer = Pacer(P, 1.0, max_behind_s=0.2)
    assert pacer.due(0.0, 0.0) == 1
    n = pacer.due(2.0, 0.01)  # the process stalled for 2 s
    assert pacer.slips == 1 and pacer.slipped_s == pytest.approx(1.79)
    assert n == pytest.approx(21, abs=1)  # catches up 0.2 s, not 2 s
    assert pacer.lag(2.0, 0.01 + n * P) <= 1e-9


def test_pacer_rejects_free_run_and_bad_periods() -> None:
    with pytest.raises(ValueError, match="real_time_factor = 0"):
        Pacer(P, 0.0)
    with pytest.raises(ValueError, match="period_s"):
        Pacer(0.0, 1.0)


def test_a_fresh_wrench_acts_a_stale_one_is_left_out_not_held() -> None:
    gate = WrenchGate(max_age_s=0.02)
    assert gate.for_period(0.01) is None  # no soil yet: nothing to apply
    f, t = np.array([1e4, 0.0, -2e3]), np.array([0.0, 5e2, 0.0])
    age = gate.offer(1.00, f, t, sim_time=1.004)
    assert age == pytest.approx(0.004)
    # periods ending 10 and 20 ms after the pose: fresh
    for end in (1.01, 1.02):
        force, torque = gate.for_period(end)
        assert np.array_equal(force, f) and np.array_equal(torque, t)
    # 30 ms: stale -> zeros once (soil absent), then nothing more to change
    force, torque = gate.for_period(1.03)
    assert not force.any() and not torque.any()
    assert gate.for_period(1.04) is None
    assert gate.stale_periods == 2 and gate.applied_periods == 2 and not gate.acting
    # the next answer restores it
    gate.offer(1.03, 2 * f, t, sim_time=1.035)
    assert np.array_equal(gate.for_period(1.04)[0], 2 * f)


def test_late_and_out_of_order_wrenches_are_counted_and_never_act() -> None:
    gate = WrenchGate(max_age_s=0.02)
    gate.offer(2.0, np.ones(3), np.zeros(3), sim_time=2.005)
    gate.offer(1.5, 9 * np.ones(3), np.zeros(3), sim_time=2.006)  # older than the held one
    assert gate.out_of_order == 1 and gate.stale_on_arrival == 1
    assert np.array_equal(gate.for_period(2.01)[0], np.ones(3))
    gate.offer(2.5, np.ones(3), np.zeros(3), sim_time=3.0)  # 0.5 s late on arrival
    assert gate.stale_on_arrival == 2
    assert not gate.for_period(3.01)[0].any()
    worst = gate.arrival_age.percentiles()[2]
    assert worst == pytest.approx(0.506) and gate.arrival_age.max_ever == pytest.approx(0.506)


def test_a_wrench_from_the_future_is_not_fresh_and_zero_age_limit_disables_the_check() -> None:
    gate = WrenchGate(max_age_s=0.02)
    gate.offer(50.0, np.ones(3), np.zeros(3), sim_time=1.0)  # another clock (a restarted sim)
    assert gate.for_period(1.01) is None
    legacy = WrenchGate(max_age_s=0.0)
    legacy.offer(0.0, np.ones(3), np.zeros(3), sim_time=100.0)
    assert np.array_equal(legacy.for_period(100.01)[0], np.ones(3))


def test_window_reports_percentiles_and_the_worst_ever() -> None:
    w = Window(size=100)
    assert all(math.isnan(v) for v in w.percentiles())
    w.extend([5.0] + [1.0] * 200)
    p50, p99, worst = w.percentiles()
    assert (p50, p99, worst) == (1.0, 1.0, 1.0)  # the 5.0 left the window...
    assert w.max_ever == 5.0 and w.count == 201  # ...but is remembered
