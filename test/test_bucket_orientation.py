"""Bucket orientation quaternions <-> (swing, pitch)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.bucket_orientation import bucket_pitch_from_quaternion, bucket_quaternion

angles = st.floats(-math.pi + 1e-6, math.pi - 1e-6)


@settings(max_examples=300, deadline=None)
@given(angles, angles)
def test_pitch_round_trip(swing: float, pitch: float) -> None:
    back, misalignment = bucket_pitch_from_quaternion(bucket_quaternion(swing, pitch), swing)
    assert abs(math.remainder(back - pitch, 2 * math.pi)) < 1e-9
    assert misalignment < 1e-9


def test_positive_pitch_lifts_the_bucket_x_axis() -> None:
    """Pitch about -y: +90 deg turns the frame's x axis straight up (REP-103, z up)."""
    x, y, z, w = bucket_quaternion(0.0, math.pi / 2)
    x_axis_z = 2 * (x * z - w * y)
    assert x_axis_z == pytest.approx(1.0)


def test_yaw_out_of_the_boom_plane_is_measured() -> None:
    _, misalignment = bucket_pitch_from_quaternion(bucket_quaternion(0.3, 0.5), 0.0)
    assert misalignment == pytest.approx(0.3)


@pytest.mark.parametrize("q", [(0, 0, 0, 0), (math.nan, 0, 0, 1)])
def test_invalid_quaternion(q: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="not a valid quaternion"):
        bucket_pitch_from_quaternion(q, 0.0)
