"""Benchmark: physics steps per second and real-time factor of the excavator simulation core.

Cases, all on the same model in this process (one core; run with nothing else busy):
- ``physics``: the machine sweeping between two poses, terrain contact off, the core's normal
  stepping (``sim.step(n)``: the outer loop every 10 ms, ``mj_step(m, d, 10)`` in C between).
- ``physics+state``: as ``physics`` plus the state a node publishes at 100 Hz (joint_state,
  bucket pose and twist) read every 10 ms.
- ``contact``: terrain contact on, the terrain raised so the bucket digs into it during the sweep.
- ``baseline``: the naive way, one Python call per physics step (control update + ``mj_step``
  every 1 ms), same model and motion.
- ``node+contact`` (when rclpy is importable): the real ``SimNode`` in this process at
  ``real_time_factor 0`` publishing joint_states, /clock, bucket pose/twist at 100 Hz and
  markers at 20 Hz, terrain contact on with the same mound, spun for ``--node-seconds`` of wall
  time while alternating the two poses.

Usage: ``.venv/bin/python bench/sim.py [--seconds 20] [--repeat 3] [--node-seconds 5]``.
Last line: JSON with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation

POSES = ({"swing": 0.6, "boom": 0.7, "arm": -1.6, "bucket": 1.2},
         {"swing": -0.6, "boom": 0.3, "arm": -0.9, "bucket": 2.0})


def run(sim: ExcavatorSimulation, sim_seconds: float, chunk: int, read_state: bool) -> float:
    """Simulate ``sim_seconds``, switching pose every 3 s; returns wall seconds."""
    steps = round(sim_seconds / sim.timestep)
    per_pose = round(3.0 / sim.timestep)
    done = 0
    start = time.perf_counter()
    while done < steps:
        if done % per_pose == 0:
            sim.set_joint_targets(POSES[(done // per_pose) % 2])
        sim.step(chunk)
        done += chunk
        if read_state:
            sim.joint_state()
            sim.bucket_pose()
            sim.bucket_twist()
    return time.perf_counter() - start


def make(contact: bool) -> ExcavatorSimulation:
    sim = ExcavatorSimulation(load_sim_config(overrides={"terrain.contact": contact}))
    if contact:
        # A mound under the bucket's path: the teeth cut 0.1-0.35 m into it.
        g = sim.terrain.grid
        i0, i1 = round((3.0 - g.x0) / g.cell_size), round((7.5 - g.x0) / g.cell_size)
        j0, j1 = round((-4.0 - g.y0) / g.cell_size), round((4.0 - g.y0) / g.cell_size)
        sim.terrain.set_region(i0, j0, np.full((i1 - i0, j1 - j0), 1.2))
    return sim


def run_node(wall_seconds: float) -> dict[str, float] | None:
    """SimNode at real_time_factor 0 with contact on; None without rclpy."""
    try:
        import rclpy

        from excavator_sim.sim_node import SimNode
    except ImportError:
        return None
    rclpy.init(args=["--ros-args", "-p", "real_time_factor:=0.0", "-p", "terrain.contact:=true"])
    node = SimNode()
    g = node.sim.terrain.grid
    i0, i1 = round((3.0 - g.x0) / g.cell_size), round((7.5 - g.x0) / g.cell_size)
    j0, j1 = round((-4.0 - g.y0) / g.cell_size), round((4.0 - g.y0) / g.cell_size)
    node.sim.terrain.set_region(i0, j0, np.full((i1 - i0, j1 - j0), 1.2))
    t0_sim = node.sim.time
    start = time.perf_counter()
    node.sim.set_joint_targets(POSES[0])
    pose = 1
    while time.perf_counter() - start < wall_seconds:
        if node.sim.time - t0_sim >= 3.0 * pose:
            node.sim.set_joint_targets(POSES[pose % 2])
            pose += 1
        rclpy.spin_once(node, timeout_sec=0.0)
    wall = time.perf_counter() - start
    simulated = node.sim.time - t0_sim
    contacts = int(node.sim.data.ncon)
    node.destroy_node()
    rclpy.try_shutdown()
    return {"steps_per_s": simulated / node.sim.timestep / wall, "rtf": simulated / wall,
            "sim_s": simulated, "wall_s": wall, "contacts_at_end": contacts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated time per case")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--node-seconds", type=float, default=5.0,
                        help="wall time of the node case (0 skips it)")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    cases = (("baseline", False, 1, False), ("physics", False, 10, False),
             ("physics+state", False, 10, True), ("contact", True, 10, True))
    for name, contact, chunk, read_state in cases:
        seconds = args.seconds if name != "baseline" else min(args.seconds, 10.0)
        # Best of --repeat fresh runs: the machines are shared, the minimum is the cost.
        wall = math.inf
        for _ in range(args.repeat):
            sim = make(contact)
            wall = min(wall, run(sim, seconds, chunk, read_state))
        steps = seconds / sim.timestep
        contacts = int(sim.data.ncon)
        results[name] = {"steps_per_s": steps / wall, "rtf": seconds / wall,
                         "sim_s": seconds, "wall_s": wall, "contacts_at_end": contacts,
                         "max_loop_residual_m": sim.constraint_residual()}
        print(f"{name:14s} {steps / wall:10.0f} steps/s  RTF {seconds / wall:7.1f}  "
              f"({seconds:.0f} s simulated in {wall:.2f} s, {contacts} contacts at the end)")
    node = run_node(args.node_seconds) if args.node_seconds > 0 else None
    if node is not None:
        results["node+contact"] = node
        print(f"{'node+contact':14s} {node['steps_per_s']:10.0f} steps/s  RTF {node['rtf']:7.1f}  "
              f"({node['sim_s']:.1f} s simulated in {node['wall_s']:.2f} s, "
              f"{node['contacts_at_end']} contacts at the end)")
    base = results["baseline"]["rtf"]
    summary = {
        "timestep_s": 0.001,
        "rtf_physics": round(results["physics"]["rtf"], 1),
        "rtf_physics_state_100hz": round(results["physics+state"]["rtf"], 1),
        "rtf_contact": round(results["contact"]["rtf"], 1),
        "rtf_node_contact_100hz": round(node["rtf"], 1) if node else None,
        "rtf_baseline_step_per_call": round(base, 1),
        "speedup_vs_baseline": round(results["physics"]["rtf"] / base, 2),
        "goal_rtf_physics": 50.0,
        "goal_rtf_node_contact": 20.0,
        "cases": results,
    }
    print(f"physics-only RTF {summary['rtf_physics']} vs one-step-per-call baseline {base:.1f}: "
          f"x{summary['speedup_vs_baseline']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
