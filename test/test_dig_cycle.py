"""The dig cycle plan: feasible end to end, arcs for swings, infeasible plans named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from excavator_hil.demo import operator as operator_module
from excavator_hil.demo.dig_cycle import DigCyclePlan, Waypoint, default_dig_cycle
from excavator_hil.demo.operator import DemoOperator
from excavator_hil.errors import DemoError
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics

IK = InverseKinematics(default_geometry())
START = np.radians([0.0, 30.0, -60.0, 70.0])


def test_default_cycle_is_feasible_and_visits_every_waypoint() -> None:
    plan = default_dig_cycle(IK, START)
    t = 0.0
    for wp in plan.waypoints[1:]:
        t += wp.duration_s
        sample = plan.sample(t)
        assert np.allclose(sample.tip, wp.tip, atol=1e-9)
        assert sample.pitch == pytest.approx(wp.pitch)
        assert np.allclose(IK.fk.tip(sample.q), wp.tip, atol=1e-9)
    assert plan.duration_s == pytest.approx(t)
    names = [w.name for w in plan.waypoints]
    assert names == ["start", "approach", "dig", "drag", "curl", "lift", "swing", "dump",
                     "return"]


def test_the_cut_goes_below_ground_and_the_swing_is_an_arc() -> None:
    plan = default_dig_cycle(IK, START, depth_m=0.35)
    times = np.cumsum([0.0] + [w.duration_s for w in plan.waypoints[1:]])
    drag = [plan.sample(t) for t in np.linspace(times[2], times[3], 20)]
    assert all(s.tip[2] == pytest.approx(-0.35) for s in drag)
    swing = [plan.sample(t) for t in np.linspace(times[5], times[6], 20)]
    radii = [math.hypot(s.tip[0], s.tip[1]) for s in swing]
    assert max(radii) - min(radii) < 1e-9
    assert math.degrees(swing[-1].q[0]) == pytest.approx(90.0)


def test_unreachable_waypoint_is_named_before_anything_moves() -> None:
    legs = [Waypoint("start", (5.7, 0.0, 0.7), 0.44, 1.0),
            Waypoint("too far", (9.0, 0.0, 0.0), 0.0, 2.0)]
    with pytest.raises(DemoError, match=r"waypoint 'too far': .* out of reach"):
        DigCyclePlan(legs, IK)


def test_leg_that_leaves_the_workspace_between_feasible_waypoints_is_named() -> None:
    """Both ends reachable (FK of boom 62/58, arm -46/-44, bucket 42/140 deg), but the straight
    Cartesian leg between them leaves the workspace; the same leg in joint space is fine."""
    high = Waypoint("high", (5.473, 0.0, 5.003), 1.012, 1.0)
    curl_out = Waypoint("curl out", (5.533, 0.0, 6.316), 2.688, 2.0)
    IK.solve(high.tip, high.pitch)
    IK.solve(curl_out.tip, curl_out.pitch)
    with pytest.raises(DemoError, match=r"leg to 'curl out' at t = "):
        DigCyclePlan([high, curl_out], IK)
    DigCyclePlan([high, Waypoint("curl out", curl_out.tip, curl_out.pitch, 2.0, "joint")], IK)


def test_joint_legs_stream_the_fk_of_interpolated_angles() -> None:
    plan = default_dig_cycle(IK, START)
    times = np.cumsum([0.0] + [w.duration_s for w in plan.waypoints[1:]])
    mid = plan.sample(0.5 * (times[4] + times[5]))  # half way through the lift
    a, b = (IK.solve(w.tip, w.pitch).q for w in plan.waypoints[4:6])
    assert np.allclose(mid.q, 0.5 * (a + b), atol=1e-9)


def test_bad_duration_is_rejected() -> None:
    legs = [Waypoint("start", (5.7, 0.0, 0.7), 0.44, 1.0),
            Waypoint("next", (5.6, 0.0, 0.6), 0.44, 0.0)]
    with pytest.raises(ValueError, match=r"duration 0\.0 s must be > 0"):
        DigCyclePlan(legs, IK)


class _StarvedOperator:
    """The operator's dig loop (``DemoOperator._play_session``, the real method) on a host
    where the simulation runs on while the operator waits for the CPU: every look at the clock
    finds it ``jump_s`` later. No ROS, no processes: the loop's own logic."""

    _play_session = DemoOperator._play_session
    _mark_phase = DemoOperator._mark_phase

    def __init__(self, jump_s: float, session_lead_s: float = 0.0) -> None:
        self.machine = "test"
        self.session_lead_s = session_lead_s
        self.loads: list[tuple[float, float]] = []
        self.phase_marks: list[tuple[float, str]] = []
        self._phase = ""
        self._t = 0.0
        self._jump_s = jump_s

    @property
    def sim_time(self) -> float:
        self._t += self._jump_s
        return self._t

    def _still(self) -> bool:
        return True


@pytest.mark.parametrize("lead_s", [0.0, 1.0])
@pytest.mark.parametrize("jump_s", [0.05, 1.7, 3.1])
def test_a_starved_operator_still_passes_every_waypoint_and_names_every_phase(
        jump_s: float, lead_s: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase shorter than the simulated time between two of the operator's looks (a slow
    host; the CI fleet demo lost `dig` and `return` this way) still gets its input published
    at its boundary, in order, and its mark at the plan's time. With a lead (the joystick
    session's start placed ahead of the clock seen) the inputs before the start go out, and
    no phase is marked before it."""
    monkeypatch.setattr(operator_module.time, "sleep", lambda _s: None)
    plan = default_dig_cycle(IK, START, time_scale=0.3)
    published: list[float] = []

    def command(t: float) -> str:
        published.append(t)
        return plan.sample(min(t, plan.duration_s)).phase

    op = _StarvedOperator(jump_s, lead_s)
    op._play_session(plan.duration_s, command, lambda: None, settle_min_s=0.0,
                     settle_max_s=1.0, phase_starts=plan.phase_starts_s)
    assert all(t >= op.session_start_s for t, _ in op.phase_marks), op.phase_marks
    names = [w.name for w in plan.waypoints[1:]]
    assert [name for _, name in op.phase_marks] == names
    assert published == sorted(published)
    for start in plan.phase_starts_s[1:]:
        assert start in published, f"the boundary at {start:.3f} s was stepped over"
    marks = dict((name, t) for t, name in op.phase_marks)
    assert [marks[n] for n in names] == sorted(marks[n] for n in names)


def test_soil_moved_is_judged_on_simulated_times_not_on_the_phase_a_load_arrived_in() -> None:
    """The dump's result from the loads' and the phases' simulated times: a starved operator
    that takes the loads of lift, swing and dump in one burst after the dump (the CI demo
    reported 0 m^3 moved that way, with a peak load of 0.275) still reports what was moved."""
    from types import SimpleNamespace

    marks = [(0.0, "approach"), (1.0, "dig"), (2.0, "drag"), (3.0, "curl"), (4.0, "lift"),
             (5.0, "swing"), (6.0, "dump"), (7.0, "return")]
    loads = [(3.5, 0.30), (4.5, 0.28), (5.5, 0.27), (6.2, 0.10), (6.6, 0.02), (7.5, 0.02)]
    op = SimpleNamespace(phase_marks=marks, loads=loads)
    assert DemoOperator.soil_moved_m3(op) == pytest.approx(0.25)  # type: ignore[arg-type]
    # no dump, or no load before it: nothing moved (never a negative or made-up figure)
    assert DemoOperator.soil_moved_m3(SimpleNamespace(phase_marks=marks[:6], loads=loads)) == 0.0
    assert DemoOperator.soil_moved_m3(SimpleNamespace(phase_marks=marks,
                                                      loads=loads[3:])) == 0.0
