"""The vehicle kinematic model interface shared by skid-steer, Ackermann and 4WD4WS.

REP-103 internally: body twist at the model's reference point, x forward, y left, yaw CCW
(z up). The contact velocity of a wheel at (x_i, y_i) is ``v_ix = v_x - w*y_i``,
``v_iy = v_y + w*x_i`` (docs/plc_bridge.md, design note plc_bridge.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class BodyTwist:
    """Planar body velocity: ``vx`` [m/s] forward, ``vy`` [m/s] left, ``wz`` [rad/s] CCW."""

    vx: float = 0.0
    vy: float = 0.0
    wz: float = 0.0

    def as_array(self) -> np.ndarray:
        return np.array([self.vx, self.vy, self.wz])


@dataclass(frozen=True)
class WheelCommand:
    """Actuator setpoints from the inverse model.

    ``speeds``: wheel/track ground speeds [m/s], in the model's ``wheel_names`` order.
    ``angles``: steering angles [rad], in the model's ``steer_names`` order (empty for
    skid-steer). ``achieved``: the twist these setpoints really produce (after saturation or an
    infeasible request). ``scale``: the common factor applied to the requested twist (1 when no
    actuator saturated). ``feasible``: False when the request could not be honoured at all (e.g.
    lateral velocity on skid-steer, yaw without speed on Ackermann); ``note`` says why.
    """

    speeds: np.ndarray
    angles: np.ndarray
    achieved: BodyTwist
    scale: float = 1.0
    feasible: bool = True
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class VehicleModel(Protocol):
    """Inverse (twist -> actuators) and direct (measured actuators -> twist) kinematics."""

    name: str
    wheel_names: tuple[str, ...]
    steer_names: tuple[str, ...]

    def inverse(self, twist: BodyTwist, held_angles: np.ndarray | None = None) -> WheelCommand:
        """Setpoints for ``twist``. ``held_angles`` [rad] are the current steering angles, kept
        when the command leaves them undefined (zero command, stop)."""
        ...

    def direct(self, speeds: np.ndarray, angles: np.ndarray) -> BodyTwist:
        """Body twist from measured wheel speeds [m/s] and steering angles [rad]."""
        ...
