"""The demo's drive for a wheeled machine (issue 28): body twists held for a while each, chosen
to show how the machine steers, through the bridge's model and the virtual PLC's speed and
steering loops to the simulated wheels.

- Ackermann (front axle steered, rear wheels driven): straight, a left turn, a right turn of
  the same curvature (an S: the heading back to +x), straight. Each turn's wheel angles are the
  model's inverse (the inner wheel steers more than the outer one, the outer rear wheel runs
  faster than the inner one).
- 4WD4WS (every wheel driven and steered): straight, a diagonal crab (all four wheels parallel,
  the machine moving forward and to the left without turning), straight. The PLC steers the
  wheels before it drives them ("steer, then drive", docs/plc_bridge.md), so the machine slows
  at each change of heading of the wheels.

The twists are ARTOF's axes (``plc.control.navigation.velocity.*``: longitudinal along
base_link x, lateral positive to the left, angular about z) [m/s, rad/s]. The machine starts
where the commanded twists, integrated, end at x = 0, y = 0, heading +x: where the dig cycle
expects it (a real loop lags the command, so it ends a little short of it). The ground is the
firm flat heavy clay of the shipped soil (no ridge, no soft patch); the soil grid is stretched
back to under the start, as for the tracked machine's path.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from excavator_kinematics.vehicle import BodyTwist
from excavator_sim.soil.terrain_config import TerrainConfig

GRID_MARGIN_M = 3.0   # soil grid beyond the start, behind the machine [m]


@dataclass(frozen=True)
class Segment:
    """One leg of the drive: its name, the twist held [m/s, m/s, rad/s] and for how long [s of
    simulated time]."""

    name: str
    twist: BodyTwist
    duration_s: float


@dataclass(frozen=True)
class WheeledPath:
    """The legs of a wheeled machine's drive, in order."""

    model: str
    segments: tuple[Segment, ...]

    @classmethod
    def for_model(cls, model: str, quick: bool = False) -> WheeledPath:
        """The drive suited to the bridge model ``model`` (``ackermann`` or ``4wd4ws``);
        ``quick`` shortens the straight legs (the steered ones keep the time their loops need
        to settle)."""
        straight = 2.0 if quick else 6.0   # 6 s: settled for 2 s after SETTLE_S
        if model == "ackermann":
            return cls(model, (Segment("straight", BodyTwist(0.8, 0.0, 0.0), straight),
                               Segment("turn left", BodyTwist(0.8, 0.0, 0.15), 7.0),
                               Segment("turn right", BodyTwist(0.8, 0.0, -0.15), 7.0),
                               Segment("straight out", BodyTwist(0.8, 0.0, 0.0), straight)))
        if model == "4wd4ws":
            return cls(model, (Segment("straight", BodyTwist(0.8, 0.0, 0.0), straight),
                               Segment("crab left", BodyTwist(0.5, 0.35, 0.0), 8.0),
                               Segment("straight out", BodyTwist(0.8, 0.0, 0.0), straight)))
        raise ValueError(f"no wheeled demo path for the model {model!r}: the wheeled models are "
                         "ackermann and 4wd4ws (skid_steer drives the tracked machine's path, "
                         "excavator_hil.demo.drive_path)")

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.segments)

    def at(self, t_s: float) -> tuple[int, Segment]:
        """The leg (its index) in force ``t_s`` [s] after the start; past the end, the last."""
        end = 0.0
        for k, s in enumerate(self.segments):
            end += s.duration_s
            if t_s < end:
                return k, s
        return len(self.segments) - 1, self.segments[-1]

    def displacement(self) -> tuple[float, float, float]:
        """Where the commanded twists, held for their durations from (0, 0, heading 0), take
        the machine: (x [m], y [m], heading [rad]) (exact arcs)."""
        x = y = yaw = 0.0
        for s in self.segments:
            u, w, r = s.twist.vx, s.twist.vy, s.twist.wz
            t = s.duration_s
            if abs(r) < 1e-12:
                dx, dy = u * t, w * t
            else:   # the body-frame velocity rotates with the heading: integrate exactly
                dx = (u * math.sin(r * t) - w * (1.0 - math.cos(r * t))) / r
                dy = (u * (1.0 - math.cos(r * t)) + w * math.sin(r * t)) / r
            c, sn = math.cos(yaw), math.sin(yaw)
            x, y = x + c * dx - sn * dy, y + sn * dx + c * dy
            yaw += r * t
        return x, y, yaw

    def start(self) -> tuple[float, float]:
        """The start (x, y) [m, world] from which the legs end at the origin, heading +x (the
        legs turn back to the heading they started with)."""
        x, y, yaw = self.displacement()
        assert abs(yaw) < 1e-9, "a demo path ends on the heading it started with"
        return -x, -y

    def soil_grid(self, shipped: TerrainConfig) -> TerrainConfig:
        """The shipped soil grid stretched back (its far edge, the dig's side, kept) to
        ``GRID_MARGIN_M`` behind the start, and wide enough for it."""
        x0, y0 = self.start()
        x_max = shipped.x0 + shipped.nx * shipped.cell_xy_m
        x_min = min(shipped.x0, x0 - GRID_MARGIN_M)
        half_y = max(0.5 * shipped.size_y_m, abs(y0) + GRID_MARGIN_M)
        size_x = x_max - x_min
        return dataclasses.replace(shipped, size_x_m=size_x, centre_x_m=x_min + 0.5 * size_x,
                                   size_y_m=2.0 * half_y, centre_y_m=0.0)

    @staticmethod
    def soil_node_parameters(grid: TerrainConfig) -> dict[str, float]:
        """soil_node's (and the in-process soil's) ``terrain.*`` for ``grid``."""
        return {"terrain.size_x_m": grid.size_x_m, "terrain.centre_x_m": grid.centre_x_m,
                "terrain.size_y_m": grid.size_y_m, "terrain.centre_y_m": grid.centre_y_m}

    def sim_parameters(self) -> dict[str, float | str]:
        """sim_node's start (its height field: ``excavator_hil.fleet.sim_grid_parameters``)."""
        x0, y0 = self.start()
        return {"initial.base_x_m": x0, "initial.base_y_m": y0}
