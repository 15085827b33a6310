"""The command line of every executable (issue 31, hole 9): ``--help`` prints the usage and exits
0 without starting ROS, an option the executable does not define ends with exit code 2 naming
it, and ROS arguments (``--ros-args ... [--]``) still reach rcl.

Each executable runs as a real process, through its console-script entry point as setup.py
declares it (what ``ros2 run excavator_hil <name>`` starts). The command lines that must end
before ROS starts run one after another in one process per executable (:func:`outcome`): an
interpreter start per command line cost the suite a minute of CPU; one that wrongly started a
node would hang that process and fail its tests on the timeout."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

import pytest
from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, get_parameters, wait_for
from hypothesis import given
from hypothesis import strategies as st
from test_launch_files import _kw, _setup_call

from excavator_common.node_args import NodeUsage, check_command_line, split_ros_args


def entry_points() -> dict[str, str]:
    """Console script -> ``module:function``, from setup.py."""
    import ast

    scripts = ast.literal_eval(_kw(_setup_call(), "entry_points"))["console_scripts"]
    return {name.strip(): target.strip() for name, target in (s.split("=") for s in scripts)}


ENTRY_POINTS = entry_points()
# The ROS nodes (run_node's command line); the others have options of their own.
NODES = {"ik_node": ("ik.yaml", "docs/kinematics.md"),
         "teleop_node": ("teleop.yaml", "docs/teleoperation.md"),
         "sim_node": ("sim.yaml", "docs/simulation.md"),
         "soil_node": ("soil.yaml", "docs/soil.md"),
         "plc_bridge": ("plc.yaml", "docs/plc_bridge.md"),
         "plant_link": ("plant_link.yaml", "docs/plc_bridge.md"),
         "foxglove_view": ("foxglove_view.yaml", "docs/foxglove.md")}
NODE_MODULES = {"ik_node": "excavator_kinematics.ik_node",
                "teleop_node": "excavator_kinematics.teleop_node",
                "sim_node": "excavator_sim.sim_node", "soil_node": "excavator_sim.soil.soil_node",
                "plc_bridge": "plc_bridge.bridge.node",
                "plant_link": "plc_bridge.plant_link.node",
                "foxglove_view": "excavator_hil.foxglove_view.node"}


def run(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script ``name`` with ``args``, as its generated script runs it."""
    module, function = ENTRY_POINTS[name].split(":")
    code = (f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; "
            f"sys.exit({function}())")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


# The command lines each executable is tried with (every test below that runs them: one
# process per executable runs them all, see outcome)
HELP_TAIL = ("--ros-args", "--log-level", "loud")   # an rcl argument rclpy.init refuses
UNKNOWN = ("--bogus", "--ros-args", "-r", "__node:=x")
OUTSIDE = [(["-p", "use_sim_time:=true"], "-p use_sim_time:=true"),   # ROS args without --ros-args
           (["--ros-args", "-r", "__node:=x", "--", "--bogus"], "--bogus"),  # after the ROS block
           (["extra"], "extra")]
_DRIVER = """
import contextlib, importlib, io, json, sys
entry_module = importlib.import_module({module!r})
entry = getattr(entry_module, {function!r})


def end(code):   # the entry's last step, os._exit after main() returned: a SystemExit here
    raise SystemExit(code)


if hasattr(entry_module, "exit_without_teardown"):
    entry_module.exit_without_teardown = end
lines, results = json.loads(sys.argv[1]), []
for argv in lines:
    sys.argv = [{name!r}, *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry()
        except SystemExit as end:
            code = end.code
    results.append([code if isinstance(code, int) else int(code is not None), out.getvalue(),
                    err.getvalue()])
print(json.dumps(results))
"""


def command_lines(name: str) -> list[tuple[str, ...]]:
    lines = [(flag, *HELP_TAIL) for flag in ("--help", "-h")] + [UNKNOWN]
    return lines + ([tuple(args) for args, _ in OUTSIDE] if name in NODES else [])


@functools.cache
def _outcomes(name: str) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every command line of :func:`command_lines` through the console script ``name``'s entry
    function as its generated script calls it (``sys.argv[0]`` the script's name, the exit
    code from ``SystemExit``), one after another in one process."""
    module, function = ENTRY_POINTS[name].split(":")
    lines = command_lines(name)
    proc = subprocess.run([sys.executable, "-c", _DRIVER.format(module=module,
                                                                function=function, name=name),
                           json.dumps(lines)], cwd=REPO, capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {line: subprocess.CompletedProcess([name, *line], code, out, err)
            for line, (code, out, err) in zip(lines, results, strict=True)}


def outcome(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """What the console script ``name`` did with ``args`` (one of :func:`command_lines`)."""
    return _outcomes(name)[args]


def test_every_console_script_is_covered() -> None:
    assert set(ENTRY_POINTS) == {*NODES, "virtual_plc", "dashboard", "excavator-hil"}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_exits_0_without_starting_ros(name: str, flag: str) -> None:
    # an rcl argument that rclpy.init refuses (exit 2): --help answers before ROS starts
    proc = outcome(name, flag, *HELP_TAIL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"usage: {name}"), proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    if name in NODES:
        params, docs = NODES[name]
        out = " ".join(proc.stdout.split())
        assert "subscribes:" in out and "publishes:" in out and docs in out
        assert f"{REPO / 'config' / params}" in out   # the parameter file that exists
        assert f"{name} --ros-args --params-file" in out and "-p name:=value" in out
    elif name != "excavator-hil":
        assert "--ros-args" in proc.stdout and "docs/" in proc.stdout


@pytest.mark.parametrize("name", sorted(NODES))
def test_the_rcl_argument_the_help_test_relies_on_stops_a_node(name: str) -> None:
    # without --help the same arguments reach rclpy.init, which refuses them
    proc = run(name, "--ros-args", "--log-level", "loud")
    assert proc.returncode == 2 and "invalid ROS arguments" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_an_unknown_option_is_refused_naming_it(name: str) -> None:
    proc = outcome(name, *UNKNOWN)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unrecognized arguments: --bogus" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(NODES))
@pytest.mark.parametrize("args, named", OUTSIDE)
def test_a_node_refuses_what_is_outside_its_ros_arguments(name: str, args: list[str],
                                                         named: str) -> None:
    proc = outcome(name, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"unrecognized arguments: {named} (ROS arguments go after --ros-args" in proc.stderr
    assert "[FATAL]" not in proc.stderr and "Traceback" not in proc.stderr


def test_ros_arguments_still_reach_the_node(node_processes: list[NodeProcess], tmp_path) -> None:
    """A remap, a parameter file and an override, in one ROS block closed by ``--``."""
    node = NodeProcess(NODE_MODULES["ik_node"], [
        "--ros-args", "-r", "__node:=renamed_ik", "--params-file", "config/ik.yaml",
        "-p", "bucket_pitch_rad:=0.4", "--"], log_dir=tmp_path)
    node_processes.append(node)
    probe = RosTestNode("cli_probe")
    try:
        values = get_parameters(probe, "/renamed_ik", ["bucket_pitch_rad"], timeout=60.0)
        assert values == {"bucket_pitch_rad": 0.4}
    finally:
        probe.close()


def test_the_virtual_plc_reads_its_options_after_the_ros_block(node_processes, tmp_path) -> None:
    """ros2 launch puts ``--ros-args ...`` after the launch file's arguments; options after a
    closing ``--`` are the executable's again (they were dropped before)."""
    proc = NodeProcess("plc_bridge.virtual_plc.cli", [
        "--port", "0", "--ros-args", "-r", "__node:=virtual_plc", "--", "--control-port", "-1",
        "--model", "ackermann"], log_dir=tmp_path)
    node_processes.append(proc)
    line = wait_for(lambda: re.search(r"READY port=\d+ control_port=(\S+) model=(\S+)",
                                      proc.log()), EVENT_WAIT_S, lambda: f"READY in {proc.log()}")
    assert line.groups() == ("-1", "ackermann")


# what rcl takes as ROS arguments, and what a user may put around them
_ROS = st.sampled_from([["-r", "__node:=n"], ["-r", "a:=b"], ["-p", "x:=1"],
                        ["--params-file", str(REPO / "config" / "ik.yaml")],
                        ["--log-level", "warn"],
                        ["-e", "/enclave"], ["--enable-stdout-logs"]])
_OWN = st.sampled_from([["--bogus"], ["x"], ["-p"], ["--"], ["--help"], ["-h", "2"]])


@st.composite
def _command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    blocks = draw(st.integers(0, 4))
    for k in range(blocks):
        argv += draw(_OWN)
        if draw(st.booleans()):
            argv.append("--ros-args")
            for _ in range(draw(st.integers(0, 3))):
                argv += draw(_ROS)
            # an unclosed block runs to the end
            if k < blocks - 1 or draw(st.booleans()):
                argv.append("--")
    return argv


@given(_command_lines())
def test_split_ros_args_splits_as_rcl_does(argv: list[str]) -> None:
    from rclpy.utilities import remove_ros_args

    own, ros = split_ros_args(argv)
    assert ["prog", *own] == remove_ros_args(["prog", *argv])
    assert len(own) + len(ros) <= len(argv)


def test_check_command_line_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    usage = NodeUsage("probe_node", "probes", subscribes=("a (std_msgs/Empty)",))
    assert check_command_line(usage, ["probe_node", "--ros-args", "-p", "x:=1"]) is None
    assert check_command_line(usage, ["probe_node"]) is None
    assert check_command_line(usage, ["probe_node", "--help"]) == 0
    assert "subscribes: a (std_msgs/Empty)" in capsys.readouterr().out
    assert check_command_line(usage, ["probe_node", "--ros-args", "--", "-x"]) == 2
    assert "unrecognized arguments: -x" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(NODES))
def test_the_topics_of_the_usage_are_the_nodes_own(name: str) -> None:
    """Every topic the usage names is a topic string of the node's source (a renamed topic
    fails here), and every topic the source subscribes or publishes is in the usage."""
    import importlib
    import inspect

    module = importlib.import_module(NODE_MODULES[name])
    source = inspect.getsource(module)
    usage: NodeUsage = module.USAGE
    named = {t.strip() for entry in (*usage.subscribes, *usage.publishes)
             if not entry.startswith("Redis") for t in entry.split("(")[0].split(",")}
    assert named and all(f'"{t}"' in source for t in named), named
    created = set(re.findall(r'create_(?:publisher|subscription)\(\s*\w+,\s*"([^"]+)"', source))
    assert created <= named, created - named
