"""The plant link's rules without ROS (plc_bridge/plant_link/core.py, config.py):
what goes into plant_in, what of plant_out is forwarded and when, the IMU's attitude, the
actuation message's arrays, the configuration's rules; and the exchange thread's pacing
(link.py) against a closed port."""

from __future__ import annotations

import math
import struct

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from plc_bridge.command_crc import seal
from plc_bridge.config import load_config
from plc_bridge.errors import BridgeConfigError
from plc_bridge.plant_link.config import load_plant_link_config
from plc_bridge.plant_link.core import (
    Actuation,
    ImuReading,
    PlantLinkCore,
    SensorError,
    Sensors,
    actuation_arrays,
    roll_pitch,
    sensors_from_joints,
)
from plc_bridge.virtual_plc.hil_program import dint

CFG = load_config(None, {"model": "skid_steer"})


def _sensors(stamp_ms: int, left: float = 0.5, right: float = 0.6) -> Sensors:
    return Sensors(stamp_ms * 1_000_000, (left, right), (100.0, -200.0), (), 0.55,
                   drive_ready=True, drive_fault=False, brake=False)


def _plant_out(seq: int, left: float = 10.0, right: float = -20.0, enable: bool = True,
               brake: bool = False, cfg=CFG) -> bytes:
    values = {**cfg.plant_out.zero_values(), "seq": dint(seq), "enable": enable,
              "brake": brake, "alive": 1}
    values.update(zip(cfg.torque_sp_fields(), (left, right), strict=False))
    return seal(cfg.plant_out, cfg.plant_out.encode(values))   # as the PLC program writes it


def test_plant_in_carries_the_sensors_and_counts_only_a_newer_simulated_time():
    core = PlantLinkCore(CFG)
    imu = ImuReading(yaw_rate=0.1, pitch=-0.05, roll=0.02)
    first = CFG.plant_in.decode(core.plant_in(_sensors(1000), imu))
    assert first["alive"] == 1 and first["sim_time"] == 1000
    assert first["speed_left"] == pytest.approx(0.5) and first["speed_right"] == pytest.approx(0.6)
    assert first["torque_left"] == 100.0 and first["torque_right"] == -200.0
    assert first["yaw_rate"] == pytest.approx(0.1) and first["pitch"] == pytest.approx(-0.05)
    assert first["roll"] == pytest.approx(0.02) and first["ground_speed"] == pytest.approx(0.55)
    assert first["drive_ready"] and not first["drive_fault"] and not first["brake"]
    # the same simulated time again (a frozen simulation, the plant link still writing): the
    # counter does not move, so the PLC's plant watchdog trips
    again = CFG.plant_in.decode(core.plant_in(_sensors(1000, 0.7), imu))
    assert again["alive"] == 1 and again["speed_left"] == pytest.approx(0.7)
    assert core.counters["sim_time_repeated"] == 1
    assert CFG.plant_in.decode(core.plant_in(_sensors(1010), None))["alive"] == 2
    # an older stamp (a message out of order) does not count either
    assert CFG.plant_in.decode(core.plant_in(_sensors(1005), None))["alive"] == 2
    # a stamp far behind (> 1 s): the simulation restarted, its time from 0 again: followed
    assert CFG.plant_in.decode(core.plant_in(_sensors(3), None))["alive"] == 3
    assert core.counters["sim_restarts"] == 1
    assert CFG.plant_in.decode(core.plant_in(_sensors(13), None))["alive"] == 4
    assert CFG.plant_in.decode(core.plant_in(_sensors(1010), None))["alive"] == 5
    # the counter wraps like the PLC's
    core._values["alive"] = 65535
    assert CFG.plant_in.decode(core.plant_in(_sensors(2000), None))["alive"] == 0
    # simulated time beyond 2^31 ms: the DINT wraps
    big = CFG.plant_in.decode(core.plant_in(_sensors(2**31 + 5), None))
    assert big["sim_time"] == 2**31 + 5 - 2**32


def test_a_non_finite_measurement_reaches_the_plc_as_nan():
    core = PlantLinkCore(CFG)
    raw = core.plant_in(_sensors(1, left=math.nan, right=math.inf), None)
    at = CFG.plant_in.field("speed_left").byte_offset
    assert math.isnan(struct.unpack(">f", raw[at:at + 4])[0])
    assert CFG.plant_in.decode(raw)["speed_right"] == math.inf


def test_plant_out_forwarding_rules():
    """The first read is a baseline; then only a newer seq is forwarded, once; the last
    forwarded seq goes back in plant_in.actuation_seq."""
    core = PlantLinkCore(CFG)
    assert core.plant_out(_plant_out(100)) is None             # baseline
    act = core.plant_out(_plant_out(101, 10.0, -20.0))
    assert act == Actuation(101, (10.0, -20.0), (), True, False)
    assert core.plant_out(_plant_out(101)) is None             # the same scan read again
    assert core.plant_out(_plant_out(99)) is None              # older
    assert core.counters["not_fresh"] == 2
    assert CFG.plant_in.decode(core.plant_in(_sensors(1), None))["actuation_seq"] == 101
    # RFC 1982 across the 32-bit wrap
    assert core.plant_out(_plant_out(2**31)).seq == 2**31      # type: ignore[union-attr]
    assert core.plant_out(_plant_out(2**32 - 1)).seq == 2**32 - 1  # type: ignore[union-attr]
    assert core.plant_out(_plant_out(2**32 + 3)).seq == 3      # type: ignore[union-attr]
    assert core.plant_out(_plant_out(2**32 - 2)) is None       # before the wrap: older


def test_after_a_link_fault_nothing_read_before_it_is_forwarded():
    """The PLC paused with seq 500 in its memory: after the fault the first read (500, or
    anything the PLC holds) is a baseline, and only what the PLC writes after it goes on; a PLC
    restarted with a low seq is followed again."""
    core = PlantLinkCore(CFG)
    core.plant_out(_plant_out(400))
    assert core.plant_out(_plant_out(500)) is not None
    core.link_fault()
    assert core.plant_out(_plant_out(500)) is None             # the old memory: not forwarded
    assert core.plant_out(_plant_out(501)).seq == 501          # type: ignore[union-attr]
    core.link_fault()
    assert core.plant_out(_plant_out(7)) is None               # restarted PLC: baseline
    assert core.plant_out(_plant_out(8)).seq == 8              # type: ignore[union-attr]
    assert core.counters["baselines"] == 3


def test_a_read_that_caught_the_plc_writing_is_not_forwarded_nor_a_baseline():
    """A read over OPC UA that spans two scans: one scan's seq and crc over set-points of the
    next. Its crc does not match: nothing forwarded, counted as torn, not taken as the baseline
    (the next whole read is) nor as a drive fault; the next whole block goes on."""
    core = PlantLinkCore(CFG)
    scan_1, scan_2 = _plant_out(41, 10.0, -20.0), _plant_out(42, 55.0, -66.0)
    at = CFG.plant_out.field("torque_sp_left").byte_offset
    torn = scan_1[:at] + scan_2[at:]           # header of scan 41, set-points of scan 42
    assert core.plant_out(torn) is None and core.counters["baselines"] == 0
    assert core.plant_out(scan_1) is None and core.counters["baselines"] == 1
    assert core.plant_out(scan_1[:at] + scan_2[at:]) is None
    assert core.counters["torn"] == 2 and core.torn_run == 1
    assert core.counters["not_fresh"] == 0 and core.counters["refused"] == 0
    assert not core.drive_fault
    act = core.plant_out(scan_2)
    assert act == Actuation(42, (55.0, -66.0), (), True, False) and core.torn_run == 0
    for k in range(12):   # a PLC program that never seals: every read is torn
        unsealed = bytearray(_plant_out(43 + k))
        unsealed[CFG.plant_out.field("crc").byte_offset + 3] ^= 0x01
        assert core.plant_out(bytes(unsealed)) is None
    assert core.torn_run == 12 and core.last_forwarded == 42


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_set_point_becomes_a_brake_and_is_counted(bad):
    core = PlantLinkCore(CFG)
    core.plant_out(_plant_out(1))
    raw = bytearray(_plant_out(2, 10.0, 20.0))
    at = CFG.plant_out.field("torque_sp_right").byte_offset
    raw[at:at + 4] = struct.pack(">f", bad)
    act = core.plant_out(seal(CFG.plant_out, raw))   # whole, as the buggy program wrote it
    assert act is not None and not act.enable and act.brake
    assert act.torques == (0.0, 0.0) and "torque_sp_right" in act.reason
    assert core.counters["refused"] == 1 and core.counters["forwarded"] == 0
    names, position, _velocity, effort = actuation_arrays(CFG, act)
    assert all(math.isfinite(e) for e in effort[:2])           # never forwarded as a number
    assert position[names.index("brake")] == 1.0 and position[names.index("drive_enable")] == 0
    # the link's own brake, not the PLC's block: the simulation keeps its own fault latched
    assert math.isnan(position[names.index("plant_out_seq")])
    # a drive fault the PLC sees in plant_in until a valid block is forwarded
    assert CFG.plant_in.decode(core.plant_in(_sensors(1), None))["drive_fault"]
    assert "torque_sp_right" in core.drive_fault
    assert core.plant_out(_plant_out(3, 10.0, 20.0)) is not None
    assert not core.drive_fault
    assert not CFG.plant_in.decode(core.plant_in(_sensors(2), None))["drive_fault"]


def test_actuation_arrays_follow_the_contract():
    cfg = load_config(None, {"model": "ackermann"})
    act = Actuation(5, (1.0, 2.0), (0.1, -0.1), True, False)
    names, position, velocity, effort = actuation_arrays(cfg, act)
    assert names == ["wheel_rl", "wheel_rr", "steer_fl", "steer_fr", "drive_enable", "brake",
                     "plant_out_seq"]
    assert len(position) == len(velocity) == len(effort) == len(names)
    assert effort[:2] == [1.0, 2.0] and velocity[2:4] == [0.1, -0.1]
    assert position[4:] == [1.0, 0.0, 5.0]
    assert all(math.isnan(v) for v in [*position[:4], *velocity[:2], *velocity[4:],
                                       *effort[2:]])
    # the seq as the PLC's DINT; a brake of the link's own (the link lost) carries NaN
    _, position, _, _ = actuation_arrays(cfg, Actuation(2**32 - 3, (0.0,) * 2, (0.0,) * 2,
                                                        True, False))
    assert position[-1] == -3.0
    _, position, _, _ = actuation_arrays(cfg, Actuation.braking(2, 2, "the link lost"))
    assert math.isnan(position[-1]) and position[-3:-1] == [0.0, 1.0]


def test_sensors_from_the_joint_state_arrays():
    names = ["track_left", "track_right", "ground_speed", "drive_ready", "drive_fault", "brake"]
    nan = math.nan
    s = sensors_from_joints(CFG, 5, names, [1.0, 2.0, nan, 1.0, 0.0, 1.0],
                            [0.3, 0.4, 0.35, nan, nan, nan], [10.0, 20.0, nan, nan, nan, nan])
    assert s == Sensors(5, (0.3, 0.4), (10.0, 20.0), (), 0.35, True, False, True)
    with pytest.raises(SensorError, match="lacks joint 'track_right'"):
        sensors_from_joints(CFG, 5, ["track_left"], [0.0], [0.0], [0.0])
    with pytest.raises(SensorError, match="no effort for joint 'track_right'"):
        sensors_from_joints(CFG, 5, names[:2], [0.0, 0.0], [0.0, 0.0], [0.0])
    cfg = load_config(None, {"model": "ackermann"})
    s = sensors_from_joints(cfg, 5, ["wheel_rl", "wheel_rr", "steer_fl", "steer_fr"],
                            [0.0, 0.0, 0.2, 0.25], [1.0, 1.1, 0.0, 0.0], [5.0, 6.0, 0.0, 0.0])
    assert s.angles == (0.2, 0.25) and s.speeds == (1.0, 1.1) and math.isnan(s.ground_speed)


angle = st.floats(-1.5, 1.5)


@given(roll=angle, pitch=angle, yaw=st.floats(-math.pi, math.pi))
def test_roll_and_pitch_from_the_imu_quaternion(roll, pitch, yaw):
    """Round trip: REP-103 roll, pitch, yaw (fixed x-y-z) -> quaternion -> roll, pitch."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    w = cr * cp * cy + sr * sp * sy
    x = sr * cp * cy - cr * sp * sy
    y = cr * sp * cy + sr * cp * sy
    z = cr * cp * sy - sr * sp * cy
    r, p = roll_pitch(x, y, z, w)
    assert r == pytest.approx(roll, abs=1e-6) and p == pytest.approx(pitch, abs=1e-6)


def test_roll_pitch_signs_and_a_degenerate_quaternion():
    s = math.sin(0.1 / 2)
    c = math.cos(0.1 / 2)
    assert roll_pitch(0.0, s, 0.0, c)[1] == pytest.approx(0.1)     # + about y: nose down
    assert roll_pitch(s, 0.0, 0.0, c)[0] == pytest.approx(0.1)     # + about x: right side down
    assert all(math.isnan(v) for v in roll_pitch(0.0, 0.0, 0.0, 0.0))


def _plant_link_file(tmp_path, **values):
    path = tmp_path / "plant_link.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    return path


def test_config_takes_the_bridges_file_and_checks_the_allow_list(tmp_path):
    cfg = load_plant_link_config()
    assert cfg.exchange_hz == 100.0 and cfg.write_allow_list == (102,)
    assert cfg.plc.plant_in_db == 102 and cfg.plc.model == "skid_steer"
    cfg = load_plant_link_config(_plant_link_file(tmp_path, plc_host="10.0.0.5",
                                                  plc_port=1102, model="4wd4ws"))
    assert (cfg.plc.plc_host, cfg.plc.plc_port, cfg.plc.model) == ("10.0.0.5", 1102, "4wd4ws")
    with pytest.raises(BridgeConfigError, match=r"lacks plant_in_db = 102"):
        load_plant_link_config(_plant_link_file(tmp_path, write_allow_list=[103]))
    with pytest.raises(BridgeConfigError, match=r"holds control_db = 100"):
        load_plant_link_config(_plant_link_file(tmp_path, write_allow_list=[102, 100]))
    with pytest.raises(BridgeConfigError, match=r"unknown parameter 'exchange_rate' \(did you "
                                                r"mean 'exchange_hz'\?\)"):
        load_plant_link_config(_plant_link_file(tmp_path, exchange_rate=50.0))
    with pytest.raises(BridgeConfigError, match=r"'plc_host' = 'plc 1'"):
        load_plant_link_config(_plant_link_file(tmp_path, plc_host="plc 1"))
    with pytest.raises(BridgeConfigError, match=r"exchange_hz = 0 Hz is outside 1 .. 1000"):
        load_plant_link_config(None, {"exchange_hz": 0.0})


def test_the_exchange_thread_outlives_a_failing_sleep(monkeypatch, caplog):
    """Where time.sleep raises (libfaketime with the monotonic clock left alone fails Python
    3.11's every sleep, wolfcw/libfaketime#426) the exchange paces by Event.wait instead, says
    so once, and goes on: a thread that ended there left a node reporting and nothing
    exchanged."""
    import logging
    import time

    from excavator_hil.local_services import free_port
    from plc_bridge.plant_link.link import PlantLink, with_overrides

    def failing_sleep(_seconds: float) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(time, "sleep", failing_sleep)
    link = PlantLink(with_overrides(load_plant_link_config(), plc_port=free_port()),
                     publish=lambda _act: None)   # no PLC there: every period has its link down
    caplog.set_level(logging.WARNING, logger="plant_link")
    link.start()
    try:
        assert link.wait_exchanges(5, 60.0), "the exchange thread stopped"
    finally:
        link.stop()
    said = [r.getMessage() for r in caplog.records if "time.sleep failed" in r.getMessage()]
    assert len(said) == 1 and "Event.wait" in said[0], said
    assert link.counters["link_down_periods"] >= 5
