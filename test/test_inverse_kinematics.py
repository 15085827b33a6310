"""Closed-form IK: round trips with the FK, scalar vs batch, every kind of bad input named."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.errors import InvalidInputError, StrokeLimitError, UnreachableError
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import IKStatus, InverseKinematics

IK = InverseKinematics(default_geometry())
FK = IK.fk
LIMITS = IK.linkage.joint_limits

configurations = st.tuples(
    st.floats(-math.pi + 1e-6, math.pi - 1e-6),
    st.floats(*LIMITS["boom"]), st.floats(*LIMITS["arm"]), st.floats(*LIMITS["bucket"]),
)


def _radial(q: np.ndarray) -> float:
    """Tip distance from the swing axis: IK's q0 = atan2(y, x) assumes it is positive."""
    tip = FK.tip(q)
    return math.hypot(tip[0], tip[1])


@settings(max_examples=500, deadline=None)
@given(configurations)
def test_ik_of_fk_recovers_the_joints(q_tuple: tuple[float, ...]) -> None:
    q = np.array(q_tuple)
    tip = FK.tip(q)
    side = IK.linkage.points(*q[1:])["tip"]
    if side[0] + default_geometry().B[0] <= 1e-3:  # tip behind/on the swing axis: see module doc
        return
    sol = IK.solve(tip, float(FK.bucket_pitch(q)))
    assert np.allclose(sol.q, q, atol=1e-9, rtol=0)
    assert np.allclose(sol.extensions, IK.linkage.extensions(*q[1:]), atol=1e-9, rtol=0)
    assert np.allclose(FK.tip(sol.q), tip, atol=1e-9, rtol=0)


@settings(max_examples=300, deadline=None)
@given(st.floats(3.0, 8.0), st.floats(-math.pi, math.pi), st.floats(-2.5, 3.0),
       st.floats(-1.5, 2.5))
def test_every_solution_reaches_its_target(r: float, yaw: float, z: float, pitch: float) -> None:
    """Targets from the workspace box: a solution reproduces the target and pitch to 1e-9;
    a failure is one of the named kinds."""
    target = np.array([r * math.cos(yaw), r * math.sin(yaw), z])
    try:
        sol = IK.solve(target, pitch)
    except (UnreachableError, StrokeLimitError):
        return
    assert np.allclose(FK.tip(sol.q), target, atol=1e-9, rtol=0)
    wrapped = math.remainder(float(FK.bucket_pitch(sol.q)) - pitch, 2 * math.pi)
    assert abs(wrapped) < 1e-9
    IK.linkage.check_extensions(*sol.extensions)


def test_batch_matches_scalar_and_keeps_good_targets_next_to_bad_ones() -> None:
    rng = np.random.default_rng(7)
    n = 300
    q = np.column_stack([rng.uniform(-3.0, 3.0, n)]
                        + [rng.uniform(*LIMITS[k], n) for k in ("boom", "arm", "bucket")])
    tips = FK.tip(q)
    pitch = FK.bucket_pitch(q)
    tips[5] = [np.nan, 0.0, 0.0]
    tips[6] = [20.0, 0.0, 0.0]
    batch = IK.solve_batch(tips, pitch)
    assert batch.status[5] == IKStatus.NOT_FINITE
    assert batch.status[6] == IKStatus.OUT_OF_REACH
    assert np.isnan(batch.q[5]).all() and np.isnan(batch.extensions[6]).all()
    good = np.flatnonzero(batch.ok)
    assert len(good) >= n - 2 - 10  # tips behind the swing axis may flip q0
    for i in good[:50]:
        single = IK.solve(tips[i], float(pitch[i]))
        assert np.array_equal(single.q, batch.q[i])
        assert np.array_equal(single.extensions, batch.extensions[i])
    assert "finite" in (batch.message(5) or "")
    assert batch.message(int(good[0])) is None


def test_reference_target_solution_values() -> None:
    """A worked example pinned in docs/kinematics.md."""
    sol = IK.solve((6.0, 0.0, 0.5), 0.3)
    d = sol.as_dict()
    assert d["swing"] == 0.0
    assert math.degrees(d["boom"]) == pytest.approx(26.06, abs=0.01)
    assert math.degrees(d["arm"]) == pytest.approx(-71.20, abs=0.01)
    assert d["arm_cylinder"] == pytest.approx(0.3369, abs=1e-4)


def test_unreachable_target_names_distance_and_reach() -> None:
    with pytest.raises(UnreachableError,
                       match=r"8\.677 m from the boom foot C.*allows 2\.973\.\.6\.074 m"):
        IK.solve((9.0, 0.0, 0.0), 0.0)


def test_too_close_target_is_unreachable() -> None:
    with pytest.raises(UnreachableError, match="inside the shortest reach"):
        IK.solve((1.5, 0.0, 1.0), 0.0)


def test_joint_limit_names_joint_cylinder_and_stroke() -> None:
    # FK of boom 30, arm -60, bucket 160 deg: the bucket is past the four-bar's toggle.
    tip = FK.tip(np.radians([0.0, 30.0, -60.0, 160.0]))
    with pytest.raises(StrokeLimitError, match=r"bucket joint at 160\.0 deg, outside 5\.3\.\."
                                               r"144\.0 deg .*bucket_cylinder stroke .*toggle"):
        IK.solve(tip, math.radians(130.0))


def test_boom_limit_is_named() -> None:
    tip = FK.tip(np.radians([0.0, 70.0, -60.0, 80.0]))
    with pytest.raises(StrokeLimitError, match=r"boom joint at 70\.0 deg, outside -39\.9\.\.65\.2"):
        IK.solve(tip, math.radians(90.0))


@pytest.mark.parametrize("bad", [(math.nan, 0, 0), (0, math.inf, 0), (5.0, 0.0, -math.inf)])
def test_non_finite_targets(bad: tuple[float, float, float]) -> None:
    with pytest.raises(InvalidInputError, match="must be finite"):
        IK.solve(bad, 0.0)


def test_non_finite_pitch() -> None:
    with pytest.raises(InvalidInputError, match="must be finite"):
        IK.solve((6.0, 0.0, 0.5), math.nan)


def test_batch_shape_is_checked() -> None:
    with pytest.raises(InvalidInputError, match=r"shape \(N, 3\)"):
        IK.solve_batch(np.zeros((4, 2)), 0.0)


def test_swing_limits_from_config_are_enforced() -> None:
    from dataclasses import replace

    narrow = InverseKinematics(replace(default_geometry(), swing_limits_rad=(-1.0, 1.0)))
    with pytest.raises(StrokeLimitError, match=r"swing 90\.0 deg outside .*-57\.3\.\.57\.3"):
        narrow.solve((0.0, 6.0, 0.5), 0.3)
