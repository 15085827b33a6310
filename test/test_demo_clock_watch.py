"""The demo's operators give up, naming why, when the simulated time stops (a sim_node that no
longer steps held a demo for ever before: pytest-timeout ended it, nothing said where)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S
from hypothesis import given
from hypothesis import strategies as st

from excavator_hil.demo.clock_watch import SimClockWatch, SimulationStalledError


def test_a_clock_standing_still_past_the_limit_is_an_error_naming_it() -> None:
    watch = SimClockWatch(stall_s=60.0, what="/exc2/sim_node")
    watch.update(12.5, 1000.0)
    watch.update(12.5, 1060.0)          # at the limit: not yet
    with pytest.raises(SimulationStalledError) as err:
        watch.update(12.5, 1060.5)
    text = str(err.value)
    assert "12.500 s" in text and "/exc2/sim_node" in text and "limit is 60 s" in text


@given(steps=st.lists(st.floats(0.001, 59.0), min_size=1, max_size=50))
def test_a_clock_that_moves_within_the_limit_never_trips(steps: list[float]) -> None:
    """However slowly: a step of simulated time within each stall_s of wall time."""
    watch = SimClockWatch(stall_s=60.0)
    sim, wall = 0.0, 0.0
    watch.update(sim, wall)
    for dt in steps:
        wall += dt
        watch.update(sim, wall)          # the same sample again, dt later
        sim += 0.01
        watch.update(sim, wall)


def test_the_wait_starts_again_when_the_clock_moves() -> None:
    watch = SimClockWatch(stall_s=10.0)
    watch.update(1.0, 0.0)
    watch.update(1.0, 9.0)
    watch.update(1.01, 9.5)
    watch.update(1.01, 19.0)            # 9.5 s since it last moved
    with pytest.raises(SimulationStalledError):
        watch.update(1.01, 19.6)


def test_a_stall_message_tells_a_running_simulation_from_a_stopped_one(tmp_path: Path) -> None:
    """What the demo adds to the error (``DemoStack.stall_diagnosis``): a process seen from
    outside, its state and its CPU time over the window. A simulation that stepped while the
    demo heard nothing shows CPU time; one frozen with SIGSTOP shows none."""
    import signal

    from excavator_hil.local_services import ManagedProcess, wait_for

    busy = ManagedProcess("timeit", ["-n", "1000000000", "pass"], log_dir=tmp_path)
    try:
        seen = busy.activity(window_s=2.0)
        assert seen.startswith("running (state R)"), seen
        cpu = float(seen.split(", ")[1].split(" s of CPU")[0])
        assert 0.05 < cpu <= 2.0 * 2 + 0.1, seen       # at most both cores for the window
        busy.proc.send_signal(signal.SIGSTOP)
        # stopped once the kernel says so (a process waiting for a CPU stops when it next runs)
        wait_for(lambda: busy.activity(window_s=0.0).startswith("stopped"), EVENT_WAIT_S,
                 lambda: busy.activity(window_s=0.0))
        seen = busy.activity(window_s=1.0)
        assert seen == "stopped (SIGSTOP) (state T), 0.00 s of CPU in 1 s", seen
        busy.proc.send_signal(signal.SIGCONT)
    finally:
        busy.stop(timeout=5.0)
    assert busy.activity(window_s=0.1).startswith("gone (exit code "), busy.activity(0.1)
