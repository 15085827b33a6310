"""fleet.launch.py under the real ``ros2 launch``: two machines on one graph, a mixed fleet
(``machine:=,wheeled_4ws_11t``: machine 1 the default tracked machine, machine 2 the 4WD4WS
wheeled excavator, its bridge and virtual PLC on its model, its URDF with its wheels).

Each machine's nodes and topics in its namespace (its plant link too: the hardware-in-the-loop
loop closed by default), its own URDF frame prefix and place in the world, one /clock publisher
for the fleet, one Redis database per bridge; a command written to
machine 2's database drives machine 2 only. Needs the launch wheels (launch_ros, ros2launch) and
registers this checkout in a temporary ament prefix itself; skips with the reason where the
wheels are absent. The namespace argument checks run without ROS launch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    EVENT_WAIT_S,
    REPO,
    free_port,
    loaded_host_plc_params,
    loaded_host_virtual_plc_params,
    not_shown,
    wait_for,
)

LIMIT_S = 90.0      # start-up of 12 processes on a loaded 2-core machine


def _load_launch_module():
    spec = importlib.util.spec_from_file_location("fleet_launch", REPO / "launch" /
                                                  "fleet.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fleet():
    pytest.importorskip("launch_ros", reason="launch_ros is not installed (the ros-kilted wheels "
                        "have no launch; see /work/shared/ros2-launch)")
    return _load_launch_module()


def test_machine_presets_one_for_all_or_one_per_machine(fleet):
    assert fleet.fleet_machines("", 2) == ["", ""]
    assert fleet.fleet_machines("wheeled_4ws_11t", 3) == ["wheeled_4ws_11t"] * 3
    assert fleet.fleet_machines(" , wheeled_4ws_11t", 2) == ["", "wheeled_4ws_11t"]
    with pytest.raises(ValueError, match="names 3 presets for 2 machines"):
        fleet.fleet_machines("a,b,c", 2)


def test_namespaces_from_count_or_list(fleet):
    assert fleet.fleet_namespaces("3", "") == ["exc1", "exc2", "exc3"]
    assert fleet.fleet_namespaces("3", "a, /b") == ["a", "b"]
    for count, names, words in (("0", "", "1..16"), ("17", "", "1..16"), ("two", "", "count"),
                                ("1", "a,a", "duplicates"), ("1", "a-b", "not a ROS name")):
        with pytest.raises(ValueError, match=words):
            fleet.fleet_namespaces(count, names)


def _ros2() -> str | None:
    found = Path(sys.executable).parent / "ros2"
    return str(found) if found.exists() else shutil.which("ros2")


def _registered_prefix(tmp_path: Path) -> str:
    """This checkout registered in a fresh ament prefix (``excavator-hil ament-register``), ahead
    of the venv's own prefix (message packages, the robot_state_publisher stand-in)."""
    from excavator_hil.ament_register import register

    prefix = tmp_path / "ament_prefix"
    register(prefix)
    return os.pathsep.join([str(prefix), sys.prefix,
                            *filter(None, [os.environ.get("AMENT_PREFIX_PATH")])])


@pytest.mark.slow
def test_two_machines_under_ros2_launch(fleet, redis_server, ros_node, tmp_path):
    import math

    import redis
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from visualization_msgs.msg import MarkerArray

    from excavator_hil.hil_harness import Heartbeat
    from plc_bridge import redis_keys as keys

    ros2 = _ros2()
    if ros2 is None:
        pytest.skip("the ros2 command is missing (make test installs it from "
                    "../shared/ros2-launch where that folder exists)")
    prefix = _registered_prefix(tmp_path)
    port = free_port()
    while True:            # two consecutive free ports for the two virtual PLCs
        with contextlib.suppress(OSError):
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        port = free_port()
    spacing = 20.0
    env = {**os.environ, "AMENT_PREFIX_PATH": prefix, "ROS_LOG_DIR": str(tmp_path / "log"),
           "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "launch.log", "wb")  # noqa: SIM115 - closed below
    launch = subprocess.Popen(
        [ros2, "launch", "excavator_hil", "fleet.launch.py", "count:=2",
         f"redis_url:=redis://127.0.0.1:{redis_server.port}", f"virtual_plc_port:={port}",
         f"spacing:={spacing}", "machine:=,wheeled_4ws_11t",
         # 13 participants created at once on a loaded host: Fast DDS crashed in one's
         # creation (SIGSEGV in rclpy's Node(), soil_node, both cores busy; upstream
         # ros2/rmw_fastrtps#860), and the required node stopped the fleet. An unattended rig
         # restarts such a node (docs/deployment.md): so does this test
         "respawn:=true",
         f"plc_params:={loaded_host_plc_params(tmp_path / 'plc.yaml')}",
         f"virtual_plc_params:={loaded_host_virtual_plc_params(tmp_path / 'vplc.yaml')}"],
        stdout=log,
        stderr=subprocess.STDOUT, env=env, start_new_session=True)
    heartbeat = Heartbeat(f"{redis_server.url[:-2]}/1", 0.25)
    try:
        def text() -> str:
            log.flush()
            return (tmp_path / "launch.log").read_text(errors="replace")[-3000:]
        node = ros_node.node
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        joints = {ns: ros_node.collect(JointState, f"/{ns}/joint_states") for ns in
                  ("exc1", "exc2")}
        urdf = ros_node.collect(String, "/exc2/robot_description", latched)
        clocks = ros_node.collect(Clock, "/clock", 1000)   # deep: every time it showed
        # what machine 2's PLC measured, as its sim_node gets it (its track_command)
        wheels = ros_node.collect(JointState, "/exc2/plc/wheel_states", 100)

        expected = {(n, f"/{ns}") for ns in ("exc1", "exc2")
                    for n in ("sim_node", "ik_node", "plc_bridge", "robot_state_publisher",
                              "plant_link")}
        expected.add(("soil_node", "/"))       # one soil_node, one terrain for both machines
        def missing() -> list[tuple[str, str]]:
            return sorted(expected - set(node.get_node_names_and_namespaces()))
        wait_for(lambda: not missing(), LIMIT_S,
                 lambda: f"every node in its namespace ({missing()} missing)\n{text()}", 0.2)
        wait_for(lambda: all(joints.values()) and urdf and clocks, LIMIT_S,
                 lambda: f"joint_states of both machines, exc2's URDF, /clock\n{text()}", 0.1)

        # one /clock for the fleet: machine 1's sim_node; machine 2's sim steps to it, so both
        # machines stamp with times the clock showed
        ros_node.wait_endpoints("publishers", "/clock", [("/exc1", "sim_node")])
        wait_for(lambda: all(len(j) > 150 for j in joints.values()), LIMIT_S,
                 "150 joint_states of each machine", 0.1)
        # (config/sim.yaml: a /clock every 10 ms; where this probe missed one, a loaded host's
        # dropped sample, nothing is judged)
        shown = {m.clock.sec * 10**9 + m.clock.nanosec for m in list(clocks)}
        for ns, states in joints.items():
            stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
                      for m in list(states)[-120:]]
            foreign = not_shown(stamps, shown, 10_000_000)
            assert not foreign, (ns, foreign[:3], sorted(shown)[-3:])
        # the one soil_node serves both machines: each machine's sim subscribes to the one
        # terrain patch topic and gets its own wrench topic
        for ns in ("exc1", "exc2"):
            ros_node.wait_endpoints("subscriptions", f"/{ns}/bucket_pose", [("/", "soil_node")])
            ros_node.wait_endpoints("publishers", f"/{ns}/soil/wrench", [("/", "soil_node")])
        ros_node.wait_endpoints("subscriptions", "/soil/terrain_patch",
                                [("/exc1", "sim_node"), ("/exc2", "sim_node")])
        # machine 2's odometry in its own frames
        odom = ros_node.collect(Odometry, "/exc2/odom")
        wait_for(lambda: odom, LIMIT_S, "/exc2/odom", 0.1)
        assert (odom[-1].header.frame_id, odom[-1].child_frame_id) == ("exc2/odom",
                                                                       "exc2/base_link")
        # machine 2's URDF: its links prefixed, world shared
        description = urdf[-1].data
        assert '<link name="exc2/base_link"' in description and '<link name="world"' in description
        assert '"base_link"' not in description and "exc1/" not in description
        # ... on its wheels: the 4WD4WS preset's steered wheels, its bridge and PLC on its model
        assert '<joint name="steer_fl"' in description, description[:400]
        assert ros_node.parameter("/exc2/plc_bridge", "model") == "4wd4ws"
        assert ros_node.parameter("/exc1/plc_bridge", "model") == "skid_steer"
        assert ros_node.parameter("/exc2/sim_node", "machine") == "wheeled_4ws_11t"

        def base(ns: str, joint: str) -> float:
            m = joints[ns][-1]
            return m.position[list(m.name).index(joint)]
        assert base("exc1", "base_y") == pytest.approx(0.0, abs=0.05)
        assert base("exc2", "base_y") == pytest.approx(spacing, abs=0.05)
        # machine 2's poses and markers in world, where its joint_states place it
        poses = ros_node.collect(PoseStamped, "/exc2/bucket_pose")
        markers = ros_node.collect(MarkerArray, "/exc2/markers")
        wait_for(lambda: poses and markers, LIMIT_S, "/exc2/bucket_pose and /exc2/markers", 0.1)
        y2, yaw2 = base("exc2", "base_y"), base("exc2", "base_yaw")
        swing = base("exc2", "swing")
        assert poses[-1].header.frame_id == "world"
        # the bucket lies in the boom plane through machine 2's swing axis
        p = poses[-1].pose.position
        heading = math.atan2(p.y - y2, p.x - base("exc2", "base_x"))
        assert abs(math.remainder(heading - (yaw2 + swing), math.tau)) < 0.2, (p, y2)
        ys = [m.pose.position.y for m in markers[-1].markers]
        assert all(m.header.frame_id == "world" for m in markers[-1].markers)
        assert min(ys) > y2 - 5.0 and max(ys) < y2 + 5.0, (min(ys), max(ys), y2)

        # each bridge in its own Redis database
        dbs = [redis.Redis.from_url(f"{redis_server.url[:-2]}/{k}") for k in (0, 1)]
        wait_for(lambda: all(db.get(keys.BRIDGE_STATUS) for db in dbs), LIMIT_S,
                 "plc.bridge.status in databases 0 and 1", 0.1)
        # drive machine 2 through database 1: machine 2 moves, machine 1 stays
        x1, x2 = base("exc1", "base_x"), base("exc2", "base_x")
        dbs[1].mset({keys.LONGITUDINAL: "0.5", keys.LATERAL: "0", keys.ANGULAR: "0"})
        heartbeat.start()
        wait_for(lambda: base("exc2", "base_x") > x2 + 0.3, LIMIT_S,
                 lambda: f"machine 2 to drive (base_x {base('exc2', 'base_x')} from {x2}; "
                 f"bridge {dbs[1].get(keys.BRIDGE_STATUS)})\n{text()}", 0.1)
        # machine 2's bridge drives it (a host too loaded for the closed loop's 0.25 s plant
        # watchdog stops it a moment: it runs again on the next heartbeat edge)
        wait_for(lambda: dbs[1].get(keys.BRIDGE_STATUS) == b"running", LIMIT_S,
                 lambda: f"bridge 2 running ({dbs[1].get(keys.BRIDGE_STATUS)})\n{text()}", 0.1)
        assert dbs[0].get(keys.BRIDGE_STATUS) != b"running"      # no heartbeat in database 0
        assert base("exc1", "base_x") == pytest.approx(x1, abs=0.01)

        # one time base for the whole launch (issue 33): every node on /clock, and the PLC's
        # wheel states stamped with times the clock showed, not decades ahead of the sims
        for name, ns in sorted(expected):
            full = f"{ns.rstrip('/')}/{name}"
            try:   # (no answer from /exc1/ik_node in 30 s once, a loaded streak run: why?)
                value = ros_node.parameter(full, "use_sim_time", timeout=LIMIT_S)
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}; in the graph: {(name, ns) in node.get_node_names_and_namespaces()}"
                    f"; launch {launch.poll()}\n{text()}") from None
            assert value is True, full
        stamped = [m for m in list(wheels) if m.header.stamp.sec or m.header.stamp.nanosec]
        assert len(stamped) >= 20, f"{len(stamped)} stamped /exc2/plc/wheel_states\n{text()}"
        stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in stamped]

        def clock_ns() -> int:
            return max(m.clock.sec * 10**9 + m.clock.nanosec for m in list(clocks))
        assert max(stamps) - clock_ns() < 60 * 10**9, (
            f"wheel states stamped {max(stamps) / 1e9:.6g} s, the clock at "
            f"{clock_ns() / 1e9:.6g} s: not the simulation's time")
        # judged: the stamps up to the newest /clock this probe took. Its reader, in a starved
        # test process, lost the last seconds of /clock once (ci70: the bridge stamped 30.8 s,
        # the probe's newest /clock was 24 s, and no newer one came in 30 s)
        def covered() -> list[int] | None:
            """The stamps up to the probe's newest /clock (the clock read once), 20 or more."""
            newest = clock_ns()
            upto = [s for s in stamps if s <= newest]
            return upto[-60:] if len(upto) >= 20 else None
        judged = wait_for(covered, EVENT_WAIT_S,
                          lambda: f"/clock to reach 20 of the wheel states' stamps (stamps "
                          f"{min(stamps) / 1e9:.6g}..{max(stamps) / 1e9:.6g} s, the clock at "
                          f"{clock_ns() / 1e9:.6g} s)\n{text()}", 0.05)
        stamps = judged
        shown = {m.clock.sec * 10**9 + m.clock.nanosec for m in list(clocks)}
        assert min(stamps) >= min(shown), (min(stamps), min(shown))
        foreign = not_shown(stamps, shown, 10_000_000)
        assert not foreign, (foreign[:3], sorted(shown)[-3:])
        # ... as the simulation took them: none beyond its max_command_lead_s
        log.flush()
        assert "beyond max_command_lead_s" not in (tmp_path / "launch.log").read_text(
            errors="replace"), text()
        assert launch.poll() is None, text()
    finally:
        heartbeat.stop()
        # the probe goes before the stack (conftest's ros_node: Fast DDS's deadlock)
        ros_node.close()
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGINT)      # a terminal's Ctrl-C
            try:
                launch.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(launch.pid, signal.SIGKILL)
                launch.wait()
        log.close()
