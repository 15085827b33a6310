"""Where the stack's processes lose time: a summary of the stall probes' reports
(``EXCAVATOR_HIL_PROBE``, ``excavator_common.stall_probe``) and, with a ``perf sched`` trace of
the machine, which processes held the CPUs while the PLC bridge overran a cycle.

    EXCAVATOR_HIL_PROBE=/tmp/probe .venv/bin/python -m excavator_hil.cli demo --quick
    .venv/bin/python bench/stall_report.py /tmp/probe [--timehist timehist.txt]

The trace: ``perf sched record -a -k CLOCK_MONOTONIC -o perf.data`` while the stack runs (root
or ``perf_event_paranoid`` <= 1), then ``perf sched timehist -i perf.data -w > timehist.txt``.
``-k CLOCK_MONOTONIC`` puts the trace on the clock the probes and the bridge stamp with.
``bench/system.py --trace-sched`` does all of it. Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import re
from pathlib import Path
from typing import Any

# perf sched timehist: "time [cpu] comm[tid/pid] wait sch-delay run" (a task switched out)
_LINE = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+"
                   r"([\d.]+)\s+([\d.]+)\s*$")


def load_probes(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def probe_summary(probes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per process: collections (count, longest, full ones), probe stalls over 3 ms (count,
    longest; a probe stall without a collection is the CPU or another thread holding the GIL),
    CPU time and the time its threads waited for a CPU while runnable [s]."""
    out: dict[str, dict[str, float]] = {}
    for r in probes:
        gcs = r["gc_summary"]
        stalls = [late for _, late in r["stalls"]]
        threads = r["threads"]
        out[r["name"]] = {
            "gc_count": sum(g["count"] for g in gcs.values()),
            "gc_max_ms": max((g["max_ms"] for g in gcs.values()), default=0.0),
            "gc_full_count": gcs.get("2", {}).get("count", 0),
            "gc_full_max_ms": gcs.get("2", {}).get("max_ms", 0.0),
            "stalls_over_3ms": len(stalls),
            "stall_max_ms": max(stalls, default=0.0),
            "cpu_s": sum(t["cpu_ms"] for t in threads) / 1e3,
            "runqueue_wait_s": sum(t["runqueue_wait_ms"] for t in threads) / 1e3,
            "nice": r.get("nice", 0),
        }
    return out


def _runs(timehist: Path) -> list[tuple[float, float, int, int, int, str]]:
    """(start, end, cpu, tid, pid, comm) of every stretch a task ran, sorted by start."""
    runs = []
    with timehist.open() as f:
        for line in f:
            m = _LINE.match(line)
            if not m:
                continue
            end, run_ms = float(m[1]), float(m[8])
            tid = int(m[4])
            runs.append((end - run_ms / 1e3, end, int(m[2]), tid, int(m[5] or tid), m[3]))
    runs.sort()
    return runs


def overrun_attribution(probes: list[dict[str, Any]], timehist: Path) -> dict[str, Any]:
    """For each bridge overrun (noted by the bridge with the probe on): CPU time each process
    got on the machine's CPUs from 2 ms before the tick it served to the cycle's end [ms];
    processes outside the stack are named by their command. Summed over all overruns, and the
    bridge loop thread's own share."""
    names = {r["pid"]: r["name"] for r in probes}
    overruns, loop_tid = [], None
    for r in probes:
        for e in r["events"]:
            if e["kind"] == "overrun":
                overruns.append(e)
            elif e["kind"] == "thread" and e.get("thread") == "plc-bridge-loop":
                loop_tid = e["tid"]
    runs = _runs(timehist)
    starts = [r[0] for r in runs]
    total: collections.Counter[str] = collections.Counter()
    each = []
    for o in sorted(overruns, key=lambda e: e["tick_s"]):
        a, b = o["tick_s"] - 0.002, o["end_s"]
        held: collections.Counter[str] = collections.Counter()
        for start, end, _cpu, tid, pid, comm in runs[bisect.bisect_left(starts, a - 0.5):]:
            if start > b:
                break
            overlap = min(end, b) - max(start, a)
            if overlap > 0:
                name = "bridge loop" if tid == loop_tid else names.get(pid, f"other: {comm}")
                held[name] += 1e3 * overlap
        total.update(held)
        each.append({"tick_s": o["tick_s"], "late_start_ms": 1e3 * (o["start_s"] - o["tick_s"]),
                     "ran_ms": 1e3 * (o["end_s"] - o["start_s"]),
                     "cpu_ms": dict(held.most_common(6))})
    ours = sum(v for k, v in total.items() if not k.startswith("other"))
    others = sum(v for k, v in total.items() if k.startswith("other"))
    return {"overruns": len(overruns), "cpu_ms_in_overrun_windows": dict(total.most_common(12)),
            "stack_ms": ours, "outside_stack_ms": others, "each": each}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe_dir", type=Path)
    parser.add_argument("--timehist", type=Path, help="perf sched timehist -w output")
    args = parser.parse_args()
    probes = load_probes(args.probe_dir)
    summary = probe_summary(probes)
    for name, s in summary.items():
        print(f"{name:14s} gc {s['gc_count']:4.0f} (max {s['gc_max_ms']:6.1f} ms, full "
              f"{s['gc_full_count']:.0f} max {s['gc_full_max_ms']:6.1f} ms); stalls > 3 ms "
              f"{s['stalls_over_3ms']:4.0f} (max {s['stall_max_ms']:6.1f} ms); CPU "
              f"{s['cpu_s']:5.1f} s, waited for a CPU {s['runqueue_wait_s']:5.1f} s")
    result: dict[str, Any] = {"processes": summary}
    if args.timehist:
        att = overrun_attribution(probes, args.timehist)
        print(f"bridge overruns {att['overruns']}: CPU in their windows [ms]: "
              + ", ".join(f"{k} {v:.0f}" for k, v in att["cpu_ms_in_overrun_windows"].items()))
        result["overruns"] = {k: v for k, v in att.items() if k != "each"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
