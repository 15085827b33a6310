"""Issue 13 through the real processes: nothing stale acts after a fault, every stop names its
cause, the timeouts survive a slow peer without a reconnect storm.

- a control-DB write held in the network (a store-and-forward proxy that stalls 2 s, with the
  bridge reconnecting through it at once or only after the outage) reaches the virtual PLC
  late and is refused: the plant does not move;
- the virtual PLC process paused 2 s (SIGSTOP/SIGCONT) with a write in flight: same;
- the bridge SIGKILLed: its liveness keys carry a TTL <= monitor_ttl_s and vanish;
- a wrong Redis password, an unknown ACL user, a slow first reply: the cause (redis-py's text)
  in the log and ``plc.bridge.detail`` from the first failure;
- a PLC that answers in 30 ms: served at the rate it allows with a warning naming the time, or
  refused with the measured time and the fix, and retried rarely (no storm);
- ``-0`` never written as negative zero; the CLI's timeout options.
"""

from __future__ import annotations

import itertools
import math
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from helpers import (
    EVENT_WAIT_S,
    REPO,
    STARTUP_TIMEOUT_S,
    RedisServer,
    free_port,
    thread_stats,
    wait_for,
)

from excavator_hil.faults.tcp_proxy import TcpProxy
from excavator_hil.hil_harness import HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.core import BridgeCore, BridgeSnapshot
from plc_bridge.config import load_config

COMMAND = (0.8, 0.0, 0.3)   # skid steer: tracks at 0.41 and 1.19 m/s


def _rig_via_proxy(redis_url: str, spawn, **overrides) -> tuple[HilRig, TcpProxy]:
    """A rig whose in-process bridge reaches its virtual PLC through a ``TcpProxy``."""
    rig = HilRig("skid_steer", redis_url, spawn)
    proxy = TcpProxy(rig.plc_port)
    rig.config = load_config(None, {"redis_url": redis_url, "model": "skid_steer",
                                    "plc_port": proxy.port, **overrides})
    rig.core = BridgeCore(rig.config)
    return rig, proxy


def _s7_function(held: bytes) -> list[int]:
    """S7 job function codes in bytes held by the proxy (TPKT 4 + COTP 3 + S7 header 10:
    the parameter's first byte; 0x05 write, 0x04 read)."""
    out, i = [], 0
    while i + 4 <= len(held) and held[i] == 3:
        n = int.from_bytes(held[i + 2:i + 4], "big")
        if n >= 18:
            out.append(held[i + 17])
        i += n
    return out


def _plc_still(rig: HilRig, since: float, hold_s: float = 0.5) -> None:
    """The plant stays at rest and no PLC scan drives from ``since`` on."""
    t_end = time.monotonic() + hold_s
    while time.monotonic() < t_end:
        st = rig.plc.status()
        assert max(abs(v) for v in st["speeds"]) < 1e-3, f"the plant moved: {st['speeds']}"
        assert st["drove_at"] is None or st["drove_at"] < since, "a scan drove the outputs"
        time.sleep(0.02)


def _status_logged(caplog: pytest.LogCaptureFixture, status: str, since: int) -> bool:
    """The bridge logged a change to ``status`` in ``caplog.records[since:]``. It logs every
    change of its status once, as it happens: a status that lasts a few ms (a link lost and
    at once reconnected) is there, where a poll of ``core.status`` from a starved test thread
    can miss it."""
    text = f"plc_bridge {status}"
    return any(r.name == "plc_bridge" and (r.getMessage() == text
                                           or r.getMessage().startswith(f"{text} ("))
               for r in caplog.records[since:])


@pytest.mark.parametrize("reconnect", ["at_once", "after_the_outage"])
def test_write_held_in_the_network_is_not_obeyed_after_the_outage(redis_server, spawn,
                                                                   reconnect, caplog):
    """Issue 13 item 1: the proxy keeps what the bridge sent during a 2 s stall and delivers it
    afterwards. The bridge aborts its socket, the PLC's latched watchdog and the seq refuse the
    old write; the plant stays still until a fresh command follows a stop."""
    caplog.set_level("INFO", logger="plc_bridge")   # the status changes (see _status_logged)
    rig, proxy = _rig_via_proxy(redis_server.url, spawn)
    try:
        rig.command(*COMMAND)
        rig.start()
        for _attempt in range(5):   # until the held request is a write (not the cycle's read)
            rig.heartbeat.resume()
            rig.wait_status("running", EVENT_WAIT_S)
            wait_for(lambda: rig.plc.status()["speeds"][0] > 0.3, EVENT_WAIT_S, "tracks at speed")
            proxy.block_new = reconnect == "after_the_outage"
            logged = len(caplog.records)
            proxy.stall()
            rig.heartbeat.pause()          # no fresh commands: only the held write could drive
            t_stall = time.monotonic()
            # at_once: the bridge reconnects within ~10 ms, so the status moves on at once
            wait_for(lambda n=logged: _status_logged(caplog, "stopped:plc_link_lost", n),
                     EVENT_WAIT_S,
                     "link loss seen")
            wait_for(lambda: max(abs(v) for v in rig.plc.status()["speeds"]) < 1e-3, EVENT_WAIT_S,
                     "the PLC's watchdog to stop the plant")
            held = proxy.held()
            time.sleep(max(0.0, t_stall + 2.0 - time.monotonic()))
            refused0 = sum(rig.plc.status()["refused"].values())
            t_release = time.monotonic()
            proxy.block_new = False
            proxy.release()
            if 0x05 in _s7_function(held):
                break
            wait_for(lambda: rig.core.status != "stopped:plc_link_lost",
                     EVENT_WAIT_S, "reconnected")
        else:
            pytest.fail("the proxy never held a control-DB write")
        late = wait_for(lambda: [w for w in rig.plc.writes(t_release) if w["enable"]], EVENT_WAIT_S,
                        "the held write to reach the PLC", 0.1)   # the log: not at 100 Hz
        assert late[0]["speed_sp_left"] > 0.3            # it was a drive command
        _plc_still(rig, t_release)
        st = rig.plc.status()
        assert sum(st["refused"].values()) > refused0, st["refused"]
        # and the machine runs again only on a fresh edge after the bridge's stop
        rig.heartbeat.resume()
        rig.wait_status("running", EVENT_WAIT_S)
        wait_for(lambda: rig.plc.status()["speeds"][0] > 0.3, EVENT_WAIT_S, "tracks at speed again")
    finally:
        rig.close()
        proxy.close()


def test_plc_process_paused_with_a_write_in_flight(redis_server, spawn):
    """SIGSTOP/SIGCONT of the virtual PLC for 2 s: whatever the bridge sent before it saw the
    loss is not obeyed when the PLC resumes."""
    rig = HilRig("skid_steer", redis_server.url, spawn)
    try:
        rig.command(*COMMAND)
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        wait_for(lambda: rig.plc.status()["speeds"][0] > 0.3, EVENT_WAIT_S, "tracks at speed")
        proc = rig.plc_proc.proc
        proc.send_signal(signal.SIGSTOP)
        rig.heartbeat.pause()
        wait_for(lambda: _stopped(proc.pid), EVENT_WAIT_S, "the virtual PLC process stopped")
        t_stop = time.monotonic()                # no PLC thread runs from here on
        try:
            wait_for(lambda: rig.core.status == "stopped:plc_link_lost", EVENT_WAIT_S, "link loss")
            time.sleep(max(0.0, t_stop + 2.0 - time.monotonic()))
        finally:
            proc.send_signal(signal.SIGCONT)
        _plc_still_after_resume(rig, t_stop)
        rig.heartbeat.resume()
        rig.wait_status("running", EVENT_WAIT_S)
    finally:
        rig.close()


def _stopped(pid: int) -> bool:
    """All threads of ``pid`` are in the stopped state ('T' in /proc)."""
    return all(fields[0] == "T" for fields in thread_stats(pid).values())


def _plc_still_after_resume(rig: HilRig, t_stop: float) -> None:
    wait_for(lambda: max(abs(v) for v in rig.plc.status()["speeds"]) < 1e-3, EVENT_WAIT_S,
             "the resumed PLC to stop the plant")
    st = rig.plc.status()
    assert st["drove_at"] is None or st["drove_at"] < t_stop, "a scan drove after the pause"
    _plc_still(rig, t_stop)


def test_liveness_keys_expire_after_the_bridge_is_killed(redis_server, spawn, tmp_path):
    rig = HilRig("skid_steer", redis_server.url, spawn)
    bridge = spawn("plc_bridge.bridge.cli", ["--redis-url", redis_server.url, "--plc-port",
                                             str(rig.plc_port), "--model", "skid_steer",
                                             "--monitor-ttl", "0.4"])
    r = redis.Redis.from_url(redis_server.url)
    live = (keys.BRIDGE_LIVE, keys.BRIDGE_STATUS, keys.STATE_VALID)

    def liveness() -> list:
        """[status, valid, PTTL of each of ``live`` in ms], read at one instant (MULTI/EXEC):
        separate reads by a test thread that a loaded host holds back would each see a
        different moment, one of them after an expiry."""
        pipe = r.pipeline(transaction=True)
        pipe.get(keys.BRIDGE_STATUS)
        pipe.get(keys.STATE_VALID)
        for k in live:
            pipe.pttl(k)
        return pipe.execute()

    try:
        rig.command(*COMMAND)
        rig.heartbeat.start()
        _, valid, *ttls = wait_for(lambda: (v := liveness())[0] == b"running" and v,
                                   STARTUP_TIMEOUT_S,
                                   "bridge running")
        assert valid == b"true"
        # each carries an expiry of at most monitor_ttl_s from its last refresh (-2: missing)
        assert all(0 < t <= 400 for t in ttls), dict(zip(live, ttls, strict=True))
        bridge.proc.send_signal(signal.SIGKILL)
        bridge.proc.wait(EVENT_WAIT_S)
        # ... so after the death each is gone (-2) or still expiring, never kept for good (-1)
        # and never given a longer life: gone within 0.4 s, whatever the machine's load
        _, _, *ttls = liveness()
        assert all(t == -2 or 0 < t <= 400 for t in ttls), dict(zip(live, ttls, strict=True))
        wait_for(lambda: not any(r.exists(k) for k in live),
                 EVENT_WAIT_S, "the liveness keys to expire")
        # what a consumer sees then: no bridge, no valid state
        assert r.get(keys.BRIDGE_STATUS) is None and r.get(keys.STATE_VALID) is None
    finally:
        rig.heartbeat.stop()
        rig.plc.close()
        r.close()


def _acl_server(tmp_path: Path) -> RedisServer:
    server = RedisServer(tmp_path / "redis-acl", password="right-pass")
    server.start()
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("bridge", enabled=True, passwords=["+bridge-pass"], keys=["*"],
                      channels=["*"], commands=["+@all"])
    admin.close()
    return server


def _snapshot_when(rig: HilRig, accept: Callable[[str], bool], timeout_s: float
                   ) -> BridgeSnapshot:
    """The first snapshot of the bridge whose detail ``accept`` takes, judged whole: the next
    may already say another thing (on a loaded host a PLC read timing out reports
    plc_link_lost for a while, and a retry says "connecting" again)."""
    def accepted() -> BridgeSnapshot | None:
        snap = rig.core.snapshot()
        return snap if accept(snap.detail) else None
    return wait_for(accepted, timeout_s,
                    lambda: f"the cause (now {rig.core.snapshot().detail!r})")


@pytest.mark.parametrize("user, password, text", [
    ("", "wrong-pass", "invalid username-password pair"),
    ("bridge", "wrong-pass", "invalid username-password pair"),
    ("nobody", "right-pass", "invalid username-password pair"),
])
def test_redis_auth_failure_names_the_cause(tmp_path, spawn, user, password, text):
    server = _acl_server(tmp_path)
    try:
        url = f"redis://{user}:{password}@127.0.0.1:{server.port}/0"
        rig = HilRig("skid_steer", server.url, spawn, overrides={"redis_url": url})
        try:
            rig.core.start()
            snap = _snapshot_when(rig, lambda d: text in d, 10.0)
            assert snap.status == "stopped:redis_lost", snap
            assert password not in snap.detail   # the URL is redacted
        finally:
            rig.close()
        # the same through the CLI: the log names it at the first failure, and not again while
        # the status stays (a PLC read timing out on a loaded host logs plc_link_lost in
        # between, and the return to redis_lost is a change, logged once more)
        bridge = spawn("plc_bridge.bridge.cli", ["--redis-url", url, "--plc-port",
                                                 str(rig.plc_port)])
        wait_for(lambda: text in bridge.log(), STARTUP_TIMEOUT_S,
                 lambda: f"the cause in the log: {bridge.log()[-400:]}")
        time.sleep(1.0)
        statuses = re.findall(r"plc_bridge (running|stopped:\S+)(.*)", bridge.log())
        assert [detail for status, detail in statuses if text in detail][:1], bridge.log()
        repeated = [a for a, b in itertools.pairwise(statuses) if a == b]
        assert not repeated, f"a status logged again without a change: {repeated}"
    finally:
        server.stop()


def test_slow_first_redis_reply_names_the_timeout(redis_server, spawn):
    proxy = TcpProxy(redis_server.port)
    proxy.reply_delay_s = 0.5
    rig = HilRig("skid_steer", redis_server.url, spawn, overrides={
        "redis_url": f"redis://127.0.0.1:{proxy.port}/0", "redis_connect_timeout_s": 0.2})
    try:
        rig.core.start()
        # Redis's timeout: on a loaded host a PLC read may time out too (S7TimeoutError)
        detail = _snapshot_when(rig, lambda d: d.startswith("Redis unreachable")
                                and "TimeoutError" in d, 10.0).detail
        assert "redis_connect_timeout_s = 0.2 s" in detail, detail
        assert "--redis-timeout" in detail, detail
    finally:
        rig.close()
        proxy.close()


def test_slow_plc_is_served_at_its_rate_with_a_warning(redis_server, spawn, caplog):
    rig, proxy = _rig_via_proxy(redis_server.url, spawn)
    proxy.reply_delay_s = 0.03           # every PLC reply 30 ms late: ~16 Hz at best
    try:
        rig.command(*COMMAND)
        with caplog.at_level("WARNING", logger="plc_bridge"):
            rig.start()
            rig.wait_status("running", EVENT_WAIT_S)
            wait_for(lambda: rig.plc.status()["speeds"][0] > 0.3, EVENT_WAIT_S, "tracks at speed")
        warn = [r.getMessage() for r in caplog.records if "answers in" in r.getMessage()]
        assert warn, "no warning named the slow PLC"
        assert "ms" in warn[0] and "cycle_hz" in warn[0] and "set cycle_hz <=" in warn[0]
        # Once per link: a reconnect (a loaded host may force one) says it again only when it
        # finds the rate changed by more than 25 %, so no two warnings in a row name one rate.
        rates = [float(re.search(r"runs at ~([0-9.]+) Hz", w).group(1)) for w in warn]
        assert all(rate < 100.0 for rate in rates), rates
        for before, after in itertools.pairwise(rates):
            assert abs(after - before) > 0.25 * before, f"said again for one rate: {warn}"
    finally:
        rig.close()
        proxy.close()


def test_one_slow_reply_at_connect_does_not_refuse_the_plc(redis_server, spawn):
    """The first read after the S7 handshake (the connection's third answer: COTP connect
    confirm, setup communication, read) of every connection is held 0.3 s, three times
    plc_timeout_s: the PLC answers the next reads at once, so the link is taken. Judged on
    that one read, every connect was refused and the bridge never ran."""
    rig, proxy = _rig_via_proxy(redis_server.url, spawn, plc_timeout_s=0.1)
    proxy.slow_reply = (2, 0.3)
    try:
        rig.command(*COMMAND)
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        assert "raise plc_timeout_s" not in rig.core.snapshot().detail
        assert proxy.accepted >= 1
    finally:
        rig.close()
        proxy.close()


def test_plc_slower_than_plc_timeout_is_refused_with_the_measured_time(redis_server, spawn):
    rig, proxy = _rig_via_proxy(redis_server.url, spawn, plc_timeout_s=0.02)
    proxy.reply_delay_s = 0.03
    try:
        rig.command(*COMMAND)
        rig.start()
        wait_for(lambda: "raise plc_timeout_s" in rig.core.snapshot().detail, EVENT_WAIT_S,
                 lambda: f"the refusal (now {rig.core.snapshot().detail!r})")
        detail = rig.core.snapshot().detail
        assert "answered a read of DB101 in" in detail and " ms" in detail
        connects = proxy.accepted
        time.sleep(3.0)
        # refused at connect: retried every 5 s, not ~20 times a second
        assert proxy.accepted - connects <= 1
        assert rig.core.status == "stopped:plc_link_lost"
    finally:
        rig.close()
        proxy.close()


def test_negative_zero_is_never_written(redis_server, spawn):
    rig = HilRig("skid_steer", redis_server.url, spawn)
    try:
        rig.redis.mset({keys.LONGITUDINAL: "-0", keys.LATERAL: "-0.0", keys.ANGULAR: "-0e0"})
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        t0 = time.monotonic()
        assert rig.core.wait_cycles(5, EVENT_WAIT_S)
        writes = [w for w in rig.plc.writes(t0) if w["enable"]]
        assert writes
        for w in writes:
            for name in rig.config.speed_sp_fields():
                assert math.copysign(1.0, w[name]) == 1.0, w
    finally:
        rig.close()


@pytest.mark.parametrize("args, text", [
    (["--plc-timeout", "5"], "parameter plc_timeout_s = 5 s is outside 0.001 .. 2 s"),
    (["--redis-timeout", "0"], "parameter redis_timeout_s = 0 s is outside"),
    (["--plc-host", "plc 1"], "'plc_host' = 'plc 1' is not an IP address or host name"),
    (["--redis-url", "redis://h:99999/0"], "'redis_url' = 'redis://h:99999/0' is not a valid"),
])
def test_cli_options_are_validated(args, text):
    proc = subprocess.run([sys.executable, "-m", "plc_bridge.bridge.cli", *args], check=False,
                          cwd=REPO,
                          capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
    assert proc.returncode == 2
    assert text in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_timeouts_reach_the_bridge(redis_server, spawn):
    port = free_port()
    bridge = spawn("plc_bridge.bridge.cli", ["--redis-url", redis_server.url, "--plc-port",
                                             str(port), "--redis-timeout", "0.5",
                                             "--plc-timeout", "0.3"])
    wait_for(lambda: "PLC_BRIDGE READY" in bridge.log(), STARTUP_TIMEOUT_S, "the bridge ready")
    assert "redis_timeout_s=0.5" in bridge.log() and "plc_timeout_s=0.3" in bridge.log()


def test_bad_tls_ca_names_the_verification_failure(redis_server, spawn, tmp_path):
    from test_bridge_e2e import TlsProxy

    proxy = TlsProxy(redis_server.port, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(other / "key.pem"), "-out", str(other / "ca.pem"), "-days", "1",
                    "-subj", "/CN=some other CA"], check=True, capture_output=True)
    url = f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={other / 'ca.pem'}"
    rig = HilRig("skid_steer", redis_server.url, spawn, overrides={"redis_url": url})
    try:
        rig.core.start()
        wait_for(lambda: "CERTIFICATE_VERIFY_FAILED" in rig.core.snapshot().detail, EVENT_WAIT_S,
                 lambda: f"the TLS cause named (now {rig.core.snapshot().detail!r})")
        assert rig.core.status == "stopped:redis_lost"
    finally:
        rig.close()
        proxy.close()
