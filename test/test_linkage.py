"""The linkage against the seed's tables, the upstream default pose, and closed-form round trips.

The seed's tables are the seed linkage's, the preset ``seed_midi`` (the default machine's linkage
is a Cat 309 CR's since issue 30): the linkage code is checked against them there, and the round
trips run on the default machine's linkage too (the end of this file)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_common.paths import config_file
from excavator_kinematics.errors import (
    ConfigError,
    InvalidInputError,
    LinkageClosureError,
    StrokeLimitError,
)
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage, absolute_to_joint, joint_to_absolute

GEOMETRY = ExcavatorGeometry.from_yaml(config_file("machines") / "seed_midi.yaml")
LINKAGE = Linkage(GEOMETRY)
LIMITS = LINKAGE.joint_limits


# The seed's tables of derived constants (excavator_model.md), as printed there.
SEED_CONSTANTS = {
    "CH": 3.845, "CE": 1.678, "CF": 2.362, "angle_HCE": 0.421, "angle_HCF": 0.411,
    "HM": 1.996, "HG": 0.570, "HI": 0.448, "HK": 1.523,
    "angle_GHM": 2.881, "angle_GHI": 1.876, "angle_GHK": 2.838,
    "JK": 0.454, "JL": 0.449, "LM": 0.379,
}


@pytest.mark.parametrize(("name", "value"), SEED_CONSTANTS.items())
def test_seed_table_reproduced_from_points(name: str, value: float) -> None:
    assert getattr(GEOMETRY, name) == pytest.approx(value, abs=1e-3)


def test_rod_lengths_match_the_seed() -> None:
    rods = {n: c.rod_length_m for n, c in GEOMETRY.cylinders.items()}
    assert rods == {"boom_cylinder": 1.336, "arm_cylinder": 1.147, "bucket_cylinder": 0.866}


def test_upstream_default_pose_extensions() -> None:
    """Upstream default pose: boom 30, arm -30, bucket 40 deg absolute -> 0.340/0.434/0.593 m."""
    joints = absolute_to_joint(*np.radians([30.0, -30.0, 40.0]))
    ext = LINKAGE.extensions(*joints)
    assert np.allclose(ext, [0.340, 0.434, 0.593], atol=1e-3)


def test_joint_limits_follow_the_strokes() -> None:
    """Arm -131.8..-38.8 deg from the 0.28..1.10 m stroke; bucket 40 deg up to the toggle."""
    arm = np.degrees(LIMITS["arm"])
    assert arm == pytest.approx([-131.8, -38.8], abs=0.1)
    bucket = np.degrees(LIMITS["bucket"])
    assert bucket[0] == pytest.approx(40.0, abs=0.2)
    toggle = math.degrees(LINKAGE.bucket_toggle_angle)
    assert 144.0 < toggle < 147.0
    assert bucket[1] == pytest.approx(toggle - math.degrees(LINKAGE.bucket_toggle_margin_rad))
    assert LINKAGE.bucket_toggle_extension == pytest.approx(0.21, abs=0.01)


def test_bucket_toggle_is_a_minimum_of_the_cylinder() -> None:
    """Past the toggle the same extension returns for a second angle: that is why it limits."""
    q_t = LINKAGE.bucket_toggle_angle
    near = LINKAGE.extensions_from_joint("bucket", q_t - 0.05)
    at = LINKAGE.extensions_from_joint("bucket", q_t)
    far = LINKAGE.extensions_from_joint("bucket", q_t + 0.05)
    assert at < near and at < far


joint_angles = st.tuples(
    st.floats(*LIMITS["boom"]), st.floats(*LIMITS["arm"]), st.floats(*LIMITS["bucket"])
)


@settings(max_examples=400, deadline=None)
@given(joint_angles)
def test_inverse_of_forward_is_identity(q: tuple[float, float, float]) -> None:
    ext = LINKAGE.extensions(*q)
    back = LINKAGE.joints(*ext)
    assert np.allclose(back, q, atol=1e-9, rtol=0)


extensions = st.tuples(*(st.floats(*LINKAGE.extension_limits[n])
                         for n in ("boom_cylinder", "arm_cylinder", "bucket_cylinder")))


@settings(max_examples=400, deadline=None)
@given(extensions)
def test_forward_of_inverse_is_identity(ext: tuple[float, float, float]) -> None:
    q = LINKAGE.joints(*ext)
    again = LINKAGE.extensions(*q)
    assert np.allclose(again, ext, atol=1e-9, rtol=0)


@settings(max_examples=200, deadline=None)
@given(joint_angles, st.floats(*LIMITS["boom"]), st.floats(*LIMITS["arm"]))
def test_each_cylinder_depends_only_on_its_own_joint(
    q: tuple[float, float, float], other_boom: float, other_arm: float
) -> None:
    """Measured from the points: the bucket cylinder I-J ignores boom and arm (the seed's arcsin
    made it depend on the arm's absolute angle), the arm cylinder F-G ignores the boom."""

    def lengths(boom: float, arm: float, bucket: float) -> np.ndarray:
        p = LINKAGE.points(boom, arm, bucket)
        return np.array([np.linalg.norm(p["E"] - p["D"]), np.linalg.norm(p["G"] - p["F"]),
                         np.linalg.norm(p["J"] - p["I"])])

    base = lengths(*q)
    moved = lengths(other_boom, other_arm, q[2])
    assert moved[2] == pytest.approx(base[2], abs=1e-12)
    assert lengths(other_boom, q[1], q[2])[1] == pytest.approx(base[1], abs=1e-12)
    rods = [GEOMETRY.cylinders[n].rod_length_m
            for n in ("boom_cylinder", "arm_cylinder", "bucket_cylinder")]
    assert np.allclose(base - rods, LINKAGE.extensions(*q), atol=1e-12)


def test_seed_arcsin_picks_the_wrong_quadrant_with_the_arm_steeply_down() -> None:
    """The seed's alpha = arcsin((z_L - z_K) / KL) in the world frame differs from the true
    direction of K->L when L is behind K; our four-bar works in the arm frame with atan2."""
    boom, arm, bucket = math.radians(5), math.radians(-130), math.radians(60)
    p = LINKAGE.points(boom, arm, bucket)
    kl = p["L"] - p["K"]
    true_alpha = math.atan2(kl[1], kl[0])
    seed_alpha = math.asin(kl[1] / np.linalg.norm(kl))
    assert kl[0] < 0  # L behind K: the arm points steeply down
    assert abs(true_alpha - seed_alpha) > 0.4
    # The seed's J = K + JK (cos, sin)(angle_JKL + alpha) then misses the side link's length.
    d = float(np.linalg.norm(kl))
    jkl = math.acos((GEOMETRY.JK**2 + d**2 - GEOMETRY.JL**2) / (2 * GEOMETRY.JK * d))
    seed_j = p["K"] + GEOMETRY.JK * np.array([math.cos(jkl + seed_alpha),
                                              math.sin(jkl + seed_alpha)])
    assert abs(np.linalg.norm(seed_j - p["L"]) - GEOMETRY.JL) > 0.05
    # Our linkage: the closed loop really closes (side link and H link keep their lengths).
    assert np.linalg.norm(p["J"] - p["L"]) == pytest.approx(GEOMETRY.JL, abs=1e-12)
    assert np.linalg.norm(p["J"] - p["K"]) == pytest.approx(GEOMETRY.JK, abs=1e-12)


def test_vectorized_matches_scalar() -> None:
    rng = np.random.default_rng(1)
    q = np.column_stack([rng.uniform(*LIMITS[k], 200) for k in ("boom", "arm", "bucket")])
    batch = np.stack(LINKAGE.extensions(*q.T), axis=1)
    scalar = np.array([LINKAGE.extensions(*row) for row in q])
    assert np.array_equal(batch, scalar)


def test_absolute_and_relative_angles_round_trip() -> None:
    rel = (0.3, -1.2, 1.5)
    assert np.allclose(absolute_to_joint(*joint_to_absolute(*rel)), rel)


def test_points_keep_every_rigid_distance() -> None:
    p = LINKAGE.points(0.4, -1.0, 1.2)
    assert np.linalg.norm(p["H"] - p["C"]) == pytest.approx(GEOMETRY.CH)
    assert np.linalg.norm(p["M"] - p["H"]) == pytest.approx(GEOMETRY.HM)
    assert np.linalg.norm(p["L"] - p["M"]) == pytest.approx(GEOMETRY.LM)
    assert np.linalg.norm(p["G"] - p["H"]) == pytest.approx(GEOMETRY.HG)


# --- bad input ---------------------------------------------------------------------------
def test_extension_outside_stroke_names_cylinder_value_and_range() -> None:
    with pytest.raises(StrokeLimitError, match=r"arm_cylinder extension 1\.210 m outside "
                                               r"0\.280\.\.1\.100 m"):
        LINKAGE.joints(0.3, 1.21, 0.5)


def test_bucket_extension_past_the_toggle_says_so() -> None:
    with pytest.raises(StrokeLimitError, match="toggle"):
        LINKAGE.joints(0.3, 0.5, 0.18)


def test_joint_outside_range_names_joint_and_range() -> None:
    with pytest.raises(StrokeLimitError, match=r"arm joint -150\.0 deg outside -131\.8\.\.-38\.7"):
        LINKAGE.extensions(0.3, math.radians(-150), 1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_input_is_rejected(bad: float) -> None:
    with pytest.raises(InvalidInputError, match="finite"):
        LINKAGE.extensions(bad, -1.0, 1.0)
    with pytest.raises(InvalidInputError, match="finite"):
        LINKAGE.joints(0.3, bad, 0.5)


def test_length_that_cannot_close_a_triangle_raises_closure_error() -> None:
    with pytest.raises(LinkageClosureError, match="boom_cylinder length"):
        LINKAGE.joint_from_extension("boom", 5.0)


# --- config ------------------------------------------------------------------------------
def _config() -> dict:
    return yaml.safe_load(config_file("excavator.yaml").read_text())


def test_missing_key_is_named(tmp_path: Path) -> None:
    data = _config()
    del data["points"]["arm"]["K"]
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="missing key 'K'"):
        ExcavatorGeometry.from_yaml(path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["cylinders"]["boom_cylinder"].update(stroke_m=[0.5, 0.1]), "stroke_m"),
    (lambda d: d["links"].update(side_link_m=-1), "links.side_link_m = -1.0 must be > 0"),
    (lambda d: d["points"]["boom"].update(H=[3.8]), "points.boom.H"),
    (lambda d: d["points"]["boom"].update(H=["x", 0]), "is not a number"),
])
def test_malformed_values_are_named(tmp_path: Path, edit, message: str) -> None:
    data = _config()
    edit(data)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=message):
        ExcavatorGeometry.from_yaml(path)


def test_unreadable_or_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        ExcavatorGeometry.from_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("points: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        ExcavatorGeometry.from_yaml(bad)


DEFAULT_LINKAGE = Linkage(default_geometry())
DEFAULT_LIMITS = DEFAULT_LINKAGE.joint_limits


@settings(max_examples=200, deadline=None)
@given(st.tuples(*(st.floats(*DEFAULT_LIMITS[j]) for j in ("boom", "arm", "bucket"))))
def test_default_machine_inverse_of_forward_is_identity(q: tuple[float, float, float]) -> None:
    ext = DEFAULT_LINKAGE.extensions(*q)
    back = DEFAULT_LINKAGE.joints(*ext)
    assert np.allclose(back, q, atol=1e-9)


def test_default_machine_limits_are_its_strokes() -> None:
    """Each joint's range ends where its cylinder's stroke ends (the bucket's curl end at the
    stroke's start, short of the four-bar's toggle)."""
    g = default_geometry()
    for name, (lo, hi) in DEFAULT_LINKAGE.extension_limits.items():
        cyl = g.cylinders[name]
        assert lo == pytest.approx(cyl.stroke_min_m, abs=1e-9)
        assert hi == pytest.approx(cyl.stroke_max_m, abs=1e-9)
