"""The launch files under the real ``ros2 launch``, as a ROS user runs them.

The package is registered in a temporary ament prefix (``excavator-hil ament-register``), each
launch file runs in its own process group and is stopped like a terminal's Ctrl-C (SIGINT to the
whole group: every node gets it twice, once from the terminal and once from launch). The graph
is checked with rclpy. Skipped where ``launch_ros`` / ``ros2launch`` are not importable (a plain
clone without ROS launch; ``make test`` installs them from ../shared/ros2-launch when present).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    EVENT_WAIT_S,
    STARTUP_TIMEOUT_S,
    RosTestNode,
    free_port,
    thread_policies,
    thread_slices,
    wait_for,
)

pytest.importorskip("launch_ros", reason="launch_ros is not importable: ROS 2 launch is not "
                    "installed (make test installs it from ../shared/ros2-launch when that "
                    "folder exists; on a ROS 2 install source its setup.bash)")
pytest.importorskip("ros2launch", reason="ros2launch (the `ros2 launch` verb) is not installed")
psutil = pytest.importorskip("psutil")

from excavator_hil.ament_register import register  # noqa: E402

ROS2 = str(Path(sys.executable).with_name("ros2"))
# Topics that are absolute by design (architecture.md): one clock, one diagnostics bus.
ABSOLUTE_TOPICS = {"/clock", "/diagnostics", "/rosout", "/parameter_events"}
# the soil runs inside sim_node by default (soil_in_process:=true: exact coupling, issue 32)
SIM_NODES = {"sim_node", "ik_node", "robot_state_publisher"}
BRIDGE_NODES = {"plc_bridge"}
LOOP_NODES = BRIDGE_NODES | {"plant_link"}   # excavator.launch.py: the loop closed (default)


@pytest.fixture(scope="module")
def ament_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("ament_prefix")
    register(prefix)
    return prefix


class RosLaunch:
    """``ros2 launch excavator_hil <file> <args>`` in its own session (a terminal's job);
    ``wrapper``: a command it runs under (e.g. ``setpriv`` dropping a capability)."""

    def __init__(self, prefix: Path, tmp: Path, file: str, *args: str,
                 wrapper: tuple[str, ...] = (), options: tuple[str, ...] = ()):
        self.log_path = tmp / f"{file}.log"
        env = dict(os.environ)
        env["AMENT_PREFIX_PATH"] = os.pathsep.join(
            [str(prefix), sys.prefix, *filter(None, [env.get("AMENT_PREFIX_PATH")])])
        env["ROS_LOG_DIR"] = str(tmp / "ros_log")
        env["TMPDIR"] = str(tmp)  # launch_ros writes launch_params_* files there
        env["PYTHONUNBUFFERED"] = "1"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([*wrapper, ROS2, "launch", *options, "excavator_hil", file,
                                      *args], env=env,
                                     cwd=tmp, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.returncode: int | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        try:
            return [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(
                recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def node_pids(self, executable: str) -> list[int]:
        """Pids of the running ``executable`` processes under the launch (after the real-time
        prefix, if any, has exec'd it)."""
        pids = []
        for p in self.processes():
            try:
                if any(Path(a).name == executable for a in p.cmdline()[:2]):
                    pids.append(p.pid)
            except psutil.NoSuchProcess:
                continue
        return pids

    def node_pid(self, executable: str) -> int:
        pids = self.node_pids(executable)
        assert pids, f"no {executable} process under ros2 launch; log:\n{self.log()}"
        return pids[0]

    def last_line(self) -> str:
        lines = [line for line in self.log().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def ctrl_c(self, timeout: float = EVENT_WAIT_S) -> int:
        """SIGINT to the process group (a terminal's Ctrl-C); wait for the launch to end and
        check that no process of it is left."""
        procs = self.processes()
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait(timeout, procs)

    def wait(self, timeout: float = EVENT_WAIT_S, procs: list[psutil.Process] | None = None) -> int:
        procs = procs if procs is not None else self.processes()
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ros2 launch still running {timeout} s later; log:\n"
                                 f"{self.log()}") from None
        _, alive = psutil.wait_procs(procs, timeout=EVENT_WAIT_S)
        left = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in alive if p.is_running()]
        assert not left, f"processes left behind: {left}; log:\n{self.log()}"
        return self.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            for sig in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(20)
                    break
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    continue
        self._log.close()


@pytest.fixture
def probe() -> Iterator[RosTestNode]:
    node = RosTestNode("launch_probe")
    try:
        yield node
    finally:
        # The launches have ended (``launches`` depends on this fixture, so it is torn down
        # first). Destroy the probe only once the graph is quiet: a peer's departure is being
        # processed in this participant while its nodes leave the graph, the moment of Fast DDS
        # 3.2's discovery deadlock (docs/deployment.md); one CI run hung here for good. A node
        # killed by a test leaves no goodbye: it stays for its lease (20 s), is removed by a
        # timer, not by a departure, and is not waited for. Not a check.
        seen, quiet_since, deadline = graph(node)[0], time.monotonic(), time.monotonic() + 10.0
        while seen and time.monotonic() - quiet_since < 1.0 and time.monotonic() < deadline:
            time.sleep(0.1)
            now = graph(node)[0]
            if now != seen:
                seen, quiet_since = now, time.monotonic()
        if seen:
            print(f"launch probe: still in the graph at its teardown: {sorted(seen)}")
        time.sleep(0.5)     # the removal of the last participant's endpoints, after its node
        node.close()


@pytest.fixture
def launches(ament_prefix: Path, tmp_path: Path,
             probe: RosTestNode) -> Iterator[list[RosLaunch]]:
    started: list[RosLaunch] = []
    yield started
    for launch in started:
        launch.close()


def graph(probe: RosTestNode) -> tuple[set[str], set[str]]:
    """Full names of the other nodes, and every topic name."""
    nodes = {f"{ns.rstrip('/')}/{name}"
             for name, ns in probe.node.get_node_names_and_namespaces()
             if name != "launch_probe"}
    topics = {t for t, _ in probe.node.get_topic_names_and_types()}
    return nodes, topics


def wait_for_nodes(probe: RosTestNode, launch: RosLaunch, expected: set[str]) -> set[str]:
    def up() -> bool:
        assert launch.proc.poll() is None, f"ros2 launch ended early; log:\n{launch.log()}"
        return expected <= graph(probe)[0]

    # a start-up: a whole launch's processes importing at once on a host whose cores are
    # taken (a dashboard still importing rclpy's messages 60 s after the launch, two workers
    # and a busy core)
    wait_for(up, 120.0, lambda: f"nodes {sorted(expected)}; have {sorted(graph(probe)[0])}; "
             f"log:\n{launch.log()}", period=0.2)
    return graph(probe)[0]


def assert_clean_exit(launch: RosLaunch, code: int) -> None:
    # robot_state_publisher is ../shared/ros2-launch's Python stand-in for the C++ node (not
    # ours): it can die of the second SIGINT; our nodes must not.
    log = "\n".join(line for line in launch.log().splitlines()
                    if "robot_state_publisher-" not in line)
    # asyncio's child watcher in launch can lose a child that exits within its SIGINT handling
    # ("Unknown child process pid N, will report returncode 255"): launch then calls it dead
    # with 255 though the node ended at once with 0. That exit status is unknown, not a
    # failure of ours: such a pid's "has died" line is left out (any other stays an error).
    lost = set(re.findall(r"Unknown child process pid (\d+)", log))
    log = "\n".join(line for line in log.splitlines()
                     if not ("has died" in line and "exit code 255" in line
                             and any(f"[pid {pid}," in line for pid in lost)))
    stuck = hung_in_dds_teardown(log)
    if stuck:
        pytest.xfail(f"{stuck} hung in rclpy's {DDS_TEARDOWN_HANG} after launch's SIGINT (its "
                     "stacks at the SIGTERM): the known Fast DDS 3.2 deadlock, docs/deployment.md")
    assert code == 0, log
    assert "Traceback" not in log, log
    assert "SIGTERM" not in log and "SIGKILL" not in log, (
        "a node did not end within launch's SIGINT grace (15 s; 20 s for one at nice 10):\n" + log)


DDS_TEARDOWN_HANG = "destroy/shutdown calls"
_STACK_HEAD = re.compile(r"^\[(?P<node>[\w-]+)\] (Current thread|Thread) 0x[0-9a-f]+ "
                         r"\(most recent call first\):")
_FRAME = re.compile(r'^\[(?P<node>[\w-]+)\]\s+File "(?P<path>[^"]+)", line \d+ in (?P<func>\w+)')


def hung_in_dds_teardown(log: str) -> str:
    """The node (``soil_node-3``) whose main thread, in the stacks it printed at launch's
    SIGTERM (excavator_common.hang_watchdog.dump_stacks_on_sigterm), stood in one of rclpy's
    ``destroy*`` or ``*shutdown`` calls while stopping (``run_nodes`` below it): how Fast DDS
    3.2's deadlock of a participant's reception and event threads shows from Python
    (docs/deployment.md).
    Empty when no stack shows that: any other hang stays a failure."""
    stacks: list[tuple[str, list[tuple[str, str]]]] = []
    for line in log.splitlines():
        if (head := _STACK_HEAD.match(line)) is not None:
            stacks.append((head["node"], []))
        elif (frame := _FRAME.match(line)) is not None and stacks \
                and stacks[-1][0] == frame["node"]:
            stacks[-1][1].append((frame["path"], frame["func"]))
    for node, frames in stacks:
        if frames and any(func == "run_nodes" for _, func in frames):     # the main thread
            path, func = frames[0]
            if "/rclpy/" in path and (func.startswith("destroy") or "shutdown" in func):
                return node
    return ""
    assert "has died" not in log, log


def test_sim_launch_with_defaults_runs_and_ends_on_ctrl_c(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    from sensor_msgs.msg import JointState

    launch = RosLaunch(ament_prefix, tmp_path, "sim.launch.py")
    launches.append(launch)
    states = probe.collect(JointState, "/joint_states")
    nodes = wait_for_nodes(probe, launch, {f"/{n}" for n in SIM_NODES})
    assert nodes == {f"/{n}" for n in SIM_NODES}
    wait_for(lambda: states, EVENT_WAIT_S, lambda: f"/joint_states; log:\n{launch.log()}")
    if not rviz_installed(ament_prefix):
        assert "RViz not started: rviz2 is not installed here" in launch.log()
    # the soil model answers inside sim_node: sim_node publishes the soil's wrench
    wait_for(lambda: [i.node_name for i in probe.node.get_publishers_info_by_topic(
        "/soil/wrench")] == ["sim_node"],
        EVENT_WAIT_S, lambda: f"sim_node publishing /soil/wrench; "
        f"log:\n{launch.log()}", period=0.2)
    assert_clean_exit(launch, launch.ctrl_c())
    for name in SIM_NODES:
        assert f"[{name}-" in launch.log()
    assert launch.log().count("process has finished cleanly") >= len(SIM_NODES) - 1


def _describe(p: psutil.Process) -> str:
    """``pid command (status)`` of a process, for a failure message."""
    try:
        return f"{p.pid} {' '.join(p.cmdline()[:4])} ({p.status()})"
    except psutil.NoSuchProcess:
        return f"{p.pid} (ended)"


def test_a_ctrl_c_that_launch_takes_after_its_nodes_ended_still_ends_with_0(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    """A terminal's Ctrl-C reaches ``ros2 launch`` and its nodes at once; launch takes its
    SIGINT in its event loop, where the nodes' exits arrive too. Made certain here that the
    nodes have ended before launch runs again (it is stopped, SIGSTOP, while the process group
    gets SIGINT): their exits are still a Ctrl-C's, not failures, and the launch ends with 0
    (launch_support records the SIGINT as it arrives)."""
    launch = RosLaunch(ament_prefix, tmp_path, "sim.launch.py", "soil:=false")
    launches.append(launch)
    wait_for_nodes(probe, launch, {f"/{n}" for n in SIM_NODES})
    nodes = [p for p in launch.processes() if p.pid != launch.proc.pid]
    assert nodes, launch.log()
    os.kill(launch.proc.pid, signal.SIGSTOP)
    try:
        os.killpg(launch.proc.pid, signal.SIGINT)
        def ended(p: psutil.Process) -> bool:   # a zombie until the stopped launch reaps it
            try:
                return p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        def alive() -> str:
            return "; ".join(_describe(p) for p in nodes if not ended(p))

        wait_for(lambda: all(ended(p) for p in nodes), EVENT_WAIT_S,
                 lambda: f"the nodes ending on SIGINT (alive: {alive()})")
    finally:
        os.kill(launch.proc.pid, signal.SIGCONT)
    assert_clean_exit(launch, launch.wait())


def test_sim_launch_with_the_soil_over_dds_starts_soil_node(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    """``soil_in_process:=false``: soil_node in its own process answers sim_node's poses."""
    launch = RosLaunch(ament_prefix, tmp_path, "sim.launch.py", "soil_in_process:=false")
    launches.append(launch)
    expected = {f"/{n}" for n in SIM_NODES | {"soil_node"}}
    assert wait_for_nodes(probe, launch, expected) == expected
    wait_for(lambda: [i.node_name for i in probe.node.get_publishers_info_by_topic(
        "/soil/wrench")] == ["soil_node"],
        EVENT_WAIT_S, lambda: f"soil_node publishing /soil/wrench; "
        f"log:\n{launch.log()}", period=0.2)
    assert_clean_exit(launch, launch.ctrl_c())


# (excavator.launch.py: in test_teleop_dashboard_and_foxglove_join_excavator_launch_in_its_
# namespace, with every optional node on)
@pytest.mark.parametrize("file", ["sim.launch.py", "bridge.launch.py"])
def test_every_node_and_topic_sits_under_the_namespace_once(
        file: str, ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode, redis_server: object) -> None:
    args = ["namespace:=ns1", f"redis_url:={redis_server.url}",  # type: ignore[attr-defined]
            f"virtual_plc_port:={free_port()}"]
    if file != "sim.launch.py":
        args.append("virtual_plc:=true")
    else:
        args = args[:1]
    expected = {"sim.launch.py": SIM_NODES, "bridge.launch.py": BRIDGE_NODES}[file]
    launch = RosLaunch(ament_prefix, tmp_path, file, *args)
    launches.append(launch)
    nodes = wait_for_nodes(probe, launch, {f"/ns1/{n}" for n in expected})
    assert nodes == {f"/ns1/{n}" for n in expected}
    relative = {"sim.launch.py": "/ns1/joint_states", "bridge.launch.py": "/ns1/odom"}[file]
    assert_topics_under_ns1(probe, launch, relative)
    assert_clean_exit(launch, launch.ctrl_c())


def assert_topics_under_ns1(probe: RosTestNode, launch: RosLaunch, last_topic: str) -> None:
    """Every topic of the launch (but the absolute ones) under /ns1, once, from when
    ``last_topic`` is on the graph."""
    wait_for(lambda: last_topic in graph(probe)[1], EVENT_WAIT_S, f"topic {last_topic}")
    time.sleep(1.0)  # the last publishers of a slow start
    topics = graph(probe)[1] - ABSOLUTE_TOPICS
    assert topics
    outside = sorted(t for t in topics if not t.startswith("/ns1/") or t.startswith("/ns1/ns1/"))
    assert outside == [], launch.log()


@pytest.mark.parametrize("plant", ["closed", "standalone"])
def test_driving_through_redis_moves_the_simulated_base(
        plant: str, ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode, redis_server: object) -> None:
    """excavator.launch.py started the documented way. closed (the default, hardware in the
    loop): a speed written to the operational layer's Redis keys goes bridge -> virtual PLC
    (its speed loops) -> plant_out -> plant link -> sim_node's drive train -> plant/sensors ->
    plant link -> plant_in -> PLC -> monitor DB -> bridge -> Redis: the simulated machine moves,
    and the Redis monitor key of the left track carries a speed the simulation measured (not
    the 0.5 m/s set-point). standalone: bridge -> virtual PLC's own plant -> plc/wheel_states
    -> sim_node's tracks."""
    import redis
    from sensor_msgs.msg import JointState

    from excavator_hil.hil_harness import Heartbeat
    from plc_bridge import redis_keys as keys

    url = redis_server.url  # type: ignore[attr-defined]
    closed = plant == "closed"
    launch = RosLaunch(ament_prefix, tmp_path, "excavator.launch.py", "namespace:=ns1",
                       f"redis_url:={url}", f"virtual_plc_port:={free_port()}", "soil:=false",
                       *([] if closed else ["plant:=standalone"]))
    launches.append(launch)
    states = probe.collect(JointState, "/ns1/joint_states")
    sensors = probe.collect(JointState, "/ns1/plant/sensors", 2000)
    wait_for(lambda: states, EVENT_WAIT_S, lambda: f"/ns1/joint_states; log:\n{launch.log()}",
             period=0.1)
    # the plant link may join the graph after the simulation's first joint states (a loaded
    # host starts the launch's processes in any order); standalone never starts one
    wait_for(lambda: "/ns1/plc_bridge" in graph(probe)[0] and (
        not closed or "/ns1/plant_link" in graph(probe)[0]), EVENT_WAIT_S,
        lambda: f"the bridge{' and the plant link' if closed else ''} on the graph "
                f"({sorted(graph(probe)[0])}); log:\n{launch.log()}", period=0.2)
    nodes = graph(probe)[0]
    assert ("/ns1/plant_link" in nodes) == closed, (sorted(nodes), launch.log())
    client = redis.Redis.from_url(url, decode_responses=True)

    def base_x() -> float:
        msg = states[-1]
        return dict(zip(msg.name, msg.position, strict=False))["base_x"]

    def measured_left() -> list[float]:
        return [dict(zip(m.name, m.velocity, strict=True))["track_left"]
                for m in list(sensors)]

    x0 = base_x()
    heartbeat = Heartbeat(url).start()  # the operational layer's: the bridge runs with it only
    try:
        wait_for(lambda: client.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
                 lambda: f"bridge running (status {client.get(keys.BRIDGE_STATUS)}: "
                         f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}",
                 period=0.1)
        def driven() -> bool:
            client.mset({keys.LONGITUDINAL: "0.5", keys.LATERAL: "0", keys.ANGULAR: "0"})
            return base_x() - x0 > 0.3

        wait_for(driven, EVENT_WAIT_S, lambda: f"base_x to grow by 0.3 m from {x0:.3f} (now "
                 f"{base_x():.3f}; bridge {client.get(keys.BRIDGE_STATUS)}: "
                 f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}", period=0.1)
        if closed:
            # the monitor key reports the simulated machine's measurement: a value sim_node
            # published on plant/sensors (to REAL rounding), never the set-point
            def key_is_a_measurement() -> bool:
                client.mset({keys.LONGITUDINAL: "0.5"})
                v = client.get(keys.wheel_speed_key("left"))
                return v is not None and float(v) not in (0.0, 0.5) and any(
                    abs(m - float(v)) <= 1e-6 * max(1.0, abs(m)) for m in measured_left())

            wait_for(key_is_a_measurement, EVENT_WAIT_S, lambda: f"plc.monitor wheel_left speed "
                     f"{client.get(keys.wheel_speed_key('left'))} among the "
                     f"{len(sensors)} speeds sim_node measured", period=0.1)
        else:
            assert not sensors, "standalone: sim_node must not run the drive train"
        client.mset({keys.LONGITUDINAL: "0"})
    finally:
        heartbeat.stop()
    assert_clean_exit(launch, launch.ctrl_c())


def test_a_required_node_that_dies_ends_the_launch_and_says_why(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    launch = RosLaunch(ament_prefix, tmp_path, "sim.launch.py", "soil:=false")
    launches.append(launch)
    wait_for_nodes(probe, launch, {"/ik_node", "/sim_node"})
    os.kill(launch.node_pid("ik_node"), signal.SIGKILL)
    code = launch.wait(EVENT_WAIT_S)  # ends by itself, nothing left behind
    log = launch.log()
    # a supervisor (systemd, CI) tells a crash from a clean stop: exit code 1, and the last
    # line, after the other nodes ended, says which node and how
    assert code == 1, log
    assert "required node ik_node was killed by signal 9 (SIGKILL): stopping the other" in log
    assert "required node ik_node was killed by signal 9 (SIGKILL); the launch stopped its " \
           "other nodes and exits with code 1" in launch.last_line(), log
    assert "sim_node-1]: process has finished cleanly" in log, log   # stopped, not killed
    assert "SIGTERM" not in log, log


@pytest.mark.parametrize("respawn", ["false", "true"])
def test_a_node_refusing_its_configuration_ends_the_launch(
        respawn: str, ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch]) -> None:
    """Exit code 2 (a refused configuration) ends the launch with code 1 naming the node, with
    respawn too: the same configuration would be refused again."""
    bad = tmp_path / "ik_bad.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    bucket_pitch: .nan\n")
    launch = RosLaunch(ament_prefix, tmp_path, "sim.launch.py", "soil:=false",
                       f"ik_params:={bad}", f"respawn:={respawn}", "respawn_delay_s:=0.5")
    launches.append(launch)
    code = launch.wait(EVENT_WAIT_S)
    log = launch.log()
    assert code == 1, log
    assert "required node ik_node refused its configuration (code 2" in launch.last_line(), log
    assert log.count("[ik_node-2]: process started") == 1, log
    if respawn == "true":
        assert "not respawned (the same configuration would be refused again)" in log, log


def _started(log: str, label: str) -> int:
    return log.count(f"[{label}]: process started")


def test_respawn_brings_a_killed_node_back_and_the_launch_keeps_running(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch], probe: RosTestNode,
        redis_server: object) -> None:
    """respawn:=true: plc_bridge killed by SIGKILL comes back (a new process, a new endpoint in
    the graph), so does the virtual PLC; each respawn is logged; Ctrl-C still ends it all with
    code 0."""
    launch = RosLaunch(ament_prefix, tmp_path, "bridge.launch.py", "virtual_plc:=true",
                       f"virtual_plc_port:={free_port()}", "respawn:=true",
                       "respawn_delay_s:=0.5",
                       f"redis_url:={redis_server.url}")  # type: ignore[attr-defined]
    launches.append(launch)
    wait_for_nodes(probe, launch, {"/plc_bridge"})

    def gids() -> set[bytes]:
        return {bytes(i.endpoint_gid)
                for i in probe.node.get_publishers_info_by_topic("/plc/wheel_states")}

    before = wait_for(gids,
                      EVENT_WAIT_S, lambda: f"plc_bridge's plc/wheel_states; log:\n{launch.log()}")
    for exe in ("plc_bridge", "virtual_plc"):
        old = launch.node_pid(exe)
        os.kill(old, signal.SIGKILL)

        def respawned(exe: str = exe, old: int = old) -> list[int]:
            return [p for p in launch.node_pids(exe) if p != old]

        wait_for(respawned,
                 EVENT_WAIT_S, lambda: f"a new process after the kill; log:\n{launch.log()}")
        assert launch.proc.poll() is None, launch.log()
    # the new bridge's publisher joins the graph (the dead one's may linger until its lease ends)
    wait_for(lambda: gids() - before,
             EVENT_WAIT_S, lambda: f"a new plc/wheel_states publisher; log:\n"
             f"{launch.log()}")
    # waited for, not read once: a respawned process can be running (and found by its pid)
    # before ros2 launch's "process started" line reaches the log (a fresh-clone run, one
    # core busy: virtual_plc's line was not there yet)
    wait_for(lambda: _started(launch.log(), "plc_bridge-2") == 2
             and _started(launch.log(), "virtual_plc-1") == 2, EVENT_WAIT_S,
             lambda: f"each respawn logged as a start; log:\n{launch.log()}")
    log = launch.log()
    for name in ("plc_bridge", "virtual_plc"):
        assert (f"required node {name} was killed by signal 9 (SIGKILL)" in log
                and "respawning it in 0.5 s (respawn #1; 1 of 5 deaths in a row" in log), log
    code = launch.ctrl_c()
    assert code == 0, launch.log()
    assert "exits with code 1" not in launch.log()


def test_a_node_that_keeps_dying_is_respawned_respawn_limit_times_then_the_launch_ends(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch]) -> None:
    """respawn_limit:=2: the virtual PLC killed right after each start is respawned twice; the
    third death within respawn_window_s of a start ends the launch with code 1, its last line
    saying so."""
    launch = RosLaunch(ament_prefix, tmp_path, "bridge.launch.py", "virtual_plc:=true",
                       f"virtual_plc_port:={free_port()}", "respawn:=true",
                       "respawn_delay_s:=0.2", "respawn_limit:=2",
                       f"redis_url:=redis://127.0.0.1:{free_port()}/0")
    launches.append(launch)
    seen: list[int] = []
    for _ in range(3):
        pid = wait_for(lambda: [p for p in launch.node_pids("virtual_plc") if p not in seen],
                       EVENT_WAIT_S, lambda: f"a new virtual_plc; log:\n{launch.log()}")[0]
        seen.append(pid)
        os.kill(pid, signal.SIGKILL)
    code = launch.wait(EVENT_WAIT_S)
    log = launch.log()
    assert code == 1, log
    assert _started(log, "virtual_plc-1") == 3, log
    assert "respawn #2; 2 of 2 deaths in a row" in log, log
    assert ("required node virtual_plc was killed by signal 9 (SIGKILL): its death #3 in a row "
            "within 60 s of its start, not respawned again; the launch stopped its other nodes "
            "and exits with code 1") in launch.last_line(), log


def rviz_installed(prefix: Path) -> bool:
    from excavator_hil.launch_support import rviz_installed

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMENT_PREFIX_PATH", f"{prefix}:{sys.prefix}")
        return rviz_installed()


def test_rviz_true_without_rviz2_starts_nothing_and_says_how(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch]) -> None:
    if rviz_installed(ament_prefix):
        pytest.skip("rviz2 is installed here")
    launch = RosLaunch(ament_prefix, tmp_path, "excavator.launch.py", "rviz:=true")
    launches.append(launch)
    code = launch.wait(EVENT_WAIT_S)
    log = launch.log()
    assert code != 0, log
    assert "rviz2 is not installed" in log and "rviz:=false" in log, log
    assert "process started" not in log, log


def test_rviz_defaults_to_off_without_rviz2(ament_prefix: Path) -> None:
    out = subprocess.run([ROS2, "launch", "excavator_hil", "excavator.launch.py", "--show-args"],
                         env={**os.environ, "AMENT_PREFIX_PATH": f"{ament_prefix}:{sys.prefix}"},
                         capture_output=True, text=True, timeout=120, check=True).stdout
    rviz = out.split("'rviz':", 1)[1].split("'soil':", 1)[0]
    default = "true" if rviz_installed(ament_prefix) else "false"
    assert f"(default: '{default}')" in rviz, out


def test_ros2_cli_finds_the_registered_package(ament_prefix: Path) -> None:
    env = {**os.environ, "AMENT_PREFIX_PATH": f"{ament_prefix}:{sys.prefix}"}
    prefix = subprocess.run([ROS2, "pkg", "prefix", "excavator_hil"], env=env,
                            capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                            check=True).stdout
    assert prefix.strip() == str(ament_prefix)
    exes = subprocess.run([ROS2, "pkg", "executables", "excavator_hil"], env=env,
                          capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                          check=True).stdout
    assert {line.split()[1] for line in exes.splitlines()} >= {
        "sim_node", "ik_node", "soil_node", "plc_bridge", "virtual_plc"}
    run = subprocess.run([ROS2, "run", "excavator_hil", "virtual_plc", "--help"], env=env,
                         capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S, check=False)
    assert run.returncode == 0 and "--port" in run.stdout, run.stdout + run.stderr


def test_teleop_dashboard_and_foxglove_join_excavator_launch_in_its_namespace(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch], probe: RosTestNode,
        redis_server: object) -> None:
    """excavator.launch.py with every optional node: ``teleop:=true`` adds teleop_node
    (sim.launch.py), ``dashboard:=true`` the browser dashboard (dashboard.launch.py),
    ``foxglove:=true`` foxglove_view (foxglove.launch.py), all under the namespace with every
    topic, on the launch's one time base. The page answers on loopback; a client of the
    Foxglove protocol gets the stack's URDF as an asset, /tf from the simulated joint states in
    simulated time, every terrain tile of soil_node's grid, and the diagnostics."""
    import base64
    import urllib.request

    from test_foxglove_view import Peer, peer_executable

    from excavator_hil.foxglove_view.core import TerrainTiles
    from excavator_sim.soil.config import load_soil_config

    try:
        node_exe, no_peer = peer_executable(), ""
    except pytest.skip.Exception as e:   # the rest still runs; the client's part is skipped
        node_exe, no_peer = "", str(e)
    port = free_port()
    launch = RosLaunch(ament_prefix, tmp_path, "excavator.launch.py", "namespace:=ns1",
                       "teleop:=true", "dashboard:=true", "foxglove:=true",
                       f"foxglove_port:={port}", "virtual_plc:=true",
                       f"redis_url:={redis_server.url}",  # type: ignore[attr-defined]
                       f"virtual_plc_port:={free_port()}")
    launches.append(launch)
    expected = {f"/ns1/{n}" for n in SIM_NODES | LOOP_NODES
                | {"teleop_node", "dashboard", "foxglove_view"}}
    assert wait_for_nodes(probe, launch, expected) == expected
    assert_topics_under_ns1(probe, launch, "/ns1/plc/wheel_states")

    def page() -> bool:
        try:
            with urllib.request.urlopen("http://127.0.0.1:8080/", timeout=5.0) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    wait_for(page,
             EVENT_WAIT_S, lambda: f"the dashboard page on 127.0.0.1:8080; log:\n{launch.log()}")
    # one time base (issue 33): every node of the launch on /clock, the dashboard (it stamps
    # the targets it sends), the bridge (the PLC's wheel states) and the view included
    assert {n: probe.parameter(n, "use_sim_time") for n in sorted(expected)} == dict.fromkeys(
        sorted(expected), True)

    wait_for(lambda: "served as package://" in launch.log(), EVENT_WAIT_S,
             lambda: f"the view to get robot_description; log:\n{launch.log()}", 0.2)
    if no_peer:
        assert_clean_exit(launch, launch.ctrl_c())
        pytest.skip(f"the Foxglove client's part: {no_peer}")
    peer = Peer(node_exe, f"ws://127.0.0.1:{port}", tmp_path / "peer.jsonl",
                "package://excavator_hil/robot_description.urdf")
    try:
        grid = load_soil_config().terrain
        tiles = TerrainTiles.from_cells(grid.x0, grid.y0, grid.cell_xy_m, grid.nx, grid.ny)
        n_tiles = tiles.tiles_shape[0] * tiles.tiles_shape[1]

        def seen() -> bool:
            return (any(e["event"] == "asset" for e in peer.events())
                    and len(peer.messages("/tf")) >= 20
                    and len({e["id"] for m in peer.messages("/terrain")
                             for e in m["decoded"]["entities"]}) == n_tiles
                    and bool(peer.messages("/diagnostics")))
        wait_for(seen, EVENT_WAIT_S, lambda: f"the client's view of the stack:\n"
                 f"{peer.out.read_text()[-2000:]}\nlog:\n{launch.log()[-3000:]}", 0.2)
        (asset,) = [e for e in peer.events() if e["event"] == "asset"]
        assert asset["status"] == 0 and '<joint name="swing"' in asset["text"], asset
        stamps = [m["decoded"]["transforms"][0]["timestamp"] for m in peer.messages("/tf")]
        times = [t.get("seconds", 0) + 1e-9 * t.get("nanos", 0) for t in stamps]
        # simulated time (the launch's time base), advancing
        assert times == sorted(times) and times[-1] > times[0] and times[-1] < 1e6, times
        frames = {t["childFrameId"] for t in peer.messages("/tf")[-1]["decoded"]["transforms"]}
        assert {"base_link", "chassis", "boom", "arm", "bucket"} <= frames
        raw = base64.b64decode(peer.messages("/diagnostics")[-1]["raw"])
        assert raw[:4] == b"\x00\x01\x00\x00"   # CDR, little endian
    finally:
        peer.stop()
    assert_clean_exit(launch, launch.ctrl_c())


# --- the real-time set-up (excavator_common.realtime, as the demo applies it) -----------------
def _setup_lines(log: str, node: str) -> list[str]:
    return [line for line in log.splitlines() if f"real-time set-up of {node}:" in line]


def _bridge_launch(ament_prefix: Path, tmp_path: Path, *args: str,
                   wrapper: tuple[str, ...] = (), options: tuple[str, ...] = ()) -> RosLaunch:
    return RosLaunch(ament_prefix, tmp_path, "bridge.launch.py", "virtual_plc:=true",
                     f"virtual_plc_port:={free_port()}",
                     f"redis_url:=redis://127.0.0.1:{free_port()}/0", *args, wrapper=wrapper,
                     options=options)


def test_realtime_auto_runs_the_path_to_the_plc_with_the_demos_fair_slice(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    """realtime:=auto (the default): every thread of the bridge and the virtual PLC runs with
    the demo's 0.1 ms fair-scheduler slice, still under normal scheduling; one log line per
    node says what was applied; a user's --launch-prefix still applies after it."""
    from excavator_common import realtime

    if not realtime.host_support().fair_slice:
        pytest.skip(f"this kernel ({os.uname().release}) keeps its own fair-scheduler slice")
    seen = "EXCAVATOR_HIL_TEST_LAUNCH_PREFIX=1"
    launch = _bridge_launch(ament_prefix, tmp_path, options=("--launch-prefix", f"env {seen}"))
    launches.append(launch)
    wait_for_nodes(probe, launch, {"/plc_bridge"})
    for exe in ("plc_bridge", "virtual_plc"):
        pid = launch.node_pid(exe)
        assert thread_slices(pid) == {0.0001}, (exe, thread_slices(pid))
        assert thread_policies(pid) == {os.SCHED_OTHER}
        lines = _setup_lines(launch.log(), exe)
        assert len(lines) == 1 and "fair-scheduler slice 0.1 ms" in lines[0], launch.log()
        assert seen.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert launch.ctrl_c() == 0, launch.log()


def test_realtime_off_leaves_the_kernels_defaults_and_says_so(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    from excavator_common import realtime

    launch = _bridge_launch(ament_prefix, tmp_path, "realtime:=off")
    launches.append(launch)
    wait_for_nodes(probe, launch, {"/plc_bridge"})
    default = realtime.current_fair_slice()
    for exe in ("plc_bridge", "virtual_plc"):
        pid = launch.node_pid(exe)
        assert thread_slices(pid) == {default} - {None}, (exe, thread_slices(pid))
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"{realtime.ENV}=off".encode() in environ   # nor the node's own gc / GIL set-up
        (line,) = _setup_lines(launch.log(), exe)
        assert "off (realtime:=off)" in line
    assert launch.ctrl_c() == 0, launch.log()


def _cannot_drop_sys_nice() -> str:
    """Why a process without CAP_SYS_NICE cannot be made here ('' when it can)."""
    import shutil

    if shutil.which("setpriv") is None:
        return "no setpriv (util-linux) here"
    probe = subprocess.run(["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice",
                            sys.executable, "-c", "import os; os.sched_setscheduler(0, "
                            "os.SCHED_FIFO, os.sched_param(20))"], capture_output=True,
                           check=False)
    return "" if probe.returncode != 0 else "SCHED_FIFO stays permitted without CAP_SYS_NICE"


@pytest.mark.parametrize("permitted", [True, False], ids=["fifo", "no-cap-sys-nice"])
def test_rt_priority_is_applied_where_permitted_and_else_named_once_per_node(
        permitted: bool, ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch],
        probe: RosTestNode) -> None:
    """rt_priority:=20: with the privilege, the bridge's loop thread and every thread of the
    virtual PLC run under SCHED_FIFO 20; without it (CAP_SYS_NICE dropped), nothing does, the
    launch says why in one line per node and the nodes do not try again."""
    from excavator_common import realtime

    wrapper: tuple[str, ...] = ()
    if permitted:
        if not realtime.host_support(20).fifo:
            pytest.skip(realtime.host_support(20).fifo_why)
    else:
        why = _cannot_drop_sys_nice() if realtime.host_support(20).fifo else ""
        if why:
            pytest.skip(why)
        if realtime.host_support(20).fifo:
            wrapper = ("setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice")
    launch = _bridge_launch(ament_prefix, tmp_path, "rt_priority:=20", wrapper=wrapper)
    launches.append(launch)
    wait_for_nodes(probe, launch, {"/plc_bridge"})
    bridge, plc = launch.node_pid("plc_bridge"), launch.node_pid("virtual_plc")
    if permitted:
        def loop_fifo() -> bool:
            return any(os.sched_getscheduler(int(t.name)) == os.SCHED_FIFO
                       and (t / "comm").read_text().strip() == "plc-bridge-loop"
                       for t in Path(f"/proc/{bridge}/task").glob("*"))
        wait_for(loop_fifo, EVENT_WAIT_S, lambda: f"the bridge loop under SCHED_FIFO; log:\n"
                 f"{launch.log()}")
        # the virtual PLC switches itself before its server starts (an idle thread numpy's BLAS
        # made at import may stay normal)
        assert os.sched_getscheduler(plc) == os.SCHED_FIFO
        assert os.sched_getparam(plc).sched_priority == 20
        assert "SCHED_FIFO 20 for its loop" in _setup_lines(launch.log(), "plc_bridge")[0]
    else:
        wait_for(lambda: "configured:" in launch.log(), EVENT_WAIT_S, launch.log)
        assert thread_policies(bridge) == thread_policies(plc) == {os.SCHED_OTHER}
        for exe in ("plc_bridge", "virtual_plc"):
            (line,) = _setup_lines(launch.log(), exe)
            assert "rt_priority 20 not applied, normal scheduling: SCHED_FIFO 20 not " \
                   "permitted here" in line, line
            assert "CAP_SYS_NICE" in line and "LimitRTPRIO" in line
        assert "not applied" not in "\n".join(   # the nodes were told 0: no second warning
            line for line in launch.log().splitlines() if "real-time set-up" not in line)
    assert launch.ctrl_c() == 0, launch.log()


def test_a_wheeled_machine_runs_the_closed_loop_from_excavator_launch(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch], probe: RosTestNode,
        redis_server: object) -> None:
    """``machine:=wheeled_4ws_11t`` (issue 28): the launch gives the bridge, the virtual PLC
    and the plant link the machine's model (4wd4ws) and geometry, sim_node the machine; a
    lateral speed on Redis (crab left) steers the wheels to 90 deg and moves the machine to
    +y, and the joint states carry the steered wheels the URDF has."""
    import redis
    from sensor_msgs.msg import JointState

    from excavator_hil.hil_harness import Heartbeat
    from plc_bridge import redis_keys as keys

    url = redis_server.url  # type: ignore[attr-defined]
    launch = RosLaunch(ament_prefix, tmp_path, "excavator.launch.py", "namespace:=wh",
                       f"redis_url:={url}", f"virtual_plc_port:={free_port()}", "soil:=false",
                       "machine:=wheeled_4ws_11t")
    launches.append(launch)
    states = probe.collect(JointState, "/wh/joint_states")
    wait_for(lambda: states, EVENT_WAIT_S, lambda: f"/wh/joint_states; log:\n{launch.log()}",
             period=0.1)
    assert {"steer_fl", "steer_rr", "wheel_fl"} <= set(states[-1].name)
    client = redis.Redis.from_url(url, decode_responses=True)

    def joint(name: str) -> float:
        msg = states[-1]
        return dict(zip(msg.name, msg.position, strict=False))[name]

    y0 = joint("base_y")
    heartbeat = Heartbeat(url).start()
    try:
        wait_for(lambda: client.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
                 lambda: f"bridge running (status {client.get(keys.BRIDGE_STATUS)}: "
                         f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}",
                 period=0.1)

        def crabbed() -> bool:
            client.mset({keys.LONGITUDINAL: "0", keys.LATERAL: "0.3", keys.ANGULAR: "0"})
            return joint("base_y") - y0 > 0.3

        wait_for(crabbed, 120.0, lambda: f"base_y to grow by 0.3 m (now {joint('base_y'):.3f}, "
                 f"steer_fl {joint('steer_fl'):.3f}; bridge {client.get(keys.BRIDGE_STATUS)}: "
                 f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}", period=0.1)
        assert abs(joint("steer_fl") - 1.5708) < 0.01, joint("steer_fl")
        assert abs(joint("base_yaw")) < 0.01
        client.mset({keys.LATERAL: "0"})
    finally:
        heartbeat.stop()
    assert_clean_exit(launch, launch.ctrl_c())


def test_a_wheeled_machine_standalone_follows_the_plcs_wheel_states(
        ament_prefix: Path, tmp_path: Path, launches: list[RosLaunch], probe: RosTestNode,
        redis_server: object) -> None:
    """``plant:=standalone machine:=wheeled_4ws_11t`` (issue 28): the virtual PLC's own plant
    under the 4wd4ws model, sim_node's ``wheel_command`` remapped to the bridge's
    ``plc/wheel_states``: a lateral speed on Redis (crab left) steers the simulated wheels to
    90 deg and moves the machine to +y without turning."""
    import redis
    from sensor_msgs.msg import JointState

    from excavator_hil.hil_harness import Heartbeat
    from plc_bridge import redis_keys as keys

    url = redis_server.url  # type: ignore[attr-defined]
    launch = RosLaunch(ament_prefix, tmp_path, "excavator.launch.py", "namespace:=ws",
                       f"redis_url:={url}", f"virtual_plc_port:={free_port()}", "soil:=false",
                       "plant:=standalone", "machine:=wheeled_4ws_11t")
    launches.append(launch)
    states = probe.collect(JointState, "/ws/joint_states")
    wait_for(lambda: states, EVENT_WAIT_S, lambda: f"/ws/joint_states; log:\n{launch.log()}",
             period=0.1)
    client = redis.Redis.from_url(url, decode_responses=True)

    def joint(name: str) -> float:
        msg = states[-1]
        return dict(zip(msg.name, msg.position, strict=False))[name]

    y0 = joint("base_y")
    heartbeat = Heartbeat(url).start()
    try:
        wait_for(lambda: client.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
                 lambda: f"bridge running (status {client.get(keys.BRIDGE_STATUS)}: "
                         f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}",
                 period=0.1)

        def crabbed() -> bool:
            """Moved 0.3 m to the left, the wheels at 90 deg (the PLC's plant drives while it
            steers, so the first metres are not sideways yet)."""
            client.mset({keys.LONGITUDINAL: "0", keys.LATERAL: "0.3", keys.ANGULAR: "0"})
            return joint("base_y") - y0 > 0.3 and abs(joint("steer_fl") - 1.5708) < 0.01

        wait_for(crabbed, 120.0, lambda: f"base_y to grow by 0.3 m (now {joint('base_y'):.3f}, "
                 f"steer_fl {joint('steer_fl'):.3f}; bridge {client.get(keys.BRIDGE_STATUS)}: "
                 f"{client.get(keys.BRIDGE_DETAIL)}); log:\n{launch.log()}", period=0.1)
        assert abs(joint("base_yaw")) < 0.01
        assert "wheel_command refused" not in launch.log()
        client.mset({keys.LATERAL: "0"})
    finally:
        heartbeat.stop()
    assert_clean_exit(launch, launch.ctrl_c())


def _sigterm_stacks(node: str, main_frames: list[tuple[str, str]]) -> str:
    lines = [f"[ERROR] [{node}]: process[{node}] failed to terminate '15' seconds after "
             "receiving 'SIGINT', escalating to 'SIGTERM'",
             f"[{node}] Thread 0x00007f01ed5fc6c0 (most recent call first):",
             f'[{node}]   File "/usr/lib/python3.11/threading.py", line 320 in wait',
             f'[{node}]   File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap',
             f"[{node}] ",
             f"[{node}] Current thread 0x00007f0277a7f540 (most recent call first):"]
    lines += [f'[{node}]   File "{path}", line 10 in {func}' for path, func in main_frames]
    return "\n".join(lines)


RUN_NODES = [("/venv/lib/python3.11/site-packages/excavator_common/ros_runtime.py",
              "_clean_up_quietly"),
             ("/venv/lib/python3.11/site-packages/excavator_common/ros_runtime.py", "run_nodes")]


@pytest.mark.parametrize(("main_frames", "expected"), [
    ([("/venv/lib/python3.11/site-packages/rclpy/publisher.py", "destroy"),
      ("/venv/lib/python3.11/site-packages/rclpy/node.py", "destroy_node"), *RUN_NODES],
     "soil_node-3"),
    ([("/venv/lib/python3.11/site-packages/rclpy/__init__.py", "try_shutdown"), *RUN_NODES],
     "soil_node-3"),
    # a hang in our own clean-up, or rclpy's destroy outside a node's stop: failures
    ([("/repo/excavator_sim/soil/node.py", "close"), *RUN_NODES], ""),
    ([("/venv/lib/python3.11/site-packages/rclpy/node.py", "destroy_node"),
      ("/repo/excavator_hil/dashboard/app.py", "switch_machine")], ""),
])
def test_the_dds_teardown_hang_is_told_from_any_other(main_frames: list[tuple[str, str]],
                                                      expected: str) -> None:
    log = "\n".join(["[INFO] [sim_node-1]: process has finished cleanly [pid 1376]",
                     _sigterm_stacks("soil_node-3", main_frames)])
    assert hung_in_dds_teardown(log) == expected
    assert hung_in_dds_teardown(log.replace("Current thread 0x", "Thread 0x")) == expected
