"""The soil carried in the bucket as a rigid body (numpy only: sim_node imports it without the
soil's numba kernels)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BucketPayload:
    """The carried soil as a rigid body on the bucket, in the bucket frame (origin M): what
    the simulator adds to its bucket body (``ExcavatorSimulation.set_bucket_payload``)."""

    mass_kg: float
    centre_m: np.ndarray  # (3,) centre of mass [m]
    inertia_kg_m2: np.ndarray  # (3, 3) about the centre of mass [kg m^2]

    @classmethod
    def empty(cls) -> BucketPayload:
        return cls(0.0, np.zeros(3), np.zeros((3, 3)))
