"""What a demo run reports: soil moved, forces, tracks, real-time factor, bridge latency."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


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
    bridge_cycles: int = 0
    bridge_overruns: int = 0
    rejected_targets: int = 0
    phases: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        lines = [
            "dig cycle summary",
            f"  soil moved (dumped)     {self.soil_moved_m3:8.3f} m^3  "
            f"(peak bucket load {self.peak_bucket_load_m3:.3f} m^3)",
            f"  peak soil force         {self.peak_soil_force_n / 1000:8.1f} kN",
            f"  tracks travelled        {self.track_distance_m:8.2f} m  (Redis -> plc_bridge -> "
            "virtual PLC -> simulated tracks)",
            f"  simulated time          {self.sim_time_s:8.1f} s in {self.wall_time_s:.1f} s wall "
            f"(real-time factor {self.real_time_factor:.2f})",
            f"  bridge latency Redis->PLC  p50 {self.bridge_latency_p50_ms:.2f} ms, "
            f"p99 {self.bridge_latency_p99_ms:.2f} ms ({self.bridge_cycles} cycles, "
            f"{self.bridge_overruns} overruns)",
            f"  rejected IK targets     {self.rejected_targets:8d}",
        ]
        lines += [f"  {name:<24}{path}" for name, path in self.outputs.items()]
        return "\n".join(lines)
