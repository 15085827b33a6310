"""How long a reliable stream is held up behind lost samples, with the project's Fast DDS
profile (``config/fastdds_default.xml``: a HEARTBEAT every 0.1 s) against Fast DDS's own
writer timing (3 s), measured in the same run.

A publisher process (``test/dds_burst_publisher.py``) sends a 100 Hz stream and, from the same
participant, a 0.8 MB sample ten times a second; this process subscribes to both and takes the
largest send-to-receive time of the small stream (CLOCK_MONOTONIC, shared by the processes of
a host). Every sample arrives in the end, in order; the figure is how long the stream stood
still. Last stdout line: one JSON object (``ratio`` = project / Fast DDS's timing).

    .venv/bin/python bench/dds_holdup.py [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))

from dds_burst_publisher import BIG_TOPIC, SMALL_TOPIC  # noqa: E402

from excavator_common.node_thread import NodeThread  # noqa: E402
from excavator_hil.local_services import ManagedProcess, wait_for  # noqa: E402

EMPTY_PROFILE = ('<?xml version="1.0" encoding="UTF-8" ?>\n<dds xmlns="http://www.eprosima.com">'
                 '<profiles><data_writer profile_name="not_the_default"/></profiles></dds>\n')


def hold_up(seconds: float, env: dict[str, str], logs: Path) -> tuple[float, int, int]:
    """The largest send-to-receive time [s] of the small stream, samples received, sent."""
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float64MultiArray, Int64

    ros = NodeThread("dds_holdup_bench")
    latencies: list[float] = []

    def on_small(msg: Int64) -> None:
        latencies.append(1e-9 * (time.monotonic_ns() - msg.data))
    ros.node.create_subscription(Int64, SMALL_TOPIC, on_small, QoSProfile(depth=1000))
    ros.node.create_subscription(Float64MultiArray, BIG_TOPIC, lambda _raw: None,
                                 QoSProfile(depth=10), raw=True)
    ros.start()
    publisher = ManagedProcess("dds_burst_publisher", [str(seconds)], log_dir=logs,
                               env={"PYTHONPATH": str(REPO / "test"), **env}, cwd=REPO)
    try:
        wait_for(lambda: "acknowledged" in publisher.log_path.read_text(), seconds + 60.0,
                 "the burst publisher to finish")
        time.sleep(0.5)
    finally:
        publisher.stop()
        ros.close()
    sent = int(publisher.log_path.read_text().split("sent ")[1].split(",")[0])
    return max(latencies), len(latencies), sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="burst length [s]")
    args = parser.parse_args()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 200))
    logs = Path(tempfile.mkdtemp(prefix="bench_dds_holdup_"))
    empty = logs / "fastdds_own_timing.xml"
    empty.write_text(EMPTY_PROFILE)
    own, own_n, own_sent = hold_up(args.seconds, {"FASTDDS_DEFAULT_PROFILES_FILE": str(empty)},
                                   logs)
    print(f"Fast DDS's timing: largest hold-up {own:.3f} s ({own_n} of {own_sent})", flush=True)
    # "" reads as unset: the publisher picks the project's profile itself
    proj, proj_n, proj_sent = hold_up(args.seconds, {"FASTDDS_DEFAULT_PROFILES_FILE": ""}, logs)
    print(f"project profile: largest hold-up {proj:.3f} s ({proj_n} of {proj_sent})", flush=True)
    print(json.dumps({"bench": "dds_holdup", "seconds": args.seconds,
                      "hold_up_s_fastdds_timing": own, "hold_up_s_project_profile": proj,
                      "ratio": proj / own, "all_arrived": own_n == own_sent
                      and proj_n == proj_sent, "loadavg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
