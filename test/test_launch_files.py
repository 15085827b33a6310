"""Launch files, checked without ROS launch (not installable here): they parse, every executable
they start is a declared console script (or an exec_depend), every file they load exists and is
installed by setup.py, each declares its arguments from the one table
(``excavator_hil.launch_support``), every argument has a description (and choices when boolean),
and excavator.launch.py declares and forwards every argument of the files it includes."""

from __future__ import annotations

import ast
import fnmatch
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from excavator_hil import launch_support
from excavator_hil.launch_support import BOOL, LaunchArgument, arguments_of

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

    # its arguments: from the one table, under its own name, and nowhere else
    assert [constant(c.args[0]) for c in calls(tree, "declare_arguments")] == [path.name]
    assert not calls(tree, "DeclareLaunchArgument"), f"{path.name}: declare in launch_support"
    declared = arguments_of(path.name)
    assert declared and len({a.name for a in declared}) == len(declared)
    for arg in declared:
        assert len(arg.description) > 10, f"{arg.name}: no description"
        if arg.default in BOOL or arg.default == launch_support.RVIZ_AUTO:
            assert arg.choices == BOOL, f"{arg.name}: boolean without choices"
        if arg.choices and arg.default != launch_support.RVIZ_AUTO:
            assert arg.default in arg.choices, f"{arg.name}: default not among its choices"
        if arg.share_path:
            rel = "/".join(arg.share_path)
            assert (REPO / rel).is_file(), f"{arg.name} defaults to {rel}, which does not exist"
            assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), (
                f"{arg.name} defaults to {rel}, which setup.py does not install")


def test_every_launch_file_is_in_the_table_and_the_table_has_no_other() -> None:
    assert set(launch_support.LAUNCH_FILES) == {p.name for p in LAUNCH_FILES}


INCLUDED = ("sim.launch.py", "bridge.launch.py")
# Arguments of an included file that excavator.launch.py deliberately does not declare:
# name -> why. Empty: every argument of sim.launch.py and bridge.launch.py can be set from it.
NOT_FORWARDED: dict[str, str] = {}
# (included file, argument) -> why excavator.launch.py's default differs from that file's.
OTHER_DEFAULTS = {
    ("sim.launch.py", "track_command"): "the whole stack drives the simulated tracks with the "
                                        "PLC's measured track speeds (plc/wheel_states)",
    ("bridge.launch.py", "use_sim_time"): "with the simulator there is a /clock to follow; the "
                                          "bridge alone (real machine) has none",
    ("bridge.launch.py", "virtual_plc"): "the whole stack runs without hardware by default",
}


def include_problems(outer: list[LaunchArgument], forwarded: tuple[str, ...],
                     included: set[str], inner: dict[str, list[LaunchArgument]]) -> list[str]:
    """What excavator.launch.py (its arguments ``outer``, the names it ``forwarded``, the files
    it ``included``) misses of the included files (``inner``: file name -> arguments): an
    argument not declared or not forwarded (and not in NOT_FORWARDED), a file not included,
    other choices, another default (not in OTHER_DEFAULTS), a forwarded name no included file
    declares."""
    declared = {a.name: a for a in outer}
    problems = [f"{n} is forwarded but not declared" for n in forwarded if n not in declared]
    inner_names: set[str] = set()
    for name, arguments in inner.items():
        if name not in included:
            problems.append(f"{name} is not included")
        for arg in arguments:
            inner_names.add(arg.name)
            if arg.name in NOT_FORWARDED:
                continue
            if arg.name not in declared or arg.name not in forwarded:
                problems.append(f"{name}: argument {arg.name} is not "
                                f"{'declared' if arg.name not in declared else 'forwarded'} by "
                                "excavator.launch.py")
                continue
            mine = declared[arg.name]
            if arg.choices != mine.choices:
                problems.append(f"{name}: argument {arg.name} has other choices here")
            if ((arg.default, arg.share_path) != (mine.default, mine.share_path)
                    and (name, arg.name) not in OTHER_DEFAULTS):
                problems.append(f"{name}: argument {arg.name} has another default here")
    problems += [f"{n} is forwarded but no included file declares it" for n in forwarded
                 if n not in inner_names]
    problems += [f"NOT_FORWARDED names {n}, which no included file declares"
                 for n in NOT_FORWARDED if n not in inner_names]
    return problems


def _excavator() -> tuple[list[LaunchArgument], tuple[str, ...], set[str],
                          dict[str, list[LaunchArgument]]]:
    """excavator.launch.py's arguments, the names it forwards (its FORWARDED expression,
    evaluated without ROS launch), the files it includes, and the included files' arguments."""
    tree = ast.parse((REPO / "launch" / "excavator.launch.py").read_text())
    expr = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "FORWARDED")
    forwarded = eval(compile(ast.Expression(expr), "FORWARDED", "eval"),
                     {"arguments_of": arguments_of})
    included = {constant(c.args[0]) for c in calls(tree, "include") if c.args}
    return (arguments_of("excavator.launch.py"), tuple(forwarded), included,
            {name: arguments_of(name) for name in INCLUDED})


def test_excavator_launch_declares_and_forwards_every_included_argument() -> None:
    assert include_problems(*_excavator()) == []
    assert all(len(why) > 10 for why in [*NOT_FORWARDED.values(), *OTHER_DEFAULTS.values()])


def test_an_included_argument_left_out_of_excavator_launch_is_found() -> None:
    outer, forwarded, included, inner = _excavator()
    without = [a if a.name != "virtual_plc_port" else a.but(name="unrelated_port")
               for a in outer]
    moved = tuple("unrelated_port" if n == "virtual_plc_port" else n for n in forwarded)
    assert include_problems(without, moved, included, inner) == [
        "bridge.launch.py: argument virtual_plc_port is not declared by excavator.launch.py",
        "unrelated_port is forwarded but no included file declares it"]
    soil = [a if a.name != "soil" else a.but(choices=("false", "true")) for a in outer]
    assert include_problems(soil, forwarded, included, inner) == [
        "sim.launch.py: argument soil has other choices here"]


def test_sim_node_gets_use_sim_time_so_it_publishes_the_clock() -> None:
    """sim_node publishes /clock only with use_sim_time true: sim.launch.py passes the
    argument to it (the ``common`` parameters every node gets)."""
    tree = ast.parse((REPO / "launch" / "sim.launch.py").read_text())
    sim = next(n for n in calls(tree, "Node") if constant(_kw(n, "executable")) == "sim_node")
    params = _kw(sim, "parameters")
    assert any(isinstance(p, ast.Name) and p.id == "common" for p in params.elts)
    common = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "common")
    assert "use_sim_time" in [constant(k) for k in common.keys]


@pytest.mark.parametrize("name", ["sim.yaml", "soil.yaml", "plc.yaml", "ik.yaml"])
def test_node_parameter_files_have_the_ros2_form(name: str) -> None:
    data = yaml.safe_load((REPO / "config" / name).read_text())
    assert list(data) == ["/**"] and "ros__parameters" in data["/**"]


def test_rviz_config_shows_robot_markers_and_terrain() -> None:
    rviz = yaml.safe_load((REPO / "rviz" / "excavator.rviz").read_text())
    displays = rviz["Visualization Manager"]["Displays"]
    classes = {d["Class"] for d in displays}
    assert {"rviz_default_plugins/RobotModel", "rviz_default_plugins/MarkerArray",
            "rviz_default_plugins/PointCloud2"} <= classes  # terrain: a cloud
    topics = {d.get("Topic", d.get("Description Topic", {})).get("Value") for d in displays}
    assert {"markers", "soil/heightmap", "robot_description"} <= topics
    assert rviz["Visualization Manager"]["Global Options"]["Fixed Frame"] == "world"


def test_urdf_the_launch_file_passes_to_robot_state_publisher_parses() -> None:
    from excavator_sim.urdf import generate_urdf

    root = ET.fromstring(generate_urdf())
    joints = {j.get("name") for j in root.iter("joint")}
    assert {"swing", "boom", "arm", "bucket"} <= joints


def _shared(name: str) -> Path | None:
    """``../shared/<name>`` beside the checkout (or beside its worktree folder)."""
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / name).is_dir():
            return base / "shared" / name
    return None


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def rosdep_keys() -> dict[str, str]:
    """Every dependency of package.xml -> its tag."""
    root = ET.parse(REPO / "package.xml").getroot()
    return {e.text: e.tag for e in root if e.tag.endswith("depend")}


def test_every_package_xml_dependency_has_a_rosdep_rule() -> None:
    """What ``rosdep install --from-paths .`` resolves: each key is a system rule of rosdistro's
    rosdep/base.yaml or python.yaml, a package of the Kilted distribution (checked against
    ../shared/rosdep-offline, a copy of ros/rosdistro), or a rule of the package's own
    rosdep.yaml (README: added to rosdep's sources) that rosdistro does not have."""
    offline = _shared("rosdep-offline")
    if offline is None:
        pytest.skip("../shared/rosdep-offline (rosdistro's rosdep rules) is not here")
    rules: dict = {}
    for name in ("base.yaml", "python.yaml"):
        rules |= yaml.load((offline / "rosdep" / name).read_text(), Loader=LOADER)
    distro = yaml.load((offline / "kilted" / "distribution.yaml").read_text(), Loader=LOADER)
    ros_packages: set[str] = set()
    for name, repo in distro["repositories"].items():
        if "release" in repo:  # a repository's packages, or the one named like it
            ros_packages |= set(repo["release"].get("packages") or [name])
    own = yaml.safe_load((REPO / "rosdep.yaml").read_text())
    assert not set(own) & (set(rules) | ros_packages), "rosdistro has these now: drop them"
    for key, rule in own.items():   # rosdistro's form of a PyPI key, on every OS
        assert key.endswith("-pip") and rule["*"]["pip"]["packages"], key
    missing = sorted(k for k in rosdep_keys()
                     if k not in rules and k not in ros_packages and k not in own)
    assert missing == [], f"no rosdep rule for {missing}"
    assert "ament_python" not in rosdep_keys()
    for pip_only in ("python3-mujoco-pip", "python3-python-snap7-pip", "python3-rosbags-pip",
                     "python3-nicegui-pip"):
        assert pip_only in rosdep_keys()


def test_share_layout_of_ament_register_matches_setup_py() -> None:
    """``excavator-hil ament-register`` installs what setup.py's data_files install."""
    from excavator_hil.ament_register import SHARE_LAYOUT

    patterns = {p for p in installed_patterns() if not p.startswith("resource")}
    assert patterns == {p for ps in SHARE_LAYOUT.values() for p in ps}
    assert not (REPO / "urdf").exists() or any((REPO / "urdf").iterdir())


def test_ament_register_makes_the_pip_install_an_ament_package(tmp_path: Path) -> None:
    """``excavator-hil ament-register --prefix P``: the ament index finds the package in P, its
    share files are the checkout's, ``P/lib/excavator_hil/<exe>`` run; ``--remove`` undoes it."""
    import os
    import subprocess
    import sys

    prefix = tmp_path / "prefix"
    cli = [sys.executable, "-m", "excavator_hil.cli", "ament-register", "--prefix", str(prefix)]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "registered excavator_hil" in out and "AMENT_PREFIX_PATH" in out
    env = {**os.environ, "AMENT_PREFIX_PATH": str(prefix)}
    found = subprocess.run(
        [sys.executable, "-c", "from ament_index_python.packages import "
         "get_package_share_directory as g; print(g('excavator_hil'))"],
        env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    share = prefix / "share" / "excavator_hil"
    assert found == str(share)
    for rel in ("package.xml", "launch/excavator.launch.py", "config/plc.yaml",
                "rviz/excavator.rviz"):
        assert (share / rel).resolve() == (REPO / rel).resolve(), rel
    exes = {p.name for p in (prefix / "lib" / "excavator_hil").iterdir()}
    assert exes == console_scripts()
    run = subprocess.run([str(prefix / "lib" / "excavator_hil" / "virtual_plc"), "--help"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0 and "--port" in run.stdout, run.stderr
    subprocess.run([*cli, "--remove"], capture_output=True, timeout=60, check=True)
    assert not share.exists() and not (prefix / "lib" / "excavator_hil").exists()
    assert not (prefix / "share/ament_index/resource_index/packages/excavator_hil").exists()


def test_rviz_config_has_the_panels_the_docs_use() -> None:
    """docs/rviz.md sends users to the Tool Properties panel (Publish Point topic)."""
    rviz = yaml.safe_load((REPO / "rviz" / "excavator.rviz").read_text())
    panels = {p["Class"] for p in rviz["Panels"]}
    assert {"rviz_common/Displays", "rviz_common/Tool Properties", "rviz_common/Views",
            "rviz_common/Time"} <= panels
    docs = (REPO / "docs" / "rviz.md").read_text()
    for panel in ("Tool Properties", "Displays", "Views"):
        assert f"*{panel}*" in docs


# From 0.7 s: before that, under load, the SIGINT can land while the interpreter itself starts,
# before the entry point's first line (Python's default KeyboardInterrupt; nothing to catch it).
@pytest.mark.parametrize("delay_s", [0.7, 1.5, 3.0])
def test_node_executable_ends_quietly_on_a_double_sigint_while_starting(
        delay_s: float, tmp_path: Path) -> None:
    """``ros2 launch``'s Ctrl-C (two SIGINTs) while ``sim_node`` is still importing, building
    or running: it exits with code 0, no traceback, well before launch's 5 s SIGTERM."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    from excavator_hil.node_entry import sim_node  # noqa: F401  (the console script's target)

    script = tmp_path / "sim_node"
    script.write_text("import sys\nfrom excavator_hil.node_entry import sim_node\n"
                      "sys.exit(sim_node())\n")
    proc = subprocess.Popen([sys.executable, str(script), "--ros-args", "-p",
                             "use_sim_time:=true"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.03)
    with contextlib.suppress(ProcessLookupError):  # already gone after the first
        os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
