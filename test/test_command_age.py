"""The age rule for stamped commands (excavator_common.command_age), pure: every time passed in.
The nodes' use of it is tested over DDS in test_teleop_node.py and test_ik_node.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_common.command_age import (
    AHEAD,
    EXPIRED,
    FRESH,
    MIN_AHEAD_S,
    UNSTAMPED,
    CommandAge,
)

WALL = 1.7e9  # a wall clock reading [s since 1970]
SIM = 120.0   # a simulated time [s since the simulation started]


def test_a_command_within_the_age_acts_and_one_past_it_is_dropped_naming_age_and_limit() -> None:
    rule = CommandAge(0.25)
    v = rule.judge("joy", WALL - 0.2, WALL)
    assert v.act and v.status == FRESH and v.age_s == pytest.approx(0.2) and v.clock == "wall"
    v = rule.judge("joy", WALL - 0.3, WALL)
    assert not v.act and v.status == EXPIRED and v.age_s == pytest.approx(0.3)
    assert "joy" in v.reason and "0.300 s old" in v.reason
    assert "max_command_age_s 0.25 s" in v.reason and "chrony" in v.reason
    assert (rule.judged, rule.expired, rule.ahead, rule.unstamped) == (2, 1, 0, 0)
    c = rule.counters()
    assert c["commands_expired"] == 1 and c["max_command_age_s"] == "0.25"
    assert c["last_dropped_topic"] == "joy" and c["last_dropped_age_s"] == "0.300"


def test_an_unstamped_command_acts_unjudged_and_is_counted_once_said() -> None:
    rule = CommandAge(0.25)
    for _ in range(3):
        v = rule.judge("target", 0.0, WALL)
        assert v.act and v.status == UNSTAMPED and math.isnan(v.age_s)
    assert rule.unstamped == 3 and rule.expired == 0
    assert rule.first_unstamped("target") and not rule.first_unstamped("target")
    assert rule.first_unstamped("joy")


def test_a_stamp_from_the_future_beyond_the_clock_tolerance_is_dropped() -> None:
    rule = CommandAge(0.25)  # ahead: up to max(0.25 s, 1 s): a player's lead
    assert rule.ahead_limit_s == MIN_AHEAD_S
    assert rule.judge("joy", WALL + 0.9, WALL).act
    v = rule.judge("joy", WALL + 1.5, WALL)
    assert not v.act and v.status == AHEAD and "1.500 s ahead" in v.reason
    assert "synchronise" in v.reason and rule.ahead == 1
    assert CommandAge(5.0).ahead_limit_s == 5.0  # the clocks may disagree as much either way
    off = CommandAge(0.25, math.inf)  # a node with a schedule of its own judges stamps ahead
    assert off.judge("joint_command", SIM + 100.0, SIM, WALL).act


def test_a_node_on_sim_time_judges_wall_stamps_on_the_wall_clock() -> None:
    """use_sim_time while the operator station stamps in wall time: each stamp is judged on
    the clock it lies nearest to."""
    rule = CommandAge(0.25)
    v = rule.judge("joy", WALL - 0.1, SIM, WALL)
    assert v.act and v.clock == "wall" and v.age_s == pytest.approx(0.1)
    v = rule.judge("joy", WALL - 0.5, SIM, WALL)
    assert not v.act and v.clock == "wall" and v.status == EXPIRED
    v = rule.judge("joy", SIM - 0.1, SIM, WALL)
    assert v.act and v.clock == "simulated" and v.age_s == pytest.approx(0.1)
    v = rule.judge("joy", SIM - 2.0, SIM, WALL)
    assert not v.act and v.clock == "simulated" and "on the simulated clock" in v.reason


def test_a_node_on_wall_time_drops_sim_stamps_saying_use_sim_time() -> None:
    rule = CommandAge(0.25)
    v = rule.judge("joy", SIM, WALL)
    assert not v.act and v.status == EXPIRED
    assert "use_sim_time:=true" in v.reason and "another clock" in v.reason


def test_the_warning_comes_at_once_then_at_most_once_per_interval_with_the_count() -> None:
    rule = CommandAge(0.25, warn_interval_s=5.0)
    assert rule.warning(0.0) is None  # nothing dropped
    rule.judge("joy", WALL - 1.0, WALL)
    first = rule.warning(100.0)
    assert first is not None and "1.000 s old" in first and "dropped since" not in first
    for k in range(4):
        rule.judge("joy", WALL - 2.0 - k, WALL)
        assert rule.warning(101.0 + k) is None
    later = rule.warning(105.0)
    assert later is not None and "4 commands dropped since the last warning" in later
    assert "5.000 s old" in later  # the latest one
    assert rule.warning(200.0) is None  # nothing new


@pytest.mark.parametrize(("age", "ahead"), [(0.0, None), (-1.0, None), (math.nan, None),
                                           (math.inf, None), (0.25, -1.0)])
def test_invalid_limits_are_refused(age: float, ahead: float | None) -> None:
    with pytest.raises(ValueError, match="must be"):
        CommandAge(age, ahead)


@given(max_age=st.floats(0.01, 100.0), offset=st.floats(-200.0, 200.0),
       sim_now=st.floats(0.0, 1e6), on_wall=st.booleans(), sim_node=st.booleans())
def test_the_verdict_is_the_age_on_the_stamps_own_clock(max_age: float, offset: float,
                                                        sim_now: float, on_wall: bool,
                                                        sim_node: bool) -> None:
    """Property: whichever clock a stamp is on, a node that can read that clock judges it by
    its age there: acts exactly when -ahead limit <= age <= max_age."""
    if not sim_node and not on_wall:
        on_wall = True  # a node on wall time reads no simulated clock (tested above)
    rule = CommandAge(max_age)
    now = WALL if on_wall else sim_now
    stamp = now - offset
    if stamp == 0.0:
        return
    v = (rule.judge("t", stamp, sim_now, WALL) if sim_node else rule.judge("t", stamp, WALL))
    assert v.clock == ("wall" if on_wall else "simulated")
    assert v.age_s == pytest.approx(offset, abs=1e-6)
    assert v.act == (-rule.ahead_limit_s <= v.age_s <= max_age)
