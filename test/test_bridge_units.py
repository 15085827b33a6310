"""Pure parts of the bridge: input parsing, the fail-safe gate, back-off. No I/O."""

from __future__ import annotations

import math
import random
import time

import pytest
from helpers import EVENT_WAIT_S
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.vehicle import BodyTwist
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.command_gate import CommandGate
from plc_bridge.bridge.input_validation import (
    Envelope,
    InputRejectedError,
    parse_bool,
    parse_control,
    parse_float,
)
from plc_bridge.reconnect import Backoff

ENV = Envelope(3.0, 1.5, 1.5)


@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_ten_significant_digits_parse_back(x):
    text = f"{x:.10g}"
    assert parse_float("k", text.encode()) == float(text)


@pytest.mark.parametrize("raw", [b"nan", b"NaN", b"inf", b"-Infinity", b"1e999", b"0x1p3",
                                 b"", b" 1", b"1 ", b"1,5", b"true", b"1_000", b"--1", b"."])
def test_non_decimal_strings_are_rejected(raw):
    with pytest.raises(InputRejectedError, match="k = "):
        parse_float("k", raw)


def test_bools():
    assert parse_bool("h", b"true") is True and parse_bool("h", b"TRUE") is True
    assert parse_bool("h", b"1") is True and parse_bool("h", b"0") is False
    assert parse_bool("h", b"false") is False and parse_bool("h", None) is None
    for raw in (b"yes", b"on", b"2", b"", b"t"):
        with pytest.raises(InputRejectedError, match="not a bool"):
            parse_bool("h", raw)


def test_control_parsing_envelope_and_lateral_sign():
    ci = parse_control(keys.CONTROL_KEYS, [b"1.5", b"0.25", b"-0.5", b"true"], ENV)
    assert ci.twist == BodyTwist(1.5, 0.25, -0.5) and ci.heartbeat is True
    ci = parse_control(keys.CONTROL_KEYS, [b"1.5", b"0.25", b"-0.5", None], ENV, "right")
    assert ci.twist == BodyTwist(1.5, -0.25, -0.5) and ci.heartbeat is None
    # a missing (deleted, expired) velocity key is doubtful input, never read as 0
    for i, key in enumerate(keys.CONTROL_KEYS[:3]):
        raw = [b"0.8", b"0", b"0.3", b"true"]
        raw[i] = None
        with pytest.raises(InputRejectedError, match=rf"{key} is missing"):
            parse_control(keys.CONTROL_KEYS, raw, ENV)
    # a key never written reads 0 (not required); one seen before and gone is rejected
    ci = parse_control(keys.CONTROL_KEYS, [b"0.8", None, b"0.3", None], ENV,
                       required=(True, False, True))
    assert ci.twist == BodyTwist(0.8, 0.0, 0.3)
    ci = parse_control(keys.CONTROL_KEYS, [None, None, None, b"0"], ENV,
                       required=(False, False, False))
    assert ci.twist == BodyTwist() and ci.heartbeat is False
    with pytest.raises(InputRejectedError, match="longitudinal is missing"):
        parse_control(keys.CONTROL_KEYS, [None, None, b"0.3", None], ENV,
                      required=(True, False, True))
    # just past a limit: the value is shown with the digits that exceed it, huge ones short
    with pytest.raises(InputRejectedError, match=r"longitudinal = 3\.0000001 m/s exceeds the "
                       r"envelope \+-3 m/s"):
        parse_control(keys.CONTROL_KEYS, [b"3.0000001", b"0", b"0", b"true"], ENV)
    with pytest.raises(InputRejectedError, match=r"= 1e\+300 m/s exceeds"):
        parse_control(keys.CONTROL_KEYS, [b"1e300", b"0", b"0", b"true"], ENV)
    with pytest.raises(InputRejectedError,
                       match=r"longitudinal = 3.5 m/s exceeds.*max_longitudinal"):
        parse_control(keys.CONTROL_KEYS, [b"3.5", b"0", b"0", b"true"], ENV)
    with pytest.raises(InputRejectedError, match=r"angular = -2 rad/s.*max_angular"):
        parse_control(keys.CONTROL_KEYS, [b"0", b"0", b"-2", b"true"], ENV)


def test_gate_needs_an_edge_and_times_out():
    g = CommandGate(0.75)
    g.observe_heartbeat(True, 0.0)                     # a level, not an edge
    assert g.decide(0.0, False, None, True).reason == "waiting_heartbeat"
    edge = g.observe_heartbeat(False, 0.5)
    assert edge
    d = g.decide(0.5, edge, None, True)
    assert d.forward and d.alive_may_run
    assert g.decide(1.2, False, None, True).forward    # 0.7 s after the edge: fresh
    d = g.decide(1.26, False, None, True)               # 0.76 s: stale
    assert not d.forward and d.reason == "heartbeat_stale" and not d.alive_may_run
    edge = g.observe_heartbeat(True, 1.3)
    assert g.decide(1.3, edge, None, True).forward


def test_gate_blocker_disarms_until_next_edge():
    g = CommandGate(0.75)
    g.observe_heartbeat(True, 0.0)
    assert g.decide(0.1, g.observe_heartbeat(False, 0.1), None, True).forward
    d = g.decide(0.2, False, "plc_fault", True)
    assert not d.forward and d.reason == "plc_fault" and d.alive_may_run
    d = g.decide(0.3, False, None, True)                # fault gone, heartbeat still fresh
    assert not d.forward and d.reason == "waiting_heartbeat_edge"
    assert g.decide(0.6, g.observe_heartbeat(True, 0.6), None, True).forward
    g.forget_heartbeat()                                # e.g. after a Redis outage
    assert not g.decide(0.7, g.observe_heartbeat(True, 0.7), None, True).forward


def test_backoff_is_capped_with_bounded_jitter():
    b = Backoff(0.01, 0.05, 0.2, random.Random(1))
    delays = [b.next_delay() for _ in range(8)]
    bases = [0.01, 0.02, 0.04, 0.05, 0.05, 0.05, 0.05, 0.05]
    for d, base in zip(delays, bases, strict=True):
        assert base <= d <= base * 1.2 + 1e-12
    b.reset()
    assert b.next_delay() <= 0.012
    assert not math.isnan(sum(delays))


@settings(deadline=None)   # no timing in tests: a loaded CI box is slow
@given(vx=st.floats(-2, 2), vy=st.floats(-1, 1), wz=st.floats(-1.5, 1.5),
       dt=st.floats(0.001, 0.5))
def test_odometry_step_matches_fine_integration(vx, vy, wz, dt):
    from plc_bridge.bridge.odometry import Pose2D, integrate

    exact = integrate(Pose2D(1.0, -2.0, 0.3), BodyTwist(vx, vy, wz), dt)
    fine = Pose2D(1.0, -2.0, 0.3)
    n = 2000
    for _ in range(n):     # midpoint rule, tiny steps
        mid = fine.yaw + 0.5 * wz * dt / n
        fine = Pose2D(fine.x + (vx * math.cos(mid) - vy * math.sin(mid)) * dt / n,
                      fine.y + (vx * math.sin(mid) + vy * math.cos(mid)) * dt / n,
                      fine.yaw + wz * dt / n)
    assert exact.x == pytest.approx(fine.x, abs=1e-8)   # midpoint rule error ~1e-9
    assert exact.y == pytest.approx(fine.y, abs=1e-8)
    assert math.cos(exact.yaw - fine.yaw) == pytest.approx(1.0, abs=1e-12)


def test_odometry_full_circle_closes():
    from plc_bridge.bridge.odometry import Pose2D, integrate

    pose = Pose2D()
    steps = 100
    period = 2 * math.pi / 0.5
    for _ in range(steps):
        pose = integrate(pose, BodyTwist(1.0, 0.0, 0.5), period / steps)
    assert abs(pose.x) < 1e-9 and abs(pose.y) < 1e-9
    with pytest.raises(ValueError, match="dt"):
        integrate(pose, BodyTwist(), -0.1)


def test_misspelt_parameter_in_the_plc_file_is_named_with_the_closest_key(tmp_path) -> None:
    """A typo must not silently fall back to the default."""
    import yaml

    from plc_bridge.config import default_config_path, load_config
    from plc_bridge.errors import BridgeConfigError

    doc = yaml.safe_load(default_config_path().read_text())
    doc["/**"]["ros__parameters"]["wake_on_chnage"] = False
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BridgeConfigError, match=r"unknown parameter 'wake_on_chnage' \(did you "
                                          r"mean 'wake_on_change'\?\)"):
        load_config(path)


def test_a_pdu_smaller_than_the_blocks_is_refused_at_connect(tmp_path) -> None:
    """pdu_size_bytes: 480 in plc.yaml, but the PLC negotiates 240 (an S7-1200): the connect fails
    with both sizes named instead of every read failing later."""
    import yaml

    from plc_bridge.config import default_config_path, load_config
    from plc_bridge.transport.s7 import S7Session

    doc = yaml.safe_load(default_config_path().read_text())
    params = doc["/**"]["ros__parameters"]
    params["pdu_size_bytes"] = 480
    params["layout"]["monitor_header"] += [f"extra_{i} | REAL | 1 | test" for i in range(60)]
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    config = load_config(path)
    assert 222 < config.monitor.size <= 462       # fits a 480 B PDU, not a 240 B one
    blocks = (config.control,), (config.monitor,)
    S7Session.check_pdu(config, *blocks, 480)
    with pytest.raises(ConnectionRefusedError,
                       match=rf"negotiated a PDU of 240 B; the monitor DB \({config.monitor.size}"
                             r" B\) needs more \(one read carries 222 B\)"):
        S7Session.check_pdu(config, *blocks, 240)


def test_a_peer_that_accepts_and_then_fails_is_retried_less_and_less():
    """No reconnect storm: a connect that succeeds does not reset the back-off; a loss soon
    after (``flapped``) doubles the wait up to FLAP_MAX_S; ``healthy`` resets it; a connect
    refused by a check (LinkRefusedError) waits REFUSED_RETRY_S."""
    import threading

    from plc_bridge.reconnect import (
        FLAP_MAX_S,
        REFUSED_RETRY_S,
        LinkRefusedError,
        Reconnector,
    )

    done = threading.Event()

    def ok() -> str:
        done.set()
        return "conn"

    r = Reconnector(ok, Backoff(0.01, 0.05, 0.0, random.Random(1)), "t")

    def connect(now: float) -> str:
        done.clear()
        assert r.poll(now) is None            # starts the attempt in its thread
        assert done.wait(EVENT_WAIT_S)
        r._thread.join(5.0)
        got = r.poll(now)
        assert got == "conn"
        return got

    now = 100.0
    waits = []
    for _ in range(10):
        connect(now)
        r.flapped(now)                        # the link failed at once
        waits.append(r._next_attempt_s - now)
        assert r.poll(now + waits[-1] * 0.99) is None and r._thread is not None
        now += waits[-1]
    assert waits == sorted(waits) and waits[-1] == FLAP_MAX_S
    r.healthy()
    assert r._next_attempt_s == -math.inf   # due at once, whatever the clock's origin

    def refused() -> str:
        raise LinkRefusedError("PDU 240 too small")

    r2 = Reconnector(refused, Backoff(0.01, 0.05, 0.0), "t2")
    t = time.monotonic()
    r2.poll(t)
    r2._thread.join(5.0)
    assert r2._next_attempt_s - t >= REFUSED_RETRY_S
    assert "PDU 240 too small" in r2.last_error
