"""The PLC's steering-angle loops (plc_bridge/virtual_plc/steering_loop.py), pure: against a
steering actuator written here (a rate-limited valve with a first-order response integrating into
the angle, seen two exchanges late), with the gain shipped in config/virtual_plc.yaml. Simulated
time only: nothing here depends on the host."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plc_bridge.config import load_virtual_plc
from plc_bridge.virtual_plc.steering_loop import SteeringLoop, alignment

VP = load_virtual_plc()
KP = VP.steer_kp_1_s
RATE = 0.35            # the wheeled presets' steering rate [rad/s]
TAU_S = 0.05           # valve response
DT_S = 0.01            # the exchange period
DELAY_S = 0.02         # two exchanges between the simulation and the PLC


class Steering:
    """A steering cylinder: the rate follows the command (limited to ``RATE``) with ``TAU_S``,
    the angle integrates it; ``leak`` [rad/s] is a drift the valve must hold against; the PLC
    sees the angle ``DELAY_S`` late; ``blocked`` holds the wheel still (a kerb)."""

    def __init__(self, leak: float = 0.0) -> None:
        self.angle = 0.0
        self.rate = 0.0
        self.leak = leak
        self.blocked = False
        self._seen: deque[float] = deque([0.0] * round(DELAY_S / DT_S))

    def measured(self) -> float:
        self._seen.append(self.angle)
        return self._seen.popleft()

    def step(self, command: float) -> None:
        target = min(max(command, -RATE), RATE)
        self.rate += (target - self.rate) * (1.0 - math.exp(-DT_S / TAU_S))
        if not self.blocked:
            self.angle += (self.rate + self.leak) * DT_S


def run(loop: SteeringLoop, setpoint: float, seconds: float, plant: Steering | None = None
        ) -> tuple[Steering, np.ndarray]:
    plant = plant if plant is not None else Steering()
    rows = []
    for _ in range(round(seconds / DT_S)):
        u = float(loop.step(DT_S, [setpoint], [plant.measured()], True)[0])
        plant.step(u)
        rows.append((plant.angle, u, float(loop.saturated[0]), float(loop.integral[0])))
    return plant, np.array(rows)


def test_the_shipped_gain_brings_the_wheel_to_its_angle_within_half_a_degree() -> None:
    """A 30 deg step: the valve opens fully (rate-limited: 1.5 s at 20 deg/s), the wheel
    settles within 0.5 deg of its set-point without overshooting it by more than 0.5 deg."""
    loop = SteeringLoop(1, KP, RATE)
    target = math.radians(30.0)
    plant, rows = run(loop, target, 4.0)
    assert abs(plant.angle - target) <= math.radians(0.5)
    assert np.max(rows[:, 0]) <= target + math.radians(0.5)
    assert np.max(np.abs(rows[:, 1])) == pytest.approx(RATE)   # the valve did open fully
    assert rows[10, 2] == 1.0                                   # ...and said so
    # rate-limited: not there before the rate allows
    assert rows[round(1.0 / DT_S), 0] < target - math.radians(5.0)


def test_the_integral_holds_a_leaking_cylinder_that_a_p_loop_cannot() -> None:
    leak = -0.02   # rad/s
    p_only, _ = run(SteeringLoop(1, KP, RATE), 0.3, 10.0, Steering(leak))
    assert abs(p_only.angle - 0.3) == pytest.approx(abs(leak) / KP, rel=0.05)
    with_i, _ = run(SteeringLoop(1, KP, RATE, ki_1_s2=5.0), 0.3, 10.0, Steering(leak))
    assert abs(with_i.angle - 0.3) < 1e-3


def test_clamping_keeps_the_integrator_from_winding_up_against_a_blocked_wheel() -> None:
    """The wheel held by a kerb for 5 s: the integrator stops at the rate limit; released,
    the wheel reaches its angle without a long overshoot (nothing to unwind)."""
    loop = SteeringLoop(1, KP, RATE, ki_1_s2=5.0)
    plant = Steering()
    plant.blocked = True
    run(loop, 0.4, 5.0, plant)
    assert abs(float(loop.integral[0])) <= RATE + 1e-12
    plant.blocked = False
    plant, rows = run(loop, 0.4, 4.0, plant)
    assert abs(plant.angle - 0.4) <= math.radians(0.5)
    assert np.max(rows[:, 0]) <= 0.4 + math.radians(2.0)


def test_the_deadband_closes_the_valve_near_the_set_point() -> None:
    loop = SteeringLoop(2, KP, RATE, deadband_rad=0.002)
    rates = loop.step(DT_S, [0.101, 0.15], [0.1, 0.1], True)
    assert rates[0] == 0.0 and rates[1] == pytest.approx(KP * 0.05)


def test_a_stop_closes_the_valves_and_resets() -> None:
    loop = SteeringLoop(2, KP, RATE, ki_1_s2=5.0)
    loop.step(DT_S, [0.03, -0.03], [0.0, 0.0], True)
    assert np.all(loop.integral != 0.0)
    assert np.all(loop.step(DT_S, [0.03, -0.03], [0.0, 0.0], False) == 0.0)
    assert np.all(loop.integral == 0.0)


def test_a_broken_angle_sensor_closes_every_valve_until_a_stop() -> None:
    loop = SteeringLoop(2, KP, RATE, names=("fl", "fr"))
    assert np.all(loop.step(DT_S, [0.3, 0.3], [math.nan, 0.0], True) == 0.0)
    assert "measured steering angle of fl is nan" in loop.fault
    # finite again but still enabled: the fault holds, the valves stay closed
    assert np.all(loop.step(DT_S, [0.3, 0.3], [0.0, 0.0], True) == 0.0)
    assert loop.fault
    loop.step(DT_S, [0.3, 0.3], [0.0, 0.0], False)      # the stop acknowledges
    assert loop.fault == ""
    assert loop.step(DT_S, [0.3, 0.3], [0.0, 0.0], True)[0] > 0.0


@given(sp=st.lists(st.floats(-3.2, 3.2), min_size=3, max_size=3),
       meas=st.lists(st.floats(-3.2, 3.2), min_size=3, max_size=3))
def test_the_command_is_bounded_and_turns_toward_the_set_point(sp: list[float],
                                                               meas: list[float]) -> None:
    loop = SteeringLoop(3, KP, RATE)
    rates = loop.step(DT_S, sp, meas, True)
    assert np.all(np.abs(rates) <= RATE)
    assert np.all(rates * (np.asarray(sp) - np.asarray(meas)) >= 0.0)


def test_alignment_holds_the_drive_until_every_wheel_points_its_way() -> None:
    """One factor for all wheels, from the worst: 0 at 15 deg off or more, 1 within 2 deg."""
    assert alignment([0.0, 1.0], [0.0, 0.0]) == 0.0
    assert alignment([0.5, -0.5], [0.49, -0.51]) == 1.0
    half = 0.5 * (0.035 + 0.26)
    assert alignment([0.3, half], [0.3, 0.0]) == pytest.approx(0.5)
    assert alignment([0.3, -half], [0.3, 0.0]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="alignment window"):
        alignment([0.0], [0.0], aligned_rad=0.3, stop_rad=0.2)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n": 0}, r"n = 0 steering actuators must be an integer in 1..16"),
    ({"kp_1_s": 0.0}, r"kp_1_s = 0.0 1/s must be finite and > 0"),
    ({"max_rate_rad_s": math.inf}, r"max_rate_rad_s = inf rad/s must be finite"),
    ({"ki_1_s2": -1.0}, r"ki_1_s2 = -1.0 1/s\^2 must be finite and >= 0"),
    ({"deadband_rad": 0.5}, r"deadband_rad = 0.5 rad is more than 0.1 rad"),
    ({"names": ("fl",)}, r"names \['fl'\] must name the 2 steering actuators"),
])
def test_bad_settings_are_named(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"n": 2, "kp_1_s": KP, "max_rate_rad_s": RATE, **kwargs}
    with pytest.raises(ValueError, match=match):
        SteeringLoop(**args)  # type: ignore[arg-type]
