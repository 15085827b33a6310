"""Issue 30.4: the same scenario with the same inputs gives bit-identical results. The demo's
dig cycle run twice in process (the soil coupled every publish period, no ROS, no wall clock):
identical joint trajectories, cylinder extensions, soil wrenches, loads and trench, bit for bit;
a changed input changes the record."""

from __future__ import annotations

import numpy as np
import pytest

from excavator_hil.reproducible import RunRecord, dig_cycle_in_process


@pytest.fixture(scope="module")
def runs() -> tuple[RunRecord, RunRecord]:
    return dig_cycle_in_process(settle_s=0.5), dig_cycle_in_process(settle_s=0.5)


def test_two_runs_of_the_dig_cycle_are_bit_identical(runs: tuple[RunRecord, RunRecord]) -> None:
    a, b = runs
    # the run did dig: a trench, a load carried and dumped, the soil pushing back
    assert a.terrain_m.min() < -0.3 and a.load_m3.max() > 0.1
    assert np.abs(a.wrench[:, :3]).max() > 5e3
    for name in ("t_s", "q", "extensions", "wrench", "load_m3", "terrain_m"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), f"{name} differs"
    assert a.digest() == b.digest()


def test_a_changed_input_changes_the_record(runs: tuple[RunRecord, RunRecord]) -> None:
    """The digest names the run: the same cycle on looser soil is another record."""
    other = dig_cycle_in_process(settle_s=0.5, soil_preset="loose_sand")
    assert other.digest() != runs[0].digest()
    assert not np.array_equal(other.terrain_m, runs[0].terrain_m)
