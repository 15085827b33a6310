"""Tests for excavator_common/parameters.py and parameter_files.read_parameter_file: specs,
tables, validation and the one parameter-file reader, without ROS."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_common.errors import ConfigurationError, ParameterError
from excavator_common.parameter_files import read_parameter_file
from excavator_common.parameters import (
    ParameterSpec,
    ParameterTable,
    ParameterTemplate,
    ParamType,
    load_parameters,
    markdown_table,
)


class DemoConfigError(ConfigurationError):
    pass


def _period_check(v: dict) -> None:
    if v["control_period_s"] < v["timestep_s"]:
        raise DemoConfigError(f"control_period_s = {v['control_period_s']} s must be >= "
                              f"timestep_s = {v['timestep_s']} s")


TABLE = ParameterTable("demo_node", (
    ParameterSpec("timestep_s", 0.001, "physics step", "s", 1e-4, 0.01,
                  deprecated_names=("timestep",)),
    ParameterSpec("control_period_s", 0.01, "outer loop period", "s", 1e-4, 0.1),
    ParameterSpec("publish_rate_hz", 100.0, "joint_states rate", "Hz", 1.0, 1000.0,
                  dynamic=True, deprecated_names=("publish_rate",)),
    ParameterSpec("count", 2, "cylinders in parallel", "count", 1, 4),
    ParameterSpec("contact", True, "bucket collides with the terrain"),
    ParameterSpec("mode", "joystick", "control mode", choices=("joystick", "coordinated")),
    ParameterSpec("invert", [False, False], "invert the axes"),
    ParameterSpec("geometry_file", "", "geometry YAML", "path"),
), error=DemoConfigError, check=_period_check,
    templates=(ParameterTemplate("presets", "preset", (
        ParameterSpec("density_kg_m3", None, "soil density", "kg/m^3", 100.0, 5000.0,
                      type=ParamType.DOUBLE),
        ParameterSpec("friction", None, "soil-steel friction", "-", 0.0, 2.0,
                      type=ParamType.DOUBLE),
    )),))


def test_a_missing_key_takes_the_documented_default() -> None:
    values = TABLE.validate({})
    assert values["timestep_s"] == 0.001 and values["count"] == 2 and values["mode"] == "joystick"
    assert values["invert"] == [False, False]
    assert TABLE.validate({"timestep_s": 0.002})["timestep_s"] == 0.002


def test_an_unknown_key_is_an_error_naming_it_and_the_closest_name() -> None:
    with pytest.raises(DemoConfigError, match=r"unknown parameter 'publish_rat_hz' \(did you "
                       r"mean 'publish_rate_hz'\?\) of demo_node"):
        TABLE.validate({"publish_rat_hz": 5.0})


@pytest.mark.parametrize(("name", "value", "needle"), [
    ("timestep_s", 0.5, "timestep_s = 0.5 s is outside 0.0001 .. 0.01 s"),
    ("timestep_s", math.nan, "must be finite"),
    ("publish_rate_hz", math.inf, "must be finite"),
    ("count", 2.5, "must be an integer"),
    ("count", 9, "outside 1 .. 4"),
    ("contact", 1, "must be true or false"),
    ("mode", "coordinatd", "not one of joystick, coordinated; did you mean 'coordinated'?"),
    ("invert", [True], "has 1 entries: give 2"),
    ("geometry_file", 3, "must be a string"),
    ("timestep_s", "fast", "is not a number"),
])
def test_a_bad_value_names_the_parameter_the_value_and_the_limit(name: str, value: object,
                                                                 needle: str) -> None:
    with pytest.raises(DemoConfigError) as info:
        TABLE.validate({name: value}, "my.yaml")
    assert f"my.yaml: parameter {name} = " in str(info.value)
    assert needle in str(info.value)


def test_huge_numbers_are_formatted_short() -> None:
    with pytest.raises(DemoConfigError) as info:
        TABLE.validate({"timestep_s": 1e300})
    assert "1e+300" in str(info.value) and len(str(info.value)) < 200


def test_exact_typing_refuses_an_integer_for_a_double_with_the_fix() -> None:
    assert TABLE.validate({"publish_rate_hz": 50})["publish_rate_hz"] == 50.0
    with pytest.raises(DemoConfigError, match=r"write 50.0 \(ROS 2 parameters are typed\)"):
        TABLE.validate({"publish_rate_hz": 50}, exact=True)


def test_the_cross_parameter_check_runs_on_the_complete_values() -> None:
    with pytest.raises(DemoConfigError, match=r"control_period_s = 0.0005 s must be >= "
                       r"timestep_s = 0.001 s"):
        TABLE.validate({"control_period_s": 0.0005})


def test_a_deprecated_name_is_used_with_a_warning_naming_the_new_one() -> None:
    warnings: list[str] = []
    values = TABLE.validate({"timestep": 0.002}, warn=warnings.append)
    assert values["timestep_s"] == 0.002 and "timestep" not in values
    assert len(warnings) == 1 and "'timestep' is deprecated" in warnings[0]
    assert "rename it 'timestep_s'" in warnings[0]
    warnings.clear()
    values = TABLE.validate({"timestep": 0.002, "timestep_s": 0.003}, warn=warnings.append)
    assert values["timestep_s"] == 0.003 and "ignored" in warnings[0]


def test_template_instances_are_complete_or_an_error() -> None:
    shipped = {"presets": {"sand": {"density_kg_m3": 1600.0, "friction": 0.4}}}
    values = TABLE.validate({"presets.gravel.density_kg_m3": 2000.0,
                             "presets.gravel.friction": 0.5}, instances=shipped)
    assert values["presets.sand.density_kg_m3"] == 1600.0
    assert values["presets.gravel.friction"] == 0.5
    with pytest.raises(DemoConfigError, match=r"presets.snad.friction is missing.*all 2 keys "
                       r"presets.<preset>.\*; or, if you meant the preset 'sand'"):
        TABLE.validate({"presets.snad.density_kg_m3": 2000.0}, instances=shipped)
    with pytest.raises(DemoConfigError, match=r"outside 0 \.\. 2"):
        TABLE.validate({"presets.sand.friction": 3.0}, instances=shipped)
    assert TABLE.spec("presets.any.friction") is not None
    assert TABLE.spec("presets.any.frction") is None


def test_a_run_time_change_of_a_read_only_parameter_is_refused_with_the_reason() -> None:
    current = TABLE.validate({})
    assert TABLE.validate_change(current, {"publish_rate_hz": 5.0}) == {"publish_rate_hz": 5.0}
    with pytest.raises(DemoConfigError, match=r"timestep_s is read at start-up only: restart "
                       r"demo_node with the new value .changeable at run time: publish_rate_hz"):
        TABLE.validate_change(current, {"timestep_s": 0.002})
    with pytest.raises(DemoConfigError, match="must be finite"):
        TABLE.validate_change(current, {"publish_rate_hz": math.nan})


def test_a_spec_refuses_a_default_outside_its_own_range() -> None:
    with pytest.raises(TypeError, match="outside"):
        ParameterSpec("x_s", 5.0, "x", "s", 0.0, 1.0)
    with pytest.raises(TypeError, match="used twice"):
        ParameterTable("n", (ParameterSpec("a_s", 1.0, "a", "s", deprecated_names=("b",)),
                             ParameterSpec("b", 1.0, "b")))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_double_passes_exactly_when_finite_and_in_range(x: float) -> None:
    spec = TABLE["timestep_s"]
    ok = math.isfinite(x) and 1e-4 <= x <= 0.01
    if ok:
        assert spec.check(x) == x
    else:
        with pytest.raises(ParameterError):
            spec.check(x)


@given(st.integers(min_value=-10**30, max_value=10**30))
def test_an_integer_passes_exactly_in_range_and_never_prints_30_digits(n: int) -> None:
    spec = TABLE["count"]
    if 1 <= n <= 4:
        assert spec.check(n) == n
    else:
        with pytest.raises(ParameterError) as info:
            spec.check(n)
        assert "outside 1 .. 4" in str(info.value)


# --- the one reader --------------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_the_reader_merges_the_sections_that_apply_to_the_node(tmp_path: Path) -> None:
    path = write(tmp_path, """
/**:
  ros__parameters:
    a: 1
    nested: {b: 2.0}
demo_node:
  ros__parameters:
    a: 3
other_node:
  ros__parameters:
    a: 4
exc1:
  demo_node:
    ros__parameters:
      c: true
/exc2/demo_node:
  ros__parameters:
    c: false
""")
    assert read_parameter_file(path, "other_node") == {"a": 4, "nested.b": 2.0}
    assert read_parameter_file(path, "/exc1/demo_node") == {"a": 1, "nested.b": 2.0, "c": True}
    assert read_parameter_file(path, "/exc2/demo_node")["c"] is False
    assert read_parameter_file(path, None) == {"a": 1, "nested.b": 2.0}


def test_the_reader_wildcards_and_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "/*/demo_node:\n  ros__parameters: {a: 1}\n")
    assert read_parameter_file(path, "/exc1/demo_node") == {"a": 1}
    assert read_parameter_file(path, "/a/b/demo_node") == {}
    path = write(tmp_path, "a: 1\n")
    with pytest.raises(DemoConfigError, match="'a' is not a node section"):
        read_parameter_file(path, "demo_node", error=DemoConfigError)
    with pytest.raises(ParameterError, match="cannot read parameter file"):
        read_parameter_file(tmp_path / "missing.yaml")
    path = write(tmp_path, "n1:\n  ros__parameters: {a: 1}\nn2:\n  ros__parameters: {a: 2}\n")
    with pytest.raises(ParameterError, match="name the node"):
        read_parameter_file(path)


def test_load_parameters_types_the_file_as_ros_does(tmp_path: Path) -> None:
    path = write(tmp_path, "/**:\n  ros__parameters:\n    publish_rate: 50\n")
    with pytest.raises(DemoConfigError, match=r"write 50\.0"):
        load_parameters(TABLE, path)
    path = write(tmp_path, "/**:\n  ros__parameters:\n    publish_rate: 50.0\n"
                           "    tmestep_s: 1.0\n")
    with pytest.raises(DemoConfigError, match="did you mean 'timestep_s'"):
        load_parameters(TABLE, path)
    path = write(tmp_path, "/**:\n  ros__parameters:\n    publish_rate: 50.0\n")
    warnings: list[str] = []
    values = load_parameters(TABLE, path, {"count": 3}, warn=warnings.append)
    assert values["publish_rate_hz"] == 50.0 and values["count"] == 3 and warnings


def test_markdown_table_lists_every_parameter() -> None:
    text = markdown_table(TABLE.parameters)
    assert "| `timestep_s` | s | `0.001` | 0.0001 .. 0.01 | no | physics step (formerly " \
        "`timestep`, deprecated) |" in text
    assert "| `geometry_file` | path | `\"\"` |" in text
    assert "| `mode` | - | `joystick` | joystick, coordinated | no |" in text
