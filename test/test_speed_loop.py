"""The PLC's PI speed loops (plc_bridge/virtual_plc/speed_loop.py), pure: against a drive model
written here (first-order torque response + the inertia of one track side + a load), with the gains
shipped in config/virtual_plc.yaml. Simulated time only: nothing here depends on the host."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plc_bridge.config import load_virtual_plc
from plc_bridge.virtual_plc.speed_loop import MAX_DT_S, PiSpeedLoop

VP = load_virtual_plc()
LIMIT = VP.torque_limit_nm
MASS_KG = 4100.0       # one side of the 8.2 t machine (config/excavator.yaml)
RADIUS_M = 0.30        # sprocket radius the torque limit assumes
TAU_S = 0.2            # torque response of the hydrostat (drive model)
DT_S = 0.005           # the virtual PLC's 200 Hz scan
DELAY_S = 0.02         # two 100 Hz exchanges between the simulation and the PLC


def shipped(n: int = 1) -> PiSpeedLoop:
    return PiSpeedLoop(n, VP.speed_kp_nm_s_per_m, VP.speed_ki_nm_per_m, LIMIT,
                       VP.speed_sp_weight)


class Drive:
    """One track side: torque follows the set-point with ``TAU_S``; the track force
    (torque / radius) minus the load accelerates ``MASS_KG``; the PLC sees the speed
    ``DELAY_S`` late."""

    def __init__(self) -> None:
        self.v = 0.0
        self.torque = 0.0
        self._seen: deque[float] = deque([0.0] * round(DELAY_S / DT_S))

    def measured(self) -> float:
        self._seen.append(self.v)
        return self._seen.popleft()

    def step(self, torque_sp: float, load_n: float) -> None:
        self.torque += (torque_sp - self.torque) * (1.0 - math.exp(-DT_S / TAU_S))
        self.v += (self.torque / RADIUS_M - load_n) / MASS_KG * DT_S


def run(loop, setpoint, load_n, t_end_s: float) -> np.ndarray:
    """Rows (t, speed, torque set-point, saturated, integral) every scan."""
    drive, rows, t = Drive(), [], 0.0
    while t < t_end_s:
        u = float(loop.step(DT_S, [setpoint(t)], [drive.measured()], True)[0])
        drive.step(u, load_n(t))
        rows.append((t, drive.v, u, float(loop.saturated[0]), float(loop.integral[0])))
        t += DT_S
    return np.array(rows)


def settling_time(rows: np.ndarray, target: float, band: float) -> float:
    outside = np.nonzero(np.abs(rows[:, 1] - target) > band * abs(target))[0]
    return float(rows[outside[-1] + 1, 0]) if len(outside) else 0.0


def test_step_response_on_flat_ground():
    """0 -> 1 m/s: within 2 % after 4 s and for good, overshoot under 2 % (set-point weight),
    no steady-state error (integral action), the torque well inside its limit."""
    rows = run(shipped(), lambda t: 1.0, lambda t: 0.0, 12.0)
    assert settling_time(rows, 1.0, 0.02) < 4.0
    assert rows[:, 1].max() < 1.02
    assert rows[-1, 1] == pytest.approx(1.0, abs=1e-3)
    assert not rows[:, 3].any()
    assert np.abs(rows[:, 2]).max() < LIMIT


def test_reverse_is_the_mirror_image():
    fwd = run(shipped(), lambda t: 0.8, lambda t: 0.0, 6.0)
    rev = run(shipped(), lambda t: -0.8, lambda t: 0.0, 6.0)
    assert np.allclose(fwd[:, 1], -rev[:, 1]) and np.allclose(fwd[:, 2], -rev[:, 2])


def test_a_slope_within_the_torque_limit_is_held_without_error():
    """A grade needing 60 % of the torque limit: the speed dips, the integrator takes the load,
    the set-point is held (error < 0.5 %), the drive not saturated once settled."""
    load = 0.6 * LIMIT / RADIUS_M
    rows = run(shipped(), lambda t: 1.0, lambda t: load if t >= 8.0 else 0.0, 25.0)
    late = rows[rows[:, 0] > 20.0]
    assert np.abs(late[:, 1] - 1.0).max() < 0.005
    assert not late[:, 3].any()
    assert late[-1, 2] == pytest.approx(0.6 * LIMIT, rel=0.01)   # torque = the load's


def test_saturation_is_reported_and_recovery_has_no_windup_overshoot():
    """A load beyond the torque limit for 3 s: the output sits at the limit, saturated, and the
    integrator holds (clamping). When the load goes, the speed comes back without the overshoot
    of a wound-up integrator: less than half that of the same PI without anti-windup (written
    below), and the set-point is held again."""
    def overload(t: float) -> float:
        return 1.1 * LIMIT / RADIUS_M if 8.0 <= t < 11.0 else 0.0

    rows = run(shipped(), lambda t: 1.0, overload, 30.0)
    during = rows[(rows[:, 0] > 9.0) & (rows[:, 0] < 11.0)]
    assert during[:, 3].all() and np.all(during[:, 2] == LIMIT)
    assert np.ptp(during[:, 4]) == 0.0                       # the integrator held
    assert during[:, 4].max() < LIMIT                        # below the limit: nothing to unwind
    after = rows[rows[:, 0] >= 11.0]
    overshoot = after[:, 1].max() - 1.0
    naive = run(_NoAntiWindup(), lambda t: 1.0, overload, 30.0)
    naive_overshoot = naive[naive[:, 0] >= 11.0, 1].max() - 1.0
    assert overshoot < 0.5 * naive_overshoot, (overshoot, naive_overshoot)
    assert np.abs(rows[rows[:, 0] > 25.0, 1] - 1.0).max() < 0.01
    assert not rows[rows[:, 0] > 25.0, 3].any()


def test_a_lasting_error_takes_the_output_exactly_to_its_limit_and_says_so():
    """A measurement stuck below the set-point (a stalled track): the integrator fills the
    output up to the limit, not to just below it (a clamp that only holds would stop one step
    short and never report the saturation), then holds."""
    loop = shipped(2)
    for _ in range(4000):   # 20 s of scans
        out = loop.step(DT_S, [1.0, -1.0], [0.4000000059604645, -0.4], True)
    assert list(out) == [LIMIT, -LIMIT] and loop.saturated.all()
    held = loop.integral
    loop.step(DT_S, [1.0, -1.0], [0.4000000059604645, -0.4], True)
    assert np.array_equal(loop.integral, held)
    # the error turns: off the limit at once
    assert abs(loop.step(DT_S, [1.0, -1.0], [1.2, -1.2], True)[0]) < LIMIT
    assert not loop.saturated[0]


class _NoAntiWindup(PiSpeedLoop):
    """The shipped loop with its integrator always integrating (within the limit): what the
    clamping is measured against."""

    def __init__(self) -> None:
        super().__init__(1, VP.speed_kp_nm_s_per_m, VP.speed_ki_nm_per_m, LIMIT,
                         VP.speed_sp_weight)

    def step(self, dt_s, setpoint_m_s, measured_m_s, enabled):
        e = np.asarray(setpoint_m_s, float) - np.asarray(measured_m_s, float)
        self._integral = np.clip(self._integral + self.ki * e * dt_s, -LIMIT, LIMIT)
        raw = self.kp * (self.sp_weight * np.asarray(setpoint_m_s, float)
                         - np.asarray(measured_m_s, float)) + self._integral
        self._saturated = np.abs(raw) >= LIMIT
        return np.clip(raw, -LIMIT, LIMIT)


def test_a_stop_resets_the_loop():
    """Disabled: torque 0 at once and the integrator emptied, so a restart begins from the
    proportional term alone, not from the torque of the last run."""
    loop = shipped(2)
    for _ in range(400):
        loop.step(DT_S, [1.0, -0.5], [0.7, -0.2], True)
    assert np.all(np.abs(loop.integral) > 100.0)
    assert np.all(loop.step(DT_S, [1.0, -0.5], [0.7, -0.2], False) == 0.0)
    assert np.all(loop.integral == 0.0) and not loop.saturated.any()
    first = loop.step(DT_S, [1.0, 0.0], [0.0, 0.0], True)
    kp, ki, b = VP.speed_kp_nm_s_per_m, VP.speed_ki_nm_per_m, VP.speed_sp_weight
    assert first[0] == pytest.approx(kp * b * 1.0 + ki * 1.0 * DT_S)
    assert first[1] == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_measurement_gives_zero_torque_on_every_drive_and_a_fault(bad):
    loop = shipped(2)
    for _ in range(100):
        loop.step(DT_S, [1.0, 1.0], [0.5, 0.5], True)
    out = loop.step(DT_S, [1.0, 1.0], [0.5, bad], True)
    assert np.all(out == 0.0) and np.all(loop.integral == 0.0)
    assert "measured speed of drive 1" in loop.fault and str(bad) in loop.fault
    # the fault holds while enabled, even with the sensor back
    assert np.all(loop.step(DT_S, [1.0, 1.0], [0.5, 0.5], True) == 0.0) and loop.fault
    # still broken at the stop: not cleared
    loop.step(DT_S, [0.0, 0.0], [0.5, bad], False)
    assert loop.fault
    # a stop with finite measurements acknowledges it; the loop drives again
    loop.step(DT_S, [0.0, 0.0], [0.5, 0.5], False)
    assert loop.fault == ""
    assert np.all(loop.step(DT_S, [1.0, 1.0], [0.5, 0.5], True) > 0.0)


def test_a_non_finite_setpoint_is_a_fault_too():
    loop = shipped(2)
    assert np.all(loop.step(DT_S, [math.nan, 1.0], [0.0, 0.0], True) == 0.0)
    assert "speed set-point of drive 0" in loop.fault


def test_a_long_scan_integrates_as_the_longest_one_taken():
    loop = shipped()
    loop.step(60.0, [1.0], [0.0], True)   # a PLC paused for a minute, then resumed
    assert loop.integral[0] == pytest.approx(VP.speed_ki_nm_per_m * MAX_DT_S)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="torque_limit_nm = 0"):
        PiSpeedLoop(1, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="sp_weight = 2"):
        PiSpeedLoop(1, 1.0, 1.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="expected 2 set-points"):
        shipped(2).step(DT_S, [1.0], [0.0, 0.0], True)
    with pytest.raises(ValueError, match="dt_s = nan"):
        shipped().step(math.nan, [1.0], [0.0], True)


finite = st.floats(-50.0, 50.0, allow_nan=False)


@given(st.lists(st.tuples(finite, finite, st.booleans(), st.floats(0.0, 1.0)), max_size=40))
def test_the_output_stays_finite_within_the_limit(scans):
    loop = shipped()
    for sp, meas, enabled, dt in scans:
        out = loop.step(dt, [sp], [meas], enabled)
        assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= LIMIT)
        assert np.all(np.abs(loop.integral) <= LIMIT)
        if not enabled:
            assert np.all(out == 0.0)
