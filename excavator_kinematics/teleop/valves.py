"""Valve commands and the machine's flow limits: demand -> spool -> cylinder speed -> joint rate.

A spool opening ``s`` in -1..1 (+1 = fully open towards extend, pump to the bore side) gives the
rod speed ``s * Q / A_bore`` when extending and ``s * Q / A_annulus`` when retracting (Q the
function's flow, areas of all its parallel cylinders): the simulation's actuators have the same
flow limits (both use ``excavator_kinematics.geometry.CylinderFlow``). The joint rate follows
from the linkage's ``d(extension)/d(angle)`` at the current pose. When the cylinders together
ask for more than the pumps deliver (``total_flow_lpm``) every function is slowed by the same
factor (flow sharing, as a load-independent flow-sharing valve block does), so the tip keeps
its direction.

The limits are read from the simulation's parameter file (``config/sim.yaml``) as plain YAML:
this package never imports ``excavator_sim``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from excavator_common.parameter_files import read_parameter_file
from excavator_common.paths import config_file
from excavator_kinematics.errors import ConfigError
from excavator_kinematics.geometry import CYLINDER_NAMES, CylinderFlow
from excavator_kinematics.linkage import JOINT_NAMES, Linkage

__all__ = ["CylinderFlow", "FlowLimits", "Hydraulics", "ValveCommand"]


@dataclass(frozen=True)
class FlowLimits:
    """The machine's speed limits: per cylinder, the swing [rad/s], the tracks [m/s], and the
    pumps' total flow [L/min] shared by the cylinders (inf = no sharing)."""

    cylinders: Mapping[str, CylinderFlow]
    swing_speed_rad_s: float
    track_speed_m_s: float
    total_flow_lpm: float = math.inf

    @classmethod
    def from_sim_parameters(cls, flat: Mapping[str, Any], total_flow_lpm: float = math.inf,
                            source: str = "<parameters>") -> FlowLimits:
        """From the dotted keys of the simulation's parameter file (``hydraulics.*``,
        ``tracks.speed_limit_m_s``)."""
        def get(key: str) -> float:
            if key not in flat:
                raise ConfigError(f"{source}: no '{key}': the teleop node reads the flow limits "
                                  "from the simulation's parameter file (hydraulics_file)")
            v = float(flat[key])
            if not math.isfinite(v) or v <= 0.0:
                raise ConfigError(f"{source}: {key} = {v:.6g} must be a positive number")
            return v

        cylinders = {n: CylinderFlow(get(f"hydraulics.{n}.bore_m"),
                                     get(f"hydraulics.{n}.rod_diameter_m"),
                                     int(get(f"hydraulics.{n}.count")),
                                     get(f"hydraulics.{n}.flow_lpm"),
                                     get(f"hydraulics.{n}.retract_flow_lpm"))
                     for n in CYLINDER_NAMES}
        for n, c in cylinders.items():
            if c.rod_diameter_m >= c.bore_m:
                raise ConfigError(f"{source}: hydraulics.{n}.rod_diameter_m "
                                  f"{c.rod_diameter_m:.6g} m must be below bore_m {c.bore_m:.6g}")
        if not total_flow_lpm > 0.0:
            raise ConfigError(f"total_flow_lpm {total_flow_lpm:.6g} L/min must be > 0 (or inf "
                              "for no flow sharing)")
        return cls(cylinders, get("hydraulics.swing.speed_limit_rad_s"),
                   get("tracks.speed_limit_m_s"), total_flow_lpm)

    @classmethod
    def from_file(cls, path: str | Path | None = None,
                  total_flow_lpm: float = math.inf) -> FlowLimits:
        """From a simulation parameter file (``None`` = the package's ``config/sim.yaml``)."""
        p = Path(path) if path else config_file("sim.yaml")
        flat = read_parameter_file(p, "sim_node", error=ConfigError)
        return cls.from_sim_parameters(flat, total_flow_lpm, str(p))


@dataclass(frozen=True)
class ValveCommand:
    """Per function (boom, arm, bucket, swing): spool opening in -1..1 (+ = extend; swing + =
    left), commanded speed (rod [m/s], swing [rad/s]) and the resulting joint rate [rad/s]."""

    spool: dict[str, float]
    speed: dict[str, float]
    joint_rate: dict[str, float]
    flow_scale: float


class Hydraulics:
    """Demands -> valve commands and joint rates, with the flow limits, at a linkage pose."""

    def __init__(self, linkage: Linkage, limits: FlowLimits):
        self.linkage = linkage
        self.limits = limits

    def extension_rates(self, q: np.ndarray) -> np.ndarray:
        """d(extension)/d(angle) [m/rad] of boom, arm, bucket at ``q = (boom, arm, bucket)``."""
        h = 1e-6
        out = np.empty(3)
        for k, name in enumerate(JOINT_NAMES):
            lo, hi = self.linkage.joint_limits[name]
            a, b = max(q[k] - h, lo), min(q[k] + h, hi)
            e = self.linkage.extensions_from_joint(name, np.array([a, b]))
            out[k] = float(e[1] - e[0]) / (b - a)
        return out

    def joint_rate_bounds(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lowest, highest) joint rates [rad/s] of boom, arm, bucket the flows allow at ``q``
        (each function alone, full flow)."""
        d = self.extension_rates(q)
        lo, hi = np.empty(3), np.empty(3)
        for k, name in enumerate(CYLINDER_NAMES):
            c = self.limits.cylinders[name]
            ext, ret = c.extend_speed_m_s / abs(d[k]), c.retract_speed_m_s / abs(d[k])
            lo[k], hi[k] = (-ret, ext) if d[k] > 0 else (-ext, ret)
        return lo, hi

    def from_demands(self, demands: Mapping[str, float], q: np.ndarray) -> ValveCommand:
        """Function demands in -1..1 (joint-positive direction) -> spools, speeds, joint rates.

        The spool sign follows the linkage: boom up extends the boom cylinder, arm out retracts
        the arm cylinder, and so on (the sign of d(extension)/d(angle))."""
        d = self.extension_rates(q)
        spool, speed = {}, {}
        for k, (joint, cyl) in enumerate(zip(JOINT_NAMES, CYLINDER_NAMES, strict=True)):
            s = min(max(float(demands.get(joint, 0.0)), -1.0), 1.0) * math.copysign(1.0, d[k])
            spool[cyl] = s
            speed[cyl] = self.limits.cylinders[cyl].speed(s)
        scale = self._flow_scale(speed)
        rates = {}
        for k, (joint, cyl) in enumerate(zip(JOINT_NAMES, CYLINDER_NAMES, strict=True)):
            speed[cyl] *= scale
            spool[cyl] *= scale
            rates[joint] = speed[cyl] / d[k]
        sw = min(max(float(demands.get("swing", 0.0)), -1.0), 1.0)
        spool["swing"] = sw
        speed["swing"] = rates["swing"] = sw * self.limits.swing_speed_rad_s
        return ValveCommand(spool, speed, rates, scale)

    def from_joint_rates(self, rates: Mapping[str, float], q: np.ndarray) -> ValveCommand:
        """Joint rates [rad/s] (already within the limits) -> the valve commands that give
        them (for coordinated and impedance modes)."""
        d = self.extension_rates(q)
        spool, speed, out = {}, {}, {}
        for k, (joint, cyl) in enumerate(zip(JOINT_NAMES, CYLINDER_NAMES, strict=True)):
            v = float(rates.get(joint, 0.0)) * d[k]
            c = self.limits.cylinders[cyl]
            speed[cyl] = v
            spool[cyl] = v / (c.extend_speed_m_s if v > 0.0 else c.retract_speed_m_s)
            out[joint] = float(rates.get(joint, 0.0))
        w = float(rates.get("swing", 0.0))
        spool["swing"], speed["swing"], out["swing"] = w / self.limits.swing_speed_rad_s, w, w
        return ValveCommand(spool, speed, out, 1.0)

    def flow_scale(self, rates: np.ndarray, q: np.ndarray) -> float:
        """Factor <= 1 that keeps boom/arm/bucket joint ``rates`` within the pumps' total flow."""
        d = self.extension_rates(q)
        return self._flow_scale({c: float(r * dk) for c, r, dk in
                                 zip(CYLINDER_NAMES, rates, d, strict=True)})

    def _flow_scale(self, speeds: Mapping[str, float]) -> float:
        total = sum(self.limits.cylinders[c].flow_lpm_at(v) for c, v in speeds.items())
        return min(1.0, self.limits.total_flow_lpm / total) if total > 0.0 else 1.0
