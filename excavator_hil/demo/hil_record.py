"""What the demo's drive with the loop closed recorded, its figures and its plot (pure: numpy and
matplotlib, no ROS).

Sources, each as the part of the loop that owns it reports it:
- the PLC's speed set-points per track: the virtual PLC's log of the control-DB writes it took
  (its monotonic clock), in force only while its program's mode was ``drive`` (its log of mode
  changes: a controlled stop after its watchdog tripped brings the drives to 0 under a set-point
  the bridge wrote before, and the tracks then run slower than the ground: no driving slip),
  mapped to simulated time through the ``/clock`` samples the operator took (the time sim_node
  sent each, so a late reader does not shift them: wall -> simulated time to a few ms);
- the measured track speeds, drive torques and ground speed: ``plant/sensors``, and the yaw
  rate and pitch: ``imu`` (simulated time stamps), what the plant link hands the PLC;
- the machine's x over ground: ``joint_states`` (same stamps), for the ground under it.

Slip per track as the drive train defines it (docs/simulation.md): ``i = (v_t - V) /
max(|v_t|, |V|)`` with ``V`` the track's ground speed, ``u -+ r_z B / 2`` (left, right).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from excavator_hil.demo.drive_path import DrivePath

SETTLE_S = 5.0          # after the start and after each change of ground, before "steady"
SLOPE_SETTLE_S = 2.5    # on the flank's constant grade, before "held"
SLIP_MIN_SPEED_M_S = 0.05   # below this on both speeds the slip is 0/0: not counted
SATURATION_RATIO = 0.99     # |torque| at this fraction of the limit counts as saturated


@dataclass
class HilRecord:
    """Samples of one closed-loop drive. ``sensors``: (t [s sim], v_left, v_right [m/s],
    ground speed [m/s], torque_left, torque_right [N m], base x [m]); ``imu``: (t, yaw rate
    [rad/s], pitch [rad], nose up positive); ``clock``: (monotonic [s], sim time [s]);
    ``setpoints``: (monotonic [s], left, right [m/s]) as the PLC took them; ``modes``:
    (monotonic [s], mode) the PLC program's mode changes (none logged: always driving)."""

    sensors: list[tuple[float, ...]] = field(default_factory=list)
    imu: list[tuple[float, float, float]] = field(default_factory=list)
    clock: list[tuple[float, float]] = field(default_factory=list)
    setpoints: list[tuple[float, float, float]] = field(default_factory=list)
    modes: list[tuple[float, str]] = field(default_factory=list)

    def setpoint_at(self, t_sim: np.ndarray) -> np.ndarray:
        """(n, 2) set-points [m/s] in force at simulated times ``t_sim`` (0 before the first
        write and while the PLC was not in ``drive``; the last write before each time)."""
        return setpoints_at(self.clock, self.setpoints, t_sim, 2, self.modes)


def setpoints_at(clock: Sequence[tuple[float, float]], setpoints: Sequence[Sequence[float]],
                 t_sim: np.ndarray, columns: int,
                 modes: Sequence[tuple[float, str]] = (), speeds: int | None = None
                 ) -> np.ndarray:
    """(n, ``columns``) set-points in force at simulated times ``t_sim``: ``setpoints`` rows
    are (monotonic time [s] the PLC took them, value...), mapped to simulated time through
    ``clock`` samples (monotonic [s], simulated [s]); 0 before the first; the last one taken
    before each time; the first ``speeds`` columns (all by default: speed set-points) 0 where
    the PLC program's mode in force (``modes``: (monotonic [s], mode) changes, the first the
    one in force before the others) was not ``drive``."""
    out = np.zeros((len(t_sim), columns))
    if not setpoints or len(clock) < 2:
        return out
    c = np.array(clock)
    sp = np.array(setpoints, dtype=float)
    t_sp = np.interp(sp[:, 0], c[:, 0], c[:, 1])   # monotonic -> simulated time
    k = np.searchsorted(t_sp, t_sim, side="right") - 1
    have = k >= 0
    out[have] = sp[k[have], 1:1 + columns]
    if modes:
        t_mode = np.interp([t for t, _ in modes], c[:, 0], c[:, 1])
        driving = np.array([m == "drive" for _, m in modes])
        j = np.maximum(np.searchsorted(t_mode, t_sim, side="right") - 1, 0)
        out[~driving[j], :columns if speeds is None else speeds] = 0.0
    return out


@dataclass
class HilFigures:
    """The closed loop's figures for the summary. Errors and slips per track (left, right)."""

    steady_error_pct: tuple[float, float] = (math.nan, math.nan)  # mean (v - sp) / sp, firm
    steady_window_s: float = 0.0      # simulated time the steady-state error is taken over
    # up the ridge's flank (its constant grade, SLOPE_SETTLE_S after reaching it): mean (v -
    # sp) / sp, both tracks, and over how long; the worst dip below the set-point on the ridge
    uphill_error_pct: float = math.nan
    uphill_window_s: float = 0.0
    ridge_worst_pct: float = math.nan
    peak_slip: tuple[float, float] = (math.nan, math.nan)         # max |i| while driving
    peak_slip_where: str = ""         # the ground under the tracks at the larger one
    mean_slip_by_ground: dict[str, float] = field(default_factory=dict)   # both tracks
    steepest_pitch_deg: float = math.nan   # the IMU's, nose up positive
    saturated_s: float = 0.0          # simulated time any drive was at its torque limit
    peak_torque_nm: float = math.nan


def _arrays(record: HilRecord) -> tuple[np.ndarray, np.ndarray]:
    s = np.array(record.sensors, dtype=float).reshape(-1, 7)
    s = s[np.argsort(s[:, 0], kind="stable")]
    imu = np.array(record.imu, dtype=float).reshape(-1, 3)
    if len(imu):
        imu = imu[np.argsort(imu[:, 0], kind="stable")]
    return s, imu


def slips(record: HilRecord, gauge_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Per sensors sample: (t, slip left, slip right) columns; NaN where both the track and
    its ground speed are below ``SLIP_MIN_SPEED_M_S``."""
    s, imu = _arrays(record)
    yaw = np.interp(s[:, 0], imu[:, 0], imu[:, 1]) if len(imu) else np.zeros(len(s))
    out = np.full((len(s), 2), np.nan)
    for col, sign in ((1, -1.0), (2, 1.0)):
        v_t = s[:, col]
        ground = s[:, 3] + sign * yaw * 0.5 * gauge_m
        den = np.maximum(np.abs(v_t), np.abs(ground))
        ok = den >= SLIP_MIN_SPEED_M_S
        out[ok, col - 1] = (v_t[ok] - ground[ok]) / den[ok]
    return s[:, 0], out


def figures(record: HilRecord, path: DrivePath, torque_limit_nm: float, gauge_m: float,
            half_length_m: float) -> HilFigures:
    """The summary's figures of ``record`` (see :class:`HilFigures`)."""
    s, imu = _arrays(record)
    f = HilFigures()
    if len(s) < 2:
        return f
    t = s[:, 0]
    sp = record.setpoint_at(t)
    zones = np.array([path.zone(x, half_length_m) for x in s[:, 6]])
    driving = np.any(np.abs(sp) > 0.05, axis=1)
    # steady: on firm ground, the set-point the same for SETTLE_S, on that ground as long
    since = np.full(len(t), np.nan)      # on this ground with this set-point for [s]
    since_sp = np.full(len(t), np.nan)   # with this set-point for [s]
    start = start_sp = t[0]
    for k in range(len(t)):
        changed = k > 0 and bool(np.any(np.abs(sp[k] - sp[k - 1]) > 0.01))
        if k == 0 or changed:
            start_sp = t[k]
        if k == 0 or changed or zones[k] != zones[k - 1]:
            start = t[k]
        since[k], since_sp[k] = t[k] - start, t[k] - start_sp
    steady = driving & (zones == "firm") & (since >= SETTLE_S)
    if steady.sum() >= 10:
        err = [100.0 * float(np.mean(s[steady, 1 + i] - sp[steady, i]) / np.mean(sp[steady, i]))
               for i in (0, 1)]
        f.steady_error_pct = (err[0], err[1])
        f.steady_window_s = float(np.sum(np.diff(t)[steady[1:]]))
    if len(imu):
        pitch = np.interp(t, imu[:, 0], imu[:, 2])
        up = driving & (pitch >= 0.9 * path.steepest_grade_rad)   # on the uphill flank
        if np.any(up):
            on_grade = np.full(len(t), np.nan)   # on the flank's grade for [s]
            start = t[0]
            for k in range(len(t)):
                if not up[k] or (k > 0 and not up[k - 1]):
                    start = t[k]
                on_grade[k] = t[k] - start
            held = up & (on_grade >= SLOPE_SETTLE_S) & (since_sp >= SLOPE_SETTLE_S)
            if held.sum() >= 10:
                rel = (s[held, 1:3] - sp[held]) / sp[held]
                f.uphill_error_pct = 100.0 * float(np.mean(rel))
                f.uphill_window_s = float(np.sum(np.diff(t)[held[1:]]))
        on_ridge = driving & np.isin(zones, ("ridge", "patch"))
        if np.any(on_ridge):
            rel = (s[on_ridge, 1:3] - sp[on_ridge]) / sp[on_ridge]
            f.ridge_worst_pct = 100.0 * float(rel[np.unravel_index(np.argmax(np.abs(rel)),
                                                                   rel.shape)])
    _, sl = slips(record, gauge_m)
    sl = np.where(driving[:, None], sl, np.nan)
    if np.any(np.isfinite(sl)):
        peak = np.nanmax(np.abs(sl), axis=0)
        f.peak_slip = (float(peak[0]), float(peak[1]))
        k = int(np.nanargmax(np.where(np.isfinite(sl), np.abs(sl), -1.0).max(axis=1)))
        f.peak_slip_where = str(zones[k])
        for zone in ("firm", "patch", "ridge"):
            here = sl[zones == zone]
            if np.any(np.isfinite(here)):
                f.mean_slip_by_ground[zone] = float(np.nanmean(here))
    if len(imu):
        f.steepest_pitch_deg = float(np.degrees(imu[np.argmax(np.abs(imu[:, 2])), 2]))
    torque = np.abs(s[:, 4:6])
    f.peak_torque_nm = float(np.max(torque))
    at_limit = np.any(torque >= SATURATION_RATIO * torque_limit_nm, axis=1)
    f.saturated_s = float(np.sum(np.diff(t)[at_limit[1:]]))
    return f


def plot(record: HilRecord, path: DrivePath, fig_path: Path, gauge_m: float,
         half_length_m: float, torque_limit_nm: float, title: str = "") -> None:
    """Set-point against measured speed per track, the slip, and the ground (pitch, torque) over
    simulated time, the ground under the tracks shaded (the project's plot style: Agg, tab
    colours, 110 dpi, like the force plots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, imu = _arrays(record)
    fig, axes = plt.subplots(4, 1, figsize=(11, 9.5), sharex=True,
                             gridspec_kw={"height_ratios": [2, 2, 1.6, 1.6]})
    if len(s) == 0:
        fig.savefig(fig_path, dpi=110)
        plt.close(fig)
        return
    t0 = s[0, 0]
    t = s[:, 0] - t0
    sp = record.setpoint_at(s[:, 0])
    for ax, i, name in ((axes[0], 0, "left"), (axes[1], 1, "right")):
        ax.plot(t, sp[:, i], color="k", ls="--", lw=1.2, drawstyle="steps-post",
                label="set-point (PLC, from the bridge)")
        ax.plot(t, s[:, 1 + i], color="tab:blue", lw=1.0, label=f"{name} track, measured")
        ax.plot(t, s[:, 3], color="tab:orange", lw=0.9, alpha=0.8,
                label="ground speed (radar)")
        ax.set_ylabel(f"{name} track [m/s]")
        ax.legend(loc="lower center", ncol=3, fontsize=8)
    _, sl = slips(record, gauge_m)
    axes[2].plot(t, sl[:, 0], color="tab:blue", lw=1.0, label="left")
    axes[2].plot(t, sl[:, 1], color="tab:red", lw=1.0, ls="--", label="right")
    axes[2].set_ylabel("slip [-]")
    axes[2].axhline(0.0, color="0.6", lw=0.6)
    axes[2].legend(loc="upper right", ncol=2, fontsize=8)
    ax_t = axes[3]
    ax_t.plot(t, s[:, 4] / 1e3, color="tab:blue", lw=1.0, label="torque left")
    ax_t.plot(t, s[:, 5] / 1e3, color="tab:red", lw=1.0, ls="--", label="torque right")
    ax_t.axhline(torque_limit_nm / 1e3, color="tab:red", lw=0.8, ls=":",
                 label="torque limit")
    ax_t.set_ylabel("drive torque [kN m]")
    ax_t.set_xlabel("simulated time [s]")
    ax_t.legend(loc="upper left", ncol=3, fontsize=8)
    if len(imu):
        ax_p = ax_t.twinx()
        ax_p.plot(imu[:, 0] - t0, np.degrees(imu[:, 2]), color="tab:green", lw=1.0)
        ax_p.set_ylabel("pitch (nose up) [deg]", color="tab:green")
    # the ground under the tracks
    zones = [path.zone(x, half_length_m) for x in s[:, 6]]
    shade = {"patch": ("tab:brown", f"soft patch ({path.patch_soil})"),
             "ridge": ("tab:green", f"ridge ({path.ridge_height_m:g} m, steepest "
                                    f"{math.degrees(path.steepest_grade_rad):.0f} deg)")}
    labelled: set[str] = set()
    for zone, (color, label) in shade.items():
        for a, b in _runs(t, [z == zone for z in zones]):
            for ax in axes:
                ax.axvspan(a, b, color=color, alpha=0.12, lw=0,
                           label=label if ax is axes[0] and zone not in labelled else None)
            labelled.add(zone)
    axes[0].legend(loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(title or "Hardware in the loop: the PLC's speed loops on the simulated "
                 "machine")
    fig.tight_layout()
    fig.savefig(fig_path, dpi=110)
    plt.close(fig)


def _runs(t: np.ndarray, flags: Sequence[bool]) -> list[tuple[float, float]]:
    """(start, end) times of each run of True in ``flags``."""
    out, start = [], None
    for k, flag in enumerate(flags):
        if flag and start is None:
            start = t[k]
        if not flag and start is not None:
            out.append((float(start), float(t[k])))
            start = None
    if start is not None:
        out.append((float(start), float(t[-1])))
    return out
