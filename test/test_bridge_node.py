"""The plc_bridge lifecycle node over real DDS, a real redis-server and the virtual PLC process:
autostart, odom / plc/wheel_states / diagnostics, cmd_vel -> Redis, deactivate writes a stop."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from helpers import (
    EVENT_WAIT_S,
    LOADED_HOST_BRIDGE,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    call_service,
    change_state,
    free_port,
    ros_param_args,
    wait_for,
)

from excavator_common.dds_profile import PROFILE_ENV, PROFILE_NAME
from excavator_common.paths import config_file
from plc_bridge import redis_keys as keys
from plc_bridge.config import load_config
from plc_bridge.virtual_plc.control import ControlClient


def _control(port: int) -> ControlClient | None:
    try:
        return ControlClient(port)
    except OSError:
        return None


@pytest.mark.slow
def test_node_publishes_and_deactivate_stops(redis_server, node_processes, ros_node, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from lifecycle_msgs.msg import State, Transition
    from lifecycle_msgs.srv import ChangeState
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import JointState

    port, cport = free_port(), free_port()
    node_processes.append(NodeProcess("plc_bridge.virtual_plc.cli", [
        "--port", str(port), "--control-port", str(cport), "--model", "skid_steer"],
        log_dir=tmp_path))
    plc = wait_for(lambda: _control(cport), STARTUP_TIMEOUT_S, "virtual PLC")
    bridge = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", f"redis_url:={redis_server.url}",
        "-p", f"plc_port:={port}", "-p", "autostart:=true", "-p", "cmd_vel_to_redis:=true",
        # a starved host stalled this bridge's cycles ~1 s (fresh20): with the default deadlines
        # its link was down when deactivate came, and no stop could be written (the PLC's
        # watchdog is then the stop; test_bridge_faults.py tests deactivate's own write)
        *ros_param_args(LOADED_HOST_BRIDGE)],
        log_dir=tmp_path, env={PROFILE_ENV: str(_long_lease_profile(tmp_path))})
    node_processes.append(bridge)
    import redis

    r = redis.Redis.from_url(redis_server.url)
    odom = ros_node.collect(Odometry, "odom")
    wheels = ros_node.collect(JointState, "plc/wheel_states")
    diags = ros_node.collect(DiagnosticArray, "/diagnostics")
    pub = ros_node.node.create_publisher(Twist, "cmd_vel", 10)
    cmd = Twist()
    cmd.linear.x, cmd.angular.z = 0.6, 0.2
    try:
        def drive():
            pub.publish(cmd)
            return r.get(keys.BRIDGE_STATUS) == b"running"
        wait_for(drive, STARTUP_TIMEOUT_S,
                 lambda: f"bridge running via cmd_vel (log: {bridge.log()[-500:]})", 0.05)
        assert r.get(keys.LONGITUDINAL) == b"0.6" and r.get(keys.ANGULAR) == b"0.2"

        def settled():
            pub.publish(cmd)
            if not odom:
                return None
            t = odom[-1].twist.twist
            return odom[-1] if abs(t.linear.x - 0.6) < 0.006 and abs(t.angular.z - 0.2) < 0.002 \
                else None
        at = wait_for(settled, EVENT_WAIT_S, "odom at the commanded twist (1 %)", 0.05)
        assert at.header.frame_id == "odom" and at.child_frame_id == "base_link"
        assert at.pose.pose.position.x > 0.0      # dead reckoning moved forward
        # the wheel speeds of that same PLC reading (one stamp for both topics; the latest
        # wheel_states can be a reading older or newer than the odom that settled)
        js = wait_for(lambda: next((w for w in list(wheels) if w.header.stamp == at.header.stamp),
                                   None),
                                   EVENT_WAIT_S, "the wheel_states of the settled odom's reading")
        assert list(js.name) == ["track_left", "track_right"]
        b = load_config().vehicle_params["track_width_m"]   # skid-steer: v -+ w * b / 2
        assert js.velocity[0] == pytest.approx(0.6 - 0.2 * b / 2, abs=0.01)
        assert js.velocity[1] == pytest.approx(0.6 + 0.2 * b / 2, abs=0.01)

        def diagnosed_running() -> bool:
            pub.publish(cmd)   # running lasts only ~1.25 s past the last cmd_vel: keep driving
            return any(s.name == "plc_bridge" and s.message == "running"
                       for d in list(diags) for s in d.status)
        wait_for(diagnosed_running, EVENT_WAIT_S, "diagnostics OK", 0.05)

        client = ros_node.node.create_client(ChangeState, "plc_bridge/change_state")
        assert client.wait_for_service(timeout_sec=30.0)
        t0 = time.monotonic()
        change_state(ros_node, client, Transition.TRANSITION_DEACTIVATE,
                      State.PRIMARY_STATE_INACTIVE, "deactivate")
        writes = plc.writes(t0)
        assert writes and not writes[-1]["enable"] and writes[-1]["stop"]
        assert writes[-1]["speed_sp_left"] == 0.0 and writes[-1]["speed_sp_right"] == 0.0
        time.sleep(0.3)
        pub.publish(cmd)
        assert r.get(keys.BRIDGE_STATUS) == b"stopped:deactivated"
        assert all(w["speed_sp_left"] == 0.0 for w in plc.writes(writes[-1]["t"]))

        # Ctrl-C: the bridge leaves the graph as it ends, not at its participant's lease
        # (rclpy's LifecycleNode kept its node alive past destroy_node; the process ends with
        # os._exit). The lease is LONG_LEASE_S here: a bridge that left without a goodbye stays
        # far longer than the wait below, on a host of any speed.
        def in_graph() -> bool:
            return ("plc_bridge", "/") in ros_node.node.get_node_names_and_namespaces()
        assert in_graph()
        assert bridge.stop(30.0) == 0, bridge.log()
        wait_for(lambda: not in_graph(), LONG_LEASE_S / 5, "the ended bridge out of the graph: "
                 "still in it, it ended without telling its peers (it stays for its lease)", 0.1)
    finally:
        plc.close()
        r.close()


# The bridge's participant lease in the graph test [s]: how long its peers keep a participant
# that went silent without a goodbye (Fast DDS's default is 20 s)
LONG_LEASE_S = 300


def _long_lease_profile(tmp_path: Path) -> Path:
    """The project's Fast DDS profile with a participant lease of LONG_LEASE_S."""
    xml = config_file(PROFILE_NAME).read_text()
    participant = (
        '<participant profile_name="long_lease" is_default_profile="true"><rtps><builtin>'
        "<discovery_config><leaseDuration>"
        f"<sec>{LONG_LEASE_S}</sec></leaseDuration></discovery_config></builtin></rtps>"
        "</participant>")
    assert xml.count("</profiles>") == 1, "the project's profile changed shape"
    path = tmp_path / "long_lease.xml"
    path.write_text(xml.replace("</profiles>", participant + "</profiles>"))
    return path


def _run_node(args: list[str], timeout: float = STARTUP_TIMEOUT_S):
    import subprocess
    import sys

    from helpers import REPO

    return subprocess.run([sys.executable, "-m", "plc_bridge.bridge.node", "--ros-args",
                           "--params-file", "config/plc.yaml", *args], check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("override, text", [
    ("model:=tank", "parameter model = 'tank' is not one of skid_steer, ackermann, 4wd4ws"),
    ("redis_url:=http://127.0.0.1:6379", "'redis_url' = 'http://127.0.0.1:6379' must start"),
])
def test_autostart_with_a_bad_configuration_exits_2_with_one_message(override, text):
    proc = _run_node(["-p", "autostart:=true", "-p", override])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert text in out and "Traceback" not in out
    assert out.count(text) == 1, out[-2000:]


def test_a_misspelt_parameter_is_an_error_naming_it():
    proc = _run_node(["-p", "plc_timout:=0.1"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "unknown parameter 'plc_timout' (did you mean 'plc_timeout_s'?) of plc_bridge" in out
    assert "Traceback" not in out


def test_the_shipped_parameter_file_holds_only_declared_parameters(node_processes, tmp_path):
    """config/plc.yaml gave ~30 'not a parameter' warnings: every key is now declared (the
    layouts, actuators and vehicle geometry under their dotted names)."""
    node = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", "autostart:=true",
        "-p", f"redis_url:=redis://127.0.0.1:{free_port()}/0", "-p",
        f"plc_port:={free_port()}", "-p", "vehicle.skid_steer.track_width_m:=2.2"],
        log_dir=tmp_path)
    node_processes.append(node)
    wait_for(lambda: "configured: model skid_steer" in node.log(), STARTUP_TIMEOUT_S,
             lambda: f"the node configured: {node.log()[-800:]}")
    assert "not a parameter" not in node.log()
    assert node.alive()


def test_diagnostics_name_a_redis_auth_failure_at_once(node_processes, ros_node, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from helpers import RedisServer

    server = RedisServer(tmp_path / "redis-auth", password="right-pass")
    server.start()
    try:
        diags = ros_node.collect(DiagnosticArray, "/diagnostics")
        node = NodeProcess("plc_bridge.bridge.node", [
            "--ros-args", "--params-file", "config/plc.yaml", "-p", "autostart:=true",
            "-p", f"redis_url:=redis://:wrong-pass@127.0.0.1:{server.port}/0",
            "-p", f"plc_port:={free_port()}"], log_dir=tmp_path)
        node_processes.append(node)
        text = "invalid username-password pair"

        def named() -> bool:
            return any(s.name == "plc_bridge" and text in s.message and s.level == b"\x02"
                       for d in diags for s in d.status)
        wait_for(named, STARTUP_TIMEOUT_S,
                 lambda: f"the cause on /diagnostics: {node.log()[-600:]}")
        assert text in node.log() and "wrong-pass" not in node.log()
    finally:
        server.stop()


def test_a_refusing_plc_and_its_cause_are_on_diagnostics(redis_server, node_processes,
                                                         ros_node, tmp_path):
    """Another writer drives the PLC's seq ahead: every write of the bridge is refused as
    stale. /diagnostics says stopped:plc_refused at level ERROR with the PLC's cause and count
    (and Redis the same)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from helpers import RogueWriter

    port, cport = free_port(), free_port()
    node_processes.append(NodeProcess("plc_bridge.virtual_plc.cli", [
        "--port", str(port), "--control-port", str(cport), "--model", "skid_steer"],
        log_dir=tmp_path))
    plc = wait_for(lambda: _control(cport), STARTUP_TIMEOUT_S, "virtual PLC")
    diags = ros_node.collect(DiagnosticArray, "/diagnostics")
    bridge = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", f"redis_url:={redis_server.url}",
        "-p", f"plc_port:={port}", "-p", "autostart:=true"], log_dir=tmp_path)
    node_processes.append(bridge)
    import redis

    r = redis.Redis.from_url(redis_server.url)
    try:
        wait_for(lambda: plc.status()["seq_accepted"] != 0, STARTUP_TIMEOUT_S,
                 lambda: f"the bridge's first stop at the PLC: {bridge.log()[-800:]}")
        config = load_config(None, {"model": "skid_steer"})
        with RogueWriter(config, port, plc.status()["seq_accepted"] + 2**30):
            def diagnosed() -> dict[str, str] | None:
                for s in (s for d in list(diags) for s in d.status if s.name == "plc_bridge"):
                    values = {kv.key: kv.value for kv in s.values}
                    if s.message.startswith("stopped:plc_refused: ") and s.level == b"\x02" \
                            and values.get("plc.refused_reason") == "stale_seq":
                        return {"message": s.message, **values}
                return None
            found = wait_for(diagnosed, EVENT_WAIT_S, lambda: f"plc_refused on /diagnostics: "
                             f"{bridge.log()[-800:]}")
            assert "stale_seq" in found["message"] and "another writer" in found["message"]
            assert int(found["plc.refused"]) > 0 and int(found["counter.plc_refusals"]) > 0
            assert int(found["plc.seq_accepted"]) > 2**30 and "seq" in found
            # waited for, not read once: the status key lives monitor_ttl_s past the bridge's
            # last cycle, and a bridge starved that long (one core busy, the other worker's
            # stack) had let it expire at the moment of a single read
            wait_for(lambda: r.get(keys.BRIDGE_STATUS) == b"stopped:plc_refused", EVENT_WAIT_S,
                     lambda: f"status {r.get(keys.BRIDGE_STATUS)!r}: {bridge.log()[-800:]}")
            assert r.get(keys.STATE_REFUSED_REASON) == b"stale_seq"
    finally:
        plc.close()
        r.close()


def _fd_counts(pid: int) -> tuple[int, int]:
    """(open file descriptors, of which sockets) of process ``pid`` (/proc/<pid>/fd)."""
    import os

    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:   # closed while listing
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return fds, sockets


@pytest.mark.slow
def test_configure_cleanup_cycles_leak_nothing(redis_server, node_processes, ros_node,
                                               tmp_path):
    """100 configure/cleanup cycles through the node's lifecycle services over DDS, each one
    with the bridge loop connected to the virtual PLC and the cmd_vel client writing to a real
    redis-server: after cleanup the node has no odom / wheel_states publisher and no cmd_vel
    subscription in the ROS graph, and its open file descriptors and sockets do not grow
    (the old node kept every cmd_vel subscription and timer)."""
    from geometry_msgs.msg import Twist
    from lifecycle_msgs.msg import State, Transition
    from lifecycle_msgs.srv import ChangeState

    port, cport = free_port(), free_port()
    node_processes.append(NodeProcess("plc_bridge.virtual_plc.cli", [
        "--port", str(port), "--control-port", str(cport), "--model", "skid_steer"],
        log_dir=tmp_path))
    plc = wait_for(lambda: _control(cport), STARTUP_TIMEOUT_S, "virtual PLC")
    bridge = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", f"redis_url:={redis_server.url}",
        "-p", f"plc_port:={port}", "-p", "cmd_vel_to_redis:=true"], log_dir=tmp_path)
    node_processes.append(bridge)
    import redis

    r = redis.Redis.from_url(redis_server.url)
    node = ros_node.node
    pub = node.create_publisher(Twist, "cmd_vel", 10)
    client = node.create_client(ChangeState, "plc_bridge/change_state")
    assert client.wait_for_service(timeout_sec=STARTUP_TIMEOUT_S), bridge.log()[-2000:]

    goals = {Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
             Transition.TRANSITION_CLEANUP: State.PRIMARY_STATE_UNCONFIGURED,
             Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE,
             Transition.TRANSITION_ACTIVE_SHUTDOWN: State.PRIMARY_STATE_FINALIZED}

    def transition(tid: int, what: str) -> None:
        change_state(ros_node, client, tid, goals[tid],
                      lambda: f"{what} (log: {bridge.log()[-1500:]})")

    def graph() -> tuple[int, int, int]:
        return (node.count_publishers("odom"), node.count_publishers("plc/wheel_states"),
                node.count_subscribers("cmd_vel"))

    def one_cycle(i: int) -> None:
        transition(Transition.TRANSITION_CONFIGURE, f"configure #{i}")
        wait_for(lambda: graph() == (1, 1, 1), EVENT_WAIT_S,
                 lambda: f"configured #{i}: one odom, wheel_states, cmd_vel endpoint: {graph()}")
        # the loop has reached Redis and the PLC, the cmd_vel client writes to Redis
        wait_for(lambda: r.get(keys.BRIDGE_STATUS) == b"stopped:inactive", EVENT_WAIT_S,
                 lambda: f"bridge loop up #{i}: {r.get(keys.BRIDGE_STATUS)!r}")
        cmd = Twist()
        cmd.linear.x = 0.001 * (i + 1)
        expected = f"{cmd.linear.x:.10g}".encode()

        def written() -> bool:
            pub.publish(cmd)
            return r.get(keys.LONGITUDINAL) == expected
        wait_for(written, EVENT_WAIT_S, f"cmd_vel #{i} written to Redis", 0.02)
        transition(Transition.TRANSITION_CLEANUP, f"cleanup #{i}")
        wait_for(lambda: graph() == (0, 0, 0), EVENT_WAIT_S,
                 lambda: f"after cleanup #{i}, no odom / wheel_states / cmd_vel endpoint left: "
                 f"{graph()}")

    pid = bridge.proc.pid
    try:
        for i in range(10):   # warm-up: DDS, the loggers and the import caches settle
            one_cycle(i)
        fds0, sockets0 = _fd_counts(pid)
        for i in range(10, 100):
            one_cycle(i)
        fds, sockets = _fd_counts(pid)
        # a leak of one descriptor per cycle would show as +90; DDS may open a few on its own
        assert fds <= fds0 + 5, f"file descriptors grew from {fds0} to {fds} in 90 cycles"
        assert sockets <= sockets0 + 3, f"sockets grew from {sockets0} to {sockets} in 90 cycles"
        assert bridge.alive()
        # shutdown from active releases the same, after a last stop to the PLC
        transition(Transition.TRANSITION_CONFIGURE, "configure before shutdown")
        # the loop has reached the PLC (its connect runs in the background; a loaded host
        # took longer than the shutdown below, which then had no link to write the stop on)
        wait_for(lambda: r.get(keys.BRIDGE_STATUS) == b"stopped:inactive", EVENT_WAIT_S,
                 lambda: f"bridge loop up before shutdown: {r.get(keys.BRIDGE_STATUS)!r}")
        transition(Transition.TRANSITION_ACTIVATE, "activate before shutdown")
        wait_for(lambda: graph() == (1, 1, 1), EVENT_WAIT_S, lambda: f"configured: {graph()}")
        t0 = time.monotonic()
        transition(Transition.TRANSITION_ACTIVE_SHUTDOWN, "shutdown")
        wait_for(lambda: graph() == (0, 0, 0), EVENT_WAIT_S,
                 lambda: f"after shutdown, no odom / wheel_states / cmd_vel endpoint: {graph()}")
        writes = plc.writes(t0)
        assert writes and writes[-1]["stop"] and not writes[-1]["enable"]
    finally:
        plc.close()
        r.close()


def _set(ros_node, name: str, value):
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    req = SetParameters.Request()
    req.parameters = [Parameter(name, value=value).to_parameter_msg()]
    return call_service(ros_node, SetParameters, "plc_bridge/set_parameters", req).results[0]


@pytest.mark.slow
def test_parameters_over_dds_describe_set_refuse_and_deprecated_names(
        redis_server, node_processes, ros_node, tmp_path):
    """Against a real plc_bridge process, a real redis-server and the virtual PLC:
    `ros2 param describe` shows the spec (description, range, read_only); a dynamic parameter
    set at run time takes effect (the command envelope stops the running bridge and lets it run
    again; the odom rate follows publish_rate_hz); a read-only one and an out-of-range value are
    refused with the reason; a deprecated name at start-up is used, with a warning naming the
    new one."""
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rcl_interfaces.srv import DescribeParameters, GetParameters

    port, cport = free_port(), free_port()
    node_processes.append(NodeProcess("plc_bridge.virtual_plc.cli", [
        "--port", str(port), "--control-port", str(cport), "--model", "skid_steer"],
        log_dir=tmp_path))
    plc = wait_for(lambda: _control(cport), STARTUP_TIMEOUT_S, "virtual PLC")
    bridge = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", f"redis_url:={redis_server.url}",
        "-p", f"plc_port:={port}", "-p", "autostart:=true", "-p", "cmd_vel_to_redis:=true",
        "-p", "publish_rate:=40.0"],   # the deprecated name of publish_rate_hz
        log_dir=tmp_path)
    node_processes.append(bridge)
    import redis

    r = redis.Redis.from_url(redis_server.url)
    odom = ros_node.collect(Odometry, "odom")
    pub = ros_node.node.create_publisher(Twist, "cmd_vel", 10)
    cmd = Twist()
    cmd.linear.x = 0.6
    try:
        def status_after_driving(want: bytes):
            def check():
                pub.publish(cmd)
                return r.get(keys.BRIDGE_STATUS) == want
            return check
        wait_for(status_after_driving(b"running"), STARTUP_TIMEOUT_S,
                 lambda: f"bridge running via cmd_vel (log: {bridge.log()[-800:]})", 0.05)

        # the deprecated name at start-up: used, and the warning names the new one
        assert "'publish_rate' is deprecated" in bridge.log()
        assert "rename it 'publish_rate_hz'" in bridge.log()
        req = GetParameters.Request()
        req.names = ["publish_rate_hz", "heartbeat_timeout_s"]
        values = call_service(ros_node, GetParameters, "plc_bridge/get_parameters", req).values
        assert [values[0].double_value, values[1].double_value] == [40.0, 0.75]

        # describe: description with unit, range, read_only from the spec
        req = DescribeParameters.Request()
        req.names = ["heartbeat_timeout_s", "cycle_hz", "plc_port", "redis_url",
                     "layout.control_header"]
        hb, cycle, plc_port, url, layout = call_service(
            ros_node, DescribeParameters, "plc_bridge/describe_parameters", req).descriptors
        assert "heartbeat" in hb.description and "[s]" in hb.description
        assert "see config" not in hb.description
        assert (hb.floating_point_range[0].from_value, hb.floating_point_range[0].to_value) == \
            (0.05, 10.0)
        assert not hb.read_only and "formerly heartbeat_timeout" in hb.additional_constraints
        assert cycle.read_only and cycle.floating_point_range[0].to_value == 1000.0
        assert plc_port.read_only and plc_port.integer_range[0].to_value == 65535
        assert url.read_only and "Redis" in url.description
        assert layout.read_only and layout.description

        # a read-only parameter: refused, with the reason; the loop keeps its rate
        res = _set(ros_node, "cycle_hz", 10.0)
        assert not res.successful and "read-only" in res.reason, res.reason
        # out of range: refused by the descriptor's range, with the reason
        res = _set(ros_node, "max_angular_rad_s", 500.0)
        assert not res.successful and "max_angular_rad_s" in res.reason, res.reason

        # a dynamic one takes effect: an envelope below the command stops the bridge...
        res = _set(ros_node, "max_longitudinal_m_s", 0.3)
        assert res.successful, res.reason
        wait_for(status_after_driving(b"stopped:invalid_input"), EVENT_WAIT_S,
                 lambda: f"the 0.6 m/s command rejected (status {r.get(keys.BRIDGE_STATUS)})",
                 0.05)
        assert b"max_longitudinal_m_s" in r.get(keys.BRIDGE_DETAIL)
        t0 = time.monotonic()
        time.sleep(0.3)
        assert all(w["speed_sp_left"] == 0.0 for w in plc.writes(t0))   # the PLC got stops
        # ... and widening it lets the same command through again
        assert _set(ros_node, "max_longitudinal_m_s", 1.0).successful
        wait_for(status_after_driving(b"running"), EVENT_WAIT_S, "running again", 0.05)

        # publish_rate_hz: odom follows the new rate (a timer never fires early). The odom
        # published after the change, told by its stamp (the node's system clock, as this
        # process's time.time()), not by its place in the list: 40 Hz odom published before it
        # can still be on its way to a loaded test process. The first after the set may be the
        # publish timer's call still due at the old period (rcl keeps the next call time).
        assert _set(ros_node, "publish_rate_hz", 4.0).successful
        t_set = time.time()

        def stamp(m) -> float:
            return m.header.stamp.sec + m.header.stamp.nanosec * 1e-9

        def after_the_change() -> list[float]:
            return [stamp(m) for m in list(odom) if stamp(m) > t_set][1:]
        stamps = wait_for(lambda: (s := after_the_change()) and len(s) >= 6 and s[:6], EVENT_WAIT_S,
                          "odom at 4 Hz")
        gaps = sorted(b - a for a, b in itertools.pairwise(stamps))
        assert gaps[len(gaps) // 2] >= 0.2, gaps   # 4 Hz: 0.25 s; 40 Hz would be 0.025 s
    finally:
        plc.close()
        r.close()


def test_a_key_missing_from_the_file_takes_the_documented_default(node_processes, ros_node,
                                                                   tmp_path):
    """The node used to take the low end of the range for a key its config_file lacked
    (cycle_hz 1 Hz, heartbeat_timeout 0.05 s): now the spec's default, as documented."""
    from rcl_interfaces.srv import GetParameters

    from plc_bridge.config import BRIDGE

    minimal = tmp_path / "minimal_plc.yaml"
    minimal.write_text("/**:\n  ros__parameters:\n    model: skid_steer\n")
    node = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", str(minimal), "-p", f"config_file:={minimal}"],
        log_dir=tmp_path)
    node_processes.append(node)
    req = GetParameters.Request()
    req.names = ["cycle_hz", "heartbeat_timeout_s", "plc_alive_timeout_s", "pdu_size_bytes",
                 "vehicle.skid_steer.track_width_m"]
    values = call_service(ros_node, GetParameters, "plc_bridge/get_parameters", req, 30.0).values
    got = [v.integer_value if v.type == 2 else v.double_value for v in values]
    assert got == [BRIDGE[n].default for n in req.names] == [100.0, 0.75, 0.5, 240, 2.6]
    assert node.alive(), node.log()


def test_a_run_time_change_breaking_a_rule_between_parameters_is_refused_with_it(
        node_processes, ros_node, tmp_path):
    """The on-set callback checks what a descriptor's range cannot: monitor_ttl_s within its
    range but shorter than two cycles at cycle_hz 10 Hz is refused, the reason names the rule;
    the value is unchanged afterwards."""
    from rcl_interfaces.srv import GetParameters

    node = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", "cycle_hz:=10.0"],
        log_dir=tmp_path)
    node_processes.append(node)
    res = _set(ros_node, "monitor_ttl_s", 0.1)
    assert not res.successful
    assert "'monitor_ttl_s' = 0.1 s is shorter than two cycles at cycle_hz = 10 Hz" in res.reason
    assert _set(ros_node, "monitor_ttl_s", 0.25).successful
    req = GetParameters.Request()
    req.names = ["monitor_ttl_s"]
    values = call_service(ros_node, GetParameters, "plc_bridge/get_parameters", req).values
    assert values[0].double_value == 0.25
