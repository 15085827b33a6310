"""One steering actuator: a proportional valve feeding a steering cylinder, with an angle sensor.

What the PLC commands (hil_contract.md, issue 28): a **steering rate** [rad/s] per steered wheel,
the proportional valve's flow expressed as the angular rate it gives; the PLC closes the angle loop
on the measured angle (:mod:`plc_bridge.virtual_plc.steering_loop`). The actuator answers it as

- a first-order rate response with ``time_constant_s`` (valve spool and oil column),
  integrated exactly over a step, toward the command clipped to ``max_rate_rad_s`` (the flow
  the steering pump and valve can give);
- an angle that is the integral of the rate, stopped at the mechanical end stops
  ``+-max_angle_rad`` (the rate drops to 0 there: the cylinder is at its end);
- inactive (drives disabled, braked, faulted, timed out): the valve closes, the rate decays
  to 0 with the same time constant and the angle holds where it is (a closed valve locks the
  cylinder; no hydraulic "centring").

The steering is kinematic: its rate does not depend on the tyre's scrub torque (the steering
pressure of the class is ample at the speeds it is rated for; a wheel steered at standstill turns
about its contact point, which the point-contact tyre does not resist). The angle sensor reads the
angle as it is (no noise, no offset: a site adds them in the plant link)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_sim.errors import SimConfigError


@dataclass(frozen=True)
class SteeringParams:
    """One steering actuator (all steered wheels of a machine are alike)."""

    max_angle_rad: float        # mechanical end stop, symmetric [rad]
    max_rate_rad_s: float       # largest steering rate (valve fully open) [rad/s]
    time_constant_s: float      # valve + oil column response [s]

    def __post_init__(self) -> None:
        for name, value, low, high, unit in (
                ("max_angle_rad", self.max_angle_rad, 0.05, math.pi, "rad"),
                ("max_rate_rad_s", self.max_rate_rad_s, 0.01, 10.0, "rad/s"),
                ("time_constant_s", self.time_constant_s, 1e-4, 2.0, "s")):
            if not (isinstance(value, int | float) and math.isfinite(value)
                    and low <= value <= high):
                raise SimConfigError(f"steering: {name} = {value!r} {unit} is outside "
                                     f"[{low:g}, {high:g}] {unit}; set it in that range")


@dataclass
class SteeringActuator:
    """The state of one steering actuator: angle [rad, + CCW seen from above] and rate
    [rad/s]."""

    params: SteeringParams
    angle_rad: float = 0.0
    rate_rad_s: float = 0.0

    def step(self, rate_command_rad_s: float, active: bool, dt: float) -> None:
        """Advance ``dt`` [s] under the rate command (ignored when not ``active``). The rate
        follows exactly over the step; the angle takes the exact integral of that rate,
        stopped at the end stops."""
        p = self.params
        target = (min(max(rate_command_rad_s, -p.max_rate_rad_s), p.max_rate_rad_s)
                  if active else 0.0)
        decay = math.exp(-dt / p.time_constant_s)
        r0 = self.rate_rad_s
        self.rate_rad_s = target + (r0 - target) * decay
        # integral over the step of target + (r0 - target) exp(-t/T)
        moved = target * dt + (r0 - target) * p.time_constant_s * (1.0 - decay)
        angle = self.angle_rad + moved
        if angle > p.max_angle_rad or angle < -p.max_angle_rad:
            angle = math.copysign(p.max_angle_rad, angle)
            if self.rate_rad_s * angle > 0.0:
                self.rate_rad_s = 0.0   # at the end stop: no further motion that way
        self.angle_rad = angle
