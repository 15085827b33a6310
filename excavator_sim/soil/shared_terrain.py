"""One terrain several machines dig in (pure Python: no ROS).

A fleet's soil_node serves every machine from one height grid: each machine has its own bucket
state (load, capacity, motion history, where its spilled soil still settles: a
:class:`~excavator_sim.soil.terrain.Terrain` each) over **one** height array, so a trench one
machine digs is ground the other sees, and soil one dumps is soil the other can scoop. Soil is
conserved over the grid and every bucket together (:attr:`SharedTerrain.total_units`).

Limit: a bucket's walls hold soil in its own update only; two buckets in the same cells at once
(machines working one spot) would each see the other's soil but not its walls. The fleet places
machines ``spacing`` apart, further than a machine reaches.
"""

from __future__ import annotations

from collections.abc import Sequence

from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.errors import SoilInputError
from excavator_sim.soil.terrain import Box, Terrain, _union
from excavator_sim.soil.terrain_config import TerrainConfig


class SharedTerrain:
    """One height grid, one bucket state per machine name."""

    def __init__(self, config: TerrainConfig, bucket: BucketPrism,
                 machines: Sequence[str]) -> None:
        names = list(machines)
        if not names or len(set(names)) != len(names):
            raise SoilInputError(f"machines {names}: give one or more distinct names")
        first = Terrain(config, bucket)
        self.terrains: dict[str, Terrain] = {names[0]: first}
        for name in names[1:]:
            terrain = Terrain(config, bucket)
            terrain.h = first.h  # the same array: every machine digs in it
            self.terrains[name] = terrain
        self.grid = first  # queries of the grid (heights, cell centres) through any of them

    @property
    def total_units(self) -> int:
        """Soil in the grid plus every bucket [units]: constant for ever."""
        return int(self.grid.h.sum()) + sum(int(t.load_units) for t in self.terrains.values())

    def take_dirty(self) -> Box | None:
        """Union of the boxes any machine changed since the last call; resets them."""
        out: Box | None = None
        for terrain in self.terrains.values():
            box = terrain.take_dirty()
            if box is not None:
                out = box if out is None else _union(out, box)
        return out
