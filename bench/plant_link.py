"""The plant link's CPU per exchange, its inputs taken by the exchange thread against the
executor's callbacks (the set-up before), in the same run.

One virtual PLC (``plant_mode: external``, patient watchdogs: no bridge runs) and, in this
process, a stand-in for the simulation publishing ``plant/sensors`` and ``imu`` every 10 ms
(absolute deadlines) as sim_node does. The plant link node runs in its own process twice, one
after the other against the same PLC and stand-in: first with
``EXCAVATOR_HIL_PLANT_LINK_INPUTS=executor`` (rclpy's SingleThreadedExecutor runs the two
subscriptions' callbacks: the baseline), then as shipped (the exchange thread takes them).
Each phase: ``--warmup`` s after the link reports ``running``, then ``--seconds`` s measured;
the two alternate ``--rounds`` times, and each mode's figure is over all its phases.

Figures per phase: CPU per exchange [us] of the whole process and of its threads (the main
thread is the executor's, ``plant-link`` the exchange's, ``dds.*`` the middleware's), from
``/proc/<pid>/task/*/stat`` over the exchanges the link counted (its /diagnostics counters):
CPU time per exchange depends little on the host's load, unlike a share of the wall time.
Late and missed exchanges are printed too, but they are the host's (a loaded host misses
periods whatever the link does): the 10-minute goal is bench/hil_loop.py's, on a calm host.

    .venv/bin/python bench/plant_link.py [--seconds 30] [--warmup 3] [--rounds 2]

Then the transport's floor (bench/transport_floor.py, ``--seconds`` long): what two loopback TCP
round trips of the same sizes cost this host's client process, with no S7 and no ROS.

Last stdout line: one JSON object (``ratio_cpu_per_exchange``: shipped / baseline;
``goal_met``: the shipped link at <= 10 % of a core at 100 Hz, issue 27's goal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from excavator_common.node_thread import NodeThread  # noqa: E402
from excavator_hil.hil_harness import wait_until  # noqa: E402
from excavator_hil.local_services import ManagedProcess, free_port  # noqa: E402
from plc_bridge.plant_link.node import INPUTS_ENV  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import transport_floor  # noqa: E402

PERIOD_S = 0.01
MODES = (("baseline: inputs run by the executor", {INPUTS_ENV: "executor"}),
         ("shipped: inputs taken by the exchange", {INPUTS_ENV: "exchange"}))
COUNTERS = ("exchanges", "late", "missed", "link_faults")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """User + system CPU time [s] of each thread of ``pid``, keyed ``name:tid``."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended
            continue
        out[f"{name}:{task.name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_role(key: str, main_tid: int) -> str:
    name, tid = key.rsplit(":", 1)
    if int(tid) == main_tid:
        return "executor (main thread)"
    if name == "plant-link":
        return "exchange thread"
    if name.startswith("dds."):
        return "middleware (dds.*)"
    return "other"


class SimStandIn(NodeThread):
    """plant/sensors and imu every 10 ms of wall time (the simulated time advancing with it);
    the plant link's /diagnostics."""

    def __init__(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Imu, JointState

        super().__init__("plant_link_bench")
        self.sensors_pub = self.node.create_publisher(JointState, "plant/sensors",
                                                      qos_profile_sensor_data)
        self.imu_pub = self.node.create_publisher(Imu, "imu", qos_profile_sensor_data)
        self.diag: dict[str, str] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self._halt = threading.Event()
        self._publisher = threading.Thread(target=self._run, daemon=True, name="stand-in")
        self._publisher.start()
        self.start()

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            if st.name == "plant_link":
                self.diag = {kv.key: kv.value for kv in st.values}

    def counters(self) -> dict[str, int]:
        return {k: int(self.diag.get(f"counter.{k}", 0)) for k in COUNTERS}

    def _run(self) -> None:
        from sensor_msgs.msg import Imu, JointState

        nan = math.nan
        sim_ns = 1_000_000_000
        deadline = time.monotonic()
        while not self._halt.is_set():
            deadline += PERIOD_S
            self._halt.wait(max(0.0, deadline - time.monotonic()))
            sim_ns += 10_000_000
            js = JointState()
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(sim_ns, 1_000_000_000)
            js.name = ["track_left", "track_right", "ground_speed", "drive_ready",
                       "drive_fault", "brake"]
            js.position = [0.0, 0.0, nan, 1.0, 0.0, 0.0]
            js.velocity = [0.3, 0.3, 0.29, nan, nan, nan]
            js.effort = [120.0, 118.0, nan, nan, nan, nan]
            imu = Imu()
            imu.header.stamp = js.header.stamp
            imu.header.frame_id = "base_link"
            imu.orientation.w = 1.0
            imu.linear_acceleration.z = 9.81
            self.sensors_pub.publish(js)
            self.imu_pub.publish(imu)

    def close(self) -> bool:
        self._halt.set()
        self._publisher.join(2.0)
        return super().close()


def phase(name: str, env: dict[str, str], plc_port: int, stand_in: SimStandIn, tmp: Path,
          warmup_s: float, seconds: float) -> dict[str, Any]:
    link = ManagedProcess("plc_bridge.plant_link.node",
                          ["--ros-args", "-p", f"plc_port:={plc_port}"], log_dir=tmp, env=env,
                          cwd=REPO)
    try:
        stand_in.diag = {}
        wait_until(lambda: stand_in.diag.get("status") == "running", 120.0,
                   f"the plant link ({name}) running")
        time.sleep(warmup_s)
        c0, t0, p0, w0 = stand_in.counters(), thread_cpu_s(link.pid), process_cpu_s(link.pid), \
            time.monotonic()
        time.sleep(seconds)
        t1, p1, w1 = thread_cpu_s(link.pid), process_cpu_s(link.pid), time.monotonic()
        time.sleep(1.5)   # the diagnostics after the window (1 Hz): counters cover it
        c1 = stand_in.counters()
    finally:
        link.proc.send_signal(signal.SIGINT)
        try:
            link.proc.wait(10.0)
        except Exception:   # noqa: BLE001 - a link that does not end is killed, and said
            print(f"[{name}] the plant link did not end on SIGINT in 10 s: killed")
        link.stop()
    delta = {k: c1[k] - c0[k] for k in COUNTERS}
    n = max(1, delta["exchanges"])
    roles: dict[str, float] = {}
    for key, cpu in t1.items():
        role = thread_role(key, link.pid)
        roles[role] = roles.get(role, 0.0) + cpu - t0.get(key, 0.0)
    return {"phase": name, "wall_s": w1 - w0, **delta,
            "cpu_us_per_exchange": 1e6 * (p1 - p0) / n,
            "cpu_share": (p1 - p0) / (w1 - w0),
            "threads_us_per_exchange": {r: 1e6 * v / n for r, v in sorted(roles.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/plant_link.py", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured per phase [s]")
    ap.add_argument("--warmup", type=float, default=3.0, help="after 'running' [s]")
    ap.add_argument("--rounds", type=int, default=2,
                    help="baseline and shipped phases, alternated, this many times each "
                         "(default 2: a change of the host's load falls on both)")
    args = ap.parse_args(argv)
    if not 1.0 <= args.seconds <= 3600.0:
        ap.error(f"--seconds {args.seconds:g} is outside 1..3600")
    if not 1 <= args.rounds <= 20:
        ap.error(f"--rounds {args.rounds} is outside 1..20")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 200))
    results = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        plant = tmp / "virtual_plc_external.yaml"
        plant.write_text('/**:\n  ros__parameters:\n    plant_mode: "external"\n'
                         "    plant_watchdog_timeout_s: 10.0\n    watchdog_timeout_s: 10.0\n")
        port, control_port = free_port(), free_port()
        plc = ManagedProcess("plc_bridge.virtual_plc.cli", [
            "--port", str(port), "--control-port", str(control_port), "--model", "skid_steer",
            "--plant-config", str(plant)], log_dir=tmp, cwd=REPO)
        stand_in = SimStandIn()
        try:
            for k in range(2 * args.rounds):
                name, env = MODES[k % 2]
                r = phase(name, env, port, stand_in, tmp, args.warmup, args.seconds)
                results.append(r)
                threads = ", ".join(f"{k} {v:.0f}" for k, v in r["threads_us_per_exchange"]
                                    .items())
                print(f"{name}: {r['exchanges']} exchanges in {r['wall_s']:.0f} s, CPU "
                      f"{r['cpu_us_per_exchange']:.0f} us per exchange ({threads}), "
                      f"{100 * r['cpu_share']:.1f} % of a core; {r['late']} late, "
                      f"{r['missed']} missed, {r['link_faults']} link faults", flush=True)
        finally:
            stand_in.close()
            plc.stop()
    per_mode = {}
    for name, _ in MODES:
        runs = [r for r in results if r["phase"] == name]
        cpu_us = sum(r["cpu_us_per_exchange"] * r["exchanges"] for r in runs)
        per_mode[name] = cpu_us / max(1, sum(r["exchanges"] for r in runs))
    base, shipped = (per_mode[name] for name, _ in MODES)
    ratio = shipped / base
    # what the transport alone costs on this host: two paced loopback round trips of the same
    # sizes and socket calls against a peer that answers at once (bench/transport_floor.py)
    floor = transport_floor.measure(args.seconds, hz=1.0 / PERIOD_S)
    share = shipped * 1e-6 / PERIOD_S   # of a core, at the stand-in's exchange rate
    print(f"transport floor (two loopback TCP round trips per exchange, no S7, no ROS): "
          f"{floor['cpu_us_per_exchange']:.0f} us per exchange; the plant link as shipped is "
          f"{shipped / floor['cpu_us_per_exchange']:.1f} x that")
    print(f"CPU per exchange over {args.rounds} round(s): baseline {base:.0f} us, shipped "
          f"{shipped:.0f} us; shipped / baseline: {ratio:.2f} (late and missed exchanges "
          f"depend on the host's load: judge them with bench/hil_loop.py on a calm host)")
    print(json.dumps({"bench": "plant_link", "seconds": args.seconds,
                      "load_average_1min": os.getloadavg()[0], "phases": results,
                      "cpu_us_per_exchange_baseline": base,
                      "cpu_us_per_exchange_shipped": shipped,
                      "cpu_us_per_exchange_transport_floor": floor["cpu_us_per_exchange"],
                      "cpu_share_goal": 0.10, "cpu_share_shipped": share,
                      "goal_met": share <= 0.10,
                      "ratio_cpu_per_exchange": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
