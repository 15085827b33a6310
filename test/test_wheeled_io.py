"""A wheeled machine's side of the plant topics (excavator_sim.drivetrain.wheeled_io), against
the plant link's own arrays (plc_bridge.plant_link.core): the two halves of issue 28's loop
agree on the names and fields before sim_node's wheeled branch joins them; bad actuation is a
drive fault naming the value, the limit and the fix."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_sim.drivetrain.actuation import ActuationError
from excavator_sim.drivetrain.wheeled import SAFE_WHEELED_COMMAND, WheeledCommand, WheeledVehicle
from excavator_sim.drivetrain.wheeled_io import (
    WheeledPlantActuation,
    parse_wheeled_actuation,
    wheeled_sensor_arrays,
)
from excavator_sim.machines import load_machine
from plc_bridge.config import load_config
from plc_bridge.plant_link.core import Actuation, actuation_arrays, sensors_from_joints

MACHINES = {"ackermann": "wheeled_ackermann_11t", "4wd4ws": "wheeled_4ws_11t"}


def params(model: str):  # type: ignore[no-untyped-def]
    under = load_machine(MACHINES[model]).undercarriage
    assert under is not None
    return under.params


@given(model=st.sampled_from(sorted(MACHINES)), data=st.data(),
       enable=st.booleans(), brake=st.booleans())
def test_the_plant_links_actuation_parses_into_the_machines_command(model: str,
                                                                     data: st.DataObject,
                                                                     enable: bool,
                                                                     brake: bool) -> None:
    p = params(model)
    cfg = load_config(None, {"model": model})
    limit = p.drive.torque_limit_nm
    torques = tuple(data.draw(st.lists(st.floats(-limit, limit), min_size=len(cfg.wheels),
                                       max_size=len(cfg.wheels))))
    rate = p.steering.max_rate_rad_s
    rates = tuple(data.draw(st.lists(st.floats(-rate, rate), min_size=len(cfg.steering),
                                     max_size=len(cfg.steering))))
    arrays = actuation_arrays(cfg, Actuation(7, torques, rates, enable, brake))
    assert parse_wheeled_actuation(*arrays, p) == WheeledCommand(torques, rates, enable, brake)


def test_the_machines_sensors_are_what_the_plant_link_reads() -> None:
    for model in MACHINES:
        p = params(model)
        v = WheeledVehicle(p, 11124.0, 2.2e4)
        for _ in range(100):
            v.step(0.01, WheeledCommand((2000.0,) * len(p.driven), (0.2,) * len(p.steered),
                                        True, False))
        cfg = load_config(None, {"model": model})
        s = sensors_from_joints(cfg, 5, *wheeled_sensor_arrays(v, drive_fault=False))
        assert s.speeds == tuple(v.wheel_speeds(cfg.wheels)) and min(s.speeds) > 0.1
        assert s.angles == tuple(v.steer_angles(cfg.steering)) and min(s.angles) > 0.1
        assert s.torques == tuple(v.wheels[w].torque_nm for w in cfg.wheels)
        assert s.ground_speed == v.ground_speed_m_s
        assert (s.drive_ready, s.drive_fault, s.brake) == (True, False, False)
        v.step(0.01, WheeledCommand())      # the safe command: brakes on
        s = sensors_from_joints(cfg, 6, *wheeled_sensor_arrays(v, drive_fault=True))
        assert (s.drive_ready, s.drive_fault, s.brake) == (False, True, True)


def arrays_with(model: str, **change: float):  # type: ignore[no-untyped-def]
    cfg = load_config(None, {"model": model})
    names, position, velocity, effort = actuation_arrays(
        cfg, Actuation(1, (0.0,) * len(cfg.wheels), (0.0,) * len(cfg.steering), True, False))
    for name, value in change.items():
        i = names.index(name)
        if name.startswith("wheel_"):
            effort[i] = value
        elif name.startswith("steer_"):
            velocity[i] = value
        else:
            position[i] = value
    return names, position, velocity, effort


@pytest.mark.parametrize(("model", "change", "match"), [
    ("ackermann", {"wheel_rl": math.nan}, r"wheel_rl effort \(torque set-point\) is nan: send "
                                          r"a finite value \[N m at the wheel\]"),
    ("ackermann", {"wheel_rr": 2.0e4}, r"wheel_rr effort \(torque set-point\) 20000 is beyond "
                                       r"15597.2 N m at the wheel \(2 x the drive's torque limit"),
    ("4wd4ws", {"steer_rl": 20.0}, r"steer_rl velocity \(steering rate\) 20 is beyond 0.7 rad/s "
                                   r"\(2 x the steering's rate 0.35 rad/s\): check the PLC's "
                                   r"scaling"),
    ("4wd4ws", {"steer_fl": math.inf}, r"steer_fl velocity \(steering rate\) is inf"),
    ("4wd4ws", {"brake": 0.5}, r"brake position is 0.5: send 1.0 \(on\) or 0.0 \(off\)"),
])
def test_bad_actuation_is_a_drive_fault_naming_value_limit_and_fix(
        model: str, change: dict[str, float], match: str) -> None:
    with pytest.raises(ActuationError, match=match):
        parse_wheeled_actuation(*arrays_with(model, **change), params(model))


def test_an_actuation_for_another_machine_is_refused() -> None:
    """The PLC configured for the tracked machine (or the other wheeled one) drives nothing."""
    tracked = (["track_left", "track_right", "drive_enable", "brake"], [math.nan] * 2 + [1.0, 0.0],
               [math.nan] * 4, [0.0, 0.0, math.nan, math.nan])
    with pytest.raises(ActuationError, match=r"names \['track_left', 'track_right'\] this "
                                             r"machine does not have.*another vehicle model"):
        parse_wheeled_actuation(*tracked, params("ackermann"))
    with pytest.raises(ActuationError, match=r"names \['steer_rl', 'steer_rr', 'wheel_fl', "
                                             r"'wheel_fr'\] this machine does not have"):
        parse_wheeled_actuation(*arrays_with("4wd4ws"), params("ackermann"))
    with pytest.raises(ActuationError,
                       match=r"missing \['wheel_fl', 'wheel_fr', 'steer_rl', 'steer_rr'\]"):
        parse_wheeled_actuation(*arrays_with("ackermann"), params("4wd4ws"))
    names, position, velocity, effort = arrays_with("ackermann")
    with pytest.raises(ActuationError, match=r"7 names but 6 effort values"):
        parse_wheeled_actuation(names, position, velocity, effort[:6], params("ackermann"))


def test_a_wheeled_actuation_times_out_and_a_fault_drops_it_as_the_tracks_do() -> None:
    """The freshness rules of the tracked machine (test_sim_plant) on a WheeledCommand: the
    safe command is the wheeled one (torque 0, valves closed, brakes on), never a stale or
    faulted command."""
    plant = WheeledPlantActuation(timeout_s=0.2)
    assert plant.command() == SAFE_WHEELED_COMMAND
    go = WheeledCommand((100.0, 100.0), (0.1, -0.1), enable=True, brake=False)
    plant.accept(go, 1.0)
    assert not plant.check(1.2) and plant.command() == go
    assert plant.check(1.2001) and plant.command() == SAFE_WHEELED_COMMAND
    plant.accept(go, 2.0)
    plant.reject("nan")
    assert plant.fault == "nan" and plant.command() == SAFE_WHEELED_COMMAND
    assert not plant.check(100.0) and plant.command() == SAFE_WHEELED_COMMAND
