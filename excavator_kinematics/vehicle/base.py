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

    def inverse_many(self, vx: np.ndarray, vy: np.ndarray, wz: np.ndarray,
                     held_angles: np.ndarray | None = None) -> WheelCommands:
        """``inverse`` for N twists at once (1-D arrays), vectorized."""
        ...

    def direct_many(self, speeds: np.ndarray, angles: np.ndarray) -> np.ndarray:
        """``direct`` for N measurements, (N, wheels) and (N, steers): (N, 3) ``[vx, vy, wz]``."""
        ...


# Why a row of a batch was not driven as requested (bit flags in ``WheelCommands.reasons``).
LATERAL_DROPPED = 1  # vy != 0 on a model without lateral motion: driven with vy = 0
YAW_WITHOUT_SPEED = 2  # Ackermann vx = 0 with wz != 0: stop, steering held
STEER_LIMIT = 4  # a wheel past the steering limit: stop, steering held


@dataclass(frozen=True)
class WheelCommands:
    """Setpoints for N twists at once (``VehicleModel.inverse_many``): ``speeds`` (N, wheels)
    [m/s], ``angles`` (N, steers) [rad], ``achieved`` (N, 3) ``[vx, vy, wz]``, ``scale`` (N,),
    ``feasible`` (N,) bool, ``reasons`` (N,) bit flags (``LATERAL_DROPPED``...)."""

    speeds: np.ndarray
    angles: np.ndarray
    achieved: np.ndarray
    scale: np.ndarray
    feasible: np.ndarray
    reasons: np.ndarray

    def row(self, i: int, note: str = "", extra: dict[str, float] | None = None
            ) -> WheelCommand:
        """Row ``i`` as a single ``WheelCommand``."""
        vx, vy, wz = (float(v) for v in self.achieved[i])
        return WheelCommand(speeds=self.speeds[i].copy(), angles=self.angles[i].copy(),
                            achieved=BodyTwist(vx, vy, wz), scale=float(self.scale[i]),
                            feasible=bool(self.feasible[i]), note=note, extra=extra or {})
