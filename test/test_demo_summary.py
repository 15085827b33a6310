"""The demo summary says whether real time was held, and how late the soil forces were."""

from __future__ import annotations

from excavator_hil.demo.summary import DemoSummary


def test_a_run_that_kept_up_says_held_with_its_lag() -> None:
    text = DemoSummary(real_time_held=True, lag_ms_p99=6.1, lag_ms_max=18.2,
                       wrench_age_ms_p50=0.0, wrench_age_ms_p99=10.0, wrench_age_ms_max=20.0,
                       wrench_stale_periods=0, poses_superseded=0).text()
    assert "real time               held (lag behind the wall clock p99 6.1 ms, max 18.2 ms)" \
        in text
    assert "wrench age p50 0.0, p99 10.0, max 20.0 ms; 0 periods without soil force" in text
    assert "NOT HELD" not in text


def test_a_run_that_fell_behind_says_not_held_and_why_it_matters() -> None:
    text = DemoSummary(real_time_held=False, lag_ms_max=356.0, lag_warnings=2, slipped_s=1.5,
                       wrench_stale_periods=317, poses_superseded=282).text()
    assert "NOT HELD: up to 356 ms behind the wall clock (2 warnings, 1.50 s given up)" in text
    assert "not those of real time" in text
    assert "317 periods without soil force (stale), 282 poses superseded" in text


def test_the_summary_says_where_operator_commands_were_lost() -> None:
    text = DemoSummary(sim_commands_dropped=3).text()
    assert "commands dropped               3  (by sim_node" in text
    assert "joystick" not in text  # no teleop_node: an IK run
    joystick = DemoSummary(teleop={"commands": 812, "holds": 2, "joys_dropped": 40,
                                   "last_dropped_age_s": 1.234, "max_command_age_s": 1.0})
    assert ("joystick (teleop_node)  812 commands, 2 holds, 40 Joys dropped as too old; the "
            "last 1.234 s old, limit 1 s") in joystick.text()
    calm = DemoSummary(teleop={"commands": 812, "holds": 1, "joys_dropped": 0,
                               "last_dropped_age_s": float("nan"), "max_command_age_s": 1.0})
    assert calm.text().endswith("812 commands, 1 holds, 0 Joys dropped as too old")
