"""The virtual PLC's plant (first-order drives, rate-limited steering) and the alive watchdog."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plc_bridge.virtual_plc.plant import (
    SEQ_MODULUS,
    AliveWatchdog,
    CommandGuard,
    VehiclePlant,
    seq_newer,
)

TAU, RATE, STEER_LIM, V_LIM = 0.2, 0.5, 0.6, 2.0


def plant(n_wheels: int = 4, n_steer: int = 4, tau: float = TAU) -> VehiclePlant:
    return VehiclePlant(n_wheels=n_wheels, n_steer=n_steer, speed_time_constant_s=tau,
                        steer_rate_rad_s=RATE, steer_limit_rad=STEER_LIM, speed_limit_m_s=V_LIM)


def test_starts_at_rest_and_straight() -> None:
    p = plant(2, 0)
    assert np.array_equal(p.speeds, np.zeros(2)) and p.angles.shape == (0,)


def test_first_order_step_response_is_exact() -> None:
    p = plant(2, 0)
    p.step(0.1, [1.0, -0.5])
    expected = np.array([1.0, -0.5]) * (1 - math.exp(-0.1 / TAU))
    assert p.speeds == pytest.approx(expected, rel=1e-12)
    for _ in range(99):
        p.step(0.01)  # setpoints kept when omitted
    assert p.speeds == pytest.approx(np.array([1.0, -0.5]) * (1 - math.exp(-1.09 / TAU)),
                                     rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(dts=st.lists(st.floats(1e-4, 0.2), min_size=1, max_size=20),
       v0=st.floats(-2.0, 2.0), sp=st.floats(-2.0, 2.0))
def test_exact_discretisation_does_not_depend_on_the_step_size(dts: list[float], v0: float,
                                                               sp: float) -> None:
    sliced, whole = plant(1, 0), plant(1, 0)
    for p in (sliced, whole):
        p.step(10.0, [v0])  # settle at v0 (10 s = 50 tau)
    for dt in dts:
        sliced.step(dt, [sp])
    whole.step(sum(dts), [sp])
    assert sliced.speeds == pytest.approx(whole.speeds, abs=1e-12)
    assert whole.speeds[0] == pytest.approx(sp + (v0 - sp) * math.exp(-sum(dts) / TAU),
                                            abs=1e-12)


def test_ideal_drive_with_zero_time_constant() -> None:
    p = plant(1, 0, tau=0.0)
    p.step(0.01, [1.5])
    assert p.speeds[0] == 1.5


def test_steering_is_rate_limited_and_reaches_its_setpoint() -> None:
    p = plant(1, 2)
    p.step(0.1, [0.0], [0.3, -0.02])
    assert p.angles == pytest.approx([RATE * 0.1, -0.02])
    for _ in range(5):
        p.step(0.1)
    assert p.angles == pytest.approx([0.3, -0.02])
    assert not p.limited


def test_actuator_limits_are_physical_and_counted() -> None:
    p = plant(1, 1)
    p.step(100.0, [5.0], [1.0])
    assert p.speeds[0] == pytest.approx(V_LIM) and p.angles[0] == pytest.approx(STEER_LIM)
    assert p.limited and p.limit_events == 1
    p.step(0.01, [1.0], [0.1])
    assert not p.limited and p.limit_events == 1


def test_stop_ramps_the_speeds_down_and_holds_the_steering() -> None:
    p = plant(2, 2)
    p.step(0.5, [1.0, 1.0], [0.5, 0.5])  # steering still moving: 0.25 rad after 0.5 s
    v_before, a_before = p.speeds, p.angles
    assert a_before == pytest.approx([0.25, 0.25])
    p.stop()
    p.step(0.1)
    assert p.speeds == pytest.approx(v_before * math.exp(-0.1 / TAU), rel=1e-12)
    assert np.array_equal(p.angles, a_before)
    for _ in range(100):
        p.step(0.05)
    assert np.max(np.abs(p.speeds)) < 1e-9 and np.array_equal(p.angles, a_before)
    p.step(0.1, [1.0, 1.0], [0.5, 0.5])  # not latched: the caller drives again
    assert p.speeds[0] > 0.0


@pytest.mark.parametrize(("speeds", "angles", "message"), [
    ([math.nan, 0.0], [0.0], "speed setpoints .* NaN/inf"),
    ([0.0, 0.0], [math.inf], "angle setpoints .* NaN/inf"),
    ([0.0], [0.0], r"expected 2 values \[m/s\]"),
])
def test_bad_setpoints_are_clear_errors(speeds: list[float], angles: list[float],
                                        message: str) -> None:
    p = plant(2, 1)
    with pytest.raises(ValueError, match=message):
        p.step(0.01, speeds, angles)
    assert np.array_equal(p.speed_setpoints, np.zeros(2))  # nothing half-applied


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n_wheels": 0}, r"n_wheels = 0 must be an integer in \[1, 16\]"),
    ({"speed_time_constant_s": -1.0}, r"speed_time_constant_s = -1.0 s is outside"),
    ({"steer_rate_rad_s": math.nan}, r"steer_rate_rad_s = nan"),
    ({"steer_limit_rad": 4.0}, r"steer_limit_rad = 4.0 rad is outside \(0, 3.14159\]"),
    ({"speed_limit_m_s": 0.0}, r"speed_limit_m_s = 0.0 m/s is outside"),
])
def test_bad_plant_parameters_name_the_parameter(kwargs: dict, message: str) -> None:
    args = {"n_wheels": 2, "n_steer": 0, "speed_time_constant_s": TAU, "steer_rate_rad_s": RATE,
            "steer_limit_rad": STEER_LIM, "speed_limit_m_s": V_LIM} | kwargs
    with pytest.raises(ValueError, match=message):
        VehiclePlant(**args)


def test_bad_dt_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"dt = -0\.01 s"):
        plant().step(-0.01)


# --- watchdog -------------------------------------------------------------------------------


def test_watchdog_needs_a_change_before_it_reports_alive() -> None:
    wd = AliveWatchdog(0.1)
    assert not wd.update(7, 0.0)
    assert not wd.update(7, 0.05)  # a counter that just sits there proves nothing
    assert wd.update(8, 0.06)


def test_watchdog_trips_after_the_timeout_and_recovers_on_change() -> None:
    wd = AliveWatchdog(0.125)
    wd.update(1, 0.0)
    assert wd.update(2, 1.0)
    assert wd.update(2, 1.125)  # exactly the timeout: still alive
    assert not wd.update(2, 1.1251)
    assert not wd.alive(1.2)
    assert wd.update(3, 1.3)


def test_watchdog_counts_the_u16_wrap_as_a_change() -> None:
    wd = AliveWatchdog(0.0625)
    wd.update(65534, 0.0)
    assert wd.update(65535, 0.25)
    assert wd.update(0, 0.5)
    assert wd.update(0, 0.5625) and not wd.update(0, 0.5626)


@settings(max_examples=50, deadline=None)
@given(start=st.integers(0, 65535), n=st.integers(1, 300))
def test_watchdog_stays_alive_on_a_running_counter(start: int, n: int) -> None:
    wd = AliveWatchdog(0.03)
    wd.update(start, 0.0)
    assert all(wd.update((start + k) % 65536, 0.01 * k) for k in range(1, n + 1))


@pytest.mark.parametrize(("counter", "now", "message"), [
    (70000, 0.0, r"alive counter = 70000 must be an integer in \[0, 65535\]"),
    (-1, 0.0, "alive counter = -1"),
    (1.5, 0.0, "alive counter = 1.5"),
    (1, math.nan, "now_s = nan"),
])
def test_watchdog_rejects_bad_input(counter: int, now: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AliveWatchdog(0.1).update(counter, now)


def test_watchdog_rejects_time_going_backwards_and_bad_timeout() -> None:
    wd = AliveWatchdog(0.1)
    wd.update(1, 5.0)
    with pytest.raises(ValueError, match="monotonic clock"):
        wd.update(2, 4.0)
    with pytest.raises(ValueError, match=r"timeout_s = 0\.0 s is outside"):
        AliveWatchdog(0.0)


def test_watchdog_reset_needs_a_fresh_change() -> None:
    wd = AliveWatchdog(0.1)
    wd.update(1, 0.0)
    assert wd.update(2, 0.01)
    wd.reset()
    assert not wd.update(2, 0.02) and wd.update(3, 0.03)


# --- CommandGuard: the PLC's acceptance of control writes -------------------------------------


def _guard() -> CommandGuard:
    return CommandGuard(2, 1, watchdog_timeout_s=0.1, speed_limit_m_s=2.0, steer_limit_rad=0.7)


def _live(g: CommandGuard, t: float = 0.0) -> float:
    """Two stops with a changing alive counter: the guard is healthy from then on."""
    g.on_write(t, 1, False, True, 10, [0, 0], [0])
    g.on_write(t + 0.01, 2, False, True, 11, [0, 0], [0])
    return t + 0.01


@given(st.integers(0, SEQ_MODULUS - 1), st.integers(1, 2**31 - 1))
def test_seq_order_is_serial_arithmetic(last, ahead):
    assert seq_newer((last + ahead) % SEQ_MODULUS, last)
    assert not seq_newer(last, last)
    assert not seq_newer((last - ahead) % SEQ_MODULUS, last)


def test_guard_starts_tripped_and_a_stop_with_a_live_counter_clears_it():
    g = _guard()
    assert g.on_write(0.0, 5, True, False, 1, [1, 1], [0]) == "watchdog_tripped"
    g.on_write(0.01, 5, False, True, 2, [0, 0], [0])   # a stop, counter unchanged: no proof
    assert g.tripped
    g.on_write(0.02, 6, False, True, 3, [0, 0], [0])
    assert not g.tripped
    assert g.on_write(0.03, 7, True, False, 4, [1, -1], [0.5]) is None
    drive, speeds, angles = g.command(0.04)
    assert drive and list(speeds) == [1, -1] and list(angles) == [0.5]


def test_a_late_write_finds_the_watchdog_tripped_and_it_stays_latched():
    g = _guard()
    t = _live(g)
    assert g.on_write(t + 0.01, 3, True, False, 12, [1, 1], [0]) is None
    # 2 s later the old, "healthy looking" write arrives (alive +1, seq +1)
    assert g.on_write(t + 2.0, 4, True, False, 13, [1, 1], [0]) == "watchdog_tripped"
    assert not g.command(t + 2.0)[0]
    # fresh writes keep the counter alive, but only a stop unlatches
    for k in range(5):
        assert g.on_write(t + 2.01 + k * 0.01, 5 + k, True, False, 14 + k, [1, 1], [0]) == \
            "watchdog_tripped"
    assert g.on_write(t + 2.1, 20, False, True, 30, [0, 0], [0]) is None
    assert g.on_write(t + 2.11, 21, True, False, 31, [1, 1], [0]) is None
    assert g.command(t + 2.12)[0]


def test_an_old_stop_neither_resyncs_seq_nor_unlatches():
    g = _guard()
    t = _live(g)
    assert g.on_write(t + 0.01, 3, True, False, 500, [1, 1], [0]) is None
    assert g.on_write(t + 0.02, 4, False, True, 10, [0, 0], [0]) == "stale_seq"   # obeyed
    assert not g.command(t + 0.02)[0]
    assert g.last_seq == 500
    assert g.on_write(t + 0.03, 5, True, False, 11, [1, 1], [0]) == "stale_seq"


def test_the_monitor_db_reports_the_last_accepted_seq_and_the_last_refusals_cause():
    g = _guard()
    assert (g.seq_accepted, g.refused_reason, g.last_refusal) == (0, 0, "")   # none yet
    assert g.on_write(0.0, 1, True, False, 7, [1, 1], [0]) == "watchdog_tripped"
    assert (g.seq_accepted, g.refused_reason) == (0, 2)   # a refused write is not accepted
    t = _live(g, 0.01)
    assert g.seq_accepted == 11 and g.refused_reason == 2   # the cause stays: the last one
    assert g.on_write(t + 0.01, 3, True, False, SEQ_MODULUS - 1, [1, 1], [0]) == "stale_seq"
    assert g.refused_reason == 1 and g.seq_accepted == 11
    assert g.on_write(t + 0.02, 4, True, False, 12, [9, 1], [0]) == "bad_setpoint"
    assert g.refused_reason == 4
    assert g.on_write(t + 0.03, 5, True, False, 13, [1, 1], [0]) == "setpoint_fault"
    assert g.refused_reason == 3 and g.refused_total == 4
    assert g.on_write(t + 0.04, 6, False, True, 14, [0, 0], [0]) is None
    assert g.seq_accepted == 14 and g.refused_reason == 3


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_setpoint_outside_the_range_is_a_latched_fault(v):
    g = _guard()
    t = _live(g)
    why = g.on_write(t + 0.01, 3, True, False, 12, [v, 0.0], [0.0])
    bad = not (abs(v) <= 2.0 + g.tolerance)
    assert (why == "bad_setpoint") == bad
    assert g.setpoint_fault == bad
    if bad:
        assert not g.command(t + 0.01)[0]
        assert g.on_write(t + 0.02, 4, True, False, 13, [0.5, 0.5], [0]) == "setpoint_fault"
        g.on_write(t + 0.03, 5, False, True, 14, [0, 0], [0])
        assert not g.setpoint_fault
        assert g.on_write(t + 0.04, 6, True, False, 15, [0.5, 0.5], [0]) is None
