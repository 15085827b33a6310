"""The dashboard shows a wheeled machine's steered wheels (issue 28): the layout from its
``robot_description`` (the URDF sim_node generates from the one geometry source), the steering
angles and wheel speeds from its ``joint_states``; and those joint states carry every movable
joint of the URDF, so robot_state_publisher (RViz) and the page pose the wheels.

Pure parts without ROS; then sim_node (a wheeled preset, driven by ``wheel_command``) in its own
process and the dashboard's ROS link in this one, over real DDS."""

from __future__ import annotations

import math
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import (
    CHROMEDRIVER,
    CHROMIUM,
    REPO,
    SMALL_SIM_ARGS,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RedisServer,
    RosTestNode,
    chromium_driver,
    free_port,
    wait_for,
)
from sensor_msgs.msg import JointState

from excavator_hil.dashboard.core import (
    TargetChecker,
    WheelLayout,
    joint_readout,
    readout_table,
)
from excavator_kinematics.geometry import default_geometry
from excavator_sim.machines import load_machine
from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation
from excavator_sim.urdf import urdf_from_model

SMALL = {"terrain.nx": 11, "terrain.ny": 11, "terrain.cell_size_m": 0.4}
LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement


def _urdf(machine: str = "") -> str:
    config = load_sim_config(machine=machine or None, overrides=SMALL)
    return urdf_from_model(ExcavatorSimulation(config).model, frame_prefix="m1/")


@pytest.mark.parametrize("machine", ["wheeled_ackermann_11t", "wheeled_4ws_11t"])
def test_the_wheel_layout_is_the_presets(machine: str) -> None:
    under = load_machine(machine).undercarriage
    assert under is not None
    g = under.params.geometry
    layout = WheelLayout.from_urdf(_urdf(machine))
    assert layout is not None
    assert layout.steered == tuple(under.params.steered)
    assert layout.radius_m == pytest.approx(g.wheel_radius_m)
    for w in ("fl", "fr", "rl", "rr"):
        assert layout.positions[w] == pytest.approx(g.position(w))


def test_a_tracked_machine_has_no_wheel_layout() -> None:
    assert WheelLayout.from_urdf(_urdf()) is None


def test_the_plan_view_turns_each_steered_wheel_by_its_angle() -> None:
    layout = WheelLayout.from_urdf(_urdf("wheeled_ackermann_11t"))
    assert layout is not None
    angles = {"fl": 0.5, "fr": 0.4, "rl": 1.0}   # rl is not steered: drawn straight
    lines = layout.plan_lines(angles)
    for w, expected in (("fl", 0.5), ("fr", 0.4), ("rl", 0.0), ("rr", 0.0)):
        x0, y0, x1, y1 = lines[w][:4]     # the first side: from (r, h) to (-r, h)
        heading = math.atan2(y0 - y1, x0 - x1)
        assert heading == pytest.approx(expected, abs=2e-3), w
        cx = sum(lines[w][0:8:2]) / 4
        cy = sum(lines[w][1:8:2]) / 4
        assert (cx, cy) == pytest.approx(layout.positions[w], abs=2e-3)
    svg = layout.plan_svg(angles)
    ET.fromstring(svg)    # well formed
    assert 'class="dash-wheel-fl" data-angle-deg="28.6"' in svg
    assert 'class="dash-wheel-rl" data-angle-deg="0.0"' in svg


def test_the_readout_lists_steering_and_wheel_speeds() -> None:
    checker = TargetChecker(default_geometry())
    names = ["swing", "boom", "arm", "bucket", "boom_cylinder", "arm_cylinder",
             "bucket_cylinder", "wheel_fl", "wheel_rr", "steer_fl", "steer_fr"]
    positions = [0.0, 0.75, -1.4, 1.5, 1.0, 1.0, 1.0, 3.0, 4.0, 0.5, -0.25]
    velocities = [0.0] * 7 + [1.5, -2.0, 0.1, 0.0]
    r = joint_readout(checker, names, positions, 1.0, velocities)
    assert r is not None
    assert r.steering == (("fl", 0.5), ("fr", -0.25))
    assert r.wheel_speeds == (("fl", 1.5), ("rr", -2.0))
    rows = {row["name"]: row for row in readout_table(r)}
    assert rows["steer_fl"]["value"] == "28.65" and rows["steer_fl"]["unit"] == "deg"
    assert rows["wheel_rr"]["value"] == "-2.000" and rows["wheel_rr"]["unit"] == "rad/s"
    tracked = joint_readout(checker, names[:7], positions[:7], 1.0, velocities[:7])
    assert tracked is not None and tracked.steering == () and tracked.wheel_speeds == ()


def test_the_dashboard_shows_the_steered_wheels_of_a_running_wheeled_machine(
        tmp_path: Path) -> None:
    """sim_node with the 4WD4WS preset (its wheels by wheel_command): its joint_states carry
    every movable joint of its robot_description; the dashboard's ROS link takes the layout
    from that URDF and the steering angles and wheel speeds from the joint states."""
    from std_msgs.msg import String

    from excavator_hil.dashboard.adapter import RosLink

    machine = "wheeled_4ws_11t"
    probe = RosTestNode("dashboard_wheels_probe")
    states: list[JointState] = probe.collect(JointState, "/dw/joint_states", 10)
    from rclpy.qos import DurabilityPolicy, QoSProfile

    descriptions: list[String] = []
    probe.node.create_subscription(
        String, "/dw/robot_description", descriptions.append,
        QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    commands = probe.node.create_publisher(JointState, "/dw/wheel_command", 10)
    angle, speed = 0.5, 0.4
    wheels = ("fl", "fr", "rl", "rr")
    command = JointState(name=[*(f"wheel_{w}" for w in wheels), *(f"steer_{w}" for w in wheels)],
                         velocity=[speed] * 4 + [math.nan] * 4,
                         position=[math.nan] * 4 + [angle] * 4)
    stop = threading.Event()

    def send() -> None:
        while not stop.wait(0.02):
            commands.publish(command)

    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "-r", "__ns:=/dw", "--params-file",
                       str(REPO / "config" / "sim.yaml"), "-p", f"machine:={machine}",
                       "-p", "use_sim_time:=false", "-p", "frame_prefix:=dw/",
                       *SMALL_SIM_ARGS], log_dir=tmp_path)
    link = RosLink(TargetChecker(default_geometry()), None,
                   ["-r", "__node:=dashboard_wheels", "-r", "__ns:=/dw"])
    sender = threading.Thread(target=send, daemon=True)
    try:
        wait_for(lambda: states and descriptions, LIMIT_S,
                 lambda: f"joint_states and robot_description of sim_node\n{sim.log()}")
        urdf = ET.fromstring(descriptions[-1].data)
        movable = {j.get("name") for j in urdf.iter("joint") if j.get("type") != "fixed"}
        assert {"steer_fl", "steer_rr", "wheel_fl", "wheel_rr"} <= movable
        assert movable <= set(states[-1].name), movable - set(states[-1].name)
        sender.start()

        def shown() -> bool:
            j = link.joints
            return j is not None and all(abs(a - angle) < 1e-3 for _, a in j.steering)
        wait_for(shown, LIMIT_S, lambda: f"the steering at {angle} rad on the dashboard "
                                         f"({link.joints and link.joints.steering})")
        j = link.joints
        assert j is not None and [w for w, _ in j.steering] == list(wheels)
        radius = load_machine(machine).undercarriage.params.geometry.wheel_radius_m  # type: ignore[union-attr]
        assert [w for w, _ in j.wheel_speeds] == list(wheels)
        assert all(v * radius == pytest.approx(speed, abs=0.01) for _, v in j.wheel_speeds)
        # robot_description reaches the dashboard on its own (latched) topic, which the joint
        # states need not wait for: a latched sample's delivery can come later (ci26)
        layout = wait_for(lambda: link.wheel_layouts.get("/dw"), LIMIT_S,
                          lambda: f"the wheel layout from /dw/robot_description "
                                  f"({link.description_errors})")
        assert layout.steered == wheels
        svg = layout.plan_svg(dict(j.steering))
        assert 'class="dash-wheel-rr" data-angle-deg="28.6"' in svg
    finally:
        stop.set()
        if sender.is_alive():
            sender.join(2.0)
        link.close()
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()




@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="Debian's chromium and chromium-driver are not installed: run "
                           "`make browser` as root")
@pytest.mark.timeout(600)
def test_the_page_draws_the_wheels_turned_by_their_steering(tmp_path: Path) -> None:
    """The dashboard process in front of sim_node's Ackermann machine (steered by
    wheel_command), in a headless browser: the Wheels card draws each front wheel turned by its
    measured angle, the rear ones straight, and the joint table lists the steering."""
    selenium = pytest.importorskip("selenium", reason="pip selenium not installed")

    from excavator_kinematics.vehicle import BodyTwist

    machine = "wheeled_ackermann_11t"
    under = load_machine(machine).undercarriage
    assert under is not None and selenium is not None
    inv = under.kinematic_model().inverse(BodyTwist(0.3, 0.0, 0.1))
    angles = dict(zip(("fl", "fr"), inv.angles.tolist(), strict=True))
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    probe = RosTestNode("dashboard_page_wheels_probe")
    commands = probe.node.create_publisher(JointState, "wheel_command", 10)
    command = JointState(name=["wheel_rl", "wheel_rr", "steer_fl", "steer_fr"],
                         velocity=[*inv.speeds.tolist(), math.nan, math.nan],
                         position=[math.nan, math.nan, *inv.angles.tolist()])
    stop = threading.Event()

    def send() -> None:
        while not stop.wait(0.05):
            commands.publish(command)
    sender = threading.Thread(target=send, daemon=True)
    procs = [NodeProcess("excavator_sim.sim_node",
                         ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                          "-p", f"machine:={machine}", "-p", "use_sim_time:=false",
                          *SMALL_SIM_ARGS], log_dir=tmp_path)]
    port = free_port()
    procs.append(NodeProcess("excavator_hil.dashboard.app",
                             ["--port", str(port), "--redis-url", redis.url, "--nice", "0"],
                             log_dir=tmp_path))
    driver = None
    try:
        for p, line in ((procs[0], "ready:"), (procs[1], "DASHBOARD READY")):
            wait_for(lambda p=p, line=line: line in p.log() or not p.alive(), LIMIT_S, p.log)
            assert p.alive(), p.log()
        sender.start()
        driver = chromium_driver(tmp_path / "chromium_profile")
        driver.get(f"http://127.0.0.1:{port}/")

        def drawn() -> dict[str, float]:
            got = driver.execute_script(
                "const o = {}; document.querySelectorAll('.dash-wheels polygon[class]')"
                ".forEach(e => { o[e.getAttribute('class')] = "
                "parseFloat(e.dataset.angleDeg); }); return o;")
            return {str(k): float(v) for k, v in (got or {}).items()}

        def steered() -> bool:
            d = drawn()
            return len(d) == 4 and all(
                abs(d.get(f"dash-wheel-{w}", math.nan) - math.degrees(a)) < 0.15
                for w, a in angles.items())
        wait_for(steered, LIMIT_S, lambda: f"the front wheels drawn at "
                 f"{ {w: round(math.degrees(a), 1) for w, a in angles.items()} } deg "
                 f"(page: {drawn()})\n{procs[1].log()[-2000:]}", period=0.2)
        d = drawn()
        assert d["dash-wheel-rl"] == d["dash-wheel-rr"] == 0.0
        rows = driver.execute_script(
            "return Array.from(document.querySelectorAll('.dash-joints tbody tr'))"
            "  .map(r => Array.from(r.cells).map(c => c.innerText.trim()));")
        table = {cells[0]: cells[1] for cells in rows if len(cells) >= 2}
        assert float(table["steer_fl"]) == pytest.approx(math.degrees(angles["fl"]), abs=0.05)
        assert "wheel_rl" in table
        text = driver.execute_script(
            "const e = document.querySelector('.dash-wheels-text'); "
            "return e ? e.innerText : '';")
        assert f"fl {math.degrees(angles['fl']):+.1f} deg" in text, text
    finally:
        stop.set()
        if driver is not None:
            driver.quit()
        probe.close()
        for p in reversed(procs):
            p.stop()
        redis.stop()
