"""Tests for plc_bridge/parameters.py: the bridge's and the virtual PLC's one parameter spec, the
files and the doc generated from it, the core applying run-time changes (no ROS here; the node
over DDS is in test_bridge_node.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from excavator_common.parameter_files import read_parameter_file
from plc_bridge.bridge.core import DYNAMIC, BridgeCore
from plc_bridge.config import BRIDGE, build_config, default_config_path, load_config
from plc_bridge.errors import BridgeConfigError
from plc_bridge.parameters import (
    PLANT_LINK,
    SECTIONS,
    VIRTUAL_PLC,
    markdown,
    markdown_virtual_plc,
)

REPO = Path(__file__).resolve().parents[1]
# identifiers, counts, flags, ratios, names and paths: no unit to carry
UNITLESS = {"redis_url", "plc_host", "plc_port", "rack", "slot", "reconnect_jitter", "model",
            "rt_priority", "lateral_positive", "wake_on_change", "configure_keyspace_events",
            "notify_channel", "control_db", "monitor_db", "plant_in_db", "plant_out_db",
            "write_allow_list", "config_file",
            "autostart", "cmd_vel_to_redis", "slip_factor", "steer_feedback", "frame_prefix",
            "plant_mode", "speed_sp_weight", "plc_config_file",
            "plc_transport", "opcua_port", "opcua_addressing", "opcua_namespace_uri",
            "opcua_node_ids", "opcua_security_policy", "opcua_security_mode",
            "opcua_allow_insecure", "opcua_user", "opcua_password_file", "opcua_pki_dir",
            "opcua_user_certificate", "opcua_user_key"}
_SUFFIX = re.compile(r"_(s|hz|m|m_s|rad|rad_s|bytes|nm|nm_s_per_m|nm_per_m|1_s)$")


def test_the_doc_tables_cover_every_parameter_once() -> None:
    """docs/configuration.md's plc_bridge tables (generated: test_docs_config checks them) list
    every parameter of the spec, each in one table."""
    listed = [n for names in SECTIONS.values() for n in names]
    assert sorted(listed) == sorted(BRIDGE.names)
    doc = (REPO / "docs" / "configuration.md").read_text()
    for section in SECTIONS:
        assert markdown(section) in doc, section
    assert markdown_virtual_plc() in doc


@pytest.mark.parametrize("table", [BRIDGE, VIRTUAL_PLC, PLANT_LINK], ids=lambda t: t.node)
def test_every_name_carries_its_unit_and_every_description_is_real(table) -> None:
    for spec in table.parameters:
        leaf = spec.name.rsplit(".", 1)[-1]
        if spec.name.startswith(("layout.", "actuators.")) or leaf in UNITLESS:
            assert spec.unit in ("", "-", "path", "B"), spec.name
        else:
            assert _SUFFIX.search(leaf), f"{spec.name} has no unit suffix"
        assert len(spec.description) >= 15 and "see config" not in spec.description, spec.name
        if spec.ros_type.is_number and not spec.ros_type.is_array:
            assert spec.low is not None and spec.high is not None, spec.name
    for old, new in table.deprecated.items():
        assert new.startswith(old), (old, new)   # the old name plus its unit


def test_the_shipped_files_hold_exactly_the_spec_defaults() -> None:
    """The spec is the source; config/plc.yaml and virtual_plc.yaml show the same values."""
    plc = read_parameter_file(default_config_path(), "plc_bridge")
    assert set(plc) == set(BRIDGE.names) - {"config_file", "autostart", "publish_rate_hz",
                                            "cmd_vel_to_redis", "cmd_vel_timeout_s",
                                            "frame_prefix"}
    assert {k: v for k, v in BRIDGE.defaults().items() if k in plc} == plc
    vp = read_parameter_file(REPO / "config" / "virtual_plc.yaml", "virtual_plc")
    assert vp == VIRTUAL_PLC.defaults()
    # no range comments left to drift from the spec
    text = default_config_path().read_text()
    assert not re.search(r"#.*\d\.\.\d", text) and "[s]" not in text


def test_the_dynamic_parameters_are_the_ones_the_loop_reads_every_cycle() -> None:
    assert {"heartbeat_timeout_s", "plc_alive_timeout_s", "max_longitudinal_m_s",
            "max_lateral_m_s", "max_angular_rad_s", "monitor_ttl_s"} == DYNAMIC
    read_only = {s.name for s in BRIDGE.parameters if not s.dynamic}
    assert {"redis_url", "plc_host", "plc_port", "cycle_hz", "model", "lateral_positive",
            "plc_timeout_s", "redis_timeout_s", "control_db"} <= read_only


def test_the_core_validates_and_applies_changes_between_cycles() -> None:
    """Without ROS: the same checks as the node's on-set callback, applied by the loop."""
    core = BridgeCore(load_config(None, {"cycle_hz": 10.0, "monitor_ttl_s": 0.4}))
    core.update_parameters({"heartbeat_timeout_s": 2.0, "max_longitudinal_m_s": 0.4})
    assert core.gate.heartbeat_timeout_s == 2.0
    assert core.envelope.max_longitudinal_m_s == 0.4
    assert core.config.parameters["max_longitudinal_m_s"] == 0.4
    with pytest.raises(BridgeConfigError, match="cycle_hz is read at start-up only"):
        core.update_parameters({"cycle_hz": 10.0})
    with pytest.raises(BridgeConfigError, match=r"max_angular_rad_s = 500 rad/s is outside"):
        core.update_parameters({"max_angular_rad_s": 500.0})
    with pytest.raises(BridgeConfigError, match=r"'monitor_ttl_s' = 0.1 s is shorter than two "
                                                r"cycles at cycle_hz = 10 Hz"):
        core.update_parameters({"monitor_ttl_s": 0.1})   # in range, but the rule between them
    assert core.config.monitor_ttl_s == 0.4 and core.envelope.max_angular_rad_s == 1.5


def test_build_config_from_the_defaults_alone() -> None:
    cfg = build_config(BRIDGE.validate({}))
    assert cfg.cycle_hz == 100.0 and cfg.heartbeat_timeout_s == 0.75
    assert cfg.parameters == load_config().parameters
