"""The dig cycle plan: feasible end to end, arcs for swings, infeasible plans named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from excavator_hil.demo.dig_cycle import DigCyclePlan, Waypoint, default_dig_cycle
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
    """Both ends reachable (FK of boom 51/48, arm -42/-40, bucket 42/140 deg), but the straight
    Cartesian leg between them leaves the workspace; the same leg in joint space is fine."""
    high = Waypoint("high", (5.383, 0.0, 3.737), 0.890, 1.0)
    curl_out = Waypoint("curl out", (5.508, 0.0, 5.040), 2.583, 2.0)
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
