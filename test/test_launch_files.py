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
from excavator_hil.local_services import STARTUP_TIMEOUT_S

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


def started_nodes(tree: ast.AST) -> list[tuple[object, object]]:
    """(package, executable) of every node a launch file starts: ``supervised_node(context,
    plan, name=..., [package=...], [executable=...])`` and the files' local ``node("name",
    ...)`` helpers around it."""
    out = []
    for call in calls(tree, "supervised_node"):
        name = constant(_kw(call, "name"))
        if name is None:   # the local helper's own call: node(name) -> supervised_node(...)
            continue
        out.append((constant(_kw(call, "package")),
                    constant(_kw(call, "executable")) or name))
    for call in calls(tree, "node"):
        if call.args and isinstance(call.args[0], ast.Constant):
            out.append((constant(_kw(call, "package")), call.args[0].value))
    return out


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
    # every node goes through launch_support.supervised_node (required, respawn, real-time
    # set-up): no bare launch_ros Node
    assert not calls(tree, "Node"), f"{path.name}: start nodes with supervised_node"
    started = started_nodes(tree)
    assert started or calls(tree, "IncludeLaunchDescription"), f"{path.name} starts no node"
    for package, executable in started:
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
    ("sim.launch.py", "plant"): "the whole stack closes the HIL loop through the simulated "
                                "machine; sim.launch.py alone has no PLC to close it",
    ("bridge.launch.py", "plant"): "the whole stack closes the HIL loop; the bridge alone runs "
                                   "real machines, where no plant link may write their PLC",
}


def test_the_loop_is_closed_by_default_only_where_simulation_and_plc_run_together() -> None:
    """excavator.launch.py and fleet.launch.py (sim_node and a PLC in one launch) close the
    hardware-in-the-loop loop by default; sim.launch.py and bridge.launch.py, each half of it,
    do only when asked (bridge.launch.py alone is how a real machine runs)."""
    defaults = {f: {a.name: a.default for a in arguments_of(f)}["plant"]
                for f in ("sim.launch.py", "bridge.launch.py", "excavator.launch.py",
                          "fleet.launch.py")}
    assert defaults == {"sim.launch.py": "standalone", "bridge.launch.py": "standalone",
                        "excavator.launch.py": "closed", "fleet.launch.py": "closed"}
    assert {a.name: a.default for a in arguments_of("excavator.launch.py")}[
        "virtual_plc"] == "true"


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
    sim = next(n for n in calls(tree, "node") if n.args and constant(n.args[0]) == "sim_node")
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
        env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
        check=True).stdout.strip()
    share = prefix / "share" / "excavator_hil"
    assert found == str(share)
    for rel in ("package.xml", "launch/excavator.launch.py", "config/plc.yaml",
                "rviz/excavator.rviz"):
        assert (share / rel).resolve() == (REPO / rel).resolve(), rel
    exes = {p.name for p in (prefix / "lib" / "excavator_hil").iterdir()}
    assert exes == console_scripts()
    run = subprocess.run([str(prefix / "lib" / "excavator_hil" / "virtual_plc"), "--help"],
                         capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S, check=False)
    assert run.returncode == 0 and "--port" in run.stdout, run.stderr
    subprocess.run([*cli, "--remove"], capture_output=True, timeout=STARTUP_TIMEOUT_S, check=True)
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


# The delays count from the entry point's module imported (a line the stand-in script prints),
# not from the process's start: under load the interpreter alone can take longer than a delay,
# and a SIGINT before the entry point's first line meets Python's default KeyboardInterrupt
# (nothing of ours to catch it). 0.05 s lands in the node module's imports on any host.
@pytest.mark.parametrize("delay_s", [0.05, 0.7, 1.5, 3.0])
def test_node_executable_ends_quietly_on_a_double_sigint_while_starting(
        delay_s: float, tmp_path: Path) -> None:
    """``ros2 launch``'s Ctrl-C (two SIGINTs) while ``sim_node`` is still importing, building
    or running: it exits with code 0, no traceback, well before launch's 5 s SIGTERM."""
    from helpers import double_sigint_while_starting

    code, text = double_sigint_while_starting("excavator_hil.node_entry", "sim_node",
                                              ["--ros-args", "-p", "use_sim_time:=true"],
                                              delay_s, tmp_path)
    assert code == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


# --- supervision: which exits end the launch, which respawn, the exit code ---------------------
# launch_support.Supervision is the bookkeeping behind the launch's event handlers; here it is
# driven as launch drives it (start and exit events of processes, the launch's shutdown flag).
# test_launch_real.py checks the same under the real ros2 launch.
def _supervised(policy: launch_support.RespawnPolicy, *names: str
                ) -> tuple[launch_support.Supervision, dict[str, object]]:
    sup = launch_support.Supervision()
    actions = {name: object() for name in names}
    for name, action in actions.items():
        sup.add(action, name, policy)
        sup.started(action, 0.0)
    return sup, actions


def test_a_required_node_killed_stops_the_launch_and_its_last_line_names_it() -> None:
    sup, a = _supervised(launch_support.RespawnPolicy(), "ik_node", "sim_node")
    rviz = object()                              # not supervised, still a process of the launch
    sup.started(rviz, 0.0)
    decision = sup.exited(a["ik_node"], -9, 12.0, shutting_down=False)
    assert decision is not None and not decision.respawn
    assert decision.message.startswith("required node ik_node was killed by signal 9 (SIGKILL): "
                                       "stopping the other nodes")
    assert sup.verdict() is None                 # sim_node and RViz still being stopped
    assert sup.exited(a["sim_node"], 0, 12.5, shutting_down=True) is None
    assert sup.verdict() is None
    sup.exited(rviz, 0, 12.6, shutting_down=True)
    assert sup.verdict() == ("required node ik_node was killed by signal 9 (SIGKILL); the "
                             "launch stopped its other nodes and exits with code 1")


def test_ctrl_c_is_no_failure_whatever_the_nodes_return() -> None:
    sup, a = _supervised(launch_support.RespawnPolicy(enabled=True), "ik_node", "sim_node")
    assert sup.exited(a["ik_node"], 0, 5.0, shutting_down=True) is None
    assert sup.exited(a["sim_node"], -15, 5.0, shutting_down=True) is None
    assert sup.running == 0 and sup.verdict() is None


@pytest.mark.parametrize("code,why", [
    (2, "refused its configuration (code 2"), (1, "failed with exit code 1"),
    (0, "exited (code 0) although nothing asked it to"),
    (-11, "was killed by signal 11 (SIGSEGV)")])
def test_every_way_a_node_ends_by_itself_is_named(code: int, why: str) -> None:
    sup, a = _supervised(launch_support.RespawnPolicy(), "plc_bridge")
    decision = sup.exited(a["plc_bridge"], code, 1.0, shutting_down=False)
    assert decision is not None and f"required node plc_bridge {why}" in decision.message
    assert sup.verdict() is not None and f"plc_bridge {why}" in str(sup.verdict())


def test_respawn_gives_up_after_the_limit_of_deaths_soon_after_start() -> None:
    policy = launch_support.RespawnPolicy(enabled=True, delay_s=1.0, limit=3, window_s=60.0)
    sup, a = _supervised(policy, "virtual_plc", "plc_bridge")
    plc, t = a["virtual_plc"], 0.0
    for k in (1, 2, 3):                          # three quick deaths: respawned, counted
        t += 5.0
        decision = sup.exited(plc, -9, t, shutting_down=False)
        assert decision is not None and decision.respawn, decision
        assert f"respawning it in 1 s (respawn #{k}; {k} of 3 deaths in a row" in decision.message
        assert sup.failure is None
        sup.started(plc, t + 1.0)
    t += 5.0
    decision = sup.exited(plc, 1, t, shutting_down=False)   # the fourth: given up
    assert decision is not None and not decision.respawn
    assert "the 4th time in a row within respawn_window_s (60 s) of a start: not respawned " \
           "again (respawn_limit 3)" in decision.message
    assert sup.verdict() is None                 # the bridge is still being stopped
    sup.exited(a["plc_bridge"], 0, t + 0.5, shutting_down=True)
    assert sup.verdict() == (
        "required node virtual_plc failed with exit code 1 (its messages above say why): its "
        "death #4 in a row within 60 s of its start, not respawned again; the launch stopped "
        "its other nodes and exits with code 1")


def test_a_node_that_ran_longer_than_the_window_starts_its_count_afresh() -> None:
    policy = launch_support.RespawnPolicy(enabled=True, limit=1, window_s=10.0)
    sup, a = _supervised(policy, "ik_node")
    ik = a["ik_node"]
    first = sup.exited(ik, -9, 5.0, shutting_down=False)       # quick death 1 of 1
    assert first is not None and first.respawn
    sup.started(ik, 7.0)
    later = sup.exited(ik, -9, 7.0 + 3600.0, shutting_down=False)   # ran an hour
    assert later is not None and later.respawn and "count reset" in later.message
    sup.started(ik, 3610.0)
    again = sup.exited(ik, -9, 3612.0, shutting_down=False)    # quick 1 of 1 again: respawned
    assert again is not None and again.respawn
    sup.started(ik, 3614.0)
    last = sup.exited(ik, -9, 3615.0, shutting_down=False)     # quick 2 > 1: given up
    assert last is not None and not last.respawn and sup.failure is not None


def test_a_refused_configuration_is_not_respawned() -> None:
    sup, a = _supervised(launch_support.RespawnPolicy(enabled=True), "ik_node")
    decision = sup.exited(a["ik_node"], 2, 3.0, shutting_down=False)
    assert decision is not None and not decision.respawn
    assert "not respawned (the same configuration would be refused again)" in decision.message
    assert "refused its configuration (code 2" in str(sup.verdict())


def test_after_a_failure_later_exits_change_nothing() -> None:
    sup, a = _supervised(launch_support.RespawnPolicy(enabled=True), "ik_node", "sim_node")
    sup.exited(a["ik_node"], 2, 3.0, shutting_down=False)
    assert sup.exited(a["sim_node"], -9, 3.1, shutting_down=False) is None
    assert "ik_node refused" in str(sup.verdict())


@pytest.mark.parametrize("args,message", [
    (("yes", "2", "5", "60"), "respawn:='yes' must be true or false"),
    (("true", "0", "5", "60"), "respawn_delay_s:=0 is outside 0.1..600"),
    (("true", "2", "2.5", "60"), "respawn_limit:='2.5' is not a whole number"),
    (("true", "2", "5", "0.5"), "respawn_window_s:=0.5 is outside 1..86400"),
])
def test_bad_respawn_arguments_are_named_with_their_range(args: tuple[str, ...],
                                                          message: str) -> None:
    with pytest.raises(launch_support.LaunchArgumentError) as err:
        launch_support.RespawnPolicy.parse(*args)
    assert str(err.value).startswith(message), err.value


# --- the real-time plan: the demo's rules, minus what the host does not support ---------------
def _host(**changes: object) -> object:
    from excavator_common.realtime import HostSupport

    values: dict[str, object] = {"fair_slice": True, "fair_slice_why": "", "fifo_priority": 20,
                                 "fifo": True, "fifo_why": "", "cpus": [0, 1], "pin_why": ""}
    return HostSupport(**{**values, **changes})  # type: ignore[arg-type]


def test_realtime_auto_gives_the_path_to_the_plc_the_demos_slice_and_fifo() -> None:
    from excavator_common.realtime import HOLD_SIGINT, ProcessSetup, command_prefixes

    plan = launch_support.realtime_plan("auto", "20", "false", "", support=_host())
    demo = command_prefixes(ProcessSetup(rt_priority=0, background_nice=10,
                                         bridge_slice_ms=0.1))
    # the demo's fair-slice prefix, with a Ctrl-C held across its exec for the node executables
    assert HOLD_SIGINT in plan.prefixes["bridge"]
    assert [a for a in plan.prefixes["bridge"] if a != HOLD_SIGINT] == demo["bridge"]
    # the background nices itself once its participant exists, Fast DDS's threads spared
    assert plan.prefixes["sim"] == []
    assert plan.prefixes["background"] == ["env", "EXCAVATOR_HIL_NICE=10"]
    assert (plan.rt_priority, plan.plc_rt_priority, plan.env) == (20, 20, {})
    assert "SCHED_FIFO 20 for its loop, 19 for its executor" in plan.line("plc_bridge")
    assert "SCHED_FIFO 20 (the whole process)" in plan.line("virtual_plc")
    assert "fair-scheduler slice 0.1 ms" in plan.line("virtual_plc")
    assert "gc frozen after start-up" in plan.line("sim_node")
    assert "gc frozen" not in plan.line("robot_state_publisher")   # not ours


def test_realtime_auto_leaves_out_and_names_what_the_host_does_not_support() -> None:
    host = _host(fair_slice=False, fair_slice_why="this kernel (6.1.0) keeps its own",
                 fifo=False, fifo_why="SCHED_FIFO 20 not permitted here (EPERM)",
                 cpus=[0], pin_why="1 CPU here, nothing to separate")
    plan = launch_support.realtime_plan("auto", "20", "true", "", support=host)
    assert plan.prefixes["bridge"] == [] and plan.prefixes["sim"] == []
    assert (plan.rt_priority, plan.plc_rt_priority) == (0, 0)   # not tried again by the nodes
    line = plan.line("plc_bridge")
    assert "no fair-scheduler slice: this kernel (6.1.0) keeps its own" in line
    assert "rt_priority 20 not applied, normal scheduling: SCHED_FIFO 20 not permitted" in line
    assert "not pinned: 1 CPU here" in line
    assert "SCHED_FIFO" not in plan.line("virtual_plc").split("not applied")[0]


def test_realtime_off_applies_nothing_and_turns_off_what_the_nodes_do_themselves() -> None:
    from excavator_common.realtime import ENV

    plan = launch_support.realtime_plan("off", "20", "true", "", support=_host())
    assert all(p == [] for p in plan.prefixes.values())
    assert (plan.rt_priority, plan.plc_rt_priority, plan.background_nice) == (0, 0, 0)
    assert plan.env == {ENV: "off"}
    assert plan.line("plc_bridge").startswith("real-time set-up of plc_bridge: off "
                                              "(realtime:=off)")


def test_every_node_gets_a_longer_sigint_grace_a_background_one_longer_still() -> None:
    auto = launch_support.realtime_plan("auto", "", "false", "", support=_host())
    off = launch_support.realtime_plan("off", "", "false", "", support=_host())
    grace = launch_support.BACKGROUND_SIGINT_GRACE_S
    node = launch_support.NODE_SIGINT_GRACE_S
    assert 5.0 < node < grace
    assert launch_support.sigint_grace("background", auto, "5") == f"{grace:g}"
    assert launch_support.sigint_grace("background", auto, "8.5") == f"{grace:g}"
    # any other node (or a background one without nice): the node grace over launch's 5 s
    for group in ("bridge", "sim"):
        assert launch_support.sigint_grace(group, auto, "5") == f"{node:g}"
    assert launch_support.sigint_grace("background", off, "5") == f"{node:g}"
    # a user's longer grace, or a value launch itself rejects: theirs
    assert launch_support.sigint_grace("background", auto, f"{grace + 10:g}") is None
    assert launch_support.sigint_grace("sim", auto, f"{node:g}") is None
    assert launch_support.sigint_grace("background", auto, "soon") is None


def test_rt_priority_left_empty_keeps_the_parameter_files(tmp_path: Path) -> None:
    params = tmp_path / "plc.yaml"
    params.write_text("/**:\n  ros__parameters:\n    rt_priority: 30\n")
    plan = launch_support.realtime_plan("auto", "", "false", str(params),
                                        support=_host(fifo_priority=30))
    assert plan.rt_priority is None              # the bridge keeps the file's value
    assert plan.plc_rt_priority == 30            # and the virtual PLC follows it
    shipped = launch_support.realtime_plan("auto", "", "false", str(REPO / "config/plc.yaml"),
                                           support=_host())
    assert (shipped.rt_priority, shipped.plc_rt_priority) == (None, 0)
    with pytest.raises(launch_support.LaunchArgumentError, match=r"rt_priority:=120 is outside"):
        launch_support.realtime_plan("auto", "120", "false", "", support=_host())
    with pytest.raises(launch_support.LaunchArgumentError, match=r"realtime:='on' must be one"):
        launch_support.realtime_plan("on", "", "false", "", support=_host())


def test_host_support_asks_without_changing_this_process() -> None:
    import os

    from excavator_common import realtime

    before = (os.sched_getscheduler(0), realtime.current_fair_slice())
    support = realtime.host_support(rt_priority=20)
    assert (os.sched_getscheduler(0), realtime.current_fair_slice()) == before
    assert support.fifo_priority == 20
    assert support.fifo or "SCHED_FIFO 20 not permitted" in support.fifo_why
    assert support.fair_slice or "slice" in support.fair_slice_why
