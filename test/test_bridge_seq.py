"""The command sequence number across restarts, and the PLC's refusals reported (issue 31, hole 1),
through the real processes: a real redis-server and the virtual PLC in its own process.

- a bridge restarted with its clock an hour back drives at once: in-process with the core's
  clock injected, and the ``plc_bridge`` process itself under libfaketime (skipped, saying
  why, where libfaketime is not installed: ``make faketime``);
- a PLC that refuses the bridge's writes (a rogue snap7 client drives its seq far ahead): the
  bridge is never ``running`` in a cycle whose read shows new refusals (read from redis-server's
  own record of writes), the PLC's cause and count are on Redis, and once the rogue is quiet
  the bridge re-synchronises and drives again;
- two bridges on one PLC: both stop and name the other writer; the one left drives again.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
import redis
from helpers import (
    EVENT_WAIT_S,
    FAKETIME_LIB,
    LOADED_HOST_BRIDGE,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    PlcWriteLog,
    RedisServer,
    RogueWriter,
    wait_for,
)

from excavator_hil.hil_harness import Heartbeat, HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.core import BridgeCore
from plc_bridge.command_seq import QUIET_S, from_dint, seq_newer

COMMAND = (0.8, 0.0, 0.3)   # skid steer: tracks at 0.41 and 1.19 m/s
HOUR_S = 3600.0
LOG_POLL_S = 0.25   # how often a test asks the virtual PLC for its write log (it grows)
# The bridge's deadline for a PLC reply in the tests of two writers (default 0.1 s, tested in
# test_bridge_faults.py): the pure-Python virtual PLC serving a rogue writer's 100 Hz beside the
# bridge's on a loaded host answered later than 0.1 s again and again (ci66, ci69: plc_link_lost,
# a reconnect, a wait for the heartbeat's next toggle), so the bridge wrote a few commands in
# 20 s instead of the refused ones these tests count. With 1 s and Redis's default 0.25 s, a
# host stalling the bridge's cycles up to 1.9 s (fresh20) still broke the bridge's run of refused
# writes (plc_link_lost, redis_lost) until 120 s were gone: the loaded-host deadlines, each the
# parameter's top (helpers.LOADED_HOST_BRIDGE)
TWO_WRITERS = dict(LOADED_HOST_BRIDGE)


def _moving_since(rig: HilRig, t0: float) -> None:
    """The PLC drove after ``t0`` and the left track is at speed (the bridge's command acts)."""
    wait_for(lambda: (st := rig.plc.status())["drove_at"] is not None and st["drove_at"] > t0
             and st["speeds"][0] > 0.3, EVENT_WAIT_S, lambda: f"the tracks driven after {t0:.3f} "
             f"(PLC: {rig.plc.status()['speeds']}, refused {rig.plc.status()['refused']})")


def _none_stale(writes: list[dict]) -> list[dict]:
    """No write refused as stale. (A command may meet the PLC's watchdog tripped by the pause
    between the two runs, in the cycle between the read that showed it clear and the write:
    that refusal is the watchdog's, and the bridge's stop clears it.)"""
    stale = [w for w in writes if w["refused"] == "stale_seq"]
    assert not stale, f"{len(stale)} of {len(writes)} writes refused as stale: {stale[:2]}"
    return writes


def test_a_bridge_restarted_with_its_clock_an_hour_back_drives_at_once(redis_server, spawn):
    """Two runs of the core against one (still running) virtual PLC; the second one's clock,
    its only time source, reads an hour less. No write of the second run is refused as stale
    and the machine moves, with no wait for the clock to catch up."""
    rig = HilRig("skid_steer", redis_server.url, spawn)
    try:
        rig.command(*COMMAND)
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        _moving_since(rig, 0.0)
        rig.core.stop()                                    # a clean stop: its last write
        first_run = rig.plc.status()["seq_accepted"]
        t2 = time.monotonic()
        rig.core = BridgeCore(rig.config, clock=lambda: time.monotonic() - HOUR_S)
        rig.core.start()
        rig.wait_status("running", EVENT_WAIT_S)
        _moving_since(rig, t2)
        writes = _none_stale(rig.plc.writes(t2))
        seqs = [from_dint(w["seq"]) for w in writes]
        assert seq_newer(seqs[0], first_run) and 0 not in seqs
        assert all(seq_newer(b, a) for a, b in itertools.pairwise(seqs))
        assert rig.get(keys.BRIDGE_SEQ) is not None
    finally:
        rig.close()


@pytest.mark.skipif(FAKETIME_LIB is None, reason="libfaketime is not installed (`make faketime` "
                    "as root, or apt-get install faketime): the bridge process cannot be run "
                    "with its wall clock stepped back")
def test_the_bridge_process_restarted_an_hour_back_under_libfaketime_drives_at_once(
        redis_server, spawn, tmp_path):
    """The real ``plc_bridge`` process, stopped and started again with its wall clock an hour
    back (libfaketime: CLOCK_REALTIME only, as an NTP step or a wrong RTC does), against the
    same virtual PLC: none of the second process's writes is refused as stale and the machine
    moves."""
    rig = HilRig("skid_steer", redis_server.url, spawn)
    args = ["--redis-url", redis_server.url, "--plc-port", str(rig.plc_port), "--model",
            "skid_steer"]
    fake = {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": "-1h", "DONT_FAKE_MONOTONIC": "1"}
    try:
        rig.command(*COMMAND)
        rig.heartbeat.start()
        first = spawn("plc_bridge.bridge.cli", args)
        wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", STARTUP_TIMEOUT_S,
                 lambda: f"the first bridge running: {first.log()[-1500:]}")
        _moving_since(rig, 0.0)
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(EVENT_WAIT_S) == 0
        first_run = rig.plc.status()["seq_accepted"]
        t2 = time.monotonic()
        second = NodeProcess("plc_bridge.bridge.cli", args, log_dir=tmp_path, env=fake)
        try:
            # its wall clock really is an hour back: the time stamps of its log
            stamp = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ ", re.M)
            found = wait_for(lambda: stamp.search(second.log()), STARTUP_TIMEOUT_S,
                             lambda: f"the second bridge's log: {second.log()[-1500:]}")
            behind = time.time() - datetime.strptime(found.group(1),
                                                      "%Y-%m-%d %H:%M:%S").timestamp()
            assert HOUR_S - 120.0 < behind < HOUR_S + 120.0, (found.group(1), behind)
            wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", STARTUP_TIMEOUT_S,
                     lambda: f"the second bridge running: {second.log()[-1500:]}")
            _moving_since(rig, t2)
            writes = _none_stale(rig.plc.writes(t2))
            assert seq_newer(from_dint(writes[0]["seq"]), first_run)
            assert f"the PLC's last accepted seq is {first_run}," in second.log()
        finally:
            second.stop()
    finally:
        rig.heartbeat.stop()
        rig.plc.close()


def _cycles(server: RedisServer) -> list[tuple[str, int | None]]:
    """From redis-server's record of writes, one entry per bridge cycle, in order: (the status
    it wrote, the PLC's refused count it published in the same cycle). The cycle's MSET (the
    values that changed) precedes its status SET in the same send."""
    refused: int | None = None
    out = []
    for cmd in server.commands_written():
        verb = cmd[0].upper()
        if verb == b"MSET":
            pairs = dict(zip(cmd[1::2], cmd[2::2], strict=True))
            if keys.STATE_REFUSED.encode() in pairs:
                refused = int(pairs[keys.STATE_REFUSED.encode()])
        elif verb == b"SET" and cmd[1] == keys.BRIDGE_STATUS.encode():
            out.append((cmd[2].decode(), refused))
    return out


@pytest.fixture
def recorded_redis(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.record_writes = True
    server.start()
    yield server
    server.stop()


def test_a_refusing_plc_is_never_reported_running_and_says_why(recorded_redis, spawn):
    """A rogue writer drives the PLC's seq far ahead: every write of the bridge is refused as
    stale. No cycle that read new refusals reports ``running``; status, detail, the PLC's count
    and cause are on Redis; once the rogue is quiet the bridge re-synchronises and drives."""
    rig = HilRig("skid_steer", recorded_redis.url, spawn, overrides=TWO_WRITERS)
    try:
        rig.command(*COMMAND)
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        _moving_since(rig, 0.0)
        t0 = time.monotonic()
        with RogueWriter(rig.config, rig.plc_port,
                         rig.plc.status()["seq_accepted"] + 2**30) as rogue:
            wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "stopped:plc_refused", EVENT_WAIT_S,
                     lambda: f"stopped:plc_refused (now {rig.get(keys.BRIDGE_STATUS)})")
            detail = rig.get(keys.BRIDGE_DETAIL) or ""
            assert "stale_seq" in detail and "another writer is on DB100" in detail, detail
            wait_for(lambda: rig.get(keys.STATE_REFUSED_REASON) == "stale_seq", EVENT_WAIT_S,
                     "the PLC's cause on Redis")

            log = PlcWriteLog(rig.plc, t0)

            def bridge_refused() -> list[dict]:
                return [w for w in log.poll()
                        if from_dint(w["seq"]) not in rogue.seqs and w["refused"]]
            # the PLC's write log is asked for at 4 Hz: it grows by ~200 writes a second (the
            # rogue's and the bridge's), and asking at 100 Hz (ci66, one core busy) kept the
            # virtual PLC serialising it instead of answering the bridge, whose link then timed
            # out over and over
            wait_for(lambda: len(bridge_refused()) >= 50, EVENT_WAIT_S, "50 refused bridge writes",
                     LOG_POLL_S)
            assert {w["refused"] for w in bridge_refused()} == {"stale_seq"}
            wait_for(lambda: int(rig.get(keys.STATE_REFUSED) or 0) >= 50
                     and int(rig.get(keys.counter_key("plc_refusals")) or 0) >= 50, EVENT_WAIT_S,
                     "the PLC's count of refusals on Redis, and the bridge's")
            assert rig.core.status == "stopped:plc_refused"
        # the rogue is quiet: a new session beyond its seq, a stop, then driving again
        t1 = time.monotonic()
        rig.wait_status("running", EVENT_WAIT_S)
        _moving_since(rig, t1)
        assert int(rig.get(keys.counter_key("seq_resyncs")) or 0) >= 1
        assert seq_newer(int(rig.get(keys.STATE_SEQ_ACCEPTED) or 0), rogue.seq % 2**32)
        cycles = _cycles(recorded_redis)
        refusing = [status for (_, before), (status, n) in itertools.pairwise(cycles)
                    if n is not None and before is not None and n > before]
        assert len(refusing) >= 10, cycles[-50:]
        assert "running" not in refusing, [c for c in cycles if c[0] != "running"][:20]
        assert refusing.count("stopped:plc_refused") >= len(refusing) - 2, refusing
    finally:
        rig.close()


def test_two_bridges_on_one_plc_both_stop_and_the_one_left_drives_again(tmp_path, spawn):
    """One bridge per PLC. A second one that connects starts beyond the first's seq: the first
    one's writes are refused, the second sees refusals of writes not its own; both stop and say
    so. The PLC takes a drive command only after QUIET_S without a refused write (on the PLC's
    own clock: a loaded host may hold one bridge's thread that long). When the second goes,
    the first re-synchronises and drives."""
    servers = [RedisServer(tmp_path / f"redis{k}") for k in range(2)]
    for s in servers:
        s.start()
    a = HilRig("skid_steer", servers[0].url, spawn, overrides=TWO_WRITERS)
    b_core = None
    try:
        a.command(*COMMAND)
        a.start()
        a.wait_status("running", EVENT_WAIT_S)
        _moving_since(a, 0.0)
        b = redis.Redis.from_url(servers[1].url)
        b.mset({keys.LONGITUDINAL: "0.8", keys.LATERAL: "0", keys.ANGULAR: "-0.3"})
        hb = Heartbeat(servers[1].url, 0.25).start()
        b_core = BridgeCore(dataclasses.replace(a.config, redis_url=servers[1].url))
        b_core.start()
        try:
            # status and detail from one snapshot each: b's status moves on (it re-synchronises
            # and waits for a heartbeat toggle) between two separate reads on a loaded host
            def both_refused() -> tuple[object, object] | None:
                sa, sb = a.core.snapshot(), b_core.snapshot()
                return (sa, sb) if sa.status == sb.status == "stopped:plc_refused" else None

            sa, sb = wait_for(both_refused, EVENT_WAIT_S,
                              lambda: f"both stopped:plc_refused (a {a.core.status}, "
                                      f"b {b_core.status})")
            assert "another writer is on DB100" in sa.detail
            assert "not this bridge's current ones" in sb.detail
            t_both = time.monotonic()
            wait_for(lambda: len(a.plc.writes(t_both)) >= 100,
                     EVENT_WAIT_S, "100 writes", LOG_POLL_S)
            writes = a.plc.writes(t_both - 2 * QUIET_S)
            refused_at = [w["t"] for w in writes if w["refused"]]
            taken = [w for w in writes if w["refused"] is None]
            for prev, w in itertools.pairwise(taken):
                if w["t"] >= t_both and w["enable"]:
                    # the writer of a drive command judged it from its read after its previous
                    # write the PLC took (the one before it: only the newest session is taken,
                    # and a session's first write is a stop): a refusal that reached the PLC
                    # after that write may be one it had not read yet (the other bridge woken
                    # after a starved host held it past QUIET_S, which made this one drive)
                    last = max((t for t in refused_at if t < prev["t"]), default=-math.inf)
                    assert w["t"] - last >= QUIET_S - 0.05, (w, prev, last)
        finally:
            b_core.stop()
            hb.stop()
            b.close()
        t1 = time.monotonic()
        a.wait_status("running", EVENT_WAIT_S)
        _moving_since(a, t1)
    finally:
        a.close()
        for s in servers:
            s.stop()
