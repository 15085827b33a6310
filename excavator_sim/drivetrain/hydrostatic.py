"""One hydrostatic travel drive: motor + planetary final drive + spring-applied holding brake.

What the PLC commands (the contract of issue 27): a **torque set-point at the sprocket** [N m],
the displacement command of an electronically controlled hydrostat expressed as the torque it
asks for. The drive answers it as

- a first-order torque response with ``time_constant_s`` (swash plate and pressure build-up),
  integrated exactly over a step (``tau <- tau_cmd + (tau - tau_cmd) exp(-dt / T)``);
- limited to ``torque_limit_nm = p_relief * D_motor * i_gear / (2 pi)`` (the crossover relief
  valves: what the drive can push or brake with);
- limited by the pump's flow: the torque in the direction of rotation fades to zero over the
  last 10 % below the sprocket speed the flow allows (``speed_limit_rad_s``), so no set-point
  drives a track faster than the pump can feed it (an overrunning load, downhill, is braked
  only by the torque the PLC commands: the counterbalance valve is not modelled);
- a **spring-applied, pressure-released holding brake** of ``brake_torque_nm`` at the sprocket:
  applied when the PLC asks for it, when the drive is not enabled, on a drive fault and when
  the actuation times out (the fail-safe state), released only by a valid actuation;
- the rotating inertia of sprocket, final drive and motor reflected to the sprocket
  (``rotating_inertia_kg_m2``: the motor's ``J_m i_gear^2`` dominates).

The torque state is integrated here; the sprocket's speed with the rest of the machine
(:mod:`excavator_sim.drivetrain.vehicle`, :mod:`~excavator_sim.drivetrain.wheeled`), whose
step resolves the brake's stick/slip (:func:`excavator_sim.drivetrain.implicit_step.settle_brakes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from excavator_sim.errors import SimConfigError

# Share of the flow-limited speed over which the motor torque fades to zero [-].
FLOW_LIMIT_BAND = 0.1


@dataclass(frozen=True)
class HydrostaticDriveParams:
    """One track's drive (both tracks are alike)."""

    relief_pressure_pa: float       # crossover relief setting [Pa]
    motor_displacement_m3: float    # motor displacement per revolution [m^3]
    gear_ratio: float               # final drive reduction [-]
    time_constant_s: float          # torque response [s]
    rotating_inertia_kg_m2: float   # sprocket + final drive + motor, at the sprocket [kg m^2]
    brake_torque_nm: float          # holding brake capacity at the sprocket [N m]
    speed_limit_rad_s: float        # sprocket speed the pump flow allows [rad/s]

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            if not (math.isfinite(value) and value > 0.0):
                raise SimConfigError(f"hydrostatic drive: {key} = {value} must be a finite "
                                     "number > 0")

    @classmethod
    def from_config(cls, values: Mapping[str, Any], radius_m: float
                    ) -> HydrostaticDriveParams:
        """The drive of a machine configuration's keys (the tracks' ``tracks.*`` of sim.yaml,
        a wheeled undercarriage's ``drive`` section): ``relief_pressure_pa``,
        ``motor_displacement_m3``, ``gear_ratio``, ``torque_time_constant_s``,
        ``rotating_inertia_kg_m2``, ``brake_torque_nm`` and ``speed_limit_m_s`` (a ground
        speed [m/s], turned into the sprocket's or wheel's speed by ``radius_m`` [m])."""
        return cls(relief_pressure_pa=values["relief_pressure_pa"],
                   motor_displacement_m3=values["motor_displacement_m3"],
                   gear_ratio=values["gear_ratio"],
                   time_constant_s=values["torque_time_constant_s"],
                   rotating_inertia_kg_m2=values["rotating_inertia_kg_m2"],
                   brake_torque_nm=values["brake_torque_nm"],
                   speed_limit_rad_s=values["speed_limit_m_s"] / radius_m)

    @property
    def torque_limit_nm(self) -> float:
        """``p D i / (2 pi)`` [N m] at the sprocket."""
        return (self.relief_pressure_pa * self.motor_displacement_m3 * self.gear_ratio
                / (2.0 * math.pi))


@dataclass
class HydrostaticDrive:
    """The torque state of one drive [N m at the sprocket]."""

    params: HydrostaticDriveParams
    torque_nm: float = 0.0   # hydrostatic torque before the flow limit [N m]

    def command(self, setpoint_nm: float, active: bool) -> float:
        """The torque the drive is asked for: the set-point clipped to the relief limit, or 0
        when the drive is not ``active`` (disabled, braked, faulted, timed out)."""
        if not active:
            return 0.0
        limit = self.params.torque_limit_nm
        return min(max(setpoint_nm, -limit), limit)

    def respond(self, target_nm: float, dt: float) -> None:
        """First-order response toward ``target_nm`` over ``dt`` [s] (exact)."""
        decay = math.exp(-dt / self.params.time_constant_s)
        self.torque_nm = target_nm + (self.torque_nm - target_nm) * decay

    def flow_factor(self, speed_rad_s: float) -> tuple[float, float]:
        """(factor, d factor / d speed) of the torque at sprocket speed ``speed_rad_s``: 1 up to
        90 % of the flow-limited speed in the torque's direction, then a smooth step
        (``3 t^2 - 2 t^3``) to 0 at the limit."""
        if self.torque_nm == 0.0:
            return 1.0, 0.0
        sign = 1.0 if self.torque_nm > 0.0 else -1.0
        top = self.params.speed_limit_rad_s
        band = FLOW_LIMIT_BAND * top
        t = (top - sign * speed_rad_s) / band   # 1 at the band's start, 0 at the limit
        if t >= 1.0:
            return 1.0, 0.0
        if t <= 0.0:
            return 0.0, 0.0
        return t * t * (3.0 - 2.0 * t), 6.0 * t * (1.0 - t) * (-sign / band)

    def output_nm(self, speed_rad_s: float) -> float:
        """The torque the motor gives at the sprocket [N m] (what the pressure sensors read)."""
        return self.torque_nm * self.flow_factor(speed_rad_s)[0]
