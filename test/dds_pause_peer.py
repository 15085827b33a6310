"""A DDS peer for test_dds_profile.py's pause test, started as the package starts processes
(NodeThread: with the project's Fast DDS profile unless one is chosen).

``publish``: 8 JointState topics at 200 Hz each (what the bag recorder takes from the whole
stack, and more), until killed. ``listen``: takes them raw, as the recorder does, and prints
``heard <n>`` each second (flushed), until killed."""

from __future__ import annotations

import sys
import time

from excavator_common.command_age_node import take_waiting
from excavator_common.node_thread import NodeThread

TOPICS = [f"dds_pause/t{k}" for k in range(8)]


def main() -> None:
    from sensor_msgs.msg import JointState

    ros = NodeThread(f"dds_pause_{sys.argv[1]}")
    if sys.argv[1] == "publish":
        pubs = [ros.node.create_publisher(JointState, t, 10) for t in TOPICS]
        msg = JointState(name=[f"j{k}" for k in range(10)], position=[0.0] * 10)
        while True:
            for p in pubs:
                p.publish(msg)
            time.sleep(0.005)
    subs = [ros.node.create_subscription(JointState, t, lambda _m: None, 10, raw=True)
            for t in TOPICS]
    heard, since = 0, time.monotonic()
    while True:
        for s in subs:
            heard += len(take_waiting(s))
        time.sleep(0.02)
        if time.monotonic() - since >= 1.0:
            print(f"heard {heard}", flush=True)
            heard, since = 0, time.monotonic()


if __name__ == "__main__":
    main()
