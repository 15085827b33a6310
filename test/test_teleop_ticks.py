"""The impedance controller keeps the clock's time when its control callbacks come late or not
at all (issue 31 hole 10): the pure core (excavator_kinematics.teleop.ticks.ControlTicks inside
TeleopCore.impedance_command) is given the callback times; no timers, no ROS."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from excavator_kinematics.errors import ConfigError
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_kinematics.teleop.config import settings_from_parameters
from excavator_kinematics.teleop.controller import MachineState, TeleopCore, TeleopSettings
from excavator_kinematics.teleop.impedance import ImpedanceParams
from excavator_kinematics.teleop.ticks import ControlTicks
from excavator_kinematics.teleop.valves import FlowLimits

GEOMETRY = default_geometry()
LINKAGE = Linkage(GEOMETRY)
LIMITS = FlowLimits.from_file(total_flow_lpm=150.0)
MID = np.array([0.0, 0.45, -1.5, 1.6])  # swing, boom, arm, bucket [rad], away from limits
P = 0.02  # control period [s]: 50 Hz
CAP = 0.1  # impedance.max_step_s [s]: 5 periods


def test_missed_ticks_are_counted_exactly_for_a_schedule_of_callback_times() -> None:
    ticks = ControlTicks(P, CAP)
    # tick:   0    1     2 (late 9 ms)  5 (3, 4 missed)  6 (early 9 ms)  7    40 (32 missed)
    times = [0.0, 0.02, 0.049, 0.10, 0.111, 0.14, 0.80]
    steps = [ticks.advance(t) for t in times]
    assert steps == pytest.approx([P, P, P, 3 * P, P, P, CAP])  # whole periods, capped
    assert ticks.missed == 2 + 32
    assert ticks.capped == 1 and ticks.dropped_s == pytest.approx(0.80 - 0.14 - CAP)
    assert ticks.callbacks == len(times)
    assert ticks.advance(0.805) == 0.0  # a second callback within the same tick: no time
    assert ticks.missed == 34
    assert ticks.advance(0.3) == P  # the clock went back (a new simulation): a new grid
    assert ticks.advance(0.32) == P and ticks.missed == 34


@settings(max_examples=200)
@given(gaps=st.lists(st.integers(1, 12), min_size=1, max_size=60),
       jitter=st.lists(st.floats(-0.45, 0.45), min_size=61, max_size=61),
       origin=st.floats(0.0, 1e5))
def test_the_time_integrated_is_the_periods_that_passed(gaps: list[int], jitter: list[float],
                                                       origin: float) -> None:
    """Property: callbacks on the period grid of the first one, with gaps of n periods and
    jitter under half a period: each integrates min(n, cap) periods, and n - 1 ticks are
    counted missed."""
    ticks = ControlTicks(P, CAP)
    tick = 0
    assert ticks.advance(origin) == P
    for k, n in enumerate(gaps, start=1):
        tick += n
        dt = ticks.advance(origin + (tick + jitter[k]) * P)
        assert dt == pytest.approx(min(n, 5) * P, rel=1e-9)
    assert ticks.missed == sum(n - 1 for n in gaps)
    assert ticks.capped == sum(n > 5 for n in gaps)


def test_a_cap_below_one_period_is_refused_naming_the_parameter() -> None:
    with pytest.raises(ConfigError, match=r"impedance\.max_step_s = 0\.01 s must be at least"):
        settings_from_parameters({"control_rate_hz": 50.0, "impedance.max_step_s": 0.01})


def _core() -> TeleopCore:
    return TeleopCore(GEOMETRY, LIMITS, TeleopSettings(mode="impedance", control_period_s=P,
                                                       impedance_max_step_s=CAP), LINKAGE)


def _run(times: np.ndarray, hand_at, soil: np.ndarray) -> TeleopCore:  # type: ignore[no-untyped-def]
    core = _core()
    state = MachineState(MID, np.zeros(4))
    for t in times:
        core.impedance_command(hand_at(t), soil, state, float(t))
    return core


def _irregular(end_tick: int, seed: int) -> np.ndarray:
    """Callback times on the 50 Hz grid with ticks left out (gaps up to the cap) and up to
    8 ms of jitter, ending at the same tick as the regular schedule."""
    rng = np.random.default_rng(seed)
    ticks = [0]
    while ticks[-1] < end_tick:
        ticks.append(min(ticks[-1] + int(rng.integers(1, 6)), end_tick))
    t = np.array(ticks, float) * P + rng.uniform(-0.008, 0.008, len(ticks))
    t[0], t[-1] = 0.0, end_tick * P
    return t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_model_state_does_not_depend_on_missed_callbacks(seed: int) -> None:
    """The hand steps 2 cm out and 1 cm down against a constant soil force: after 3 s of
    callbacks that came late or not at all, the model is where 150 regular callbacks put it.
    The model is discretised exactly for inputs held over a step (matrix exponential), so
    with held inputs the only difference is rounding: 1e-9."""
    end = 150
    soil = np.array([-8e3, 3e3, -500.0])
    step = np.array([0.02, -0.01, 0.05])

    def hand(t: float) -> np.ndarray:
        return step if t > 0.0 else np.zeros(3)
    regular = _run(np.arange(end + 1) * P, hand, soil)
    times = _irregular(end, seed)
    late = _run(times, hand, soil)
    assert late.impedance_ticks.missed == end - (len(times) - 1) > 30
    assert late.impedance.x == pytest.approx(regular.impedance.x, abs=1e-9)
    assert late.impedance.v == pytest.approx(regular.impedance.v, abs=1e-9)
    moved = regular.impedance.x - _core().task(MachineState(MID, np.zeros(4)))
    assert np.abs(moved).max() > 0.1  # it did move (0.2 m of set-point, the soil's offset)


def _l1_gain(p: ImpedanceParams, axis: int) -> float:
    """Integral of |h| of X/X_0 = (B s + K) / (M s^2 + B s + K): the most an input error of 1
    can move X, whatever its shape."""
    t = np.linspace(0.0, 40.0, 400_001)
    _, h = signal.impulse(signal.lti([p.b[axis], p.k[axis]], [p.m[axis], p.b[axis], p.k[axis]]),
                          T=t)
    return float(np.sum(np.abs(h)) * (t[1] - t[0]))


def test_a_moving_hand_differs_only_by_its_coarser_sampling() -> None:
    """The hand moves at constant speed. A callback that integrates n periods holds the latest
    set-point over them: exactly what n regular callbacks do when fed that same set-point
    (the discretisation is exact; 1e-9). Against the hand sampled every period the state
    differs by at most the L1 gain of eq. 1 times the largest set-point difference, speed x
    (the gap - 1 period + the jitter)."""
    end = 150
    rate = np.array([0.01, -0.005, 0.02])  # hand [m/s, m/s, rad/s]

    def hand(t: float) -> np.ndarray:
        return rate * t
    times = _irregular(end, 7)
    late = _run(times, hand, np.zeros(3))
    ticks = np.round(times / P).astype(int)

    def held(t: float) -> np.ndarray:  # the set-point the late callbacks held at grid time t
        return hand(float(times[np.searchsorted(ticks, round(t / P))]))
    same_input = _run(np.arange(end + 1) * P, held, np.zeros(3))
    assert late.impedance.x == pytest.approx(same_input.impedance.x, abs=1e-9)

    regular = _run(np.arange(end + 1) * P, hand, np.zeros(3))
    s = late.settings
    scale = np.array([s.position_scale, s.position_scale, s.angle_scale])
    input_error = np.abs(rate) * scale * ((np.diff(ticks).max() - 1) * P + 0.008)
    bound = np.array([_l1_gain(s.impedance, a) for a in range(3)]) * input_error
    diff = np.abs(late.impedance.x - regular.impedance.x)
    assert np.all(diff <= bound), (diff, bound)
    assert np.any(diff > 0.0)  # the sampling does differ


def test_a_stall_longer_than_the_cap_advances_the_model_by_the_cap_only() -> None:
    """A 2 s stall (the process stopped): the model moves as in max_step_s, not 2 s, and the
    time given up is counted."""
    step = np.array([0.02, 0.0, 0.0])

    def hand(t: float) -> np.ndarray:
        return step if t > 0.0 else np.zeros(3)
    stalled = _run(np.array([0.0, 0.02, 2.02]), hand, np.zeros(3))
    short = _run(np.array([0.0, 0.02, 0.02 + CAP]), hand, np.zeros(3))
    assert stalled.impedance.x == pytest.approx(short.impedance.x, abs=1e-12)
    t = stalled.impedance_ticks
    assert t.missed == 99 and t.capped == 1 and t.dropped_s == pytest.approx(2.0 - CAP)
