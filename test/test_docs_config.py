"""docs/configuration.md against the files it documents: a parameter or launch argument added,
renamed or given a new default without updating the reference fails here.

Checked, per config file (its own section of the doc, so keys that two files share such as
``terrain.initial_height_m`` must be documented in both):
- every leaf key (dotted, under ``/**: ros__parameters`` or, for ``excavator.yaml``, from the top)
  appears in backticks; a row may stand for several keys with a ``<placeholder>`` segment
  (``presets.<preset>.density_kg_m3``) when each concrete segment is named too
  (``presets.loose_sand``);
- a default cell written in backticks equals the file's value;
- every row of a ``key`` table names a key that still exists (no stale rows).
Per launch file: every argument it declares (from the one table,
``excavator_hil.launch_support.LAUNCH_FILES``) has a row with its default and choices, and no
row names an argument that is gone.
The parameter tables of the nodes with a spec (``excavator_common.parameters``) are generated
from it (``excavator-hil params-doc``) and must match; each shipped file holds its spec's
defaults, with no unknown key and ROS's types.
Also: docs/rviz.md names every topic and the fixed frame of rviz/excavator.rviz. Pure text and
YAML: no ROS, well under a second.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from excavator_common.parameter_files import flatten

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
CONFIG_FILES = sorted((REPO / "config").glob("*.yaml"))
LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))
# The node modules and the parameter file each reads (a module not written yet is skipped).
NODE_MODULES = {
    "excavator_kinematics/ik_node.py": "ik.yaml",
    "excavator_sim/sim_node.py": "sim.yaml",
    "excavator_sim/soil/soil_node.py": "soil.yaml",
    "plc_bridge/bridge/node.py": "plc.yaml",
    "plc_bridge/plant_link/node.py": "plant_link.yaml",
    "excavator_hil/foxglove_view/node.py": "foxglove_view.yaml",
}

_HEADING = re.compile(r"^(#+)\s+(.*)$")
_TICKED = re.compile(r"`([^`\n]+)`")
_PLACEHOLDER = re.compile(r"^<[^<>]+>$")


# --- what the files hold ---------------------------------------------------------------------
def config_parameters(path: Path) -> dict[str, Any]:
    """Leaf keys of a config file: the ``ros__parameters`` of every node section of a ROS 2
    parameter file, or the whole document for a plain YAML file (excavator.yaml)."""
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, Mapping), f"{path}: top level is not a mapping"
    sections = [s["ros__parameters"] for s in data.values()
                if isinstance(s, Mapping) and isinstance(s.get("ros__parameters"), Mapping)]
    if not sections:
        return flatten(data)
    out: dict[str, Any] = {}
    for section in sections:
        out.update(flatten(section))
    return out


def launch_arguments(path: Path) -> dict[str, dict[str, Any]]:
    """name -> {"default": str | None (None = not a literal: a share file, the RViz default),
    "choices": list | None} of every argument the launch file declares (the launch files
    declare theirs from excavator_hil.launch_support's table)."""
    from excavator_hil.launch_support import RVIZ_AUTO, arguments_of

    return {a.name: {"default": None if a.share_path or a.default == RVIZ_AUTO else a.default,
                     "choices": list(a.choices) or None} for a in arguments_of(path.name)}


def declared_parameters(path: Path) -> set[str]:
    """Parameter names a node module declares with a constant name: ``declare(node, "name",
    ...)`` (excavator_common.ros_runtime) or ``node.declare_parameter("name", ...)``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        index = {"declare": 1, "declare_parameter": 0}.get(func or "")
        if index is not None and len(node.args) > index:
            arg = node.args[index]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


# --- what the doc says -----------------------------------------------------------------------
def doc_section(text: str, file_label: str) -> str:
    """The text under the heading that names ``file_label`` in backticks, up to the next heading
    of the same or a higher level; '' when there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _HEADING.match(line)
        if m and f"`{file_label}`" in m.group(2):
            level = len(m.group(1))
            body = []
            for following in lines[i + 1:]:
                h = _HEADING.match(following)
                if h and len(h.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    return ""


def table_rows(section: str) -> list[tuple[list[str], list[str]]]:
    """(header cells, row cells) of every markdown table row in a section."""
    rows: list[tuple[list[str], list[str]]] = []
    header: list[str] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append((header, cells))
    return rows


def ticked(cell: str) -> str | None:
    """The content of a cell that is one backticked span, else None (prose)."""
    m = re.fullmatch(r"`([^`]*)`", cell.strip())
    return m.group(1) if m else None


def matches(pattern: str, key: str, tokens: set[str]) -> bool:
    """``key`` equals ``pattern`` segment by segment, a ``<placeholder>`` segment standing for
    any one segment whose dotted prefix is itself named in the section."""
    p_parts, k_parts = pattern.split("."), key.split(".")
    if len(p_parts) != len(k_parts):
        return False
    for i, (p, k) in enumerate(zip(p_parts, k_parts, strict=True)):
        if _PLACEHOLDER.match(p):
            if ".".join(k_parts[:i + 1]) not in tokens:
                return False
        elif p != k:
            return False
    return True


def equal(parsed: Any, value: Any) -> bool:
    """A documented value (parsed as YAML) equals the file's; floats to 1e-9 relative."""
    if isinstance(value, list):
        return (isinstance(parsed, list) and len(parsed) == len(value)
                and all(equal(p, v) for p, v in zip(parsed, value, strict=True)))
    if isinstance(value, bool) or isinstance(parsed, bool):
        return parsed is value
    if isinstance(value, int | float) and isinstance(parsed, int | float):
        return math.isclose(float(parsed), float(value), rel_tol=1e-9, abs_tol=1e-12)
    return parsed == value


def placeholder_index(pattern: str) -> int:
    return next(i for i, p in enumerate(pattern.split(".")) if _PLACEHOLDER.match(p))


def same_value(cell: str, value: Any) -> bool:
    try:
        return equal(yaml.safe_load(cell), value)
    except yaml.YAMLError:
        return False


def config_problems(config: Path, doc_text: str) -> list[str]:
    """Everything wrong between one config file and its section of the doc."""
    label = f"config/{config.name}"
    section = doc_section(doc_text, label)
    if not section:
        return [f"no heading naming `{label}`"]
    tokens = set(_TICKED.findall(section))
    params = config_parameters(config)
    rows = table_rows(section)
    patterns = {ticked(cells[0]) for _, cells in rows if ticked(cells[0])}
    problems = []
    for key in params:
        if key not in tokens and not any(matches(p, key, tokens) for p in patterns if "<" in p):
            problems.append(f"{label}: {key} is not documented")
    for header, cells in rows:
        first = ticked(cells[0])
        if header[0].lower() != "key" or first is None:
            continue
        covered = [k for k in params if k == first or ("<" in first and matches(first, k, tokens))]
        if not covered:
            problems.append(f"{label}: the doc lists {first}, which the file no longer has")
        for key in covered:
            # A placeholder row shows each concrete key's value in the column named after it.
            column = "default" if key == first else key.split(".")[placeholder_index(first)]
            headers = [ticked(h) or h.lower() for h in header]
            if column not in headers or len(cells) != len(header):
                continue
            cell = ticked(cells[headers.index(column)])
            if cell is not None and not same_value(cell, params[key]):
                problems.append(f"{label}: {key} documented as {cell!r}, the file has "
                                f"{params[key]!r}")
    return problems


def launch_problems(launch: Path, doc_text: str) -> list[str]:
    label = f"launch/{launch.name}"
    section = doc_section(doc_text, label)
    if not section:
        return [f"no heading naming `{label}`"]
    declared = launch_arguments(launch)
    documented: dict[str, dict[str, str]] = {}
    for header, cells in table_rows(section):
        name = ticked(cells[0])
        if header[0].lower() == "argument" and name and len(cells) == len(header):
            documented[name] = {h.lower(): c for h, c in zip(header, cells, strict=True)}
    problems = [f"{label}: argument {n} is not documented" for n in declared
                if n not in documented]
    problems += [f"{label}: the doc lists argument {n}, which the file no longer declares"
                 for n in documented if n not in declared]
    for name, arg in declared.items():
        row = documented.get(name)
        if row is None:
            continue
        if arg["default"] is not None:
            shown = ticked(row.get("default", ""))
            if shown is None or (shown if shown != '""' else "") != arg["default"]:
                problems.append(f"{label}: {name} default documented as "
                                f"{row.get('default')!r}, the file has {arg['default']!r}")
        if arg["choices"] is not None:
            shown_choices = _TICKED.findall(row.get("choices", ""))
            if shown_choices != [str(c) for c in arg["choices"]]:
                problems.append(f"{label}: {name} choices documented as {shown_choices}, the "
                                f"file has {arg['choices']}")
    return problems


# --- the tests -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text()


def test_the_files_are_there() -> None:
    assert {p.name for p in CONFIG_FILES} >= {"excavator.yaml", "ik.yaml", "sim.yaml",
                                              "soil.yaml", "plc.yaml"}
    assert len(LAUNCH_FILES) >= 3


@pytest.mark.parametrize("config", CONFIG_FILES, ids=lambda p: p.name)
def test_every_parameter_is_documented_with_its_default(config: Path, doc_text: str) -> None:
    problems = config_problems(config, doc_text)
    assert not problems, "docs/configuration.md is out of date:\n" + "\n".join(problems)


@pytest.mark.parametrize("launch", LAUNCH_FILES, ids=lambda p: p.name)
def test_every_launch_argument_is_documented(launch: Path, doc_text: str) -> None:
    problems = launch_problems(launch, doc_text)
    assert not problems, "docs/configuration.md is out of date:\n" + "\n".join(problems)


@pytest.mark.parametrize("module", sorted(NODE_MODULES))
def test_parameters_a_node_declares_beyond_its_file_are_documented(module: str,
                                                                   doc_text: str) -> None:
    path = REPO / module
    if not path.is_file():
        pytest.skip(f"{module} does not exist yet")
    label = f"config/{NODE_MODULES[module]}"
    tokens = set(_TICKED.findall(doc_section(doc_text, label)))
    missing = sorted(declared_parameters(path) - tokens)
    assert not missing, f"{module} declares {missing}, not documented under `{label}`"


# --- the checks catch drift (temp copies; the real files are never touched) ------------------
def new_problems(check: Callable[[Path, str], list[str]], real: str, copy: Path,
                 doc_text: str) -> list[str]:
    """Problems the edited copy has beyond those of the real file (which the tests above
    report on their own), so these tests stay about the checks."""
    baseline = set(check(REPO / real, doc_text))
    return [p for p in check(copy, doc_text) if p not in baseline]


def test_an_undocumented_parameter_fails(tmp_path: Path, doc_text: str) -> None:
    copy = tmp_path / "sim.yaml"
    data = yaml.safe_load((REPO / "config" / "sim.yaml").read_text())
    data["/**"]["ros__parameters"]["hydraulics"]["dummy_gain_1_s"] = 1.0
    copy.write_text(yaml.safe_dump(data))
    assert new_problems(config_problems, "config/sim.yaml", copy, doc_text) == [
        "config/sim.yaml: hydraulics.dummy_gain_1_s is not documented"]


def test_an_undocumented_geometry_key_and_preset_fail(tmp_path: Path, doc_text: str) -> None:
    geometry = yaml.safe_load((REPO / "config" / "excavator.yaml").read_text())
    geometry["links"]["dummy_link_m"] = 0.5
    (tmp_path / "excavator.yaml").write_text(yaml.safe_dump(geometry))
    assert new_problems(config_problems, "config/excavator.yaml", tmp_path / "excavator.yaml",
                        doc_text) == ["config/excavator.yaml: links.dummy_link_m is not documented"]

    soil = yaml.safe_load((REPO / "config" / "soil.yaml").read_text())
    presets = soil["/**"]["ros__parameters"]["presets"]
    presets["dummy_gravel"] = dict(presets["loose_sand"])
    (tmp_path / "soil.yaml").write_text(yaml.safe_dump(soil))
    problems = new_problems(config_problems, "config/soil.yaml", tmp_path / "soil.yaml", doc_text)
    assert len(problems) == len(presets["loose_sand"])
    assert all("presets.dummy_gravel." in p for p in problems)


def test_a_changed_default_and_a_removed_key_fail(tmp_path: Path, doc_text: str) -> None:
    data = yaml.safe_load((REPO / "config" / "ik.yaml").read_text())
    params = data["/**"]["ros__parameters"]
    params["bucket_pitch_rad"] = params["bucket_pitch_rad"] + 0.25
    del params["orientation_tolerance_rad"]
    (tmp_path / "ik.yaml").write_text(yaml.safe_dump(data))
    problems = config_problems(tmp_path / "ik.yaml", doc_text)
    assert any(p.startswith("config/ik.yaml: bucket_pitch_rad documented as") for p in problems)
    assert ("config/ik.yaml: the doc lists orientation_tolerance_rad, which the file no longer has"
            in problems)


def test_an_undocumented_launch_argument_fails(monkeypatch: pytest.MonkeyPatch,
                                               doc_text: str) -> None:
    from excavator_hil import launch_support
    from excavator_hil.launch_support import ARGUMENTS, LaunchArgument

    launch = REPO / "launch" / "sim.launch.py"
    baseline = set(launch_problems(launch, doc_text))
    table = dict(launch_support.LAUNCH_FILES)
    table["sim.launch.py"] = (
        *(ARGUMENTS["soil"].but(default="false") if a == "soil" else a
          for a in table["sim.launch.py"]),
        LaunchArgument("dummy_arg", "not documented", "1"))
    monkeypatch.setattr(launch_support, "LAUNCH_FILES", table)
    assert [p for p in launch_problems(launch, doc_text) if p not in baseline] == [
        "launch/sim.launch.py: argument dummy_arg is not documented",
        "launch/sim.launch.py: soil default documented as '`true`', the file has 'false'"]


def test_the_rviz_doc_names_every_display_topic_and_the_fixed_frame() -> None:
    config = yaml.safe_load((REPO / "rviz" / "excavator.rviz").read_text())
    manager = config["Visualization Manager"]
    topics = [d[key]["Value"] for d in manager["Displays"]
              for key in ("Topic", "Description Topic") if isinstance(d.get(key), Mapping)]
    topics += [t["Topic"]["Value"] for t in manager["Tools"] if isinstance(t.get("Topic"), Mapping)]
    tokens = set(_TICKED.findall((REPO / "docs" / "rviz.md").read_text()))
    assert len(topics) >= 4
    missing = [t for t in [*topics, manager["Global Options"]["Fixed Frame"]] if t not in tokens]
    assert not missing, f"docs/rviz.md does not mention {missing}"


def test_a_node_parameter_outside_the_file_is_found(tmp_path: Path, doc_text: str) -> None:
    module = tmp_path / "dummy_node.py"
    module.write_text('def f(self):\n    declare(self, "dummy_rate", 1.0, "x", unit="Hz")\n'
                      '    self.declare_parameter("dummy_flag", True)\n'
                      '    declare(self, "marker_rate", 20.0, "documented")\n')
    tokens = set(_TICKED.findall(doc_section(doc_text, "config/sim.yaml")))
    assert declared_parameters(module) - tokens == {"dummy_rate", "dummy_flag"}


# --- the parameter specs are the source ------------------------------------------------------
def _spec_files() -> list[tuple[str, Any, Any]]:
    """(config file, node table, template instances) of every node with a parameter spec."""
    from excavator_kinematics.ik_parameters import IK_PARAMETERS
    from excavator_kinematics.teleop.config import TELEOP_PARAMETERS
    from excavator_sim.sim_config import INSTANCES as SIM_INSTANCES
    from excavator_sim.sim_config import SIM_PARAMETERS
    from excavator_sim.soil.config import INSTANCES, SOIL_PARAMETERS
    from plc_bridge.config import BRIDGE
    from plc_bridge.parameters import PLANT_LINK, VIRTUAL_PLC

    return [("ik.yaml", IK_PARAMETERS, None), ("sim.yaml", SIM_PARAMETERS, SIM_INSTANCES),
            ("soil.yaml", SOIL_PARAMETERS, INSTANCES), ("teleop.yaml", TELEOP_PARAMETERS, None),
            ("plc.yaml", BRIDGE, None), ("virtual_plc.yaml", VIRTUAL_PLC, None),
            ("plant_link.yaml", PLANT_LINK, None)]


def test_the_parameter_tables_are_generated_from_the_specs(doc_text: str) -> None:
    from excavator_hil.parameters_doc import BLOCKS, blocks_in, render

    assert sorted(blocks_in(doc_text)) == sorted(BLOCKS)
    if render(doc_text) != doc_text:
        import difflib

        diff = "\n".join(difflib.unified_diff(doc_text.splitlines(), render(doc_text).splitlines(),
                                              "docs/configuration.md", "generated", lineterm="",
                                              n=0))
        pytest.fail("docs/configuration.md's parameter tables differ from the specs: run "
                    f"`excavator-hil params-doc`\n{diff[:3000]}")


@pytest.mark.parametrize(("name", "table", "instances"), _spec_files(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_each_shipped_file_holds_the_specs_defaults(name: str, table: Any,
                                                   instances: Any) -> None:
    """The shipped file passes the node's spec as ROS types it (no unknown key, floats with a
    point) and holds exactly the documented defaults: spec, file and doc cannot drift."""
    from excavator_common.parameters import load_parameters

    from_file = load_parameters(table, REPO / "config" / name, instances=instances)
    defaults = table.validate({}, instances=instances)
    differ = {k: (v, defaults.get(k)) for k, v in from_file.items() if v != defaults.get(k)}
    assert not differ, f"config/{name} differs from the spec's defaults (file, spec): {differ}"
    flat = config_parameters(REPO / "config" / name)
    assert not table.unknown(flat) and not set(flat) & set(table.deprecated)


def test_a_file_with_an_unknown_or_mistyped_key_fails_naming_it(tmp_path: Path) -> None:
    from excavator_common.parameters import load_parameters
    from excavator_sim.errors import SimConfigError
    from excavator_sim.sim_config import SIM_PARAMETERS

    path = tmp_path / "sim.yaml"
    path.write_text("/**:\n  ros__parameters:\n    publish_rate_hz: 50.0\n    tmestep_s: 0.002\n")
    with pytest.raises(SimConfigError, match=r"unknown parameter 'tmestep_s' \(did you mean "
                                             r"'timestep_s'\?\) of sim_node"):
        load_parameters(SIM_PARAMETERS, path)
    path.write_text("/**:\n  ros__parameters:\n    publish_rate_hz: 50\n")
    with pytest.raises(SimConfigError, match=r"publish_rate_hz = 50 is an integer .* write 50\.0"):
        load_parameters(SIM_PARAMETERS, path)
