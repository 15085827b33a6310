"""The simulated machine and the bridge's model chosen together (excavator_hil.machine_match):
the shipped pairs pass, every mismatch is a start-up error naming the preset, the model and
the fix (issue 28: "a mismatch is a clear start-up error, not a silent wrong drive")."""

from __future__ import annotations

import pytest

from excavator_common.paths import config_file
from excavator_hil.errors import HilConfigError
from excavator_hil.machine_match import (
    bridge_overrides_for_machine,
    check_launch_machine,
    check_machine_and_bridge,
)
from excavator_sim.machines import load_machine
from plc_bridge.config import load_config


def bridge_for(machine: str):  # type: ignore[no-untyped-def]
    """config/plc.yaml set up for a wheeled preset: its model and its vehicle parameters."""
    under = load_machine(machine).undercarriage
    assert under is not None
    overrides = {"model": under.vehicle_model}
    overrides.update({f"vehicle.{under.vehicle_model}.{k}": v
                      for k, v in under.model_parameters().items()})
    return load_config(None, overrides)


def test_the_shipped_pairs_pass() -> None:
    tracked = load_config(None, {})
    check_machine_and_bridge("", tracked)
    check_machine_and_bridge("heavy_36t", tracked)
    for machine in ("wheeled_ackermann_11t", "wheeled_4ws_11t"):
        check_machine_and_bridge(machine, bridge_for(machine))


def test_a_mismatch_is_a_start_up_error_naming_the_fix() -> None:
    with pytest.raises(HilConfigError, match=r"the default machine runs on tracks .* but the "
                                             r"bridge's model is 'ackermann': set the bridge's "
                                             r"model: skid_steer, or choose a machine of the "
                                             r"ackermann model \(wheeled_ackermann_11t\)"):
        check_machine_and_bridge("", load_config(None, {"model": "ackermann"}))
    with pytest.raises(HilConfigError, match=r"is a 4wd4ws machine but the bridge's model is "
                                             r"'skid_steer'"):
        check_machine_and_bridge("wheeled_4ws_11t", load_config(None, {}))
    with pytest.raises(HilConfigError, match=r"is a ackermann machine but the bridge's model is "
                                             r"'4wd4ws'"):
        check_machine_and_bridge("wheeled_ackermann_11t", bridge_for("wheeled_4ws_11t"))
    # the right model with config/plc.yaml's shipped (2.0 m) Ackermann geometry
    with pytest.raises(HilConfigError, match=r"wheelbase_m = 2 m, the machine's is 2.6 m"):
        check_machine_and_bridge("wheeled_ackermann_11t",
                                 load_config(None, {"model": "ackermann"}))
    with pytest.raises(HilConfigError, match=r"no file .*wheeled_99t"):
        check_machine_and_bridge("wheeled_99t", load_config(None, {}))


def test_a_launch_takes_the_wheeled_machines_model_and_geometry() -> None:
    """The launch's ``machine`` argument: a wheeled machine brings its model and vehicle
    geometry to the bridge (with ``model`` left at its default), the pair passes the check,
    and only in the closed loop; a tracked machine changes nothing."""
    plc = str(config_file("plc.yaml"))
    assert bridge_overrides_for_machine("", "skid_steer") == {}
    assert check_launch_machine("heavy_36t", plc, "skid_steer") == {}
    for machine, model in (("wheeled_ackermann_11t", "ackermann"),
                           ("wheeled_4ws_11t", "4wd4ws")):
        got = check_launch_machine(machine, plc, "skid_steer")
        assert got["model"] == model
        assert got[f"vehicle.{model}.wheelbase_m"] == 2.6
        assert check_launch_machine(machine, plc, model) == got
    with pytest.raises(HilConfigError, match=r"is a ackermann machine but the launch's model "
                                             r"is '4wd4ws': leave model out"):
        check_launch_machine("wheeled_ackermann_11t", plc, "4wd4ws")
    with pytest.raises(HilConfigError, match=r"runs on tracks .* but the bridge's model is "
                                             r"'ackermann'"):
        check_launch_machine("", plc, "ackermann")
