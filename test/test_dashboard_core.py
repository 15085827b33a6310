"""The dashboard's pure core, without ROS, Redis or a browser."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from excavator_hil.dashboard.core import (
    REASONS,
    BridgeWatch,
    DriveLimits,
    RollingSeries,
    SideView,
    TargetChecker,
    TerrainGrid,
    flat_profile,
    joint_readout,
    read_number,
    readout_table,
    zero_command,
)
from excavator_kinematics.bucket_orientation import bucket_pitch_from_quaternion
from excavator_kinematics.errors import KinematicsError
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS
from plc_bridge import redis_keys as keys

GEOMETRY = default_geometry()
CHECKER = TargetChecker(GEOMETRY)
coord = st.floats(-8.0, 8.0, allow_nan=False)
pitch = st.floats(-math.pi, math.pi, allow_nan=False)


# --- targets ---------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(coord, coord, coord, pitch)
def test_verdict_is_the_iks_own(x, y, z, p):
    """Reachable exactly when ``solve`` succeeds; an unreachable verdict carries solve's message
    (the value and the limit) and names the limit."""
    r = CHECKER.check(x, y, z, p)
    try:
        sol = CHECKER.ik.solve((x, y, z), p)
    except KinematicsError as exc:
        assert not r.ok
        assert r.message == str(exc)
        assert r.limit and r.status != "OK"
    else:
        assert r.ok and r.status == "OK" and r.limit == ""
        np.testing.assert_allclose(r.q, sol.q)
        np.testing.assert_allclose(r.extensions, sol.extensions)


def test_named_limits():
    assert CHECKER.check(9.0, 0.0, 0.0, 0.0).status == "OUT_OF_REACH"
    far = CHECKER.check(9.0, 0.0, 0.0, 0.0)
    assert "reach" in far.limit and "out of reach" in far.message
    nan = CHECKER.check(float("nan"), 0.0, 0.0, 0.0)
    assert nan.status == "NOT_FINITE" and not nan.ok


@settings(max_examples=200, deadline=None)
@given(coord, coord, coord, pitch)
def test_target_pose_carries_the_pitch_the_ik_node_reads(x, y, z, p):
    (px, py, pz), quat = CHECKER.pose(x, y, z, p)
    assert (px, py, pz) == (x, y, z)
    swing = math.atan2(y, x) if math.hypot(x, y) > 1e-9 else 0.0
    got, misalignment = bucket_pitch_from_quaternion(quat, swing)
    assert misalignment < 1e-9
    assert abs(math.remainder(got - p, 2 * math.pi)) < 1e-9


def test_slider_ranges_cover_the_workspace():
    rng = CHECKER.ranges()
    for name, target, p in (("approach", (6.05, 0.0, 1.19), 0.52), ("dig", (4.29, 0, -1.34), -0.26),
                            ("dump", (0.0, 5.68, 2.41), 0.61)):
        assert CHECKER.check(*target, p).ok, name
        assert rng.x[0] <= target[0] <= rng.x[1] and rng.z[0] <= target[2] <= rng.z[1]


# --- joint states and the side view ---------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.floats(2.0, 6.5), st.floats(-math.pi, math.pi), st.floats(-1.5, 2.5), pitch)
def test_side_view_and_readout_agree_with_fk(rho, swing, z, p):
    """The side view's tip is the FK tip in the boom plane; the readout's tip too."""
    x, y = rho * math.cos(swing), rho * math.sin(swing)
    r = CHECKER.check(x, y, z, p)
    if not r.ok:
        return
    names = [*ACTIVE_JOINTS, "boom_cylinder", "arm_cylinder", "bucket_cylinder", "base_x",
             "base_y", "base_yaw", "track_left"]
    readout = joint_readout(CHECKER, names, [*r.q, *r.extensions, 1.0, 2.0, 0.3, 0.0], 12.5)
    assert readout is not None
    np.testing.assert_allclose(readout.tip, (x, y, z), atol=1e-9)
    assert abs(math.remainder(readout.pitch - p, 2 * math.pi)) < 1e-9
    assert readout.base == (1.0, 2.0, 0.3)
    side = SideView(GEOMETRY)
    tip_r, tip_z = side.tip(r.q)
    assert tip_r == pytest.approx(rho, abs=1e-3) and tip_z == pytest.approx(z, abs=1e-3)
    rows = readout_table(readout)
    assert [row["name"] for row in rows][:4] == list(ACTIVE_JOINTS)
    assert float(rows[1]["value"]) == pytest.approx(math.degrees(r.q[1]), abs=0.006)


def test_side_view_wire_format_is_the_lines_flattened_and_stable():
    """The page gets ``{part: [r0, z0, r1, z1, ...]}`` rounded to mm: the same points as
    ``lines``, and a pose that moves less than the rounding gives the same frame (an idle
    machine sends nothing)."""
    side = SideView(GEOMETRY)
    q = CHECKER.check(5.0, 0.0, 0.5, 0.3).q
    assert q is not None
    lines, flat = side.lines(q), side.flat_lines(q)
    assert flat.keys() == lines.keys()
    for part, line in lines.items():
        np.testing.assert_allclose(np.reshape(flat[part], (-1, 2)), line, atol=5e-4 + 1e-12)
    assert flat["bucket"][6:8] == pytest.approx(list(side.tip(q)), abs=5e-4)
    # a change far below a millimetre at the tip: the frame stays the same object of values
    nudged = side.flat_lines(np.asarray(q) + 1e-8)
    assert nudged == flat


def test_flat_profile_keeps_finite_heights_in_cm():
    r = np.array([0.0, 0.5, 1.0, 1.5])
    z = np.array([0.1234, np.nan, -0.456, np.inf])
    assert flat_profile(r, z) == [0.0, 0.12, 1.0, -0.46]
    assert flat_profile(r, np.full(4, np.nan)) == []


def test_readout_needs_every_active_joint():
    assert joint_readout(CHECKER, ["swing", "boom"], [0.0, 0.1]) is None


# --- terrain ---------------------------------------------------------------------------------

def test_terrain_from_patches_is_exact_on_a_plane():
    """The grid is written by soil/terrain_patch messages (whole grid, then patches) and then
    interpolates a plane exactly."""
    def plane(x, y):
        return 0.1 * x - 0.05 * y + 0.2
    grid = TerrainGrid.from_cells(-2.0, -4.0, 0.25, 40, 32)
    xx, yy = np.meshgrid(grid.xs, grid.ys, indexing="ij")
    grid.apply_patch(40, 32, [0.0, 0.0, *np.zeros(40 * 32)])
    z = plane(xx, yy)
    for i0 in range(0, 40, 10):   # four patches of 10 x 32 cells
        grid.apply_patch(10, 32, [i0, 0, *z[i0:i0 + 10].ravel()])
    assert grid.xs[0] == pytest.approx(-1.875) and grid.ys[-1] == pytest.approx(3.875)
    pts = np.random.default_rng(1).uniform((grid.xs[0], grid.ys[0]), (grid.xs[-1], grid.ys[-1]),
                                           size=(500, 2))
    np.testing.assert_allclose(grid.height_at(pts[:, 0], pts[:, 1]),
                               plane(pts[:, 0], pts[:, 1]), atol=1e-9)
    assert np.isnan(grid.height_at(9.0, 0.0)).all()
    # the profile along the boom plane of a base at (1, 0.5) turned 90 deg
    r = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(grid.profile((1.0, 0.5), math.pi / 2, r),
                               plane(1.0, 0.5 + r), atol=1e-9)
    coarse = grid.coarse(10)
    assert len(coarse.xs) <= 10 and len(coarse.ys) <= 10
    # the 3D view's cloud: at most 10 x 10 finite nodes in world, lighter the higher
    points, colours = grid.cloud(10)
    assert 0 < len(points) <= 100 and len(colours) == len(points)
    p = np.array(points)
    np.testing.assert_allclose(p[:, 2], plane(p[:, 0], p[:, 1]), atol=0.006)  # cm rounding
    hi, lo = int(np.argmax(p[:, 2])), int(np.argmin(p[:, 2]))
    assert sum(colours[hi]) > sum(colours[lo])
    grid.z[:] = np.nan
    assert grid.cloud(10) == ([], [])


def test_patch_outside_the_grid_is_named():
    grid = TerrainGrid.from_cells(0.0, 0.0, 0.1, 10, 10)
    with pytest.raises(ValueError, match=r"outside the configured 10 x 10 grid.*--soil-config"):
        grid.apply_patch(4, 4, [8, 0, *np.zeros(16)])
    with pytest.raises(ValueError, match="needs 2 \\+ 16 values, got 5"):
        grid.apply_patch(4, 4, [0, 0, 1, 2, 3])
    assert np.isnan(grid.z).all()   # nothing written


# --- chart buffers ---------------------------------------------------------------------------

def test_rolling_series_keeps_a_minute_at_the_rate():
    s = RollingSeries(window_s=60.0, max_rate_hz=10.0)
    kept = sum(s.add(t, math.sin(t)) for t in np.arange(0.0, 120.0, 0.01))
    assert kept == pytest.approx(1200, abs=2)          # 10 Hz over 120 s
    pts = s.points(120.0)
    assert len(pts) == pytest.approx(600, abs=2)       # only the last minute
    assert pts[0][0] >= -60.0 and pts[-1][0] <= 0.0
    assert not s.add(120.5, float("nan"))
    s.add(5.0, 1.0)                                     # a restarted source: start again
    assert len(s) == 1 and s.last() == 1.0


def test_rolling_series_decoding_gate_and_chart_thinning():
    """``accepts`` says beforehand what ``add`` keeps (so a message is decoded only then);
    ``points(every_s=0.5)`` gives at most 2 points a second over the minute (120)."""
    s = RollingSeries(window_s=60.0, max_rate_hz=10.0)
    for t in np.arange(0.0, 90.0, 0.013):
        expect = s.accepts(t)
        assert s.add(t, 1.0 + t) == expect
    assert not s.accepts(float("nan"))
    assert s.accepts(1.0)            # time went backwards: kept (a restarted source)
    pts = s.points(90.0, every_s=0.5, decimals=2)
    assert 118 <= len(pts) <= 121
    t = np.array([p[0] for p in pts])
    assert t[0] >= -60.0 and t[-1] <= 0.0 and np.all(np.diff(t) >= 0.45)
    assert all(p[1] == round(p[1], 2) for p in pts)


# --- the bridge ------------------------------------------------------------------------------

def _snapshot(watch: BridgeWatch, **values: str) -> list[str | None]:
    return [values.get(k) for k in watch.keys]


def _running(cycles: int, alive: int) -> dict[str, str]:
    return {keys.BRIDGE_STATUS: "running", keys.STATE_VALID: "true",
            keys.counter_key("cycles"): str(cycles), keys.STATE_PLC_ALIVE: str(alive),
            keys.state_key("ready"): "true", keys.state_key("fault"): "false",
            keys.MON_LONGITUDINAL: "0.25", keys.wheel_speed_key("left"): "nan"}


def test_bridge_watch_running_rates_and_values():
    w = BridgeWatch(("left", "right"), ())
    v = w.update(_snapshot(w, **_running(100, 7)), 10.0, 0.5)
    v = w.update(_snapshot(w, **_running(200, 8)), 11.0, 0.5)
    assert v.status == "running" and not v.bridge_down and not v.plc_down and v.banner == ""
    assert v.cycle_rate_hz == pytest.approx(100.0)
    assert v.monitor[keys.MON_LONGITUDINAL] == 0.25
    assert math.isnan(v.monitor[keys.wheel_speed_key("left")])
    assert v.monitor[keys.wheel_speed_key("right")] is None
    assert v.state_bits["ready"] is True and v.state_bits["fault"] is False
    assert v.control[keys.HEARTBEAT] == "(missing)"


def test_bridge_watch_frozen_bridge_is_down():
    """A killed bridge leaves its keys behind: the frozen cycle counter gives it away."""
    w = BridgeWatch(("left", "right"), (), stale_s=2.0)
    for t in range(5):
        v = w.update(_snapshot(w, **_running(500, 9)), 100.0 + t, None)
    assert v.bridge_down and "cycle counter has not advanced" in v.banner


def test_bridge_watch_plc_down_and_reasons():
    w = BridgeWatch(("left", "right"), ())
    snap = {**_running(1, 1), keys.BRIDGE_STATUS: "stopped:plc_link_lost",
            keys.STATE_VALID: "false", keys.BRIDGE_DETAIL: "PLC 127.0.0.1:1102 refused"}
    v = w.update(_snapshot(w, **snap), 1.0)
    assert v.status == "stopped" and v.reason == "plc_link_lost" and v.plc_down
    assert v.banner.startswith("PLC down") and v.detail == "PLC 127.0.0.1:1102 refused"
    expired = w.update(_snapshot(w), 2.0)  # its status was seen, now gone: the TTL ran out
    assert expired.bridge_down and expired.banner.startswith("PLC bridge down")
    assert "expired" in expired.banner
    never = BridgeWatch(("left", "right"), ()).update(_snapshot(w), 2.0)
    assert never.bridge_down and "not running" in never.banner
    gone = w.update(None, 3.0)
    assert gone.status == "redis down" and gone.bridge_down and "Redis unreachable" in gone.banner


# --- driving ---------------------------------------------------------------------------------

def test_drive_limits_by_model_and_envelope():
    skid = DriveLimits.for_model("skid_steer", 3.0, 1.5, 1.5)
    assert skid.max_lateral == 0.0
    assert DriveLimits.for_model("4wd4ws", 3.0, 1.5, 1.5).max_lateral == 1.5
    assert skid.redis_values(0.3, 0.0, -0.25) == {
        keys.LONGITUDINAL: "0.3", keys.LATERAL: "0", keys.ANGULAR: "-0.25"}
    with pytest.raises(ValueError, match=r"longitudinal = 3\.5 outside \+-3"):
        skid.redis_values(3.5, 0.0, 0.0)
    with pytest.raises(ValueError, match="lateral"):
        skid.redis_values(0.0, 0.1, 0.0)
    with pytest.raises(ValueError, match="nan"):
        skid.redis_values(float("nan"), 0.0, 0.0)
    assert set(zero_command()) == {keys.LONGITUDINAL, keys.LATERAL, keys.ANGULAR}
    assert set(zero_command().values()) == {"0"}


# --- the page's fields as a client sends them (issue 31, holes 7 and 8) --------------------------

FIELDS = CHECKER.fields()
IN_RANGE = st.fixed_dictionaries({
    n: st.floats(f.low, f.high, allow_nan=False) for n, f in FIELDS.items()})


@settings(max_examples=300, deadline=None)
@given(IN_RANGE, st.sampled_from([lambda v: v, str, lambda v: f" {v!r} "]))
def test_fields_in_range_get_the_iks_own_verdict(values, as_sent):
    """Numbers (or the strings a number input sends) within the fields' ranges: the verdict is
    the IK's on the target in SI units, and carries that target."""
    r = CHECKER.verdict({n: as_sent(v) for n, v in values.items()})
    si = (values["x"], values["y"], values["z"], math.radians(values["pitch"]))
    expected = CHECKER.check(*si)
    assert (r.ok, r.status, r.message) == (expected.ok, expected.status, expected.message)
    np.testing.assert_allclose(r.target, si)
    assert r.headline == ("reachable" if r.ok else f"unreachable: {r.status} ({r.limit})")


@settings(max_examples=200, deadline=None)
@given(IN_RANGE, st.sampled_from(list(FIELDS)),
       st.sampled_from([math.nan, math.inf, -math.inf, "nan", "-inf", "1e999", 10**400]))
def test_nan_or_inf_in_any_field_is_the_iks_refusal(values, field, bad):
    r = CHECKER.verdict({**values, field: bad})
    assert not r.ok and r.status == "NOT_FINITE" and r.target is None
    assert r.headline == "refused: NOT_FINITE (input (NaN/inf))"
    assert "must be finite numbers" in r.message   # the IK's own words
    assert CHECKER.field_problem(field, bad).status == "NOT_FINITE"


@settings(max_examples=200, deadline=None)
@given(IN_RANGE, st.sampled_from(list(FIELDS)), st.floats(1e-6, 1e308), st.booleans())
def test_a_number_outside_its_fields_range_is_refused_naming_it(values, field, beyond, high):
    f = FIELDS[field]
    value = f.high + beyond if high else f.low - beyond
    assume(math.isfinite(value))
    r = CHECKER.verdict({**values, field: value})
    assert not r.ok and r.status == "OUT_OF_RANGE" and r.target is None
    assert r.limit == f"{field} range {f.range_text}"
    assert f"is outside the field's range {f.range_text}: refused, not clamped" in r.message
    assert r.headline.startswith("refused: OUT_OF_RANGE")


@pytest.mark.parametrize("value, shown_as", [
    (None, "x is empty"), ("", "x is empty"), ("abc", "x = 'abc' is not a number"),
    ([6.0], "x = [6.0] is not a number"), (True, "x = True is not a number"),
    ({"v": 1}, "x = {'v': 1} is not a number"), ("6,5", "x = '6,5' is not a number"),
    ("9" * 500, "x = " + repr("9" * 500)[:37] + "..."),
])
def test_a_field_without_a_number_is_refused_naming_the_value(value, shown_as):
    r = CHECKER.verdict({"x": value, "y": 0.0, "z": 0.5, "pitch": 30.0})
    assert not r.ok and r.status == "NOT_A_NUMBER" and r.limit == "x: a number"
    low, high = CHECKER.ranges().x   # the geometry's reach (8.0 m on the default machine)
    assert r.message.startswith(shown_as)
    assert f"type a number in {low:.2f}..{high:.2f} m" in r.message
    assert r.headline == "refused: NOT_A_NUMBER (x: a number)"


def test_read_number_reads_what_a_number_input_does():
    assert read_number("6.5") == 6.5 and read_number(" 7 ") == 7.0 and read_number(3) == 3.0
    assert math.isnan(read_number("nan")) and read_number("1e999") == math.inf
    assert read_number(10**400) == math.inf and read_number(-(10**400)) == -math.inf
    for bad in (None, "", "abc", True, False, [1.0], {}, "0x10"):
        assert read_number(bad) is None, bad


def test_every_stop_reason_the_bridge_documents_has_an_operator_text() -> None:
    """The page names every `stopped:<reason>` of docs/plc_bridge.md in words (a new reason
    added to the bridge and its docs but not here would show as a bare key)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "plc_bridge.md").read_text()
    documented = set(re.findall(r"stopped:([a-z_]+)", doc))
    assert documented >= {"plc_refused", "heartbeat_stale", "plc_link_lost"}
    assert documented <= set(REASONS), sorted(documented - set(REASONS))
