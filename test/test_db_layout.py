"""Data-block layouts: S7 offsets, big-endian round trips, PDU checks, SCL source, config errors."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_common.parameter_files import read_parameter_file
from plc_bridge.config import MODELS, default_config_path, load_config
from plc_bridge.db_layout import DbLayout, FieldSpec, LayoutError, max_payload
from plc_bridge.errors import BridgeConfigError
from plc_bridge.scl_export import config_source, data_block_source, hil_source


def _layout(*decl: tuple[str, str]) -> DbLayout:
    return DbLayout("t", 7, [FieldSpec(n, t) for n, t in decl])


def test_offsets_follow_s7_rules():
    lay = _layout(("a", "BOOL"), ("b", "BOOL"), ("c", "INT"), ("d", "BOOL"), ("e", "REAL"),
                  ("f", "BOOL"), ("g", "BOOL"), ("h", "BOOL"), ("i", "BOOL"), ("j", "BOOL"),
                  ("k", "BOOL"), ("l", "BOOL"), ("m", "BOOL"), ("n", "BOOL"), ("o", "DINT"),
                  ("p", "UINT"), ("q", "WORD"), ("r", "REAL"))
    addr = {f.name: f.address for f in lay.fields}
    assert addr["a"] == "0.0" and addr["b"] == "0.1"      # BOOLs bit-packed
    assert addr["c"] == "2"                                # INT on the next even byte
    assert addr["d"] == "4.0"
    assert addr["e"] == "6"                                # REAL after a BOOL byte: even
    assert addr["f"] == "10.0" and addr["m"] == "10.7"     # eight BOOLs fill a byte
    assert addr["n"] == "11.0"                             # the ninth opens the next byte
    assert addr["o"] == "12"                               # after byte 11: next even byte
    assert addr["p"] == "16" and addr["q"] == "18" and addr["r"] == "20"
    assert lay.size == 24


def test_odd_bool_byte_pads_to_even_and_size_is_whole_words():
    lay = _layout(("x", "INT"), ("a", "BOOL"), ("y", "INT"), ("b", "BOOL"))
    assert [f.address for f in lay.fields] == ["0", "2.0", "4", "6.0"]
    assert lay.size == 8   # 7 bytes used, rounded to a word


def test_encode_is_big_endian_with_bits_lsb_first():
    lay = _layout(("alive", "UINT"), ("enable", "BOOL"), ("stop", "BOOL"), ("v", "REAL"),
                  ("n", "DINT"), ("i", "INT"))
    data = lay.encode({"alive": 0x1234, "enable": False, "stop": True, "v": 1.5, "n": -2,
                       "i": -3})
    assert data[:2] == b"\x12\x34"
    assert data[2] == 0b10 and data[3] == 0
    assert struct.unpack(">f", data[4:8])[0] == 1.5
    assert struct.unpack(">i", data[8:12])[0] == -2
    assert struct.unpack(">h", data[12:14])[0] == -3
    assert len(data) == lay.size == 14


@given(alive=st.integers(0, 65535), i=st.integers(-32768, 32767),
       d=st.integers(-(2**31), 2**31 - 1),
       r=st.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False).map(
           lambda x: float(np.float32(x))), bits=st.lists(st.booleans(),
                                                                          min_size=9, max_size=9))
def test_round_trip(alive, i, d, r, bits):
    decl = [("alive", "UINT"), *((f"b{k}", "BOOL") for k in range(9)), ("i", "INT"),
            ("d", "DINT"), ("r", "REAL")]
    lay = _layout(*decl)
    values = {"alive": alive, "i": i, "d": d, "r": r, **{f"b{k}": b for k, b in enumerate(bits)}}
    assert lay.decode(lay.encode(values)) == values


def test_bad_values_name_the_field():
    lay = _layout(("alive", "UINT"), ("v", "REAL"))
    with pytest.raises(LayoutError, match=r"'alive'.*65536.*0..65535"):
        lay.encode({"alive": 65536, "v": 0.0})
    with pytest.raises(LayoutError, match=r"'v'.*nan"):
        lay.encode({"alive": 0, "v": float("nan")})
    with pytest.raises(LayoutError, match="no value for field 'v'"):
        lay.encode({"alive": 0})
    with pytest.raises(LayoutError, match=r"3 bytes.*6 bytes"):
        lay.decode(b"abc")
    with pytest.raises(LayoutError, match="type 'LREAL'"):
        _layout(("x", "LREAL"))
    with pytest.raises(LayoutError, match="declared twice"):
        _layout(("x", "INT"), ("x", "INT"))


def test_pdu_limits():
    assert max_payload(240, "read") == 222 and max_payload(240, "write") == 205
    assert max_payload(480, "read") == 462 and max_payload(480, "write") == 445
    big = _layout(*((f"r{k}", "REAL") for k in range(52)))   # 208 B
    big.check_pdu(240, "read")
    with pytest.raises(LayoutError, match=r"208 B.*at most 205 B.*480"):
        big.check_pdu(240, "write")
    big.check_pdu(480, "write")


@pytest.mark.parametrize("model", MODELS)
def test_config_layouts_fit_s7_1200_and_export_scl(model):
    cfg = load_config(None, {"model": model})
    assert cfg.control.size <= 205 and cfg.monitor.size <= 222
    # every setpoint/measurement field is a REAL, packed right after the header: control 12 B
    # (alive, command bits, the DINT seq, the DINT crc), monitor 14 B (alive, status bits, the
    # DINT refused count, the DINT seq_accepted, the INT refused_reason)
    assert cfg.control.field("seq").byte_offset == 4 and cfg.control.field("seq").s7_type == \
        "DINT"
    assert cfg.control.field("crc").byte_offset == 8 and cfg.control.field("crc").s7_type == \
        "DINT"
    assert cfg.monitor.field("refused").byte_offset == 4
    assert cfg.monitor.field("seq_accepted").byte_offset == 8
    assert cfg.monitor.field("refused_reason").address == "12"
    assert cfg.monitor.field("setpoint_fault").address == "2.5"
    for lay, header in ((cfg.control, 12), (cfg.monitor, 14)):
        reals = [f for f in lay.fields if f.s7_type == "REAL"]
        assert [f.byte_offset for f in reals] == list(range(header, header + 4 * len(reals), 4))
    text = config_source(cfg)
    assert text.count("{ S7_Optimized_Access := 'FALSE' }") == 2
    assert text.count("END_DATA_BLOCK") == 2
    for f in cfg.control.fields:
        assert f"{f.name}" in text
    assert "speed_sp_" in text
    # the HIL status bits use the status byte's free bits: no offset of the header moved
    assert cfg.monitor.field("plant_lost").address == "2.6"
    assert cfg.monitor.field("drive_saturated").address == "2.7"


@pytest.mark.parametrize("model", MODELS)
def test_plant_blocks_fit_s7_1200_and_export_scl(model):
    """The HIL blocks: plant_in is written by the plant link (one write), plant_out read (one
    read), each within an S7-1200's PDU; every REAL on a 4-byte boundary; the TIA source has
    both, non-optimized, with every field and its offset."""
    cfg = load_config(None, {"model": model})
    assert (cfg.plant_in_db, cfg.plant_out_db) == (102, 103)
    assert cfg.plant_in.size <= max_payload(240, "write")
    assert cfg.plant_out.size <= max_payload(240, "read")
    assert cfg.plant_out.field("seq").address == "4"
    assert cfg.plant_out.field("seq").s7_type == "DINT"
    assert cfg.plant_out.field("crc").address == "8"
    assert cfg.plant_out.field("crc").s7_type == "DINT"
    assert cfg.plant_in.field("alive").address == "0"
    assert [cfg.plant_in.field(n).address for n in ("drive_ready", "drive_fault", "brake")] == \
        ["2.0", "2.1", "2.2"]
    for lay in (cfg.plant_in, cfg.plant_out):
        assert all(f.byte_offset % 4 == 0 for f in lay.fields if f.s7_type == "REAL")
    for n in (*cfg.speed_fields(), *cfg.torque_fields(), *cfg.angle_fields()):
        assert cfg.plant_in.field(n).s7_type == "REAL"
    for n in (*cfg.torque_sp_fields(), *cfg.steer_rate_sp_fields()):
        assert cfg.plant_out.field(n).s7_type == "REAL"
    text = hil_source(cfg)
    assert text.count("{ S7_Optimized_Access := 'FALSE' }") == 2
    assert f'DATA_BLOCK "PlcBridge_plant_in_{model}"' in text
    assert f'DATA_BLOCK "PlcBridge_plant_out_{model}"' in text
    for lay in (cfg.plant_in, cfg.plant_out):
        for f in lay.fields:
            assert any(ln.split()[:1] == [f.name] and f"// {f.address} " in ln
                       for ln in text.splitlines()), (lay.name, f.name)


def test_plant_block_rules_name_the_parameter(tmp_path):
    params = read_parameter_file(default_config_path(), "plc_bridge")
    import yaml

    def write(**changes):
        p = dict(params)
        p.update({k.replace("__", "."): v for k, v in changes.items()})
        path = tmp_path / "plc.yaml"
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": p}}))
        return path

    with pytest.raises(BridgeConfigError, match=r"'plant_in_db' = 102 is in 'write_allow_list'"):
        load_config(write(write_allow_list=[100, 102]))
    with pytest.raises(BridgeConfigError, match=r"'monitor_db' and 'plant_out_db' are both 101"):
        load_config(write(plant_out_db=101))
    out = [ln for ln in params["layout.plant_out_header"] if not ln.startswith("seq")]
    with pytest.raises(BridgeConfigError, match=r"'plant_out_skid_steer' lacks field 'seq'"):
        load_config(write(layout__plant_out_header=out))
    with pytest.raises(BridgeConfigError, match=r"field 'seq' of 'plant_out_skid_steer' is INT"):
        load_config(write(layout__plant_out_header=[*out, "seq | INT"]))
    no_crc = [ln for ln in params["layout.plant_out_header"] if not ln.startswith("crc")]
    with pytest.raises(BridgeConfigError, match=r"'plant_out_skid_steer' lacks field 'crc' "
                       r"\(the actuation's CRC: the plant link forwards only a whole block "
                       r"\(docs/plc_setup.md section 7\)\)"):
        load_config(write(layout__plant_out_header=no_crc))
    with pytest.raises(BridgeConfigError, match=r"lacks field 'torque_sp_right'"):
        load_config(write(layout__skid_steer__plant_out=params["layout.skid_steer.plant_out"][:1]))
    many = [*params["layout.skid_steer.plant_in"], *(f"r{k} | REAL" for k in range(50))]
    with pytest.raises(BridgeConfigError, match=r"pdu_size_bytes.*'plant_in_skid_steer'"):
        load_config(write(layout__skid_steer__plant_in=many))


def test_scl_text_lines():
    lay = DbLayout("control_x", 100, [FieldSpec("alive", "UINT", "1", "counter"),
                                      FieldSpec("enable", "BOOL", "1", "on"),
                                      FieldSpec("v", "REAL", "m/s", "speed")])
    text = data_block_source(lay)
    lines = [" ".join(ln.split()) for ln in text.splitlines()]
    assert 'DATA_BLOCK "PlcBridge_control_x"' in lines
    assert "NON_RETAIN" in lines and "BEGIN" in lines and "END_STRUCT;" in lines
    assert any(ln.startswith("alive : UInt;") and "// 0 counter" in ln for ln in lines)
    assert any(ln.startswith("enable : Bool;") and "// 2.0 on" in ln for ln in lines)
    assert any(ln.startswith("v") and "Real;" in ln and "// 4 [m/s] speed" in ln
               for ln in lines)


def test_config_errors_name_the_parameter(tmp_path):
    params = read_parameter_file(default_config_path(), "plc_bridge")   # dotted names
    import yaml

    def write(**changes):
        p = dict(params)
        p.update({k.replace("__", "."): v for k, v in changes.items()})
        path = tmp_path / "plc.yaml"
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": p}}))
        return path

    with pytest.raises(BridgeConfigError, match=r"parameter cycle_hz = 0 Hz is outside 1 .. 1000"):
        load_config(write(cycle_hz=0.0))
    with pytest.raises(BridgeConfigError, match=r"cycle_hz = 5 is an integer but the parameter "
                       r"is a double: write 5.0"):
        load_config(write(cycle_hz=5))   # ROS types a parameter file's 5 as an integer
    with pytest.raises(BridgeConfigError, match="parameter model = 'tank' is not one of"):
        load_config(write(model="tank"))
    with pytest.raises(BridgeConfigError, match="'control_db' = 100 is not in 'write_allow_list'"):
        load_config(write(write_allow_list=[5]))
    with pytest.raises(BridgeConfigError, match=r"plc_timeout_s = 5 s is outside 0.001 .. 2 s"):
        load_config(write(plc_timeout_s=5.0))
    with pytest.raises(BridgeConfigError, match=r"parameter rack = 'x' is not a number"):
        load_config(write(rack="x"))
    with pytest.raises(BridgeConfigError,
                       match=r"'monitor_ttl_s' = 0.05 s is shorter than two cycles"):
        load_config(write(monitor_ttl_s=0.05, cycle_hz=10.0))
    for host in ("", "plc 1", "300.1.1.1", "-plc"):
        with pytest.raises(BridgeConfigError,
                           match=r"'plc_host' = .* is not an IP address or host"):
            load_config(write(plc_host=host))
    assert load_config(write(plc_host="plc-1.local")).plc_host == "plc-1.local"
    with pytest.raises(BridgeConfigError, match=r"'redis_url' = 'redis://u:\*\*\*@h:99999/0'"):
        load_config(write(redis_url="redis://u:secret@h:99999/0"))
    # a misspelt key, top level or nested, is an error naming it and the closest known key
    with pytest.raises(BridgeConfigError, match=r"unknown parameter 'plc_timout' \(did you mean "
                       r"'plc_timeout_s'\?\)"):
        load_config(write(plc_timout=0.1))
    with pytest.raises(BridgeConfigError, match=r"'vehicle.skid_steer.track_widht_m' \(did you "
                       r"mean 'vehicle.skid_steer.track_width_m'\?\)"):
        load_config(write(vehicle__skid_steer__track_widht_m=2.0))
    vp = tmp_path / "virtual_plc.yaml"
    vp.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"plant_hertz": 100.0}}}))
    with pytest.raises(BridgeConfigError, match=r"unknown parameter 'plant_hertz' \(did you mean "
                       r"'plant_hz'\?\)"):
        load_config(None, None, vp)
    with pytest.raises(BridgeConfigError, match="parameter lateral_positive = 'up'"):
        load_config(write(lateral_positive="up"))
    many = [*params["layout.skid_steer.control"], *(f"r{k} | REAL" for k in range(60))]
    with pytest.raises(BridgeConfigError, match="pdu_size_bytes"):
        load_config(write(layout__skid_steer__control=many))
    # a monitor DB without the PLC's last accepted seq: the bridge could not continue from it
    header = [f for f in params["layout.monitor_header"] if not f.startswith("seq_accepted")]
    with pytest.raises(BridgeConfigError, match=r"lacks field 'seq_accepted' \(the PLC's last "
                       r"accepted seq: the bridge continues beyond it"):
        load_config(write(layout__monitor_header=header))
    header = [f.replace("refused_reason | INT", "refused_reason | REAL")
              for f in params["layout.monitor_header"]]
    with pytest.raises(BridgeConfigError, match=r"'refused_reason' .* is REAL; it must be INT"):
        load_config(write(layout__monitor_header=header))


def test_a_missing_key_takes_the_spec_default_not_the_low_end_of_its_range(tmp_path):
    """The issue: a key missing from plc.yaml took the low end of its range (cycle_hz 1 Hz,
    heartbeat_timeout 0.05 s). Now the documented default, also for a nested one."""
    import yaml

    from plc_bridge.config import BRIDGE

    params = read_parameter_file(default_config_path(), "plc_bridge")
    for name in ("cycle_hz", "heartbeat_timeout_s", "layout.control_header",
                 "vehicle.skid_steer.track_width_m"):
        params.pop(name)
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    cfg = load_config(path)
    assert cfg.cycle_hz == BRIDGE["cycle_hz"].default == 100.0
    assert cfg.heartbeat_timeout_s == BRIDGE["heartbeat_timeout_s"].default == 0.75
    assert cfg.vehicle_params["track_width_m"] == 2.6
    assert cfg.control.has("seq")
    # an empty file: every default (the shipped file holds the spec's defaults)
    path.write_text("/**:\n  ros__parameters: {}\n")
    assert load_config(path).parameters == load_config().parameters


def test_deprecated_names_work_with_a_warning_naming_the_new_one(tmp_path):
    params = read_parameter_file(default_config_path(), "plc_bridge")
    text = default_config_path().read_text()
    text = text.replace("heartbeat_timeout_s: 0.75", "heartbeat_timeout: 1.25")
    text = text.replace("max_angular_rad_s: 1.5", "max_angular: 0.5")
    path = tmp_path / "plc.yaml"
    path.write_text(text)
    warnings: list[str] = []
    cfg = load_config(path, {"plc_timeout": 0.05}, warn=warnings.append)
    assert (cfg.heartbeat_timeout_s, cfg.max_angular_rad_s, cfg.plc_timeout_s) == \
        (1.25, 0.5, 0.05)
    assert params["heartbeat_timeout_s"] == 0.75
    assert len(warnings) == 3, warnings
    assert any("'heartbeat_timeout' is deprecated" in w and "rename it 'heartbeat_timeout_s'" in w
               for w in warnings)
    assert any("rename it 'plc_timeout_s'" in w for w in warnings)


def test_float32_setpoints_round_trip_through_block():
    cfg = load_config(None, {"model": "4wd4ws"})
    vals = cfg.control.zero_values()
    speeds = np.array([0.1, -0.2, 1.0 / 3.0, 2.5])
    for name, v in zip(cfg.speed_sp_fields(), speeds, strict=True):
        vals[name] = float(v)
    out = cfg.control.decode(cfg.control.encode(vals))
    got = np.array([out[n] for n in cfg.speed_sp_fields()])
    assert np.array_equal(got, speeds.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("model", MODELS)
def test_generated_guard_block_has_the_plc_side_checks(model):
    """The TIA source carries the rules docs/plc_setup.md section 4 asks for, with this
    model's fields and the vehicle's limits."""
    cfg = load_config(None, {"model": model})
    text = config_source(cfg)
    guard = text[text.index('FUNCTION_BLOCK "PlcBridge_Guard"'):]
    ctl = f'"PlcBridge_control_{model}"'
    assert "END_FUNCTION_BLOCK" in guard and "#Tripped := TRUE" in guard
    assert "Tripped : Bool := TRUE" in guard                 # starts tripped
    # every variable read once, then judged only on those copies
    for f in cfg.control.fields:
        assert f"#C_{f.name} := {ctl}.{f.name};" in guard
    assert guard.count(f"{ctl}.") == len(cfg.control.fields)
    assert "DWORD_TO_UDINT(DINT_TO_DWORD(#C_seq))" in guard
    assert "- DWORD_TO_UDINT(DINT_TO_DWORD(#LastSeq))" in guard
    assert "#Diff < 16#8000_0000" in guard                   # serial-number order
    # a half-written block (crc mismatch) is no write and no sign of life; seq 0 none
    assert "#NewWrite := #Whole AND #C_seq <> 0 AND" in guard
    assert "#Changed := #Whole AND (#C_alive <> #LastAlive);" in guard
    # the monitor DB's verdicts: each refusal's cause, the last accepted seq (0: none)
    for code in range(1, 5):
        assert f"#RefusedReason := {code};" in guard
    assert guard.count("#Refused := #Refused + 1;") == 5
    assert "#SeqAccepted := #LastSeq;" in guard and "#SeqAccepted := 0;" in guard
    for n in cfg.speed_sp_fields():
        assert f"ABS(#C_{n}) <= #SpeedLimit" in guard
    for n in cfg.angle_sp_fields():
        assert f"ABS(#C_{n}) <= #SteerLimit" in guard
    limit = cfg.vehicle_params["max_wheel_speed_m_s"]
    assert f"SpeedLimit : Real := {limit:.6g};" in guard
    assert guard.count("IF") - guard.count("END_IF") - guard.count("ELSIF") == \
        guard.count("END_IF")                                # balanced IF / END_IF


def test_plc_setup_doc_tables_match_the_layouts():
    """docs/plc_setup.md section 5 is what the PLC programmer types in: every offset as the
    config computes it."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "plc_setup.md").read_text()
    for model in MODELS:
        cfg = load_config(None, {"model": model})
        for lay in (cfg.control, cfg.monitor, cfg.plant_in, cfg.plant_out):
            assert f"{lay.size} bytes)" in doc
            for addr, name, s7_type, _unit, comment in lay.describe():
                assert f"| {addr} | `{name}` | {s7_type} |" in doc, (model, name)
                assert comment in doc


@pytest.mark.parametrize("model", MODELS)
def test_generated_hil_io_block_maps_the_io_behind_the_interlock(model):
    """PlcBridge_HilIo (docs/plc_setup.md section 7): HIL only with the hardware interlock and
    changed at standstill; in HIL the real outputs are safe and every sensor comes from
    plant_in, every actuator goes to plant_out; a watchdog on plant_in.alive; seq written
    last."""
    cfg = load_config(None, {"model": model})
    text = hil_source(cfg)
    fb = text[text.index('FUNCTION_BLOCK "PlcBridge_HilIo"'):]
    pin, pout = f'"PlcBridge_plant_in_{model}"', f'"PlcBridge_plant_out_{model}"'
    body = fb[fb.index("BEGIN"):]
    start = body.index("   IF #Active THEN\n      // sensors")
    active = body[start:body.index("   ELSE\n      // the real")]
    assert "   IF NOT #Enable THEN\n      #Active := #HilRequest AND #DrivesDisconnected;" in body
    assert "   IF NOT #DrivesDisconnected THEN\n      #Active := FALSE;" in body
    assert "#Io_Enable := FALSE;" in active and "#Io_Brake := TRUE;" in active
    for n in (*cfg.speed_fields(), *cfg.torque_fields(), *cfg.angle_fields()):
        assert f"#{n} := {pin}.{n};" in active, n
    # the drive fault follows the plant too: the simulation's in HIL, the real drives' else
    assert f"#DriveFault := {pin}.drive_fault;" in active
    assert "#DriveFault := #Io_DriveFault;" in body[body.index("   ELSE\n      // the real"):]
    for n in (*cfg.torque_sp_fields(), *cfg.steer_rate_sp_fields()):
        assert f"#Io_{n} := 0.0;" in active and f"{pout}.{n} := #{n};" in active, n
    assert f"#WdTimer(IN := #Active AND ({pin}.alive = #LastAlive)" in body
    # PlantLost acknowledged only with the counter running (3 changes since it stopped: one
    # late write is not enough)
    assert f"IF {pin}.alive <> #LastAlive AND #Changes < 3 THEN" in body
    assert "#PlantLost := TRUE;\n      #Changes := 0;" in body
    assert "(#Ack AND NOT #AckOld AND NOT #WdTimer.Q AND #Changes >= 3" in body
    ms = round(cfg.virtual_plc.plant_watchdog_timeout_s * 1000)
    assert f"PlantWatchdogTime : Time := T#{ms}MS;" in fb
    # leaving HIL, the real outputs wait for the program's Enable to drop
    assert "#Io_Enable := #Enable AND #RealOk;" in body
    statements = [ln.strip() for ln in body.splitlines() if ln.strip().endswith(";")]
    # seq, then the crc over the block as written, last (test_command_crc: the CRC itself)
    assert statements[-1] == f"{pout}.crc := DWORD_TO_DINT(#Crc);"
    assert statements.index(f"{pout}.seq := #Seq;") < statements.index("#Crc := 16#FFFF_FFFF;")
    # seq restart-safe without a clock (hil_program.ActuationSequence's rule): a new run
    # 2^16 beyond plant_in.actuation_seq when that is newer (RFC 1982) than the last seq
    assert (f"#SeqAhead := DWORD_TO_UDINT(DINT_TO_DWORD({pin}.actuation_seq))\n"
            "                - DWORD_TO_UDINT(DINT_TO_DWORD(#Seq));") in body
    assert (f"   IF {pin}.actuation_seq <> 0 AND #SeqAhead > 0 AND #SeqAhead < 2147483648 THEN"
            f"\n      #Seq := DWORD_TO_DINT(UDINT_TO_DWORD(DWORD_TO_UDINT(DINT_TO_DWORD("
            f"{pin}.actuation_seq)) + 65535));") in body
    assert body.index("#SeqAhead :=") < body.index("#Seq := #Seq + 1;")
    opened = re.findall(r"(?<![A-Z_])IF ", body)                # IF, not ELSIF / END_IF
    assert len(opened) == body.count("END_IF;")                 # balanced IF / END_IF
