"""What a wheeled machine's demo drive recorded, its figures and its plot (pure: numpy and
matplotlib, no ROS).

Sources, each as the part of the loop that owns it reports it (as for the tracked machine,
:mod:`excavator_hil.demo.hil_record`):
- the PLC's wheel speed and steering angle set-points: the virtual PLC's log of the control-DB
  writes it took (what the bridge's model computed), mapped to simulated time through the
  operator's ``/clock`` samples;
- the measured wheel speeds (``r omega`` [m/s]) and steering angles [rad]: ``plant/sensors``,
  the yaw rate: ``imu`` (simulated time stamps), what the plant link hands the PLC;
- the reference: the bridge model's inverse of each leg's commanded twist
  (:class:`~excavator_kinematics.vehicle.WheelCommand`, with the machine's own geometry).

Per leg, over its settled part (``SETTLE_S`` after it began and after any stop the PLC held
it in: the steering needs up to ~3 s at 0.35 rad/s, the speed loops their own seconds), the
mean speed error of each driven wheel against the PLC's set-point [%], the mean steering angle
error of each steered wheel against the model's inverse [deg] and the yaw rate against the
command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from excavator_hil.demo.hil_record import setpoints_at
from excavator_hil.demo.wheeled_path import WheeledPath

SETTLE_S = 4.0   # after a leg begins, before its steady figures [s of simulated time]
MIN_WINDOW_S = 1.0   # a shorter settled part gives no figure (NaN)


@dataclass
class WheeledRecord:
    """Samples of one wheeled drive. ``wheels``/``steers``: the model's driven and steered
    wheels (the PLC's order); ``sensors``: (t [s sim], speed per driven wheel [m/s], angle per
    steered wheel [rad]); ``imu``: (t, yaw rate [rad/s]); ``clock``: (monotonic [s], sim [s]);
    ``setpoints``: (monotonic [s], speed per driven wheel [m/s], angle per steered wheel [rad])
    as the PLC took them; ``modes``: (monotonic [s], mode) the PLC program's mode changes
    (its speed set-points are in force in ``drive`` only); ``legs``: (sim time [s], leg index)
    where each leg began."""

    wheels: tuple[str, ...]
    steers: tuple[str, ...]
    sensors: list[tuple[float, ...]] = field(default_factory=list)
    imu: list[tuple[float, float]] = field(default_factory=list)
    clock: list[tuple[float, float]] = field(default_factory=list)
    setpoints: list[tuple[float, ...]] = field(default_factory=list)
    modes: list[tuple[float, str]] = field(default_factory=list)
    legs: list[tuple[float, int]] = field(default_factory=list)

    def arrays(self) -> np.ndarray:
        n = 1 + len(self.wheels) + len(self.steers)
        s = np.array(self.sensors, dtype=float).reshape(-1, n)
        return s[np.argsort(s[:, 0], kind="stable")]

    def setpoint_at(self, t_sim: np.ndarray) -> np.ndarray:
        """(n, wheels + steers) set-points in force at ``t_sim`` [s of simulated time]."""
        return setpoints_at(self.clock, self.setpoints, t_sim,
                            len(self.wheels) + len(self.steers), self.modes, len(self.wheels))


def setpoint_row(write: dict[str, Any], wheels: tuple[str, ...], steers: tuple[str, ...]
                 ) -> tuple[float, ...]:
    """(monotonic t, speeds..., angles...) a control-DB write the PLC took puts in force: speeds
    0 when it asks for a stop or does not enable the drives (the angles stay set)."""
    stop = bool(write.get("stop")) or not write.get("enable", True)
    speeds = [0.0 if stop else float(write.get(f"speed_sp_{w}", 0.0)) for w in wheels]
    angles = [float(write.get(f"angle_sp_{s}", 0.0)) for s in steers]
    return (float(write["t"]), *speeds, *angles)


@dataclass
class LegFigures:
    """One leg's steady figures (NaN where its settled part is too short)."""

    name: str
    twist: tuple[float, float, float]             # commanded (vx, vy, wz) [m/s, m/s, rad/s]
    window_s: float = 0.0                          # settled part averaged over [s]
    speed_error_pct: dict[str, float] = field(default_factory=dict)    # vs the PLC set-point
    setpoint_m_s: dict[str, float] = field(default_factory=dict)       # the mean set-point
    inverse_angle_deg: dict[str, float] = field(default_factory=dict)  # the model's inverse
    angle_error_deg: dict[str, float] = field(default_factory=dict)    # measured - inverse
    yaw_rate_rad_s: float = math.nan                # measured (IMU), mean


def figures(record: WheeledRecord, path: WheeledPath, model: Any) -> list[LegFigures]:
    """Each leg's :class:`LegFigures`; ``model``: the bridge's vehicle model of the machine
    (its ``inverse`` gives the reference angles)."""
    s = record.arrays()
    marks = sorted(record.legs)
    out = []
    nw = len(record.wheels)
    sp = record.setpoint_at(s[:, 0]) if len(s) else np.zeros((0, nw + len(record.steers)))
    imu = np.array(record.imu, dtype=float).reshape(-1, 2)
    for k, (t0, index) in enumerate(marks):
        leg = path.segments[index]
        t1 = marks[k + 1][0] if k + 1 < len(marks) else t0 + leg.duration_s
        f = LegFigures(leg.name, (leg.twist.vx, leg.twist.vy, leg.twist.wz))
        inverse = model.inverse(leg.twist)
        for name, angle in zip(model.steer_names, inverse.angles, strict=True):
            f.inverse_angle_deg[name] = math.degrees(float(angle))
        sel = _settled(s[:, 0], sp[:, :nw], t0, t1) if len(s) else np.zeros(0, bool)
        if sel.sum() >= 2 and s[sel, 0][-1] - s[sel, 0][0] >= MIN_WINDOW_S:
            f.window_s = float(s[sel, 0][-1] - s[sel, 0][0])
            for i, w in enumerate(record.wheels):
                mean_sp = float(np.mean(sp[sel, i]))
                f.setpoint_m_s[w] = mean_sp
                f.speed_error_pct[w] = (100.0 * float(np.mean(s[sel, 1 + i] - sp[sel, i]))
                                        / abs(mean_sp) if abs(mean_sp) > 1e-3 else math.nan)
            for j, name in enumerate(record.steers):
                measured = float(np.mean(s[sel, 1 + nw + j]))
                f.angle_error_deg[name] = math.degrees(measured) - f.inverse_angle_deg[name]
            on = (imu[:, 0] >= t0 + SETTLE_S) & (imu[:, 0] < t1) if len(imu) else None
            if on is not None and on.any():
                f.yaw_rate_rad_s = float(np.mean(imu[on, 1]))
        out.append(f)
    return out


def _settled(t: np.ndarray, speed_sp: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """The samples of the leg [t0, t1) at least ``SETTLE_S`` after it began and after the PLC
    last took the drives from a stop (a set-point of zero on every wheel: the bridge's stop, a
    heartbeat missed on a starved host), the drives enabled since: what the loops had time to
    reach."""
    moving = np.any(np.abs(speed_sp) > 0.05, axis=1) if speed_sp.shape[1] else \
        np.ones(len(t), bool)
    out = np.zeros(len(t), bool)
    since = t0
    for k in range(len(t)):
        if t[k] < t0 or t[k] >= t1:
            continue
        if not moving[k]:
            since = math.inf
            continue
        if since == math.inf:
            since = t[k]
        out[k] = t[k] - since >= SETTLE_S
    return out


def plot(record: WheeledRecord, path: WheeledPath, model: Any, fig_path: Path,
         title: str = "") -> None:
    """Set-point against measured speed per driven wheel, measured steering angle against the
    model's inverse per steered wheel and the yaw rate against the command, over simulated
    time, the legs marked (the project's plot style: Agg, tab colours, 110 dpi)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = record.arrays()
    fig, axes = plt.subplots(3, 1, figsize=(11, 9.5), sharex=True,
                             gridspec_kw={"height_ratios": [2, 2, 1.4]})
    if len(s) == 0:
        fig.savefig(fig_path, dpi=110)
        plt.close(fig)
        return
    t0 = s[0, 0]
    t = s[:, 0] - t0
    sp = record.setpoint_at(s[:, 0])
    nw = len(record.wheels)
    colours = dict(zip(("fl", "fr", "rl", "rr"), ("tab:blue", "tab:orange", "tab:green",
                                                  "tab:red"), strict=True))
    for i, w in enumerate(record.wheels):
        c = colours.get(w, "k")
        axes[0].plot(t, sp[:, i], color=c, ls="--", lw=1.0, drawstyle="steps-post")
        axes[0].plot(t, s[:, 1 + i], color=c, lw=1.0, label=f"{w} measured (-- PLC set-point)")
    axes[0].set_ylabel("wheel speed r$\\omega$ [m/s]")
    axes[0].legend(loc="lower center", ncol=4, fontsize=8)
    marks = sorted(record.legs)
    # the model's inverse per leg, as steps
    inv_t, inv_a = [], []
    for k, (tm, index) in enumerate(marks):
        leg = path.segments[index]
        end = marks[k + 1][0] if k + 1 < len(marks) else s[-1, 0]
        inv_t += [tm - t0, end - t0]
        a = np.degrees(np.asarray(model.inverse(leg.twist).angles, dtype=float))
        inv_a += [a, a]
    for j, name in enumerate(record.steers):
        c = colours.get(name, "k")
        axes[1].plot(t, np.degrees(s[:, 1 + nw + j]), color=c, lw=1.0, label=f"{name} measured")
        if inv_t:
            axes[1].plot(inv_t, [a[j] for a in inv_a], color=c, ls=":", lw=1.4)
    axes[1].set_ylabel("steering angle [deg]\n(: model's inverse)")
    axes[1].legend(loc="lower center", ncol=4, fontsize=8)
    imu = np.array(record.imu, dtype=float).reshape(-1, 2)
    if len(imu):
        imu = imu[np.argsort(imu[:, 0])]
        axes[2].plot(imu[:, 0] - t0, imu[:, 1], color="tab:purple", lw=1.0,
                     label="yaw rate (IMU)")
    if inv_t:
        axes[2].plot(inv_t, [path.segments[i].twist.wz for _, i in marks for _ in (0, 1)],
                     color="k", ls="--", lw=1.0, label="commanded")
    lo, hi = axes[2].get_ylim()   # a crab's zero yaw rate drawn as zero, not as noise
    axes[2].set_ylim(min(lo, -0.05), max(hi, 0.05))
    axes[2].set_ylabel("yaw rate [rad/s]")
    axes[2].set_xlabel("simulated time [s]")
    axes[2].legend(loc="lower center", ncol=2, fontsize=8)
    for tm, index in marks:
        for ax in axes:
            ax.axvline(tm - t0, color="0.7", lw=0.6)
        axes[0].annotate(path.segments[index].name, (tm - t0, 1.0),
                         xycoords=("data", "axes fraction"), fontsize=8, va="top")
    fig.suptitle(title or f"Wheeled drive ({path.model}) through the PLC's speed and steering "
                 "loops")
    fig.tight_layout()
    fig.savefig(fig_path, dpi=110)
    plt.close(fig)
