"""Where the machines of a fleet stand and which terrain they dig in (pure Python: no ROS).

Used by ``launch/fleet.launch.py`` and ``excavator-hil demo --machines N``:
- :func:`fleet_namespaces`: the machines' namespaces from ``count`` or a list;
- machine k stands at y = k * ``spacing`` [m] in ``world``;
- :func:`shared_soil_grid`: one soil grid over every machine's strip (the single machine's grid,
  stretched along y by ``(n - 1) * spacing``), for one soil_node serving them all;
- :func:`sim_grid_parameters`: sim_node's height field on that grid's cell centres, so the soil
  node's ``soil/terrain_patch`` copies one to one into every machine's MuJoCo height field.
"""

from __future__ import annotations

import dataclasses
import re

from excavator_sim.soil.terrain_config import TerrainConfig

MAX_MACHINES = 16          # Redis has 16 databases by default (databases in redis.conf)
MAX_SIM_NODES = 4000       # sim_node's terrain.nx / terrain.ny limit


def fleet_namespaces(count: str, namespaces: str) -> list[str]:
    """The machines' namespaces from the ``count`` / ``namespaces`` arguments; ValueError naming
    the bad value and the fix."""
    if namespaces.strip():
        names = [n.strip().strip("/") for n in namespaces.split(",")]
        for n in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"namespaces: {n!r} is not a ROS name (letters, digits, '_', "
                                 "not starting with a digit)")
        if len(set(names)) != len(names):
            raise ValueError(f"namespaces: {names} has duplicates; give each machine its own")
    else:
        try:
            how_many = int(count)
        except ValueError:
            raise ValueError(f"count: {count!r} is not an integer (1..{MAX_MACHINES})") from None
        names = [f"exc{k + 1}" for k in range(how_many)]
    if not 1 <= len(names) <= MAX_MACHINES:
        raise ValueError(f"{len(names)} machines: give 1..{MAX_MACHINES} (one Redis database "
                         "each)")
    return names


def fleet_machines(machine: str, count: int) -> list[str]:
    """Each machine's preset from the ``machine`` argument: one for every machine (empty: the
    default tracked machine), or a comma-separated list of exactly ``count``; ValueError naming
    the bad value and the fix. The presets themselves are checked where they are loaded."""
    presets = [m.strip() for m in machine.split(",")] if "," in machine else [machine.strip()]
    if len(presets) == 1:
        return presets * count
    if len(presets) != count:
        raise ValueError(f"machine: {machine!r} names {len(presets)} presets for {count} "
                         f"machines; give one preset for all or one per machine, in the "
                         f"namespaces' order")
    return presets


def shared_soil_grid(single: TerrainConfig, machines: int, spacing_m: float) -> TerrainConfig:
    """The soil grid of ``single`` (one machine's, around y = its centre) stretched over the
    strips of ``machines`` machines ``spacing_m`` apart along y; ValueError when the simulators'
    height fields could not hold it."""
    extra = (machines - 1) * abs(spacing_m)
    grid = dataclasses.replace(single, size_y_m=single.size_y_m + extra,
                               centre_y_m=single.centre_y_m + 0.5 * (machines - 1) * spacing_m)
    if grid.ny > MAX_SIM_NODES:
        raise ValueError(
            f"a shared terrain for {machines} machines {spacing_m:.6g} m apart is {grid.ny} "
            f"cells along y (cell {grid.cell_xy_m:.6g} m), beyond sim_node's {MAX_SIM_NODES}: "
            "reduce spacing, raise the soil cell_xy_m, or use shared_terrain:=false")
    return grid


def sim_grid_parameters(grid: TerrainConfig) -> dict[str, float | int]:
    """sim_node's ``terrain.*`` for a height field whose node (i, j) is the centre of soil cell
    (i, j) of ``grid``."""
    half = 0.5 * grid.cell_xy_m
    return {"terrain.x0_m": grid.x0 + half, "terrain.y0_m": grid.y0 + half,
            "terrain.cell_size_m": grid.cell_xy_m, "terrain.nx": grid.nx, "terrain.ny": grid.ny}
