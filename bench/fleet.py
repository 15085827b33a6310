"""Benchmark: how the simulation and the ROS graph behave with 1, 2, 4 machines on one host.

Per fleet size N: N machines, each sim_node + soil_node + ik_node in its own namespace
(``/excK``), every node in its own process, real DDS on loopback (a private domain,
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``); the clock as ``launch/fleet.launch.py`` has it:
machine 1's sim at ``real_time_factor`` 1 owns ``/clock``, the others step to it
(``follow_clock``); a soil_node per machine (``shared_terrain:=false``: one shared soil_node
does the same updates in one process); every machine sweeps between two poses (a new
``joint_command`` every 3 s), so hydraulics and swing work. After a warm-up (every machine's
joint_states arriving), for ``--seconds`` of wall time a probe in this process records every
machine's ``joint_states``:

- ``rtf``: achieved real-time factor of each sim = simulated time advanced (header stamps) /
  wall time, min and mean over the machines; 1.0 = keeps up;
- ``js_hz``: joint_states received per second per machine (sim_node publishes 100 Hz);
- ``cpu``: CPU use of each process [% of one core] from /proc (utime + stime), summed per kind.

The baseline is N = 1 in the same run: ``rtf_ratio`` = min RTF at N / RTF at 1. Figures depend on
what else runs on the machine: report its load with them.

Usage: ``.venv/bin/python bench/fleet.py [--sizes 1 2 4] [--seconds 20]``. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from excavator_hil.local_services import ManagedProcess, wait_for  # noqa: E402

KINDS = (("sim_node", "excavator_sim.sim_node", ["-p", "real_time_factor:=1.0",
                                                  "-p", "use_sim_time:=true",
                                                  "-p", "marker_rate_hz:=0.0"]),
         ("soil_node", "excavator_sim.soil.soil_node", []),
         ("ik_node", "excavator_kinematics.ik_node", []))
TICK_S = os.sysconf("SC_CLK_TCK")
POSES = ({"swing": 0.6, "boom": 0.7, "arm": -1.6, "bucket": 1.2},    # as bench/sim.py
         {"swing": -0.6, "boom": 0.3, "arm": -0.9, "bucket": 2.0})


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process [s] (fields 14, 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def measure(n: int, seconds: float, log_dir: Path) -> dict[str, Any]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    names = [f"exc{k + 1}" for k in range(n)]
    procs: list[tuple[str, ManagedProcess]] = []
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("fleet_bench_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    records: dict[str, list[tuple[float, float]]] = {ns: [] for ns in names}
    recording = threading.Event()

    def on_joints(ns: str):
        def cb(msg: Any) -> None:
            if recording.is_set():
                records[ns].append((time.monotonic(),
                                    msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec))
            else:
                records[ns][:] = [(0.0, 0.0)]       # alive marker for the warm-up
        return cb
    commands = []
    for ns in names:
        node.create_subscription(JointState, f"/{ns}/joint_states", on_joints(ns), 50)
        commands.append(node.create_publisher(JointState, f"/{ns}/joint_command", 10))
    period = [0]

    def sweep() -> None:
        """Every machine between two poses, 3 s each: the cylinders and the swing work."""
        pose = POSES[period[0] % 2]
        period[0] += 1
        msg = JointState(name=list(pose), position=list(pose.values()))
        for pub in commands:
            pub.publish(msg)
    node.create_timer(3.0, sweep)
    stop = threading.Event()

    def spin_loop() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)
    spin = threading.Thread(target=spin_loop, daemon=True)
    spin.start()
    try:
        for k, ns in enumerate(names):
            for kind, module, args in KINDS:
                # machine 1 owns /clock, the others follow it (one time for every stamp)
                clock = ["-p", f"follow_clock:={'true' if k else 'false'}"] \
                    if kind == "sim_node" else ["-p", "use_sim_time:=true"]
                procs.append((kind, ManagedProcess(module, ["--ros-args", "-r", f"__ns:=/{ns}",
                                                            "--log-level", "warn", *args,
                                                            *clock],
                                                   log_dir=log_dir / f"n{n}")))
        wait_for(lambda: all(records.values()), 120.0, f"joint_states of {n} machine(s)", 0.2)
        time.sleep(2.0)
        cpu0 = {id(p): cpu_seconds(p.proc.pid) for _, p in procs}
        t0 = time.monotonic()
        recording.set()
        time.sleep(seconds)
        recording.clear()
        wall = time.monotonic() - t0
        cpu = {kind: 0.0 for kind, _, _ in KINDS}
        for kind, p in procs:
            cpu[kind] += 100.0 * (cpu_seconds(p.proc.pid) - cpu0[id(p)]) / wall
        rtfs, rates = [], []
        for ns in names:
            rec = [r for r in records[ns] if r[0] > 0.0]
            rates.append(len(rec) / wall)
            rtfs.append((rec[-1][1] - rec[0][1]) / (rec[-1][0] - rec[0][0]) if len(rec) > 1
                        else 0.0)
        alive = all(p.alive() for _, p in procs)
        for ns, rate in zip(names, rates, strict=True):
            if rate == 0.0:      # say why in the output rather than report a bare 0
                sim = next(p for (kind, p) in procs if kind == "sim_node"
                           and f"__ns:=/{ns}" in p.proc.args)
                tail = "\n".join(sim.log().splitlines()[-10:])
                print(f"warning: no joint_states from /{ns} while measuring; its sim_node log "
                      f"ends:\n{tail}", file=sys.stderr, flush=True)
    finally:
        stop.set()
        spin.join(2.0)
        for _, p in reversed(procs):
            p.stop(timeout=10.0)
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
    return {"machines": n, "rtf_min": round(min(rtfs), 3),
            "rtf_mean": round(sum(rtfs) / n, 3), "js_hz_min": round(min(rates), 1),
            "js_hz_mean": round(sum(rates) / n, 1),
            "cpu_pct": {k: round(v, 1) for k, v in cpu.items()},
            "cpu_pct_total": round(sum(cpu.values()), 1), "all_alive": alive}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 200))
    os.environ.setdefault("MUJOCO_GL", "egl")
    results = []
    with tempfile.TemporaryDirectory(prefix="fleet_bench_") as tmp:
        for n in args.sizes:
            res = measure(n, args.seconds, Path(tmp))
            print(f"{n} machine(s): RTF min {res['rtf_min']:.2f} mean {res['rtf_mean']:.2f}, "
                  f"joint_states {res['js_hz_min']:.0f}..{res['js_hz_mean']:.0f} Hz/machine, "
                  f"CPU {res['cpu_pct']} (% of one core), total {res['cpu_pct_total']:.0f} %",
                  flush=True)
            results.append(res)
    base = next((r["rtf_min"] for r in results if r["machines"] == 1), None)
    for r in results:
        r["rtf_ratio"] = round(r["rtf_min"] / base, 3) if base else None
    load = os.getloadavg()
    print(json.dumps({"bench": "fleet", "cores": os.cpu_count(), "loadavg_1m": round(load[0], 2),
                      "seconds": args.seconds, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
