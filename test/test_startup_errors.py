"""Every start-up error of every node and of the ``excavator-hil`` CLI is one clean message and
exit code 2, never a traceback (issue 20: a missing or malformed ``--params-file`` and
``use_sim_time:=maybe`` ended in a Python traceback with exit code 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, REPO, NodeProcess

from excavator_common.errors import ParameterError
from excavator_common.parameter_files import check_params_file, check_ros_arguments

NODES = ("excavator_kinematics.ik_node", "excavator_sim.sim_node",
         "excavator_sim.soil.soil_node")


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad_params")
    files = {"not yaml": "/**:\n  ros__parameters: [1, 2\n",
             "a list": "- 1\n- 2\n",
             "flat": "timestep: 0.001\n",
             "parameters not a mapping": "/**:\n  ros__parameters: 3\n"}
    out = {}
    for name, text in files.items():
        path = d / f"{name.replace(' ', '_')}.yaml"
        path.write_text(text)
        out[name] = path
    out["missing"] = d / "does_not_exist.yaml"
    return out


def _run(module: str, args: list[str], tmp_path: Path) -> tuple[int, str]:
    proc = NodeProcess(module, args, log_dir=tmp_path)
    try:
        code = proc.proc.wait(EVENT_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.stop()
        pytest.fail(f"{module} {args} did not exit; log:\n{proc.log()}")
    proc.stop()
    return code, proc.log()


def _assert_clean(code: int, log: str, *words: str) -> None:
    assert code == 2, f"exit code {code}, expected 2:\n{log}"
    assert "Traceback" not in log, log
    fatal = [line for line in log.splitlines() if line.startswith("[FATAL]")]
    assert len(fatal) == 1, f"expected one [FATAL] line:\n{log}"
    for word in words:
        assert word in fatal[0], f"'{word}' not in {fatal[0]!r}"


@pytest.mark.parametrize("case, words", [
    ("missing", ("cannot read parameter file", "No such file")),
    ("not yaml", ("is not valid YAML at line 3", "parsing a flow sequence from line 2")),
    ("a list", ("holds a list at the top", "ros__parameters")),
    ("flat", ("'timestep' is not a node section",)),
    ("parameters not a mapping", ("'/**/ros__parameters' holds a number",)),
])
def test_bad_params_file_is_one_fatal_line_and_exit_2(bad_files: dict[str, Path], tmp_path: Path,
                                                      case: str, words: tuple[str, ...]) -> None:
    code, log = _run("excavator_kinematics.ik_node",
                     ["--ros-args", "--params-file", str(bad_files[case])], tmp_path)
    _assert_clean(code, log, str(bad_files[case]), *words)


@pytest.mark.parametrize("module", NODES)
def test_every_node_rejects_a_malformed_params_file(bad_files: dict[str, Path], tmp_path: Path,
                                                   module: str) -> None:
    code, log = _run(module, ["--ros-args", "--params-file", str(bad_files["not yaml"])],
                     tmp_path)
    _assert_clean(code, log, "is not valid YAML")


@pytest.mark.parametrize("module", NODES)
def test_every_node_rejects_use_sim_time_maybe(tmp_path: Path, module: str) -> None:
    code, log = _run(module, ["--ros-args", "-p", "use_sim_time:=maybe"], tmp_path)
    _assert_clean(code, log, "use_sim_time", "true or false")


def test_use_sim_time_of_the_wrong_type_in_a_file_is_fatal(tmp_path: Path) -> None:
    """From a file (check_ros_arguments only sees -p): rclpy refuses the declaration."""
    path = tmp_path / "p.yaml"
    path.write_text("/**:\n  ros__parameters:\n    use_sim_time: maybe\n")
    code, log = _run("excavator_sim.soil.soil_node", ["--ros-args", "--params-file", str(path)],
                     tmp_path)
    _assert_clean(code, log, "use_sim_time", "'maybe'", "true or false")


def test_an_override_without_value_and_a_bad_rcl_argument(tmp_path: Path) -> None:
    code, log = _run("excavator_kinematics.ik_node", ["--ros-args", "-p", "bucket_pitch"],
                     tmp_path)
    _assert_clean(code, log, "'bucket_pitch' is not 'name:=value'")
    code, log = _run("excavator_kinematics.ik_node", ["--ros-args", "--log-level", "loud"],
                     tmp_path)
    _assert_clean(code, log, "invalid ROS arguments")
    assert ".c:" not in log.split("[FATAL]")[1], "rcl's C source locations in the message"


def test_a_huge_number_is_printed_short(tmp_path: Path) -> None:
    code, log = _run("excavator_sim.sim_node", ["--ros-args", "-p", "initial.boom_rad:=1e300"],
                     tmp_path)
    _assert_clean(code, log, "boom joint 5.72958e+301 deg outside")


# --- the CLI ------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "excavator_hil.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("args, words", [
    (("ik", "--geometry", "/nonexistent/geometry.yaml"), "cannot read geometry file"),
    (("urdf", "--geometry", "{bad}"), "is not valid YAML"),
    (("render", "{tmp}/x.png", "--config", "{bad}"), "is not valid YAML"),
    (("soil-plots", "--preset", "nosuch", "--out-dir", "{tmp}"), "preset='nosuch'"),
])
def test_cli_bad_file_or_value_is_one_error_line_and_exit_2(
        bad_files: dict[str, Path], tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    args = tuple(a.format(bad=bad_files["not yaml"], tmp=tmp_path) for a in args)
    result = _cli(*args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()
             and "RuntimeWarning" not in line]
    assert len(lines) == 1 and lines[0].startswith("excavator-hil: error:"), result.stderr
    assert words in lines[0]


def test_cli_ik_prints_a_huge_target_short() -> None:
    result = _cli("ik", "--target", "1e308", "0", "0")
    assert result.returncode == 1 and "1e+308" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 400


# --- the checks themselves (no process) -----------------------------------------------------
def test_shipped_parameter_files_pass_the_check() -> None:
    for path in sorted((REPO / "config").glob("*.yaml")):
        text = path.read_text()
        if "ros__parameters" in text:
            check_params_file(path)


@pytest.mark.parametrize("args, words", [
    (["--ros-args", "--params-file"], "needs a file name"),
    (["--ros-args", "-p", "x"], "is not 'name:=value'"),
    (["--ros-args", "-p", "use_sim_time:=maybe"], "use_sim_time is true or false"),
    (["--ros-args", "-p", "sim_node:use_sim_time:=2"], "use_sim_time is true or false"),
])
def test_ros_argument_checks(args: list[str], words: str) -> None:
    with pytest.raises(ParameterError, match=words):
        check_ros_arguments(args)


def test_ros_argument_checks_accept_what_rcl_accepts(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    check_ros_arguments(["prog", "--ros-args", "-p", "use_sim_time:=True", "-p",
                         "a.b:=[1, 2]", "--params-file", str(empty), "--", "-p", "x"])
    check_ros_arguments(["prog", "-p", "not-ros"])  # outside --ros-args: not ours


def test_sim_node_with_an_unknown_machine_preset_names_the_shipped_ones(tmp_path: Path) -> None:
    code, log = _run("excavator_sim.sim_node", ["--ros-args", "-p", "machine:=heavy_99t"],
                     tmp_path)
    _assert_clean(code, log, "machine preset 'heavy_99t'", "heavy_36t")


def test_sim_node_takes_a_machine_preset(tmp_path: Path) -> None:
    """``machine:=heavy_36t``: the node simulates the 36 t preset (masses and hydraulics)."""
    from helpers import wait_for

    proc = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "-p", "machine:=heavy_36t", "-p", "terrain.nx:=11",
                        "-p", "terrain.ny:=11"], log_dir=tmp_path)
    try:
        wait_for(lambda: "ready:" in proc.log(),
                 EVENT_WAIT_S, lambda: f"sim_node ready:\n{proc.log()}")
    finally:
        code = proc.stop()
    assert "machine heavy_36t (36.0 t, 34.3 MPa)" in proc.log(), proc.log()
    assert code == 0, proc.log()
