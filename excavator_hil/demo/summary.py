"""What a demo run reports: soil moved, forces, tracks, real-time factor and whether real time
was held (sim_node's lag behind the wall clock), soil coupling latency, bridge latency."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DemoSummary:
    soil_moved_m3: float = 0.0
    peak_bucket_load_m3: float = 0.0
    peak_soil_force_n: float = 0.0
    track_distance_m: float = 0.0
    sim_time_s: float = 0.0
    wall_time_s: float = 0.0
    real_time_factor: float = 0.0
    bridge_latency_p50_ms: float = math.nan
    bridge_latency_p99_ms: float = math.nan
    bridge_latency_max_ms: float = math.nan
    # (Redis time of the command relative to the drive's first [s], latency [ms]) per command:
    # with a few dozen commands the p99 is the worst one, so each is kept for its diagnosis
    bridge_latencies: list[tuple[float, float]] = field(default_factory=list)
    # the drive's commands no write carried (s after the first command, why: operator.
    # commands_not_carried); they have no latency
    bridge_not_carried: list[tuple[float, str]] = field(default_factory=list)
    bridge_cycles: int = 0
    bridge_overruns: int = 0
    rejected_targets: int = 0
    # real time, from sim_node's /diagnostics (excavator_sim.pacing)
    real_time_held: bool = True  # never warned "cannot keep up", no time given up
    lag_ms_p99: float = math.nan  # behind the wall clock, last window [ms]
    lag_ms_max: float = math.nan  # worst since start-up [ms]
    slipped_s: float = 0.0  # wall time the simulation gave up catching up [s]
    lag_warnings: int = 0  # diagnostics that said "cannot keep up"
    # soil coupling: wrench age on arrival at sim_node [ms of sim time], stale periods
    wrench_age_ms_p50: float = math.nan
    wrench_age_ms_p99: float = math.nan
    wrench_age_ms_max: float = math.nan
    wrench_stale_periods: int = 0  # publish periods without soil force: the wrench was too old
    wrench_applied_periods: int = 0
    poses_superseded: int = 0  # poses soil_node skipped for a newer one (latest wins)
    # commands sim_node dropped as sent too long before it took them (max_command_age_s)
    sim_commands_dropped: int = 0
    # --joystick: teleop_node's joint commands, hold commands and Joys it dropped as too old
    # (with the age of the last one dropped [s] and its limit, max_command_age_s [s])
    teleop: dict[str, float] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    # the plant: "closed" (hardware in the loop: the simulated machine is the PLC's plant) or
    # "standalone" (the virtual PLC's built-in plant, the tracks following it)
    plant: str = "standalone"
    # the closed loop's drive over firm ground, soft soil and a ridge (excavator_hil.demo.
    # hil_record): per track (left, right)
    loop_steady_error_pct: list[float] = field(default_factory=list)  # (v - sp) / sp, firm
    loop_steady_window_s: float = 0.0
    loop_uphill_error_pct: float = math.nan   # held up the ridge's flank (both tracks)
    loop_uphill_window_s: float = 0.0
    loop_ridge_worst_pct: float = math.nan    # the worst deviation from the set-point on it
    loop_peak_slip: list[float] = field(default_factory=list)
    loop_peak_slip_where: str = ""          # firm / patch / ridge
    loop_mean_slip: dict[str, float] = field(default_factory=dict)   # by ground
    loop_steepest_pitch_deg: float = math.nan
    loop_grade_deg: float = math.nan          # the ridge's flanks
    loop_saturated_s: float = 0.0           # at the torque limit [s of simulated time]
    loop_peak_torque_nm: float = math.nan
    loop_torque_limit_nm: float = math.nan
    # a wheeled machine (issue 28): its preset, the bridge's model, and per leg of its drive
    # (excavator_hil.demo.wheeled_record.LegFigures): the speed error per driven wheel against
    # the PLC's set-point [%], the steering angle per steered wheel against the model's inverse
    # [deg], the yaw rate
    machine: str = ""
    vehicle_model: str = ""
    wheel_legs: list[dict[str, Any]] = field(default_factory=list)
    # base_link (x [m], y [m], yaw [rad]) in world where the wheeled drive began and ended
    drive_poses: list[list[float]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        lines = [
            "dig cycle summary",
            f"  soil moved (dumped)     {self.soil_moved_m3:8.3f} m^3  "
            f"(peak bucket load {self.peak_bucket_load_m3:.3f} m^3)",
            f"  peak soil force         {self.peak_soil_force_n / 1000:8.1f} kN",
            f"  {'wheels travelled' if self.vehicle_model else 'tracks travelled':<24}"
            f"{self.track_distance_m:8.2f} m  ({self._path()})",
            *self._loop_lines(),
            *self._wheel_lines(),
            f"  simulated time          {self.sim_time_s:8.1f} s in {self.wall_time_s:.1f} s wall "
            f"(real-time factor {self.real_time_factor:.2f})",
            self._real_time_line(),
            f"  soil coupling           wrench age p50 {self.wrench_age_ms_p50:.1f}, p99 "
            f"{self.wrench_age_ms_p99:.1f}, max {self.wrench_age_ms_max:.1f} ms; "
            f"{self.wrench_stale_periods} periods without soil force (stale), "
            f"{self.poses_superseded} poses superseded",
            f"  bridge latency Redis->PLC  p50 {self.bridge_latency_p50_ms:.2f} ms, "
            f"p99 {self.bridge_latency_p99_ms:.2f} ms, max {self.bridge_latency_max_ms:.2f} ms "
            f"({len(self.bridge_latencies)} commands, {len(self.bridge_not_carried)} never "
            f"carried; {self.bridge_cycles} cycles, {self.bridge_overruns} overruns)",
            f"  rejected IK targets     {self.rejected_targets:8d}",
            *self._command_lines(),
        ]
        lines += [f"  {name:<24}{path}" for name, path in self.outputs.items()]
        return "\n".join(lines)

    def _path(self) -> str:
        if self.plant == "closed":
            return ("Redis -> plc_bridge -> virtual PLC speed loops -> plant link -> simulated "
                    "drive train -> plant link -> PLC -> Redis")
        return "Redis -> plc_bridge -> virtual PLC -> simulated tracks"

    def _loop_lines(self) -> list[str]:
        """The closed loop's figures (none in the standalone arrangement or without a drive
        path)."""
        if self.plant != "closed" or not self.loop_peak_slip:
            return []
        err = self.loop_steady_error_pct
        errors = (f"left {err[0]:+.2f} %, right {err[1]:+.2f} % over "
                  f"{self.loop_steady_window_s:.1f} s on firm ground" if len(err) == 2
                  and all(math.isfinite(e) for e in err) else "no settled stretch on firm ground")
        slips = ", ".join(f"{k} {v:.3f}" for k, v in self.loop_mean_slip.items())
        if self.loop_saturated_s > 0.0:
            sat = (f"at the torque limit ({self.loop_torque_limit_nm / 1000:.2f} kN m) for "
                   f"{self.loop_saturated_s:.2f} s")
        else:
            sat = (f"never (peak {self.loop_peak_torque_nm / 1000:.2f} of "
                   f"{self.loop_torque_limit_nm / 1000:.2f} kN m)")
        uphill = (f"{self.loop_uphill_error_pct:+.2f} % held up the {self.loop_grade_deg:.0f} "
                  f"deg flank ({self.loop_uphill_window_s:.1f} s)"
                  if math.isfinite(self.loop_uphill_error_pct) else "not settled up the flank")
        return [
            f"  speed loop (PLC)        steady-state error {errors}",
            f"  on the ridge            {uphill}; worst {self.loop_ridge_worst_pct:+.1f} % "
            "while the grade changed",
            f"  slip                    peak left {self.loop_peak_slip[0]:.3f}, right "
            f"{self.loop_peak_slip[1]:.3f} (on {self.loop_peak_slip_where}); mean by ground: "
            f"{slips}",
            f"  drive saturation        {sat}; steepest pitch "
            f"{self.loop_steepest_pitch_deg:.1f} deg",
        ]

    def _wheel_lines(self) -> list[str]:
        """A wheeled machine's drive, leg by leg: each driven wheel's speed against the PLC's
        set-point, each steered wheel's angle against the model's inverse, the yaw rate."""
        if not self.vehicle_model:
            return []
        lines = [f"  wheeled drive           {self.machine} ({self.vehicle_model} model): "
                 "speed vs PLC set-point, steering vs the model's inverse, settled part of "
                 "each leg"]
        for leg in self.wheel_legs:
            vx, vy, wz = leg["twist"]
            head = (f"    {leg['name']:<14}v_x {vx:+.2f} m/s, v_y {vy:+.2f} m/s, w_z "
                    f"{wz:+.3f} rad/s")
            if leg["window_s"] <= 0.0:
                lines.append(f"{head}: not settled")
                continue
            speeds = ", ".join(f"{w} {e:+.2f} %" for w, e in leg["speed_error_pct"].items())
            angles = ", ".join(
                f"{w} {leg['inverse_angle_deg'][w]:+.1f} deg {e:+.2f}"
                for w, e in leg["angle_error_deg"].items())
            lines.append(f"{head} over {leg['window_s']:.1f} s")
            lines.append(f"      speed error   {speeds}")
            if angles:
                lines.append(f"      steering      {angles} (inverse, measured - inverse)")
            lines.append(f"      yaw rate      {leg['yaw_rate_rad_s']:+.4f} rad/s "
                         f"(commanded {wz:+.4f})")
        return lines

    def _command_lines(self) -> list[str]:
        """Where operator commands were lost: the first thing to read when the bucket never
        reached the soil."""
        lines = [f"  commands dropped        {self.sim_commands_dropped:8d}  (by sim_node: sent "
                 "longer than its max_command_age_s before it took them)"]
        t = self.teleop
        if t:
            last = (f"; the last {t['last_dropped_age_s']:.3f} s old, limit "
                    f"{t['max_command_age_s']:g} s" if t["joys_dropped"] else "")
            lines.append(f"  joystick (teleop_node)  {int(t['commands'])} commands, "
                         f"{int(t['holds'])} holds, {int(t['joys_dropped'])} Joys dropped as "
                         f"too old{last}")
            if "joys_restamped" in t:  # a summary.json of an earlier version has not
                lines.append(f"  joystick schedule       {int(t['joys_restamped'])} Joys "
                             f"re-stamped, {int(t['commands_past_stamp'])} commands past their "
                             f"stamp, {int(t['command_lockstep_timeouts'])} lockstep waits "
                             "given up (0, 0, 0: the session acted at its stamps)")
        return lines

    def _real_time_line(self) -> str:
        if self.real_time_held:
            return (f"  real time               held (lag behind the wall clock p99 "
                    f"{self.lag_ms_p99:.1f} ms, max {self.lag_ms_max:.1f} ms)")
        return (f"  real time               NOT HELD: up to {self.lag_ms_max:.0f} ms behind the "
                f"wall clock ({self.lag_warnings} warnings, {self.slipped_s:.2f} s given up)\n"
                "                          this machine could not keep up: forces and timings "
                "of this run are not those of real time")
