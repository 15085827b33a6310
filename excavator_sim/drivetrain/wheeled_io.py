"""A wheeled machine's side of the plant topics, on the messages' arrays (pure: no ROS): the
PLC's ``plant/actuation`` checked into a :class:`WheeledCommand`, and what ``plant/sensors``
carries of the wheeled drive train. The names are those the plant link uses
(``plc_bridge.plant_link.core``: ``wheel_<name>``, ``steer_<name>``, hil_contract.md), so
sim_node's wheeled branch (issue 28) has only to call these.

- :func:`parse_wheeled_actuation`: every driven wheel's ``wheel_<name>`` with its torque
  set-point in ``effort`` [N m at the wheel], every steered wheel's ``steer_<name>`` with its
  steering rate in ``velocity`` [rad/s], and the pseudo-joints ``drive_enable`` and ``brake``
  in ``position`` (1.0 on, 0.0 off); each once, nothing else. Torques beyond
  ``TORQUE_RANGE_FACTOR`` x the drive's limit, rates beyond ``RATE_RANGE_FACTOR`` x the
  steering's rate are refused (a wrong unit or scale: deg/s for rad/s is 57 x); up to there the
  relief valve and the steering valve clip as on the machine. A bad message raises
  :class:`~excavator_sim.drivetrain.actuation.ActuationError` naming the value, the limit and
  the fix: a drive fault that brakes. The checks of the names and flags are the tracked
  machine's (:func:`~excavator_sim.drivetrain.actuation.check_names`,
  :func:`~excavator_sim.drivetrain.actuation.read_flags`).
- :class:`WheeledPlantActuation`: the rules of freshness and faults
  (:class:`~excavator_sim.drivetrain.actuation.ActuationFreshness`) for a
  :class:`WheeledCommand`, safe command ``SAFE_WHEELED_COMMAND``.
- :func:`wheeled_sensor_arrays`: ``wheel_<name>`` for all four wheels (position = travelled
  distance [m], velocity = ``r omega`` [m/s], effort = the drive's torque [N m], 0 on an
  undriven wheel), ``steer_<name>`` per steered wheel (position = angle [rad]),
  ``ground_speed`` (velocity [m/s] along x), and the pseudo-joints ``drive_ready``,
  ``drive_fault``, ``brake`` in position, as the tracked machine's message has them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from excavator_sim.drivetrain.actuation import (
    FLAG_JOINTS,
    TORQUE_RANGE_FACTOR,
    ActuationError,
    ActuationFreshness,
    check_names,
    read_flags,
)
from excavator_sim.drivetrain.wheeled import (
    SAFE_WHEELED_COMMAND,
    WHEELS,
    WheeledCommand,
    WheeledParams,
    WheeledVehicle,
)

DRIVE_PREFIX = "wheel_"
STEER_PREFIX = "steer_"
# Rates up to this many times the steering's rate are clipped (the valve); beyond, refused.
RATE_RANGE_FACTOR = 2.0


def drive_joints(params: WheeledParams) -> tuple[str, ...]:
    return tuple(DRIVE_PREFIX + w for w in params.driven)


def steer_joints(params: WheeledParams) -> tuple[str, ...]:
    return tuple(STEER_PREFIX + w for w in params.steered)


def parse_wheeled_actuation(names: Sequence[str], position: Sequence[float],
                            velocity: Sequence[float], effort: Sequence[float],
                            params: WheeledParams) -> WheeledCommand:
    """The command of one ``plant/actuation`` message for a wheeled machine, or
    :class:`ActuationError`."""
    drives, steers = drive_joints(params), steer_joints(params)
    index = check_names(names, position, velocity, effort, (*drives, *steers, *FLAG_JOINTS),
                        "it")
    torque_limit = params.drive.torque_limit_nm
    torques = tuple(_bounded(name, "effort (torque set-point)", float(effort[index[name]]),
                             TORQUE_RANGE_FACTOR * torque_limit, "N m at the wheel",
                             f"{TORQUE_RANGE_FACTOR:g} x the drive's torque limit "
                             f"{torque_limit:.6g} N m")
                    for name in drives)
    max_rate = params.steering.max_rate_rad_s
    rates = tuple(_bounded(name, "velocity (steering rate)", float(velocity[index[name]]),
                           RATE_RANGE_FACTOR * max_rate, "rad/s",
                           f"{RATE_RANGE_FACTOR:g} x the steering's rate {max_rate:.6g} rad/s")
                  for name in steers)
    enable, brake = read_flags(position, index)
    return WheeledCommand(torques, rates, enable=enable, brake=brake)


@dataclass
class WheeledPlantActuation(ActuationFreshness[WheeledCommand]):
    """A wheeled machine's :class:`~excavator_sim.drivetrain.actuation.ActuationFreshness`
    (safe command: ``SAFE_WHEELED_COMMAND``: torque 0, steering valves closed, brakes
    applied)."""

    safe: WheeledCommand = SAFE_WHEELED_COMMAND


def _bounded(name: str, what: str, value: float, limit: float, unit: str, why: str) -> float:
    if not math.isfinite(value):
        raise ActuationError(f"plant/actuation {name} {what} is {value}: send a finite value "
                             f"[{unit}]")
    if abs(value) > limit:
        raise ActuationError(f"plant/actuation {name} {what} {value:.6g} is beyond "
                             f"{limit:.6g} {unit} ({why}): check the PLC's scaling ({unit}) "
                             "and clamp at the limit")
    return value


def wheeled_sensor_arrays(vehicle: WheeledVehicle, drive_fault: bool
                          ) -> tuple[list[str], list[float], list[float], list[float]]:
    """``(name, position, velocity, effort)`` of ``plant/sensors`` for a wheeled machine
    (module docstring); NaN where an entry does not apply."""
    nan = math.nan
    p = vehicle.params
    braked = vehicle.wheels[WHEELS[0]].braked
    names = [DRIVE_PREFIX + w for w in WHEELS] + list(steer_joints(p)) + [
        "ground_speed", "drive_ready", "drive_fault", "brake"]
    wheels = [vehicle.wheels[w] for w in WHEELS]
    steers = vehicle.steer_angles(p.steered)
    position = ([w.travel_m for w in wheels] + steers
                + [nan, 0.0 if drive_fault else 1.0, 1.0 if drive_fault else 0.0,
                   1.0 if braked else 0.0])
    velocity = (vehicle.wheel_speeds(WHEELS) + [nan] * len(steers)
                + [vehicle.ground_speed_m_s, nan, nan, nan])
    effort = [w.torque_nm for w in wheels] + [nan] * len(steers) + [nan] * 4
    return names, position, velocity, effort
