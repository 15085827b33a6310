"""Operator latency: a sensor_msgs/Joy message in -> the valve / joint command out, over DDS.

Setup: teleop_node in its own process (config/teleop.yaml, ISO pattern, joystick mode); this
process is the operator and the machine: it publishes ``joint_states`` at 100 Hz (a fixed mid
pose) and Joy messages at ``--hz`` with random stick deflections, each stamped with the system
clock as it is published. teleop_node answers every Joy at once (in its callback) with
``joint_command`` and ``teleop/valve_command``; the valve command carries the stamp of the Joy
it answers, so latency = arrival time of that valve command - the Joy's stamp (one host, one
clock).

Baseline in the same run: the pure core alone (``TeleopCore.stick_command`` on the same inputs,
in this process): what the node adds on top is DDS, serialisation and the executor.

Goal (issue 16): p99 <= 5 ms. Last stdout line: JSON.

    .venv/bin/python bench/teleop.py [--messages 2000] [--hz 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(150 + os.getpid() % 50))


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 3),
            "p99_ms": round(float(np.percentile(a, 99)), 3),
            "max_ms": round(float(a.max()), 3)}


def core_baseline(samples: list[list[float]]) -> dict[str, float]:
    from excavator_kinematics.geometry import default_geometry
    from excavator_kinematics.teleop.controller import MachineState, TeleopCore
    from excavator_kinematics.teleop.valves import FlowLimits

    core = TeleopCore(default_geometry(), FlowLimits.from_file(total_flow_lpm=560.0))
    state = MachineState(np.array([0.0, 0.75, -1.4, 1.5]), np.zeros(4))
    out = []
    for axes in samples:
        t0 = time.perf_counter()
        core.stick_command(axes, state)
        out.append((time.perf_counter() - t0) * 1e3)
    return percentiles(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--hz", type=float, default=50.0)
    args = ap.parse_args()

    from helpers import NodeProcess, RosTestNode, wait_for
    from sensor_msgs.msg import JointState, Joy

    rng = random.Random(16)
    samples = [[rng.uniform(-1, 1), rng.uniform(-1, 1), 0.0, rng.uniform(-1, 1),
                rng.uniform(-1, 1), 0.0] for _ in range(args.messages)]
    baseline = core_baseline(samples)

    log_dir = Path(tempfile.mkdtemp(prefix="bench_teleop_"))
    node = NodeProcess("excavator_kinematics.teleop_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
                        "-p", "joy_timeout_s:=2.0"], log_dir=log_dir)
    probe = RosTestNode("bench_teleop")
    arrivals: dict[int, float] = {}

    def on_valve(msg: JointState) -> None:
        now = time.time_ns()
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        arrivals.setdefault(stamp, now)

    probe.node.create_subscription(JointState, "teleop/valve_command", on_valve, 100)
    joy_pub = probe.node.create_publisher(Joy, "joy", 100)
    state_pub = probe.node.create_publisher(JointState, "joint_states", 10)
    stop = threading.Event()

    def publish_states() -> None:
        msg = JointState()
        msg.name = ["swing", "boom", "arm", "bucket", "base_yaw"]
        msg.position = [0.0, 0.75, -1.4, 1.5, 0.0]
        msg.velocity = [0.0] * 5
        while not stop.is_set():
            state_pub.publish(msg)
            time.sleep(0.01)

    threading.Thread(target=publish_states, daemon=True).start()
    try:
        wait_for(lambda: joy_pub.get_subscription_count() > 0 and node.alive(), 30.0,
                 lambda: f"teleop_node; log:\n{node.log()}")
        time.sleep(1.0)  # joint_states reach the node

        def warm() -> bool:  # until the answers flow both ways (discovery is done)
            msg = Joy()
            msg.axes = [0.0, 0.5, 0.0, 0.0, 0.0, 0.0]
            msg.buttons = [0] * 8
            t = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 1_000_000_000)
            joy_pub.publish(msg)
            time.sleep(0.05)
            return t in arrivals
        wait_for(lambda: warm() and warm() and warm(), 30.0, "teleop_node's answers")
        sent: list[int] = []
        period = 1.0 / args.hz
        next_t = time.monotonic()
        for axes in samples:
            msg = Joy()
            msg.axes = axes
            msg.buttons = [0] * 8
            t = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 1_000_000_000)
            joy_pub.publish(msg)
            sent.append(t)
            next_t += period
            time.sleep(max(0.0, next_t - time.monotonic()))
        time.sleep(1.0)
    finally:
        stop.set()
        probe.close()
        code = node.stop()
    lat = [(arrivals[t] - t) / 1e6 for t in sent if t in arrivals]
    result = {"bench": "teleop", "messages": len(sent), "answered": len(lat),
              "joy_to_valve": percentiles(lat) if lat else None, "core_only": baseline,
              "goal_p99_ms": 5.0,
              "p99_ratio_to_core": (round(percentiles(lat)["p99_ms"] / baseline["p99_ms"], 1)
                                    if lat else None),
              "node_exit_code": code}
    print(f"Joy -> valve command over DDS: {result['joy_to_valve']} "
          f"({len(lat)}/{len(sent)} answered); core alone: {baseline}")
    print(json.dumps(result))
    return 0 if lat else 1


if __name__ == "__main__":
    raise SystemExit(main())
