"""A process that publishes, from one participant, a small reliable stream at 100 Hz (each
sample carries its send time, CLOCK_MONOTONIC [ns], shared by the processes of a host) and a
0.8 MB sample (soil_node's whole terrain grid: 320 x 320 float64) ten times a second, for
``seconds`` (argv[1]). Run by test_dds_profile.py, through NodeThread as every probe and the
dashboard start rclpy (so with the project's Fast DDS profile unless one is chosen)."""

from __future__ import annotations

import sys
import time

from excavator_common.node_thread import NodeThread

SMALL_TOPIC, BIG_TOPIC = "dds_burst/small", "dds_burst/big"


def main() -> None:
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float64MultiArray, Int64

    seconds = float(sys.argv[1])
    ros = NodeThread("dds_burst_publisher")
    small = ros.node.create_publisher(Int64, SMALL_TOPIC, QoSProfile(depth=1000))
    big = ros.node.create_publisher(Float64MultiArray, BIG_TOPIC, QoSProfile(depth=10))
    grid = Float64MultiArray(data=[0.0] * (320 * 320))
    # both readers matched first: a sample sent before is not the hold-up measured
    while small.get_subscription_count() < 1 or big.get_subscription_count() < 1:
        time.sleep(0.05)
    time.sleep(0.5)
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        small.publish(Int64(data=time.monotonic_ns()))
        if k % 10 == 0:
            big.publish(grid)
        k += 1
        time.sleep(0.01)
    # the last repairs (Fast DDS's own timing: the next heartbeat, up to 3 s away)
    acked = small.wait_for_all_acked(Duration(seconds=20.0))
    print(f"sent {k}, all acknowledged: {acked}", flush=True)
    ros.close()


if __name__ == "__main__":
    main()
