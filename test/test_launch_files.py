"""Launch files, checked without ROS launch (not installable here): they parse, every executable
they start is a declared console script (or an exec_depend), every file they load exists and is
installed by setup.py, every argument has a description (and choices when boolean)."""

from __future__ import annotations

import ast
import fnmatch
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))


def _setup_call() -> ast.Call:
    tree = ast.parse((REPO / "setup.py").read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def console_scripts() -> set[str]:
    entry = ast.literal_eval(_kw(_setup_call(), "entry_points"))
    return {line.split("=")[0].strip() for line in entry["console_scripts"]}


def installed_patterns() -> list[str]:
    """The source patterns of setup.py's data_files (glob("x") or literal lists)."""
    patterns = []
    for item in _kw(_setup_call(), "data_files").elts:
        sources = item.elts[1]
        if isinstance(sources, ast.Call):  # glob("config/*.yaml")
            patterns.append(ast.literal_eval(sources.args[0]))
        else:
            patterns += [s.value if isinstance(s, ast.Constant) else "resource/*"
                         for s in sources.elts]
    return patterns


def exec_depends() -> set[str]:
    root = ET.parse(REPO / "package.xml").getroot()
    return {e.text for e in root.iter("exec_depend")}


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


def share_files(tree: ast.AST) -> list[str]:
    """Relative paths in PathJoinSubstitution([share, "dir", "file"]) calls."""
    out = []
    for call in calls(tree, "PathJoinSubstitution"):
        parts = call.args[0].elts[1:]
        if all(isinstance(p, ast.Constant) for p in parts):
            out.append("/".join(p.value for p in parts))
    return out


def constant(expr: ast.expr | None) -> object:
    return expr.value if isinstance(expr, ast.Constant) else None


def test_there_are_the_three_launch_files() -> None:
    assert {p.name for p in LAUNCH_FILES} >= {"sim.launch.py", "bridge.launch.py",
                                               "excavator.launch.py"}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    compile(source, str(path), "exec")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description"
               for n in tree.body)

    scripts, depends = console_scripts(), exec_depends()
    nodes = calls(tree, "Node")
    for node in nodes:
        package, executable = constant(_kw(node, "package")), constant(_kw(node, "executable"))
        if package in ("excavator_hil", None):  # None: the PACKAGE constant
            assert executable in scripts, f"{path.name}: {executable} is no console script"
        else:
            assert package in depends, f"{path.name}: {package} missing from package.xml"

    patterns = installed_patterns()
    for rel in share_files(tree):
        assert (REPO / rel).is_file(), f"{path.name} loads {rel}, which does not exist"
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), (
            f"{path.name} loads {rel}, which setup.py does not install")

    declared = calls(tree, "DeclareLaunchArgument")
    assert declared
    for arg in declared:
        name = constant(arg.args[0])
        description = constant(_kw(arg, "description"))
        assert isinstance(description, str) and len(description) > 10, f"{name}: no description"
        if constant(_kw(arg, "default_value")) in ("true", "false"):
            choices = ast.literal_eval(_kw(arg, "choices"))
            assert choices == ["true", "false"], f"{name}: boolean without choices"


def test_included_launch_arguments_are_declared_by_the_includer() -> None:
    tree = ast.parse((REPO / "launch" / "excavator.launch.py").read_text())
    declared = {constant(a.args[0]) for a in calls(tree, "DeclareLaunchArgument")}
    forwarded = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", "") == "FORWARDED")
    assert set(forwarded) <= declared
    for name in ("sim.launch.py", "bridge.launch.py"):
        inner = ast.parse((REPO / "launch" / name).read_text())
        inner_declared = {constant(a.args[0]) for a in calls(inner, "DeclareLaunchArgument")}
        assert inner_declared & set(forwarded), name


@pytest.mark.parametrize("name", ["sim.yaml", "soil.yaml", "plc.yaml", "ik.yaml"])
def test_node_parameter_files_have_the_ros2_form(name: str) -> None:
    data = yaml.safe_load((REPO / "config" / name).read_text())
    assert list(data) == ["/**"] and "ros__parameters" in data["/**"]


def test_rviz_config_shows_robot_markers_and_terrain() -> None:
    rviz = yaml.safe_load((REPO / "rviz" / "excavator.rviz").read_text())
    displays = rviz["Visualization Manager"]["Displays"]
    classes = {d["Class"] for d in displays}
    assert {"rviz_default_plugins/RobotModel", "rviz_default_plugins/MarkerArray",
            "rviz_default_plugins/Marker"} <= classes
    topics = {d.get("Topic", d.get("Description Topic", {})).get("Value") for d in displays}
    assert {"markers", "soil/heightmap", "robot_description"} <= topics
    assert rviz["Visualization Manager"]["Global Options"]["Fixed Frame"] == "world"


def test_urdf_the_launch_file_passes_to_robot_state_publisher_parses() -> None:
    from excavator_sim.urdf import generate_urdf

    root = ET.fromstring(generate_urdf())
    joints = {j.get("name") for j in root.iter("joint")}
    assert {"swing", "boom", "arm", "bucket"} <= joints
