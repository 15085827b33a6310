"""The control DB's CRC (plc_bridge.command_crc): the bridge's (zlib) and the PLC's (the bitwise
loop the generated SCL runs) agree on every block, and a command half written never passes.
No PLC needed: pure functions, property tests."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plc_bridge.command_crc import (
    CRC_FIELD,
    block_crc,
    crc32_feed,
    crc_feed,
    feed_crc,
    is_whole,
    seal,
)
from plc_bridge.config import MODELS, load_config
from plc_bridge.scl_export import config_source, crc_lines

CONFIGS = {m: load_config(None, {"model": m}) for m in MODELS}

f32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@st.composite
def commands(draw, model: str) -> dict:
    cfg = CONFIGS[model]
    v = cfg.control.zero_values()
    v.update(alive=draw(st.integers(0, 65535)), enable=draw(st.booleans()),
             stop=draw(st.booleans()), seq=draw(st.integers(-(2**31), 2**31 - 1)))
    for n in (*cfg.speed_sp_fields(), *cfg.angle_sp_fields()):
        v[n] = draw(f32)
    return v


def test_the_plc_loop_is_crc32_iso_hdlc():
    """The CRC catalogue's check value of CRC-32/ISO-HDLC: 0xCBF43926 over ASCII
    "123456789", through PlcBridge_Crc32's bitwise loop (fed a byte at a time and four at a
    time) as through zlib."""
    data = b"123456789"
    one = 0xFFFFFFFF
    for b in data:
        one = crc32_feed(one, b, 1)
    four = 0xFFFFFFFF
    for i in range(0, 8, 4):
        four = crc32_feed(four, int.from_bytes(data[i:i + 4], "big"), 4)
    four = crc32_feed(four, data[8], 1)
    assert one ^ 0xFFFFFFFF == four ^ 0xFFFFFFFF == zlib.crc32(data) == 0xCBF43926


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_bridge_and_the_plc_compute_the_same_crc(model, data):
    """Every command of every model (NaN, inf, -0.0 setpoints too: the PLC judges them after
    the CRC): zlib over the block's bytes equals the PLC's field-by-field loop, and the sealed
    block is whole."""
    cfg = CONFIGS[model]
    values = data.draw(commands(model))
    raw = seal(cfg.control, cfg.control.encode(values, nonfinite_ok=True))
    decoded = cfg.control.decode(raw)
    assert feed_crc(cfg.control, decoded) == block_crc(cfg.control, raw)
    assert is_whole(cfg.control, raw)
    assert (decoded[CRC_FIELD] & 0xFFFFFFFF) == block_crc(cfg.control, raw)


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_command_half_written_is_never_whole(model, data):
    """A scan between the variables of one Write finds some fields of the new command and the
    rest of the old one (the crc of either): unless that mix is one of the two commands, it is
    not whole, whichever fields were written first."""
    cfg = CONFIGS[model]
    old = seal(cfg.control, cfg.control.encode(data.draw(commands(model)), nonfinite_ok=True))
    new = seal(cfg.control, cfg.control.encode(data.draw(commands(model)), nonfinite_ok=True))
    names = list(cfg.control.names)
    written = data.draw(st.sets(st.sampled_from(names)))
    a, b = cfg.control.decode(old), cfg.control.decode(new)
    mix = {n: (b[n] if n in written else a[n]) for n in names}
    raw = cfg.control.encode(mix, nonfinite_ok=True)
    if raw not in (old, new):
        assert not is_whole(cfg.control, raw), (written, mix)


def test_a_block_of_zeros_and_a_flipped_bit_are_not_whole():
    """A DB as the CPU starts it (all zeros) is no command; nor is a sealed one with any single
    bit flipped."""
    cfg = CONFIGS["skid_steer"]
    assert not is_whole(cfg.control, bytes(cfg.control.size))
    v = cfg.control.zero_values()
    v.update(alive=3, enable=True, seq=12345, speed_sp_left=0.5, speed_sp_right=-0.25)
    raw = bytearray(seal(cfg.control, cfg.control.encode(v)))
    for bit in range(8 * len(raw)):
        flipped = bytearray(raw)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert not is_whole(cfg.control, flipped), bit


@pytest.mark.parametrize("model", MODELS)
def test_the_generated_scl_feeds_every_byte_but_the_crc_once(model):
    """PlcBridge_Guard's CRC lines are crc_feed's steps: every byte of the block but the crc
    field's four, in order, BOOLs in their bits; the check value is the one the bridge seals."""
    cfg = CONFIGS[model]
    steps = crc_feed(cfg.control)
    assert sum(s.nbytes for s in steps) == cfg.control.size - 4
    fed = [n for s in steps for n in s.fields]
    assert fed == [n for n in cfg.control.names if n != CRC_FIELD]
    lines = crc_lines(cfg.control)
    calls = [x for x in lines if '"PlcBridge_Crc32"(' in x]
    assert len(calls) == len(steps)
    for line, step in zip(calls, steps, strict=True):
        assert line.endswith(f"Bytes := {step.nbytes});")
        for n in step.fields:
            assert f"#C_{n})" in line
    source = config_source(cfg)
    assert 'FUNCTION "PlcBridge_Crc32" : DWord' in source and "16#EDB8_8320" in source
    assert "#Whole := #Crc = DINT_TO_DWORD(#C_crc);" in source
    assert "16#FFFF_FFFF" in source


def test_the_check_vector_of_plc_setup_md():
    """docs/plc_setup.md section 4 gives the PLC programmer one command and its crc, to check
    the compiled PlcBridge_Guard online: it is what the bridge seals."""
    from pathlib import Path

    cfg = CONFIGS["skid_steer"]
    v = cfg.control.zero_values()
    v.update(alive=1, enable=True, stop=False, seq=65537, speed_sp_left=0.5,
             speed_sp_right=-0.5)
    raw = seal(cfg.control, cfg.control.encode(v))
    crc = block_crc(cfg.control, raw)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "plc_setup.md").read_text()
    assert f"16#{crc >> 16:04X}_{crc & 0xFFFF:04X}" in doc, f"16#{crc:08X}"
    assert np.int32(np.uint32(crc)) == cfg.control.decode(raw)[CRC_FIELD]


# --- plant_out: the same seal the other way round (the PLC writes, the plant link checks) -----
@pytest.mark.parametrize("model", MODELS)
def test_the_plc_seals_plant_out_as_the_plant_link_checks_it(model):
    """PlcBridge_HilIo's CRC lines run crc_feed over plant_out as the FB wrote it this scan,
    every byte but the crc field's, and store it last; the PLC's loop over a block equals
    zlib's, so the plant link (is_whole) takes what the FB sealed."""
    from plc_bridge.scl_export import block_name, hil_source

    cfg = CONFIGS[model]
    lay = cfg.plant_out
    steps = crc_feed(lay)
    assert sum(s.nbytes for s in steps) == lay.size - 4
    assert [n for s in steps for n in s.fields] == [n for n in lay.names if n != CRC_FIELD]
    fb = hil_source(cfg)
    pout = block_name(lay)
    lines = crc_lines(lay, f'"{pout}".{{}}')
    assert "\n".join(lines) in fb
    statements = [x.strip() for x in fb[fb.index('FUNCTION_BLOCK "PlcBridge_HilIo"'):]
                  .splitlines() if x.strip().endswith(";")]
    assert statements[-1] == f'"{pout}".crc := DWORD_TO_DINT(#Crc);'   # written last
    v = lay.zero_values()
    v.update(alive=7, enable=True, seq=-5, **dict.fromkeys(cfg.torque_sp_fields(), -1.25e3))
    raw = cfg.plant_out.encode(v)
    v[CRC_FIELD] = int.from_bytes(feed_crc(lay, v).to_bytes(4, "big"), "big", signed=True)
    assert is_whole(lay, lay.encode(v)) and lay.encode(v) == seal(lay, raw)


@pytest.mark.parametrize("model", MODELS)
def test_the_virtual_plcs_program_seals_every_scan(model):
    """The virtual PLC's HIL program (hil_program.HilProgram) seals each scan's plant_out."""
    from plc_bridge.virtual_plc.hil_program import HilProgram

    cfg = CONFIGS[model]
    program = HilProgram(cfg)
    plant_in = cfg.plant_in.zero_values()
    sp = np.full(len(cfg.speed_sp_fields()), 0.5)
    angles = np.zeros(len(cfg.angle_sp_fields()))
    for k in range(1, 6):
        plant_in["alive"] = k
        res = program.scan(0.01 * k, 0.01, True, False, sp, angles, plant_in, True)
        raw = cfg.plant_out.encode(res.plant_out)
        assert is_whole(cfg.plant_out, raw), k
