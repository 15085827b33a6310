"""Bag recorder cost: CPU per message of `excavator-hil bag record`, against an executor-based
recorder in the same run.

Setup: this process publishes ``--streams`` JointState streams at ``--hz`` each (the demo's
recorder takes ~10 streams at 50-100 Hz) for ``--seconds``; a recorder in its own process writes
them to an MCAP bag, run twice:
- the recorder (``excavator-hil bag record``): no executor, each subscription taken empty every
  20 ms (bags/recorder.py);
- baseline: the design it replaced, a callback per message on rclpy's EventsExecutor (raw
  subscriptions, the same BagWriter), written out below as a small script.
Figures: each process's CPU time (user + system, /proc) over the publishing window divided by
the messages it wrote [us a message], their ratio, and the messages each bag lacks.

Goal (issue 31's soak on a busy CI host: the niced recorder fell behind its depth): the
recorder costs at most 0.75 of the baseline's CPU a message and loses nothing.
Last stdout line: JSON.

    .venv/bin/python bench/bag_record.py [--streams 8 --hz 100 --seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(150 + os.getpid() % 50))
GOAL_RATIO = 0.75
TOPIC = "/bench_record/s{}"

# The baseline recorder: a raw subscription per topic, a callback per message on the events
# executor, stamped with the node clock when it runs (the recorder before this issue).
BASELINE = '''
import signal, sys
import rclpy
from rclpy.experimental.events_executor import EventsExecutor
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState
from excavator_hil.bags.io import BagWriter
rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
stop = []
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
node = rclpy.create_node("baseline_recorder")
writer = BagWriter(sys.argv[1])
def on(topic):
    def write(data):
        writer.write(topic, node.get_clock().now().nanoseconds, data)
    return write
for topic in sys.argv[2:]:
    writer.add_topic(topic, "sensor_msgs/msg/JointState")
    node.create_subscription(JointState, topic, on(topic), 1000, raw=True)
executor = EventsExecutor()
executor.add_node(node)
print("recording", flush=True)
while not stop:
    executor.spin_once(timeout_sec=0.05)
writer.close()
'''


def cpu_s(pid: int) -> float:
    """User + system CPU time of ``pid`` [s]."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(kind: str, work: Path, streams: int, hz: float, seconds: float) -> dict[str, float]:
    from helpers import RosTestNode, wait_for
    from sensor_msgs.msg import JointState

    from excavator_hil.bags.io import read_bag

    topics = [TOPIC.format(k) for k in range(streams)]
    bag = work / kind
    if kind == "recorder":
        command = [sys.executable, "-m", "excavator_hil.cli", "bag", "record", *topics, "-o",
                   str(bag)]
    else:
        script = work / "baseline_recorder.py"
        script.write_text(BASELINE)
        command = [sys.executable, str(script), str(bag), *topics]
    log = (work / f"{kind}.log").open("w")
    proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    probe = RosTestNode(f"bench_record_{kind}")
    pubs = [probe.node.create_publisher(JointState, t, 1000) for t in topics]
    try:
        wait_for(lambda: all(p.get_subscription_count() > 0 for p in pubs), 60.0,
                 f"the {kind} subscribed to every stream")
        time.sleep(1.0)   # matched on the recorder's side too
        msg = JointState(name=["swing", "boom", "arm", "bucket"], position=[0.1] * 4,
                         velocity=[0.0] * 4)
        period = 1.0 / hz
        n = round(seconds * hz)
        cpu0 = cpu_s(proc.pid)
        t0 = time.monotonic()
        for i in range(n):
            due = t0 + i * period
            time.sleep(max(0.0, due - time.monotonic()))
            msg.position[0] = float(i)
            for p in pubs:
                p.publish(msg)
        time.sleep(1.0)   # what is on its way is written inside the window
        cpu = cpu_s(proc.pid) - cpu0
    finally:
        probe.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        log.close()
    written = len(read_bag(bag).messages)
    sent = n * streams
    return {"cpu_s": cpu, "written": written, "lost": sent - written,
            "us_per_message": 1e6 * cpu / max(written, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--hz", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_bag_record_"))
    base = run("baseline", work, args.streams, args.hz, args.seconds)
    new = run("recorder", work, args.streams, args.hz, args.seconds)
    ratio = new["us_per_message"] / base["us_per_message"]
    result = {
        "bench": "bag_record", "streams": args.streams, "hz": args.hz,
        "seconds": args.seconds,
        "recorder_us_per_message": round(new["us_per_message"], 1),
        "baseline_us_per_message": round(base["us_per_message"], 1),
        "ratio_recorder_vs_baseline": round(ratio, 3),
        "recorder_lost": new["lost"], "baseline_lost": base["lost"],
        "goal_ratio": GOAL_RATIO, "goal_met": ratio <= GOAL_RATIO and new["lost"] == 0,
    }
    print(f"recorder {new['us_per_message']:.1f} us a message, baseline (events executor) "
          f"{base['us_per_message']:.1f} us: ratio {ratio:.2f} (goal <= {GOAL_RATIO}); lost "
          f"{new['lost']} / {base['lost']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
