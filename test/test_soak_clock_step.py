"""The soak's records through a step of the wall clock.

A soak on a VM that was paused and resumed (a snapshot: the guest's CLOCK_REALTIME steps by the
pause, its CLOCK_MONOTONIC does not) or on a host whose NTP steps the clock once failed with a
thousand false ``joint_order``/``stale_joint`` violations: its timelines are on CLOCK_MONOTONIC,
and wall stamps converted with an offset read a while before the step landed 11 s off. The
observer (its own process, here under libfaketime with a step back written to a file mid-run) must
put each joint command's stamp on the monotonic clock with the offset of the moment."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, FAKETIME_LIB, NodeProcess, RosTestNode, wait_for

STEP_S = -30.0         # the wall clock's step [s]: back, as NTP corrects a clock that ran
                       # ahead (a timer on the node's clock, the old refresh, waits it out)
PUBLISH_PERIOD_S = 0.05
AROUND_STEP_S = 2.0    # commands published before and after the step [s]
SAME_MOMENT_S = 0.5    # a command's stamp on the monotonic clock vs its arrival [s]: a loaded
                       # host delays an arrival by this much at worst; the step moves it by 30 s


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(FAKETIME_LIB is None, reason="libfaketime is not installed (`make faketime` "
                    "as root, or apt-get install faketime): the observer cannot be run with its "
                    "wall clock stepped")
def test_a_wall_clock_step_does_not_move_the_observers_joint_command_times(tmp_path: Path
                                                                           ) -> None:
    from sensor_msgs.msg import JointState

    step_file = tmp_path / "faketime"
    step_file.write_text("+0\n")
    port = _closed_port()   # no PLC, no Redis: the observer waits for them and records the rest
    out = tmp_path / "observed"
    observer = NodeProcess(
        "excavator_hil.soak.observer",
        ["--out", str(out), "--plc-port", str(port), "--plc-control-port", str(port),
         "--redis-url", f"redis://127.0.0.1:{port}/0"],
        log_dir=tmp_path,
        env={"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME_TIMESTAMP_FILE": str(step_file),
             "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1",
             "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    probe = RosTestNode()
    try:
        wait_for(lambda: "SOAK_OBSERVER READY" in observer.log(), EVENT_WAIT_S,
                 lambda: f"the observer's start: {observer.log()[-1500:]}")
        pub = probe.node.create_publisher(JointState, "joint_command", 50)
        probe.wait_endpoints("subscriptions", "/joint_command", [("/", "soak_observer")])
        names = ["swing", "boom", "arm", "bucket"]

        def publish_for(seconds: float, wall_ahead_s: float) -> None:
            """Commands stamped as a process on the stepped host would stamp them."""
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                msg = JointState(name=names, position=[0.1, 0.2, 0.3, 0.4])
                ns = time.time_ns() + int(wall_ahead_s * 1e9)
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
                pub.publish(msg)
                time.sleep(PUBLISH_PERIOD_S)

        publish_for(AROUND_STEP_S, 0.0)
        time.sleep(SAME_MOMENT_S)   # the last ones taken before the step
        # the observer reads the file at each clock call (FAKETIME_NO_CACHE): stepped at once
        step_file.write_text(f"{STEP_S:+.0f}\n")
        publish_for(AROUND_STEP_S, STEP_S)
    finally:
        probe.close()
        observer.stop()
    rows = [json.loads(line) for line in (out / "joint_commands.jsonl").read_text().splitlines()]
    assert len(rows) > AROUND_STEP_S / PUBLISH_PERIOD_S, f"only {len(rows)} commands observed"
    off = [(round(t_stamp - t_recv, 3), round(t_recv, 3)) for t_stamp, t_recv, _q in rows
           if abs(t_stamp - t_recv) > SAME_MOMENT_S]
    assert not off, (f"{len(off)} of {len(rows)} commands' stamps landed off their arrival on "
                     f"the monotonic clock (stamp - arrival [s], arrival): {off[:5]}")
