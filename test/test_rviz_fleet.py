"""RViz and Foxglove for a fleet, without ROS (rviz2 is not installable here: the config is
parsed): every machine in one scene, each under its frame prefix.

- ``rviz/fleet.rviz`` is what ``excavator_hil.rviz_fleet`` writes for exc1,exc2 (the config
  ``fleet.launch.py rviz:=true`` writes for its own namespaces), and it parses as RViz reads it:
  a RobotModel per machine on ``/<ns>/robot_description`` whose URDF (the one fleet.launch.py
  gives that machine's robot_state_publisher) carries the machine's prefix on every link, the
  display's own TF Prefix empty (else ``<ns>/<ns>/base_link``), the fixed frame ``world`` the
  machines share, the terrain once (or per machine);
- ``layouts/excavator_foxglove_fleet.json`` is what ``excavator_hil.foxglove_view.layout``
  writes for exc1,exc2: a URDF layer per machine, served by the one view as that machine's asset.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml
from helpers import REPO

from excavator_hil.rviz_fleet import fleet_rviz, main
from excavator_sim.urdf import generate_urdf

ROBOT = "rviz_default_plugins/RobotModel"


def _displays(text: str) -> list[dict]:
    config = yaml.safe_load(text)
    assert config["Visualization Manager"]["Global Options"]["Fixed Frame"] == "world"
    return config["Visualization Manager"]["Displays"]


def _topic(display: dict) -> str:
    return display.get("Topic", display.get("Description Topic", {})).get("Value", "")


def test_the_shipped_fleet_config_is_the_generators() -> None:
    assert (REPO / "rviz" / "fleet.rviz").read_text() == fleet_rviz(["exc1", "exc2"])


@pytest.mark.parametrize("names", [["exc1", "exc2"], ["north", "south", "east"]])
def test_every_machine_in_one_scene_under_its_prefix(names: list[str]) -> None:
    displays = _displays(fleet_rviz(names))
    robots = [d for d in displays if d["Class"] == ROBOT]
    assert [_topic(d) for d in robots] == [f"/{ns}/robot_description" for ns in names]
    for ns, robot in zip(names, robots, strict=True):
        assert robot["Enabled"] is True and robot["Description Source"] == "Topic"
        assert robot["Description Topic"]["Durability Policy"] == "Transient Local"
        assert robot["TF Prefix"] == ""
        # the machine's URDF as fleet.launch.py gives it: every link prefixed but world, so
        # its frames on /tf are <ns>/..., under the shared world
        links = {link.get("name") for link in ET.fromstring(
            generate_urdf(frame_prefix=f"{ns}/")).iter("link")}
        assert "world" in links and f"{ns}/base_link" in links
        assert all(name == "world" or name.startswith(f"{ns}/") for name in links), links
    topics = [_topic(d) for d in displays]
    assert [f"/{ns}/markers" for ns in names] == [t for t in topics if t.endswith("/markers")]
    assert topics.count("/soil/heightmap") == 1
    assert len({d["Name"] for d in displays}) == len(displays), "display names are unique"


def test_a_terrain_per_machine() -> None:
    topics = [_topic(d) for d in _displays(fleet_rviz(["exc1", "exc2"], shared_terrain=False))]
    assert "/soil/heightmap" not in topics
    assert {"/exc1/soil/heightmap", "/exc2/soil/heightmap"} <= set(topics)


def test_bad_machines_are_refused_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    for names, words in (([], "no machines"), (["exc1", "/exc1"], "named twice"),
                         (["2x"], "not a ROS namespace")):
        with pytest.raises(ValueError, match=words):
            fleet_rviz(names)
    with pytest.raises(SystemExit):
        main(["exc-1"])
    assert "exc-1" in capsys.readouterr().err


def test_the_shipped_foxglove_fleet_layout_is_the_generators() -> None:
    pytest.importorskip("foxglove", reason="foxglove-sdk is not installed")
    from excavator_hil.foxglove_view.layout import build_layout
    from excavator_hil.foxglove_view.node import urdf_asset

    text = (REPO / "layouts" / "excavator_foxglove_fleet.json").read_text()
    assert text == build_layout(["exc1", "exc2"])
    assert all(urdf_asset(m) in text for m in ("exc1", "exc2"))
    json.loads(text)


def test_the_camera_looks_at_the_middle_of_the_fleet() -> None:
    for names, spacing in ((["exc1", "exc2"], 20.0), (["a", "b", "c"], 30.0), (["a"], 20.0)):
        view = yaml.safe_load(fleet_rviz(names, spacing_m=spacing))[
            "Visualization Manager"]["Views"]["Current"]
        assert view["Focal Point"]["Y"] == pytest.approx(spacing * (len(names) - 1) / 2)
        assert view["Distance"] >= 18.0 + spacing * (len(names) - 1)


def test_the_fleet_launch_opens_rviz_on_its_own_machines(tmp_path, monkeypatch) -> None:
    """``fleet.launch.py rviz:=true`` evaluated as ``ros2 launch`` would (its arguments, its
    opaque function) for three machines of the user's names and spacing: the RViz it starts
    opens the config written for them (each machine's description topic, the camera on the
    fleet), kept in the launch's log directory. rviz2 itself: a stand-in registered in an
    ament prefix, found as the launch looks for it."""
    pytest.importorskip("launch_ros", reason="launch_ros is not installed")
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, GroupAction
    from launch.logging import launch_config
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node, PushRosNamespace
    from test_fleet_launch import _load_launch_module, _registered_prefix

    stand_in = tmp_path / "rviz2_prefix"
    index = stand_in / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "rviz2").write_text("")
    exe = stand_in / "lib" / "rviz2" / "rviz2"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{stand_in}:{_registered_prefix(tmp_path)}")
    monkeypatch.setattr(launch_config, "_log_dir", str(tmp_path / "launch_log"))
    (tmp_path / "launch_log").mkdir()

    fleet = _load_launch_module()
    context = LaunchContext()
    names, spacing = ["north", "south", "east"], 30.0
    context.launch_configurations.update({
        "namespaces": ",".join(names), "spacing": str(spacing), "rviz": "true",
        "soil": "true", "shared_terrain": "true"})
    description = fleet.generate_launch_description()
    for action in description.entities:    # the defaults of what the user did not give
        if isinstance(action, DeclareLaunchArgument):
            action.visit(context)
    actions = fleet._machines(context)
    (rviz,) = [a for a in actions if isinstance(a, Node) and a.node_package == "rviz2"]
    cmd: list[str] = []   # the executable and its arguments (the ROS arguments follow)
    for part in rviz.cmd:
        cmd.append(perform_substitutions(context, part))
        if cmd[-1] == "--ros-args":
            break
    path = cmd[cmd.index("-d") + 1]
    assert path == str(tmp_path / "launch_log" / "fleet.rviz")
    text = (tmp_path / "launch_log" / "fleet.rviz").read_text()
    assert text == fleet_rviz(names, spacing_m=spacing)
    robots = [d for d in _displays(text) if d["Class"] == ROBOT]
    assert [_topic(d) for d in robots] == [f"/{ns}/robot_description" for ns in names]
    # ... the namespaces the launch put the machines in (each its robot_state_publisher)
    groups = [a.get_sub_entities() for a in actions if isinstance(a, GroupAction)]
    pushed = [perform_substitutions(context, e.namespace) for g in groups for e in g
              if isinstance(e, PushRosNamespace)]
    assert pushed == names
    assert all(any(isinstance(e, Node) and e.node_package == "robot_state_publisher"
                   for e in g) for g in groups)
