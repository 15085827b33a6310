"""A wheeled machine in ``drive_mode`` kinematic (issue 28): the wheels turn at the commanded
speeds and the steering follows the commanded angles, without the drive train's forces,
as the tracked machine's tracks follow ``track_command`` (sim_node's ``wheel_command``; the
standalone arrangement remaps it to the bridge's ``plc/wheel_states``).

The command is what the bridge's vehicle model computes and reports: a ground speed
``r omega`` [m/s] per driven wheel of the model (``wheel_names``: Ackermann the rear wheels,
4WD4WS all four) and an angle [rad, + left] per steered wheel (``steer_names``). The steering
moves toward the commanded angle at the machine's ``steering.max_rate_rad_s`` (the actuators
of the preset; the bridge's angles change in steps); the wheel speeds act at once, as the
tracks' do in this mode. The base moves with the model's direct kinematics of the commanded
speeds and the steering angles reached (the twist at the model's reference point, Ackermann
the rear axle's centre, taken to base_link's origin). A driven wheel turns at its commanded
speed (a command the steering does not fit yet scrubs, as a real one would); an undriven one
rolls without slip: its contact point's velocity along its heading over the rolling radius.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from excavator_sim.drivetrain.wheeled import WHEELS
from excavator_sim.errors import CommandError
from excavator_sim.undercarriage import WheeledUndercarriage


class KinematicWheels:
    """The wheels and steering of a wheeled machine driven by speed and angle commands."""

    def __init__(self, undercarriage: WheeledUndercarriage) -> None:
        self.params = undercarriage.params
        self.model = undercarriage.kinematic_model()
        self.reference = undercarriage.reference_point()
        g = self.params.geometry
        self.speed_limit_m_s = self.params.drive.speed_limit_rad_s * g.wheel_radius_m
        self.drive_names = tuple(self.model.wheel_names)
        self.steer_names = tuple(self.model.steer_names)
        self._speeds = np.zeros(len(self.drive_names))      # commanded [m/s]
        self._targets = np.zeros(len(self.steer_names))     # commanded [rad]
        self.angles = {w: 0.0 for w in self.params.steered}       # reached [rad]
        self.steer_rates = {w: 0.0 for w in self.params.steered}  # over the last step [rad/s]
        self.travel_m = {w: 0.0 for w in WHEELS}
        self.speeds_m_s = {w: 0.0 for w in WHEELS}           # r omega of every wheel [m/s]
        self.twist = (0.0, 0.0, 0.0)    # base_link origin, body axes [m/s, m/s, rad/s]

    @property
    def moving(self) -> bool:
        """A wheel speed other than 0 is commanded."""
        return bool(np.any(self._speeds != 0.0))

    def command(self, speeds: Mapping[str, float], angles: Mapping[str, float]) -> None:
        """Set the wheel speeds [m/s] of the model's driven wheels and the angles [rad] of its
        steered wheels, each by its name (``rl``, ``fl`` ...); a name left out keeps 0 (a
        speed) or its current target (an angle). A non-finite value, a speed beyond the
        drives' limit or an angle beyond the end stops is refused, nothing changed."""
        unknown = sorted((set(speeds) - set(self.drive_names))
                         | (set(angles) - set(self.steer_names)))
        if unknown:
            raise CommandError(
                f"wheel command names {unknown}: this {self.model.name} machine drives "
                f"{list(self.drive_names)} and steers {list(self.steer_names)}")
        limit = self.speed_limit_m_s
        max_angle = self.params.steering.max_angle_rad
        for name, v in speeds.items():
            if not math.isfinite(v) or abs(v) > limit:
                raise CommandError(f"wheel_{name} speed {v!r} m/s: must be finite and within "
                                   f"+-{limit:.3g} m/s (the wheel drive's speed limit)")
        for name, a in angles.items():
            if not math.isfinite(a) or abs(a) > max_angle:
                raise CommandError(f"steer_{name} angle {a!r} rad: must be finite and within "
                                   f"+-{max_angle:.3g} rad (the steering's end stops)")
        self._speeds = np.array([float(speeds.get(n, 0.0)) for n in self.drive_names])
        self._targets = np.array([float(angles.get(n, t)) for n, t in
                                  zip(self.steer_names, self._targets, strict=True)])

    def stop(self) -> None:
        """Wheel speeds 0, the steering held where it is (a stale command's stop)."""
        self._speeds = np.zeros(len(self.drive_names))
        self._targets = np.array([self.angles[n] for n in self.steer_names])

    def step(self, dt: float) -> tuple[float, float, float]:
        """Advance by ``dt`` [s]; the twist of base_link's origin over it (body axes)."""
        rate = self.params.steering.max_rate_rad_s
        for name, target in zip(self.steer_names, self._targets, strict=True):
            now = self.angles[name]
            new = now + min(max(float(target) - now, -rate * dt), rate * dt)
            self.steer_rates[name] = (new - now) / dt if dt > 0.0 else 0.0
            self.angles[name] = new
        reached = np.array([self.angles[n] for n in self.steer_names])
        t = self.model.direct(self._speeds, reached)
        xr, yr = self.reference
        # the velocity at the origin: v_ref + w x (0 - r_ref)
        vx, vy, wz = t.vx + t.wz * yr, t.vy - t.wz * xr, t.wz
        self.twist = (vx, vy, wz)
        g = self.params.geometry
        driven = dict(zip(self.drive_names, self._speeds.tolist(), strict=True))
        for w in WHEELS:
            px, py = g.position(w)
            cx, cy = vx - wz * py, vy + wz * px
            a = self.angles.get(w, 0.0)
            speed = driven.get(w, cx * math.cos(a) + cy * math.sin(a))
            self.speeds_m_s[w] = speed
            self.travel_m[w] += speed * dt
        return self.twist

    def positions(self) -> list[float]:
        """The wheels' angles [rad] (travel / r) in ``WHEELS`` order, then the steering angles
        [rad] of the steered wheels (sim joint order)."""
        r = self.params.geometry.wheel_radius_m
        return ([self.travel_m[w] / r for w in WHEELS]
                + [self.angles[w] for w in self.params.steered])

    def velocities(self) -> list[float]:
        """The wheels' speeds [rad/s], then the steering rates [rad/s]."""
        r = self.params.geometry.wheel_radius_m
        return ([self.speeds_m_s[w] / r for w in WHEELS]
                + [self.steer_rates[w] for w in self.params.steered])
