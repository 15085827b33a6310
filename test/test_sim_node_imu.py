"""sim_node computes its ``imu`` reading only while the topic has a subscriber (issue 32: the
ground plane under the footprint and the rates by difference were ~10 % of a period's Python
work, published to nobody in the demo without the closed loop). The node runs in this process
(its executor spun here, so the readings it computes can be counted); the subscriber is a
probe in its own context, over DDS."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import rclpy
from helpers import EVENT_WAIT_S, RosTestNode
from sensor_msgs.msg import Imu

from excavator_sim.sim_node import SimNode

SMALL_TERRAIN = ["-p", "terrain.nx:=41", "-p", "terrain.ny:=41", "-p", "terrain.cell_size_m:=0.4"]


def _spin_until(node: SimNode, done: Callable[[], bool], what: str, timeout_s: float = EVENT_WAIT_S
                ) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        rclpy.spin_once(node, timeout_sec=0.0)


def test_the_imu_is_computed_and_published_only_for_a_subscriber() -> None:
    rclpy.init(args=["--ros-args", "-p", "real_time_factor:=0.0", "-p", "marker_rate_hz:=0.0",
                     *SMALL_TERRAIN])
    node = SimNode()
    try:
        sim = node.sim
        readings: list[float] = []   # simulated time of every IMU reading the node computed
        imu = sim.imu

        def counted() -> object:
            readings.append(sim.time)
            return imu()
        sim.imu = counted  # type: ignore[method-assign]
        _spin_until(node, lambda: sim.time >= 1.0, "a second of simulated time")
        assert readings == []   # nobody subscribed: nothing computed
        probe = RosTestNode("imu_probe")
        try:
            got: list[Imu] = probe.collect(Imu, "imu", 100)
            _spin_until(node, lambda: len(got) >= 5, "5 imu messages at the probe")
            received = list(got)
        finally:
            probe.close()
        assert len(readings) >= len(received) >= 5
        for msg in received:   # real readings: a unit quaternion, gravity in the accelerometer
            o = msg.orientation
            assert math.isclose(o.w ** 2 + o.x ** 2 + o.y ** 2 + o.z ** 2, 1.0, abs_tol=1e-9)
            assert 5.0 < msg.linear_acceleration.z < 15.0, msg.linear_acceleration
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
