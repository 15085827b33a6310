"""One error root per package, a configuration marker that every node's start-up turns into one
message and exit code 2, and errors of a lower package wrapped at the boundary."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from excavator_hil.errors import BagError, DemoError, HilConfigError, HilError
from excavator_hil.local_services import STARTUP_TIMEOUT_S
from excavator_kinematics.errors import ConfigError, ConfigurationError, KinematicsError
from excavator_sim.errors import CommandError, HeightFieldError, SimConfigError, SimulationError
from excavator_sim.soil.errors import SoilConfigError, SoilError
from plc_bridge.errors import BridgeConfigError, BridgeError, LayoutError

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"excavator_kinematics": KinematicsError, "excavator_sim": SimulationError,
         "plc_bridge": BridgeError, "excavator_hil": HilError}
CONFIG_ERRORS = (ConfigError, SimConfigError, SoilConfigError, BridgeConfigError, HilConfigError)


def _error_classes(package: str) -> list[type[BaseException]]:
    """Every exception class defined in the package's sources (found by their text, so a new
    module with a new error is checked without listing it here)."""
    found: list[type[BaseException]] = []
    for path in sorted((REPO / package).rglob("*.py")):
        names = re.findall(r"^class (\w+)\(", path.read_text(), flags=re.M)
        if not names:
            continue
        module_name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if "dashboard" in module_name:   # NiceGUI pages: no exception classes there
            continue
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, BaseException) and \
                    obj.__module__ == module_name:
                found.append(obj)
    return found


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_error_of_a_package_derives_from_its_root(package: str) -> None:
    classes = _error_classes(package)
    assert classes, f"no error classes found in {package}"
    root = ROOTS[package]
    for cls in classes:
        if cls is ConfigurationError:   # the shared marker, under no package
            continue
        assert issubclass(cls, root), f"{cls.__module__}.{cls.__name__} is not a {root.__name__}"
        others = [r for p, r in ROOTS.items() if p != package and issubclass(cls, r)]
        assert not others, f"{cls.__name__} also derives from {others}"


def test_named_errors_sit_under_their_roots() -> None:
    assert issubclass(SoilError, SimulationError) and issubclass(SoilConfigError, SoilError)
    assert issubclass(CommandError, SimulationError)
    assert issubclass(HeightFieldError, SimulationError)
    assert issubclass(LayoutError, BridgeError)
    assert issubclass(BagError, HilError) and issubclass(DemoError, HilError)


@pytest.mark.parametrize("cls", CONFIG_ERRORS, ids=lambda c: c.__name__)
def test_every_config_error_is_a_configuration_error(cls: type[Exception]) -> None:
    assert issubclass(cls, ConfigurationError)


@pytest.mark.parametrize("cls", [BridgeConfigError, SimConfigError, SoilConfigError,
                                 HilConfigError], ids=lambda c: c.__name__)
def test_a_config_error_of_a_package_is_not_a_kinematics_error(cls: type[Exception]) -> None:
    assert not issubclass(cls, KinematicsError)
    with pytest.raises(cls):
        try:
            raise cls("x")
        except KinematicsError:   # must not catch it
            pytest.fail(f"{cls.__name__} caught as a KinematicsError")


def test_bridge_config_wraps_a_bad_vehicle_geometry(tmp_path: Path) -> None:
    """The vehicle model (kinematics) rejects the geometry; the bridge's loader re-raises it as
    its own config error, naming the parameter, with the kinematics error as the cause."""
    import yaml

    from plc_bridge.config import default_config_path, load_config

    doc = yaml.safe_load(default_config_path().read_text())
    params = next(iter(doc.values()))["ros__parameters"]
    params["vehicle"]["skid_steer"]["track_width_m"] = 0.0   # the spec allows 0, the model not
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BridgeConfigError, match="track_width_m") as info:
        load_config(path, {"model": "skid_steer"})
    assert not isinstance(info.value, KinematicsError)
    assert isinstance(info.value.__cause__, KinematicsError)


@pytest.mark.parametrize("cls", CONFIG_ERRORS, ids=lambda c: c.__name__)
def test_run_node_exits_2_on_every_packages_config_error(cls: type[Exception]) -> None:
    """A node whose construction raises any package's configuration error: one [FATAL] line
    with the message, exit code 2, no traceback."""
    code = (f"import sys\n"
            f"from {cls.__module__} import {cls.__name__}\n"
            f"from excavator_common.ros_runtime import run_node\n"
            f"def factory():\n"
            f"    raise {cls.__name__}('parameter x = 7 outside 0..5: set it within the range')\n"
            f"sys.exit(run_node(factory, ['node']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=STARTUP_TIMEOUT_S, cwd=REPO, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[FATAL] invalid configuration: parameter x = 7 outside 0..5: set it within the " \
           "range" in proc.stderr


def test_a_broken_bag_is_a_bag_error_caused_by_rosbags(tmp_path: Path) -> None:
    """rosbags' reader error is re-raised at the system package's boundary as a BagError
    naming the directory, with rosbags' error as the cause (as AnyReader itself wraps the
    readers' errors)."""
    from rosbags.highlevel import AnyReaderError

    from excavator_hil.bags.io import read_bag

    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: {version: 99}\n")
    with pytest.raises(BagError, match=f"{bag} cannot be read as a rosbag2 directory") as info:
        read_bag(bag)
    assert isinstance(info.value, HilError)
    assert isinstance(info.value.__cause__, AnyReaderError)
