"""The demo's bridge latency is timed from when Redis held the command (real redis-server)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import redis

from excavator_common.clock_offset import realtime_minus_monotonic
from excavator_hil.demo.operator import (
    DemoOperator,
    _carries_speed,
    _latencies,
    commands_not_carried,
)
from plc_bridge import redis_keys as keys


def test_command_time_is_redis_set_time(redis_server) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    operator = SimpleNamespace(redis=client)   # _command needs only the Redis client
    for speed in (0.25, 0.5, -0.125):
        before = time.monotonic()
        t_set = DemoOperator._command(operator, speed)   # type: ignore[arg-type]
        after = time.monotonic()
        # Redis's clock, mapped to CLOCK_MONOTONIC: inside the round trip (1 ms of slack for
        # the two clocks' readings and Redis's microsecond resolution)
        assert before - 1e-3 <= t_set <= after + 1e-3, (before, t_set, after)
        assert float(client.get(keys.LONGITUDINAL)) == speed
        assert client.get(keys.LATERAL) == "0" and client.get(keys.ANGULAR) == "0"
    client.close()


def test_latencies_pair_each_command_with_the_first_write_carrying_it() -> None:
    sent = [(10.0, 0.3), (10.2, 0.301)]
    writes = [{"t": 9.99, "values": {"speed_left": 0.3, "speed_right": 0.3}},   # before: no
              {"t": 10.0012, "values": {"speed_left": 0.3, "speed_right": 0.3}},
              {"t": 10.2008, "values": {"speed_left": 0.3, "speed_right": 0.3}},  # old value
              {"t": 10.2021, "values": {"speed_left": 0.301, "speed_right": 0.301}}]
    got = _latencies(sent, writes)
    assert [round(x, 1) for x in got] == [1.2, 2.1]


def test_clock_offset_is_stable() -> None:
    """Two readings of CLOCK_REALTIME - CLOCK_MONOTONIC agree (no step between them here)."""
    a, b = realtime_minus_monotonic(), realtime_minus_monotonic()
    assert abs(a - b) < 1e-3
    assert abs(a - (time.time() - time.monotonic())) < 0.5



def test_a_command_that_never_reached_the_plc_has_no_latency() -> None:
    """The drive's speeds repeat every 10 commands: a command the PLC never got (superseded,
    or held by a fail-safe stop) is not paired with the next one of the same value, 0.5 s
    later (it counted as a 500 or 1,000 ms latency before)."""
    sent = [(10.0, 0.3), (10.05, 0.301), (10.5, 0.3)]
    writes = [{"t": 10.0511, "values": {"speed_left": 0.301, "speed_right": 0.301}},
              {"t": 10.5013, "values": {"speed_left": 0.3, "speed_right": 0.3}}]
    got = _latencies(sent, writes)
    assert [round(x, 1) for x in got] == [1.1, 1.3]   # the first 0.3 left out: not carried


def test_a_command_never_carried_is_listed_with_why() -> None:
    """Where the never-carried commands fall and why (the bench reports them): no write while
    it was the newest command, every write refused, or the writes carried another value."""
    sent = [(10.0, 0.3), (10.05, 0.301), (10.10, 0.302), (10.15, 0.303), (10.20, 0.304)]
    writes = [{"t": 10.001, "speed_sp_left": 0.3, "speed_sp_right": 0.3, "refused": None},
              # 0.301: no bridge cycle wrote for 50 ms
              # 0.302: the writes of its time refused (a stop the bridge held, say)
              {"t": 10.101, "speed_sp_left": 0.0, "speed_sp_right": 0.0,
               "refused": "stale_seq"},
              {"t": 10.111, "speed_sp_left": 0.0, "speed_sp_right": 0.0,
               "refused": "stale_seq"},
              # 0.303: a stop taken
              {"t": 10.151, "speed_sp_left": 0.0, "speed_sp_right": 0.0, "refused": None},
              {"t": 10.201, "speed_sp_left": 0.304, "speed_sp_right": 0.304, "refused": None}]
    got = commands_not_carried(sent, writes, _carries_speed)
    assert got == [(0.05, "no write"), (0.1, "refused: stale_seq"), (0.15, "other value")]
    assert commands_not_carried([], writes, _carries_speed) == []

