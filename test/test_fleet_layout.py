"""The fleet's layout (excavator_hil.fleet): one soil grid over every machine's strip, and every
sim's height field on its cell centres (so terrain patches copy one to one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_hil.fleet import fleet_namespaces, shared_soil_grid, sim_grid_parameters
from excavator_sim.sim_config import load_sim_config
from excavator_sim.soil.config import load_soil_config

SINGLE = load_soil_config().terrain


def test_one_machine_gets_the_shipped_grids() -> None:
    grid = shared_soil_grid(SINGLE, 1, 20.0)
    assert grid == SINGLE
    sim = load_sim_config().terrain
    params = sim_grid_parameters(grid)
    assert params["terrain.nx"] == sim.nx and params["terrain.ny"] == sim.ny
    assert params["terrain.x0_m"] == pytest.approx(sim.x0)
    assert params["terrain.y0_m"] == pytest.approx(sim.y0)
    assert params["terrain.cell_size_m"] == sim.cell_size


@given(st.integers(1, 5), st.floats(8.0, 40.0))
def test_the_shared_grid_covers_every_machine_and_sim_nodes_sit_on_its_cells(
        n: int, spacing: float) -> None:
    grid = shared_soil_grid(SINGLE, n, spacing)
    xs = grid.x0 + (np.arange(grid.nx) + 0.5) * grid.cell_xy_m
    ys = grid.y0 + (np.arange(grid.ny) + 0.5) * grid.cell_xy_m
    for k in range(n):          # each machine's own strip, as wide as one machine's grid
        y = k * spacing
        assert ys[0] <= y + SINGLE.centre_y_m - 0.5 * SINGLE.size_y_m + grid.cell_xy_m
        assert ys[-1] >= y + SINGLE.centre_y_m + 0.5 * SINGLE.size_y_m - grid.cell_xy_m
    p = sim_grid_parameters(grid)
    nodes_x = p["terrain.x0_m"] + np.arange(p["terrain.nx"]) * p["terrain.cell_size_m"]
    nodes_y = p["terrain.y0_m"] + np.arange(p["terrain.ny"]) * p["terrain.cell_size_m"]
    assert np.allclose(nodes_x, xs) and np.allclose(nodes_y, ys)


def test_too_large_a_shared_grid_names_the_fix() -> None:
    with pytest.raises(ValueError, match="shared_terrain:=false"):
        shared_soil_grid(SINGLE, 16, 20.0)


def test_namespaces_from_count_or_list() -> None:
    assert fleet_namespaces("2", "") == ["exc1", "exc2"]
    with pytest.raises(ValueError, match="duplicates"):
        fleet_namespaces("1", "a,a")
