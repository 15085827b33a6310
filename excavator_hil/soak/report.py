"""The soak's report: every check run over the records, the faults and their recoveries, the
violations (zero is the goal), the footprints; a text for people and a summary for the JSON
line. Pure: records in, text and numbers out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from excavator_hil.soak import checks
from excavator_hil.soak.bounds import SoakBounds
from excavator_hil.soak.records import SoakRecords
from excavator_hil.soak.schedule import KINDS, Fault

JOINT_CLOCK_MARGIN_S = 0.001   # two processes' readings of one host's clock


@dataclass
class SoakReport:
    text: str
    summary: dict[str, Any]
    violations: list[checks.Violation] = field(default_factory=list)
    recoveries: list[checks.Recovery] = field(default_factory=list)


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f} {unit}"


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return round(max(known), 3) if known else None


def recovered(r: checks.Recovery, bounds: SoakBounds) -> bool:
    return (r.startup_s is not None and r.drive_s is not None and r.dig_s is not None
            and r.startup_s <= bounds.startup_s and r.drive_s <= bounds.drive_rearm_s
            and r.dig_s <= bounds.dig_rearm_s)


def build_report(seed: int, minutes: float, schedule: Sequence[Fault], records: SoakRecords,
                 bounds: SoakBounds, warmup_s: float, window_s: float,
                 notes: Sequence[str] = (), extra: Sequence[checks.Violation] = (),
                 cycles: int = 0, cycle_loads: Sequence[float] = ()) -> SoakReport:
    """Run every check over ``records`` and put the results together."""
    violations: list[checks.Violation] = list(extra)
    violations += checks.stale_drive_commands(records.commands, records.redis_losses,
                                              records.plc_writes, bounds)
    violations += checks.drive_at_rest(records.faults, records.plc_samples, bounds)
    order, late_s = checks.joint_command_order(records.targets, records.joint_commands,
                                               records.faults, JOINT_CLOCK_MARGIN_S)
    violations += order
    recs, found = checks.recoveries(records.faults, records.commands, records.plc_writes,
                                    records.joint_commands, records.wrenches,
                                    records.joint_states, bounds, records.end)
    violations += found
    gaps, excused, losses = checks.bag_gaps(
        records.bag_stamps, {"joint_states": records.joint_states,
                             "soil/wrench": records.wrenches},
        records.faults, bounds, records.start, records.end)
    violations += gaps
    violations += checks.soil_mass(records.soil_mass)
    if not records.soil_mass:
        violations.append(checks.Violation("soil_mass", records.end,
                                           "soil_node never reported its mass"))
    found, prints, skipped = checks.resource_growth(records.resources, warmup_s, window_s,
                                                    bounds, first_life_warmup_s=0.0)
    violations += found
    for t, name, code, tail in records.unexpected_exits:
        violations.append(checks.Violation("crash", t, f"{name} ended by itself (exit code "
                                           f"{code}); its last lines:\n{tail}"))
    violations.sort(key=lambda v: v.t)

    injected = [f.fault for f in records.faults]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [r for r in recs if r.fault.fault.kind == kind]
        by_kind[kind] = {
            "scheduled": sum(1 for f in schedule if f.kind == kind),
            "injected": len(mine),
            "recovered": sum(1 for r in mine if recovered(r, bounds)),
            "recovery_s_max": _max([r.total_s for r in mine]),
        }
    n_ok = sum(1 for r in recs if recovered(r, bounds))
    summary: dict[str, Any] = {
        "bench": "soak", "seed": seed, "minutes": minutes,
        "faults_scheduled": len(schedule), "faults_injected": len(injected),
        "faults_recovered": n_ok, "violations": len(violations),
        "violations_by_check": {c: sum(1 for v in violations if v.check == c)
                                for c in sorted({v.check for v in violations})},
        "by_kind": by_kind,
        "recovery_s_max": _max([r.total_s for r in recs]),
        "startup_s_max": _max([r.startup_s for r in recs if r.fault.restarted]),
        "drive_resume_s_max": _max([r.drive_s for r in recs]),
        "dig_resume_s_max": _max([r.dig_s for r in recs]),
        "joint_command_late_s_max": round(late_s, 3),
        "memory_growth_max_pct": _max([100 * p.growth for p in prints]),
        "dig_cycles": cycles,
        "soil_per_cycle_m3_mean": (round(sum(cycle_loads) / len(cycle_loads), 4)
                                   if cycle_loads else None),
        "drive_commands": len(records.commands),
        "plc_writes": len(records.plc_writes),
        "plc_writes_refused": sum(1 for w in records.plc_writes if w.refused is not None),
        "unexpected_exits": len(records.unexpected_exits),
        "bag_lost_messages": {x.topic: x.lost for x in losses},
        "bounds": {k: round(v, 3) for k, v in bounds.as_dict().items()},
    }

    lines = [f"chaos soak: seed {seed}, {minutes:g} min of faults "
             f"(replay: bench/soak.py --minutes {minutes:g} --seed {seed})",
             f"  faults injected {len(injected)} of {len(schedule)} scheduled, recovered "
             f"within bounds {n_ok}; dig cycles {cycles}; drive commands "
             f"{len(records.commands)}; PLC writes {len(records.plc_writes)} "
             f"({summary['plc_writes_refused']} refused by the PLC)",
             f"  bounds: stale command {bounds.stale_command_s:g} s, drive at rest "
             f"{bounds.drive_stop_s:.2f} s, resume driving {bounds.drive_rearm_s:.2f} s / "
             f"digging {bounds.dig_rearm_s:.2f} s after the stack is back, start-up "
             f"{bounds.startup_s:g} s, respawn delay {bounds.respawn_delay_s:g} s, bag gap "
             f"{bounds.bag_gap_s:g} s, memory +{100 * bounds.memory_growth:g} %",
             "", "  fault                                   start-up  drive     dig       total"]
    for r in recs:
        mark = "" if recovered(r, bounds) else "  NOT RECOVERED"
        lines.append(f"  {r.fault.fault.describe():<40}{_fmt(r.startup_s):<10}"
                     f"{_fmt(r.drive_s):<10}{_fmt(r.dig_s):<10}{_fmt(r.total_s)}{mark}")
        if r.fault.note:
            lines.append(f"      {r.fault.note}")
    not_injected = [f for f in schedule if f not in injected]
    if not_injected:
        lines.append(f"  not injected (the run ended first): "
                     f"{', '.join(f.describe() for f in not_injected)}")
    lines += ["", f"  joint commands: the latest was stamped {late_s:.3f} s after its target "
              "had been superseded"]
    lines += ["", "  footprint after warm-up (anonymous PSS MiB start -> end, PSS, fds, "
              "threads):"]
    for p in prints:
        name = p.process + (f" ({p.life}, moved {p.phase})" if p.phase else f" ({p.life})")
        lines.append(f"    {name:<24} {p.anon_start_kib / 1024:7.1f} -> "
                     f"{p.anon_end_kib / 1024:7.1f} ({100 * p.growth:+.1f} %)  PSS "
                     f"{p.pss_start_kib / 1024:.1f} -> {p.pss_end_kib / 1024:.1f}  fds "
                     f"{p.fds_start} -> {p.fds_end}  threads {p.threads_start} -> "
                     f"{p.threads_end}  over {p.judged_s:.0f} s")
    for s in skipped:
        lines.append(f"    not judged: {s}")
    lines += ["", "  the bag against what the observer received:"]
    for loss in losses:
        lines.append(f"    {loss.topic}: {loss.lost} of {loss.seen} messages missing, the "
                     f"longest run {loss.longest_s:.2f} s of simulated time")
    if excused:
        lines += ["", "  gaps in the bag inside fault windows:"] + [f"    {e}" for e in excused]
    if notes:
        lines += ["", "  notes:"] + [f"    {n}" for n in notes]
    lines += ["", f"  violations: {len(violations)}"]
    t0 = records.faults[0].started if records.faults else 0.0
    for v in violations:
        lines.append(f"    [{v.check}] at {v.t - t0:+.1f} s: {v.detail}")
    return SoakReport("\n".join(lines), summary, violations, recs)
