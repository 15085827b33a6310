"""The wheeled machine presets (config/machines/wheeled_*.yaml, excavator_sim.undercarriage):
files, not edits; their figures; their undercarriage checked at load with errors that name the
key, the value, the range and the fix; the bridge's model and the preset chosen together (a
mismatch is a clear error, never a silently wrong drive); sim_node refuses a wheeled preset
until its wheeled branch lands."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from excavator_common.paths import config_file
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.vehicle import AckermannModel, FourWheelSteerModel
from excavator_sim.errors import SimConfigError
from excavator_sim.machines import available_machines, load_machine
from excavator_sim.sim_config import load_sim_config, load_sim_machine

ACK = "wheeled_ackermann_11t"
WS4 = "wheeled_4ws_11t"


def plc_yaml() -> dict[str, Any]:
    data = yaml.safe_load(config_file("plc.yaml").read_text())
    params: dict[str, Any] = data["/**"]["ros__parameters"]
    return params


def test_both_wheeled_presets_are_shipped_files_of_the_11_t_class() -> None:
    assert {ACK, WS4} <= set(available_machines())
    for name, model, driven, steered in ((ACK, "ackermann", ("rl", "rr"), ("fl", "fr")),
                                         (WS4, "4wd4ws", ("fl", "fr", "rl", "rr"),
                                          ("fl", "fr", "rl", "rr"))):
        preset = load_machine(name)
        under = preset.undercarriage
        assert under is not None and under.vehicle_model == model
        p = under.params
        assert (p.driven, p.steered) == (driven, steered)
        # the class: DX100W-7 11.10 t, Hydradig 110W 11.2 t; Hydradig wheelbase 2.6 m
        assert sum(preset.geometry().masses_kg.values()) == pytest.approx(11.1e3, rel=0.02)
        assert p.geometry.wheelbase_m == 2.6
        # the upper carriage and the linkage are the default machine's
        base = default_geometry()
        geo = preset.geometry()
        assert geo.H == base.H
        assert {k: v for k, v in geo.masses_kg.items() if k != "caterpillar"} == \
            {k: v for k, v in base.masses_kg.items() if k != "caterpillar"}
        # the drives: 7.8 kN m a wheel, 0.6 W over four wheels at 0.48 m
        assert p.drive.torque_limit_nm == pytest.approx(7.8e3, rel=0.01)
        # the preset's own model (what the bridge must run) matches its wheels
        km = under.kinematic_model()
        assert tuple(km.wheel_names) == driven and tuple(km.steer_names) == steered
    ack = load_machine(ACK).undercarriage
    assert ack is not None
    assert ack.params.steering.max_angle_rad == pytest.approx(math.radians(36.0), abs=0.01)
    assert isinstance(ack.kinematic_model(), AckermannModel)
    assert ack.reference_point() == (-1.3, 0.0)
    ws4 = load_machine(WS4).undercarriage
    assert ws4 is not None and isinstance(ws4.kinematic_model(), FourWheelSteerModel)
    # pure crab and spin in place within its steering limit
    assert ws4.kinematic_model().inverse_many([0.0, 0.0], [0.5, 0.0], [0.0, 0.4]).feasible.all()
    assert load_machine("heavy_36t").undercarriage is None   # tracked


def test_the_bridge_model_and_the_preset_are_chosen_together() -> None:
    """The preset's own model parameters pass; config/plc.yaml's current Ackermann geometry
    (2.0 m) and the wrong model are refused, naming each mismatch and the values to set."""
    ack = load_machine(ACK).undercarriage
    ws4 = load_machine(WS4).undercarriage
    assert ack is not None and ws4 is not None
    ack.check_bridge_model("ackermann", ack.model_parameters())
    ws4.check_bridge_model("4wd4ws", ws4.model_parameters())
    with pytest.raises(SimConfigError, match=r"is a ackermann machine but the bridge's model is "
                                             r"'skid_steer'; set the bridge's model: ackermann"):
        ack.check_bridge_model("skid_steer", {})
    shipped = plc_yaml()["vehicle"]["ackermann"]
    with pytest.raises(SimConfigError) as err:
        ack.check_bridge_model("ackermann", shipped)
    text = str(err.value)
    assert "wheelbase_m = 2 m, the machine's is 2.6 m" in text
    assert "max_steer_angle_rad = 0.7 rad is past the machine's end stop 0.63 rad" in text
    assert "set vehicle.ackermann to {wheelbase_m: 2.6" in text
    too_fast = {**ws4.model_parameters(), "max_wheel_speed_m_s": 5.0}
    with pytest.raises(SimConfigError, match=r"max_wheel_speed_m_s = 5 m/s is more than the "
                                             r"machine's drives give"):
        ws4.check_bridge_model("4wd4ws", too_fast)
    with pytest.raises(SimConfigError, match=r"the bridge's vehicle.4wd4ws parameters: .*"
                                             r"wheelbase_m = -1"):
        ws4.check_bridge_model("4wd4ws", {"wheelbase_m": -1.0})


def test_a_wheeled_preset_carries_its_undercarriage_in_either_drive_mode() -> None:
    """Plant mode: the drive train under the PLC's actuation; kinematic mode (issue 28 item 3):
    the wheels follow wheel_command. Either way the config carries the undercarriage."""
    for name in (ACK, WS4):
        assert load_sim_machine(name).undercarriage is not None
        for mode in ("plant", "kinematic"):
            config = load_sim_config(machine=name, overrides={"drive_mode": mode})
            assert config.undercarriage is not None
            assert config.undercarriage.vehicle_model == ("ackermann" if name == ACK
                                                          else "4wd4ws")
    assert load_sim_machine("heavy_36t").undercarriage is None
    assert load_sim_config(machine="heavy_36t").undercarriage is None


def write_preset(tmp_path: Path, edit: dict[str, Any]) -> Path:
    data = yaml.safe_load((config_file("machines") / f"{ACK}.yaml").read_text())
    under = data["undercarriage"]
    for dotted, value in edit.items():
        *parents, leaf = dotted.split(".")
        node = under
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


DELETE = object()


@pytest.mark.parametrize(("edit", "match"), [
    ({"wheelbase_m": 2600.0}, r"undercarriage.wheelbase_m = 2600.0 m is outside \[0.5, 10\] m "
                              r"\(axle to axle\); set it in that range"),
    ({"steering.max_angle_rad": 36.0}, r"steering.max_angle_rad = 36.0 rad is outside "
                                       r"\[0.05, 3.14159\] rad"),
    ({"steering.max_angle_rad": 1.55}, r"an Ackermann wheel at or past 1.5 rad cannot roll"),
    ({"drive.relief_pressure_pa": 350.0}, r"drive.relief_pressure_pa = 350.0 Pa is outside"),
    ({"tyre.friction": "high"}, r"tyre.friction = 'high' is not a number"),
    ({"tyre.rolling_resistance": DELETE}, r"tyre.rolling_resistance is missing .*every key of "
                                          r"the undercarriage is required"),
    ({"tyre.grip": 1.0}, r"undercarriage.tyre: unknown key\(s\) \['grip'\]"),
    ({"wheel_base": 2.6}, r"undercarriage: unknown key\(s\) \['wheel_base'\]"),
    ({"type": "tracked"}, r"undercarriage.type = 'tracked': only 'wheeled'"),
    ({"vehicle_model": "skid_steer"}, r"vehicle_model = 'skid_steer' is not a wheeled model"),
    ({"driven": ["fl", "fr", "rl", "rr"]}, r"driven = \['fl', 'fr', 'rl', 'rr'\] does not match "
                                           r"the ackermann model, which drives \['rl', 'rr'\] "
                                           r".*set driven: \['rl', 'rr'\]"),
    ({"steered": "fl"}, r"steered = 'fl' must be a list of wheel names"),
    ({"front_load_share": math.nan}, r"front_load_share = nan - is outside"),
])
def test_a_bad_undercarriage_is_refused_at_load_naming_key_value_and_fix(
        tmp_path: Path, edit: dict[str, Any], match: str) -> None:
    path = write_preset(tmp_path, edit)
    with pytest.raises(SimConfigError, match=match) as err:
        load_machine(path)
    assert str(err.value).startswith(f"machine preset {path}: undercarriage")
