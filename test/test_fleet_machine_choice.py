"""The choice of a fleet's machine in the shells, over real DDS and real processes, without a
fleet (test_fleet_operated.py runs the fleet itself):

- the dashboard's ROS link (``RosLink``, in-process, its own DDS participant) lists a machine
  that a probe publishes ``joint_states`` for, serves it only when chosen, refuses a machine
  not on the graph, refuses a Send named for another machine than the one served (another tab
  chose), waits for the machine's ``robot_description`` before sending, then sends the target
  in the frame that description's base link names;
- two machines as the fleet places them (``/exc1``, ``/exc2`` 20 m out: a sim_node and an ik_node
  each, small terrains), machine 1 judged on every joint state it published during each test:
  teleop_node started the way ROS users put a node on a machine (``--ros-args -r
  __ns:=/exc2``, its joystick remapped to a topic of the operator's, ``-r joy:=/operator/joy``)
  drives machine 2 (its topics are relative, so the namespace and the remapping place them);
  the dashboard process, started on machine 1 and driven through its page's own socket.io
  events, lists both, is switched to machine 2 (its readout and target frame follow) and its
  Send moves machine 2 to the IK's solution; machine 1 stays still and gets no command
  (test_fleet_operated.py does the same under ``ros2 launch`` with the whole fleet);
- bad machine names stop teleop_node and the dashboard at start-up with one message naming the
  value and the fix (exit 2).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    EVENT_WAIT_S,
    REPO,
    SMALL_SIM_ARGS,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RosTestNode,
    free_port,
    latest_statuses,
    wait_for,
)

from excavator_hil.dashboard.core import TargetChecker
from excavator_hil.local_services import stop_together
from excavator_kinematics.geometry import CYLINDER_NAMES, default_geometry
from excavator_sim.urdf import generate_urdf

TARGET = (6.0, 0.0, 0.5, 0.5)   # x, y, z [m], pitch [rad]: reachable
MACHINES = ("exc1", "exc2")
SPACING_M = 20.0     # machine 2's base y [m] (fleet.launch.py's default spacing)
ACTIVE = ("swing", "boom", "arm", "bucket")
BASE = ("base_x", "base_y", "base_yaw")
STILL_RAD = 0.01     # [rad] a joint holding position moves less (hydraulic hold, numerics)
STILL_M = 0.01       # [m]
BOOM_AXIS = 4        # config/teleop.yaml: axes.right_y, the ISO pattern's boom
LIMIT_S = 90.0       # start-up of the nodes on a loaded 2-core host
COMMAND_AGE_S = 5.0  # the nodes' max_command_age_s here (TwoMachines)


def test_the_dashboards_ros_link_serves_only_the_machine_chosen() -> None:
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from excavator_hil.dashboard.adapter import RosLink

    probe = RosTestNode("machine_choice_probe")
    link = RosLink(TargetChecker(default_geometry()), None,
                   ["-r", "__node:=dashboard_choice_probe", "-r", "__ns:=/choice_test"])
    try:
        node = probe.node
        states = node.create_publisher(JointState, "/choice_m9/joint_states", 10)
        own_targets = probe.collect(PoseStamped, "/choice_test/target_pose", 100)
        m9_targets = probe.collect(PoseStamped, "/choice_m9/target_pose", 100)
        assert link.machine == "/choice_test"      # its own namespace at start

        def publish_states() -> bool:
            msg = JointState()
            msg.name = ["swing", "boom", "arm", "bucket", *CYLINDER_NAMES]
            msg.position = [0.0, 0.75, -1.4, 1.5, 1.0, 1.0, 1.0]
            states.publish(msg)
            return "/choice_m9" in link.choice.listed
        wait_for(publish_states,
                 EVENT_WAIT_S, lambda: f"/choice_m9 listed ({link.choice.listed})", 0.1)
        assert link.machine == "/choice_test", "a machine on the graph is not chosen for the user"
        assert link.joints is None   # nothing of /choice_m9 is shown before it is chosen

        with pytest.raises(ValueError, match="not on the graph"):
            link.select("choice_m8")
        assert link.select("choice_m9") == "/choice_m9"
        wait_for(lambda: publish_states() and link.joints is not None, EVENT_WAIT_S,
                 "/choice_m9's joint_states in the readout", 0.1)

        # a Send from a tab that still showed the own namespace: refused, nothing published
        with pytest.raises(ValueError, match="serves /choice_m9 now, not /choice_test"):
            link.send_target(*TARGET, machine="/choice_test")
        # the machine's frame prefix is not known yet: refused, nothing published
        with pytest.raises(ValueError, match="waiting for /choice_m9/robot_description"):
            link.send_target(*TARGET, machine="/choice_m9")
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_publisher(String, "/choice_m9/robot_description", latched).publish(
            String(data=generate_urdf(frame_prefix="choice_m9/")))
        wait_for(lambda: link.frame_prefix("/choice_m9") == "choice_m9/", EVENT_WAIT_S,
                 "the machine's prefix from its robot_description", 0.05)
        assert link.send_target(*TARGET, machine="/choice_m9") == "/choice_m9"
        wait_for(lambda: m9_targets, EVENT_WAIT_S, "/choice_m9/target_pose", 0.05)
        assert m9_targets[-1].header.frame_id == "choice_m9/base_link"
        assert m9_targets[-1].pose.position.x == pytest.approx(TARGET[0])
        assert not own_targets, "nothing to the machine not chosen"
    finally:
        link.close()
        probe.close()


class TwoMachines:
    """Two machines as fleet.launch.py places them: ``/exc1`` at y = 0, ``/exc2`` at y =
    ``SPACING_M``, each a sim_node (small terrain under it, its frame prefix, its
    robot_description) and an ik_node (targets in ``<ns>/base_link``); the probe records every
    joint state of both from their start."""

    def __init__(self, logs: Path):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from excavator_sim.sim_config import load_sim_config

        self.probe = RosTestNode("two_machines_probe")
        self.every = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE)
        self.states = {ns: self.probe.collect(JointState, f"/{ns}/joint_states", self.every)
                       for ns in MACHINES}
        # every status the nodes publish (a failure names what ik_node and sim_node counted)
        self.diagnostics = self.probe.collect(DiagnosticArray, "/diagnostics", 1000)
        y0 = load_sim_config(str(REPO / "config" / "sim.yaml")).terrain.y0
        self.procs: list[NodeProcess] = []
        for k, ns in enumerate(MACHINES):
            y = k * SPACING_M
            # the Send is one target, one joint command: on a host loaded enough to hold one
            # back past the nodes' age limits (0.5 s, 1 s) it is dropped, as it should be, and
            # the machine waits for another; this test is about which machine moves
            self.procs += [
                NodeProcess("excavator_sim.sim_node", [
                    "--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                    "-r", f"__ns:=/{ns}", "-p", f"frame_prefix:={ns}/", *SMALL_SIM_ARGS,
                    "-p", f"initial.base_y_m:={y}", "-p", f"terrain.y0_m:={y0 + y}",
                    "-p", f"max_command_age_s:={COMMAND_AGE_S}"],
                    log_dir=logs / ns),
                NodeProcess("excavator_kinematics.ik_node", [
                    "--ros-args", "--params-file", str(REPO / "config" / "ik.yaml"),
                    "-r", f"__ns:=/{ns}", "-p", f"frame_prefix:={ns}/",
                    "-p", f"max_command_age_s:={COMMAND_AGE_S}"], log_dir=logs / ns)]

    def statuses(self, ns: str) -> str:
        """The latest status of each of ``ns``'s nodes: message and counters."""
        return latest_statuses(self.diagnostics, f"{ns}/")

    def logs(self, *more: NodeProcess) -> str:
        return "\n".join(p.log()[-3000:] for p in (*self.procs, *more))

    def pos(self, ns: str, name: str) -> float:
        m = self.states[ns][-1]
        return float(m.position[list(m.name).index(name)])

    def q(self, ns: str) -> np.ndarray:
        return np.array([self.pos(ns, n) for n in (*ACTIVE, *BASE)])

    def machine_1_at_rest(self) -> tuple[int, np.ndarray]:
        """Once machine 1 holds still: where its record starts and its pose then."""
        def resting() -> bool:
            m = self.states["exc1"][-1]
            vel = dict(zip(m.name, m.velocity, strict=False))
            return all(abs(vel.get(n, 0.0)) < 1e-3 for n in ACTIVE)
        wait_for(resting, LIMIT_S, lambda: f"machine 1 at rest ({self.states['exc1'][-1]})", 0.1)
        return len(self.states["exc1"]), self.q("exc1")

    def assert_machine_1_still(self, start: int, q1: np.ndarray) -> None:
        """Every joint state machine 1 published from ``start`` on (one more second of them
        first): no joint and no base coordinate moved beyond what a machine holding does."""
        last = len(self.states["exc1"])
        wait_for(lambda: len(self.states["exc1"]) > last + 50, LIMIT_S,
                 "machine 1's last second", 0.1)
        record = list(self.states["exc1"])[start:]
        worst = np.max(np.abs(np.array([[m.position[list(m.name).index(n)]
                                         for n in (*ACTIVE, *BASE)] for m in record]) - q1),
                       axis=0)
        limits = np.array([STILL_RAD] * 4 + [STILL_M, STILL_M, STILL_RAD])
        assert np.all(worst < limits), dict(zip((*ACTIVE, *BASE), worst.round(4), strict=True))

    def close(self) -> None:
        try:
            stop_together(self.procs)
        finally:
            self.probe.close()


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoMachines]:
    two = TwoMachines(tmp_path_factory.mktemp("two_machines"))
    try:
        # (the project's start-up bound: fresh8, one core busy and a whole stack on the other,
        # took 65 s to start each ik_node and over 90 s each sim_node; a node that exits fails
        # at once)
        wait_for(lambda: all(len(s) > 50 for s in two.states.values())
                 or any(not p.alive() for p in two.procs), STARTUP_TIMEOUT_S,
                 lambda: f"joint_states of both machines\n{two.logs()}", 0.1)
        assert all(p.alive() for p in two.procs), f"a node exited at start-up\n{two.logs()}"
        yield two
    finally:
        two.close()


def test_teleop_node_in_a_machines_namespace_drives_that_machine_only(
        machines: TwoMachines, spawn) -> None:
    from sensor_msgs.msg import JointState, Joy

    probe = machines.probe
    node = probe.node
    to_m1 = {topic: probe.collect(JointState, topic, machines.every) for topic in (
        "/exc1/joint_command", "/exc1/track_command", "/exc1/teleop/valve_command")}
    valves_m2 = probe.collect(JointState, "/exc2/teleop/valve_command", machines.every)
    # as a user puts a node on machine 2: its namespace; the joystick stays the operator's.
    # max_command_age_s 1 s: this test's own joystick may be held back by a loaded host
    teleop = spawn("excavator_kinematics.teleop_node", [
        "--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
        "-r", "__ns:=/exc2", "-r", "joy:=/operator/joy", "-p", "max_command_age_s:=1.0"])

    # teleop_node's topics where the namespace and the remapping put them
    probe.wait_endpoints("subscriptions", "/operator/joy", [("/exc2", "teleop_node")], LIMIT_S)
    for kind, topic in (("publishers", "joint_command"), ("publishers", "track_command"),
                        ("publishers", "teleop/valve_command"),
                        ("subscriptions", "joint_states")):
        wait_for(lambda kind=kind, topic=topic: ("/exc2", "teleop_node") in probe.endpoints(
            kind, f"/exc2/{topic}"), LIMIT_S,
            lambda kind=kind, topic=topic: f"teleop_node's {kind} of /exc2/{topic}\n"
            f"{teleop.log()}")
    # its ready line comes at the end of its start-up, after the endpoints exist
    wait_for(lambda: "machine /exc2" in teleop.log(), LIMIT_S, teleop.log)
    for kind in ("publishers", "subscriptions"):
        for topic in ("/exc1/joint_command", "/exc1/track_command", "/exc1/joint_states",
                      "/joy", "/exc2/joy"):
            assert ("/exc2", "teleop_node") not in probe.endpoints(kind, topic), (kind, topic)

    start, q1 = machines.machine_1_at_rest()
    joy = node.create_publisher(Joy, "/operator/joy", 10)

    def stick(boom: float) -> Joy:
        msg = Joy()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.axes = [0.0] * 6
        msg.axes[BOOM_AXIS] = boom
        msg.buttons = [0] * 8
        return msg
    stop = threading.Event()

    def hold() -> None:    # the joy driver's 20 Hz autorepeat
        while not stop.is_set():
            joy.publish(stick(0.8))
            stop.wait(0.05)
    holder = threading.Thread(target=hold, daemon=True)
    boom0 = machines.pos("exc2", "boom")
    holder.start()
    try:
        wait_for(lambda: abs(machines.pos("exc2", "boom") - boom0) > 0.1, LIMIT_S,
                 lambda: f"machine 2's boom to move under the stick ("
                 f"{machines.pos('exc2', 'boom')} from {boom0}; {len(valves_m2)} valve "
                 f"commands)\n{machines.logs(teleop)}", 0.1)
    finally:
        stop.set()
        holder.join(5.0)
    joy.publish(stick(0.0))   # released: teleop holds machine 2
    machines.assert_machine_1_still(start, q1)
    assert all(not msgs for msgs in to_m1.values()), {t: len(m) for t, m in to_m1.items()}
    assert valves_m2


def test_the_dashboard_drives_the_machine_chosen_on_its_page(
        machines: TwoMachines, spawn, redis_server) -> None:
    """The dashboard process started on machine 1, driven through its page's own socket.io
    events (test_dashboard_events.PageClient): it lists both machines, is switched to machine 2,
    and its readout, target frame and Send follow; machine 1 stays still."""
    pytest.importorskip("socketio", reason="python-socketio (NiceGUI's) not installed")
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import JointState
    from test_dashboard_events import PageClient

    from excavator_kinematics.inverse_kinematics import InverseKinematics

    probe = machines.probe
    to_m1 = {topic: probe.collect(t, topic, machines.every) for topic, t in (
        ("/exc1/joint_command", JointState), ("/exc1/target_pose", PoseStamped))}
    targets_m2: list[PoseStamped] = []
    m2_sub = probe.node.create_subscription(PoseStamped, "/exc2/target_pose", targets_m2.append,
                                            machines.every)
    port = free_port()
    dash = spawn("excavator_hil.dashboard.app", [
        "--port", str(port), "--redis-url", redis_server.url, "--nice", "0",
        "--machine", "exc1"])
    wait_for(lambda: "DASHBOARD READY" in dash.log() or not dash.alive(), LIMIT_S, dash.log)
    assert dash.alive(), dash.log()
    start, q1 = machines.machine_1_at_rest()
    page = PageClient(f"http://127.0.0.1:{port}/")
    try:
        def handled() -> None:
            """Until the page handled every event sent, and shown (a hidden tab gets no
            updates; the barrier toggles the tab's visibility)."""
            page.barrier()
            if page.hidden:
                page.barrier()

        def options() -> dict[str, int]:
            return {o["label"].split()[0]: o["value"]
                    for o in page.props("dash-machine").get("options", [])}

        def base_y() -> float | None:   # the readout's "base x, y m; yaw ..."
            found = re.search(r"base (-?[0-9.]+), (-?[0-9.]+) m", page.text("dash-joint-age"))
            return float(found.group(2)) if found else None
        handled()
        wait_for(lambda: {"/exc1", "/exc2"} <= set(options()), LIMIT_S,
                 lambda: f"both machines in the dashboard's selector ({options()})", 0.2)
        assert "of /exc1" in page.text("dash-target-machine"), page.text("dash-target-machine")
        wait_for(lambda: base_y() is not None and abs(base_y() - 0.0) < 0.05, LIMIT_S,
                 lambda: f"machine 1's base in the readout ({page.text('dash-joint-age')})", 0.1)
        page.emit_to("dash-machine", "update:modelValue",
                     json.dumps({"value": options()["/exc2"], "label": "/exc2"}))
        handled()
        assert page.text("dash-machine-error") == ""
        # the target's frame, and the readout, are machine 2's now (it stands SPACING_M out)
        wait_for(lambda: page.text("dash-target-machine") == "Bucket-tip target "
                 "(exc2/base_link) of /exc2", LIMIT_S,
                 lambda: f"the target in machine 2's frame ({page.text('dash-target-machine')})")
        wait_for(lambda: base_y() is not None and abs(base_y() - SPACING_M) < 0.05, LIMIT_S,
                 lambda: f"machine 2's base in the readout ({page.text('dash-joint-age')})", 0.1)
        target = {"x": 6.0, "y": 0.0, "z": 1.5, "pitch": 30.0}
        for name, value in target.items():
            page.emit_to(f"dash-number-{name}", "update:modelValue", json.dumps(str(value)))
        handled()
        assert page.text("dash-verdict") == "reachable", page.text("dash-verdict-detail")
        solution = InverseKinematics(default_geometry()).solve(
            (target["x"], target["y"], target["z"]), math.radians(target["pitch"]))
        # this probe observes the topic: matched to the dashboard's new publisher of it first
        # (the dashboard waits 5 s at most for the subscribers its graph shows; past that, on
        # a loaded host, the probe's match came after the Send and the target passed it by)
        wait_for(lambda: m2_sub.get_publisher_count() > 0, LIMIT_S,
                 "the probe matched to the dashboard's /exc2/target_pose", 0.05)
        page.emit_to("dash-send", "click")
        wait_for(lambda: "to /exc2" in page.text("dash-sent"), LIMIT_S,
                 lambda: f"the send ({page.text('dash-sent')})")
        # The probe gets the target if the dashboard's writer had matched it when it published:
        # the probe matching the writer (above) does not say the writer matched the probe (DDS
        # discovers each side on its own; both cores busy, the dashboard's side came late). The
        # dashboard's Send log line says whom it went to; machine 2's ik_node must be among
        # them, and the machine's motion below is what proves the target reached it.
        sent = wait_for(lambda: re.search(r"sent on /exc2/target_pose to (\d+) matched "
                                          r"subscriber\(s\); the graph shows: ([^\n]*)",
                                          dash.log()), LIMIT_S,
                        lambda: f"the dashboard's Send log line\n{dash.log()[-3000:]}", 0.1)
        readers = sent.group(2)
        assert "/exc2/ik_node" in readers, f"machine 2's ik_node not among the readers: {sent[0]}"
        if int(sent.group(1)) >= 2 and "two_machines_probe" in readers:
            wait_for(lambda: targets_m2, LIMIT_S,
                     lambda: f"/exc2/target_pose at the probe (its publishers: "
                             f"{probe.endpoints('publishers', '/exc2/target_pose')})\n"
                             f"{machines.logs(dash)}")
        if targets_m2:
            assert targets_m2[-1].header.frame_id == "exc2/base_link"
        wait_for(lambda: np.max(np.abs(machines.q("exc2")[:4] - solution.q)) < 0.05, LIMIT_S,
                 lambda: f"machine 2 at the IK solution ({machines.q('exc2')[:4]} vs "
                 f"{solution.q})\n{machines.statuses('exc2')}\n{machines.logs(dash)}", 0.1)
        # machine 2's ik_node says so too: one target solved (its status, once a second)
        wait_for(lambda: "exc2/ik_node: inverse kinematics: running solved=1," in
                 machines.statuses("exc2"), LIMIT_S, lambda: machines.statuses("exc2"), 0.2)
    finally:
        page.close()
    machines.assert_machine_1_still(start, q1)
    assert all(not msgs for msgs in to_m1.values()), {t: len(m) for t, m in to_m1.items()}
    assert len(targets_m2) <= 1


@pytest.mark.parametrize(("command", "message"), [
    ([sys.executable, "-m", "excavator_kinematics.teleop_node", "--ros-args", "-p",
      "machine:=2x"], "machine: machine '2x' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine", "exc-2"],
     "--machine: machine 'exc-2' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--redis-machine", "a b"],
     "--redis-machine: machine 'a b' is not a ROS namespace"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine-redis", "exc1"],
     "--machine-redis 'exc1': give NS=URL"),
    ([sys.executable, "-m", "excavator_hil.cli", "dashboard", "--machine-redis",
      "exc1=redis://127.0.0.1:1/0", "--machine-redis", "/exc1=redis://127.0.0.1:1/1"],
     "--machine-redis: /exc1 is given twice"),
])
def test_a_bad_machine_name_stops_the_start_with_one_message(command: list[str],
                                                              message: str) -> None:
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
