"""The closed loop of a wheeled machine, in-process and pure (no ROS, no MuJoCo, no S7): the
bridge's kinematic model inverse -> per-wheel speed and angle set-points -> the PLC's speed and
steering loops (plc_bridge.speed_loop, plc_bridge.steering_loop) -> the wheeled drive train
(excavator_sim.drivetrain.wheeled) on firm flat ground -> its measured wheel states, two
exchange periods late, back to the PLC and to the model's direct. Simulated time only."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from excavator_kinematics.vehicle import BodyTwist, VehicleModel
from excavator_sim.drivetrain.wheeled import WheeledCommand, WheeledVehicle
from excavator_sim.machines import load_machine
from excavator_sim.undercarriage import WheeledUndercarriage
from plc_bridge.speed_loop import PiSpeedLoop
from plc_bridge.steering_loop import SteeringLoop, alignment

PERIOD_S = 0.01        # the simulation's control period and the plant exchange (100 Hz)
DELAY_PERIODS = 2      # plant_in -> PLC -> plant_out: two exchanges late
CROSSOVER_RAD_S = 3.3  # the speed loop's crossover, as the tracked machine's (virtual_plc.yaml)
STEER_KP_1_S = 5.0     # config/virtual_plc.yaml steer_kp_1_s


def machine_mass(preset: str) -> float:
    """The preset's total mass [kg] (the geometry's parts)."""
    return float(sum(load_machine(preset).geometry().masses_kg.values()))


def yaw_inertia(mass_kg: float) -> float:
    """[kg m^2]: a radius of gyration of 1.4 m about the centre of the wheels (upper carriage,
    boom and undercarriage of a 2.6 m wheelbase machine; the MuJoCo model gives the real one)."""
    return mass_kg * 1.4**2


@dataclass
class Record:
    t: list[float] = field(default_factory=list)
    twist: list[tuple[float, float, float]] = field(default_factory=list)   # ground truth
    direct: list[tuple[float, float, float]] = field(default_factory=list)  # model's direct
    angles: list[list[float]] = field(default_factory=list)                 # measured
    angle_sp: list[list[float]] = field(default_factory=list)
    speeds: list[list[float]] = field(default_factory=list)                 # measured, driven
    feasible: list[bool] = field(default_factory=list)

    def mean(self, name: str, since_s: float) -> np.ndarray:
        rows = [r for t, r in zip(self.t, getattr(self, name), strict=True) if t >= since_s]
        return np.mean(np.asarray(rows, dtype=float), axis=0)

    def worst(self, name: str, since_s: float) -> np.ndarray:
        rows = np.asarray([r for t, r in zip(self.t, getattr(self, name), strict=True)
                           if t >= since_s], dtype=float)
        return np.max(np.abs(rows), axis=0)


class WheeledLoop:
    """One machine preset with its PLC loops and its bridge model."""

    def __init__(self, preset: str, *, friction: float | None = None,
                 align: bool = True) -> None:
        under = load_machine(preset).undercarriage
        assert under is not None
        self.under: WheeledUndercarriage = under
        self.model: VehicleModel = under.kinematic_model()
        p = under.params
        assert tuple(self.model.wheel_names) == p.driven
        assert tuple(self.model.steer_names) == p.steered
        mass = machine_mass(preset)
        self.vehicle = WheeledVehicle(p, mass, yaw_inertia(mass))
        per_wheel = mass / len(p.driven)
        r = p.geometry.wheel_radius_m
        kp = CROSSOVER_RAD_S * r * per_wheel
        self.speed = PiSpeedLoop(len(p.driven), kp, kp / 1.33, p.drive.torque_limit_nm, 0.5,
                                 names=p.driven)
        self.steer = SteeringLoop(len(p.steered), STEER_KP_1_S, p.steering.max_rate_rad_s,
                                  names=p.steered)
        self.align = align
        self.ref = under.reference_point()
        self.t = 0.0
        self.friction = friction
        self._seen: deque[tuple[list[float], list[float]]] = deque(
            [self.measure()] * DELAY_PERIODS)

    def measure(self) -> tuple[list[float], list[float]]:
        v = self.vehicle
        return v.wheel_speeds(self.under.params.driven), v.steer_angles(self.under.params.steered)

    def run(self, twist: BodyTwist, seconds: float, record: Record | None = None) -> Record:
        from excavator_sim.drivetrain.wheeled import WheeledGround

        record = record if record is not None else Record()
        ground = WheeledGround(friction=self.friction)
        for _ in range(round(seconds / PERIOD_S)):
            self._seen.append(self.measure())
            speeds, angles = self._seen.popleft()
            cmd = self.model.inverse(twist, np.asarray(angles))   # held = the measured angles
            speed_sp = np.asarray(cmd.speeds, dtype=float)
            angle_sp = np.asarray(cmd.angles, dtype=float)
            rates = self.steer.step(PERIOD_S, angle_sp, angles, True)
            if self.align and self.under.params.driven == self.under.params.steered:
                speed_sp = speed_sp * alignment(angle_sp, angles)
            torques = self.speed.step(PERIOD_S, speed_sp, speeds, True)
            self.vehicle.step(PERIOD_S, WheeledCommand(tuple(float(x) for x in torques),
                                                       tuple(float(x) for x in rates),
                                                       True, False), ground)
            self.t += PERIOD_S
            m_speeds, m_angles = self.measure()
            d = self.model.direct(np.asarray(m_speeds), np.asarray(m_angles))
            record.t.append(self.t)
            record.twist.append(self.vehicle.twist_at(*self.ref))
            record.direct.append((d.vx, d.vy, d.wz))
            record.angles.append(m_angles)
            record.angle_sp.append(angle_sp.tolist())
            record.speeds.append(m_speeds)
            record.feasible.append(cmd.feasible)
        return record
