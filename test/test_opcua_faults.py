"""Faults of the OPC UA transport, from outside, as they happen: the PLC stops answering (a
silent link), the virtual PLC process killed and started again (a new server: the session is
created anew and the nodes registered again), and the secure channel renewed mid-run. Each
stop names its cause on Redis; the first write after the PLC returns is a stop, as over S7.
Bounds here are sanity bounds on a loaded host, not the figures (bench/bridge.py's)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Iterator

import pytest
from helpers import EVENT_WAIT_S, RedisServer, Spawner, module_redis, opcua_rig
from test_bridge_faults import (
    COMMAND,
    counter,
    is_stop,
    link_lost_logged,
    running,
    stopped_in_cpu_stop,
)
from test_bridge_faults import SANITY_S as S7_SANITY_S
from test_opcua_transport import (
    PASSWORD,
    PASSWORD_HASH,
    Lab,
    _commands,
    _free_port,
    _secret,
    connect,
)

from excavator_hil.hil_harness import HilRig, wait_until
from plc_bridge import redis_keys as keys
from plc_bridge.config import load_config
from plc_bridge.opcua_pki import generate
from plc_bridge.transport import opcua as opcua_transport
from plc_bridge.transport.opcua import OpcUaSession
from plc_bridge.transport.plc_link import PlcLink
from plc_bridge.virtual_plc.opcua_server import OpcUaServer
from plc_bridge.virtual_plc.server import VirtualPlc

SANITY_S = 10.0   # an OPC UA reconnect is a secure-channel handshake and a session: generous


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    root = tmp_path_factory.mktemp("opcua_faults")
    server = generate(root / "virtual_plc", "virtual_plc", server=True)
    client = generate(root / "plc_bridge", "plc_bridge")
    shutil.copy(server.cert, client.trusted / "virtual_plc.der")
    shutil.copy(client.cert, server.trusted / "plc_bridge.der")
    return Lab(root, server, client, _secret(root / "password", PASSWORD),
               _secret(root / "users", f"bridge:{PASSWORD_HASH}\n"))


@pytest.fixture(scope="module")
def rig(redis_module, lab) -> Iterator[HilRig]:
    server, spawner = redis_module
    port = _free_port()
    r = opcua_rig(lab, server.url, spawner, port)
    r.command(*COMMAND)
    r.start()
    yield r
    r.close()


@pytest.fixture(scope="module")
def redis_module(tmp_path_factory) -> Iterator[tuple[object, Spawner]]:
    with module_redis(tmp_path_factory.mktemp("opcua_faults_redis")) as pair:
        yield pair


def test_a_silent_link_stops_the_bridge_and_it_comes_back_with_a_stop(rig, caplog):
    """The PLC stops answering (stall: requests never answered): the request times out, the
    bridge stops as plc_link_lost, the monitor keys go invalid; once the PLC answers again a
    new session is made and its first command is a stop."""
    running(rig, 60.0)
    caplog.set_level(logging.INFO, logger="plc_bridge")
    reconnects = counter(rig, "plc_reconnects")
    logged = len(caplog.records)
    rig.plc.faults(stall=True)
    t0 = time.monotonic()   # once the PLC confirmed it (a starved PLC's control call is slow)
    wait_until(lambda: rig.get(keys.STATE_VALID) == "false", EVENT_WAIT_S, "invalid monitor")
    # the bridge's own request timeout (plc_timeout_s) ended it, not asyncua's 5 s one: said
    # by the error itself (load-independent), and within the S7 path's sanity bound
    assert link_lost_logged(caplog, logged) - t0 <= S7_SANITY_S
    lost = next(r.getMessage() for r in caplog.records[logged:]
                if r.getMessage().startswith("plc_bridge stopped:plc_link_lost"))
    timeout_ms = f"{rig.config.plc_timeout_s * 1e3:.0f} ms"
    assert f"TimeoutError: no reply within {timeout_ms}" in lost, lost
    assert rig.get(keys.BRIDGE_STATUS) == "stopped:plc_link_lost"
    assert rig.get(keys.MON_LONGITUDINAL) == keys.INVALID
    t_back = time.monotonic()
    rig.plc.faults(stall=False)
    first = wait_until(lambda: (rig.plc.writes(t_back) or [None])[0], EVENT_WAIT_S,
                       "the first command taken after the PLC answered again")
    assert is_stop(first, rig), f"the first write after a reconnect must be a stop: {first}"
    wait_until(lambda: counter(rig, "plc_reconnects") > reconnects,
               EVENT_WAIT_S, "reconnect counted")
    running(rig, 60.0)


def test_the_plc_process_killed_and_restarted_gets_a_new_session(rig, caplog):
    """SIGKILL of the virtual PLC (its OPC UA server with it), then a new process on the same
    ports: the bridge stops as plc_link_lost, then creates a new session, resolves and
    registers the nodes again, and starts with a stop."""
    running(rig, 60.0)
    caplog.set_level(logging.INFO, logger="plc_bridge")
    old = rig.core.plc.session
    assert isinstance(old, OpcUaSession)
    logged = len(caplog.records)
    t0 = time.monotonic()
    rig.kill_plc()
    wait_until(lambda: rig.get(keys.STATE_VALID) == "false", EVENT_WAIT_S, "invalid monitor")
    assert link_lost_logged(caplog, logged) - t0 <= SANITY_S
    assert rig.core.status == "stopped:plc_link_lost"
    rig.start_plc()
    t_back = rig.plc.status()["started_at"]
    first = wait_until(lambda: (rig.plc.writes(t_back) or [None])[0], EVENT_WAIT_S, "first write")
    assert is_stop(first, rig)
    new = rig.core.plc.session
    assert isinstance(new, OpcUaSession) and new is not old
    assert new.nodes.keys() == old.nodes.keys() and new.namespace_index == 3
    running(rig, 60.0)


def test_the_secure_channel_is_renewed_mid_run_without_a_lost_write(lab, monkeypatch):
    """A secure channel token lifetime of 1 s (renewed at 75 %): writes and reads go on across
    several renewals, none fails, the link is never dropped."""
    monkeypatch.setattr(opcua_transport, "SECURE_CHANNEL_LIFETIME_MS", 1000)
    plc = VirtualPlc(load_config(None), port=0)
    plc.start()
    server = OpcUaServer(plc, port=0, pki=lab.server, users={"bridge": PASSWORD_HASH})
    server.start()
    try:
        cfg = dataclasses.replace(
            load_config(None), plc_transport="opcua", opcua_port=server.port,
            opcua_pki_dir=str(lab.client.root), opcua_user="bridge",
            opcua_password_file=str(lab.password_file), plc_timeout_s=2.0)
        link = PlcLink(cfg)
        assert connect(link) == ""
        session = link.session
        assert isinstance(session, OpcUaSession)
        proto = session.client.uaclient.protocol
        tokens = {proto._connection.security_token.TokenId}
        commands = _commands(cfg, 7_000_000, 100_000)
        n = 0
        deadline = time.monotonic() + EVENT_WAIT_S
        while len(tokens) < 4 and time.monotonic() < deadline:
            assert link.write(cfg.control_db, commands[n]), link.last_error
            assert link.read(cfg.monitor_db, cfg.monitor.size) is not None, link.last_error
            n += 1
            tokens.add(proto._connection.security_token.TokenId)
        assert len(tokens) >= 4, f"{len(tokens) - 1} renewals in {n} cycles"
        assert link.session is session and link.reconnects == 0
        link.close()
    finally:
        server.stop()
        plc.stop()


def test_a_link_cut_stops_the_bridge_and_nothing_sent_before_it_acts_after(redis_module, lab,
                                                                          tmp_path):
    """A cable pulled between the bridge and the PLC (the proxy keeps what each side sent and
    delivers it when plugged back, even into the bridge's dropped connection): the bridge stops
    as plc_link_lost, the PLC's watchdog trips, and after the link returns the first command the
    PLC takes is a stop: no write of before the cut drives after it."""
    from excavator_hil.faults.tcp_proxy import TcpProxy
    from plc_bridge.bridge.core import BridgeCore

    # a Redis of its own: the module's rig (its bridge and heartbeat) may still run on the
    # module's Redis, and its bridge writing "running" into the same keys made this test read
    # another bridge's status (a fresh-clone run with one core busy)
    _, spawner = redis_module
    server = RedisServer(tmp_path / "redis")
    server.start()
    port = _free_port()
    rig = opcua_rig(lab, server.url, spawner, port)
    proxy = TcpProxy(port)
    rig.config = dataclasses.replace(rig.config, opcua_port=proxy.port)
    rig.core = BridgeCore(rig.config)
    try:
        rig.command(*COMMAND)
        rig.start()
        running(rig, 60.0)
        t_cut = time.monotonic()
        proxy.cut()
        wait_until(lambda: rig.get(keys.STATE_VALID) == "false", EVENT_WAIT_S, "invalid monitor")
        assert rig.get(keys.BRIDGE_STATUS) == "stopped:plc_link_lost"
        wait_until(lambda: not rig.plc.status()["watchdog_ok"],
                   EVENT_WAIT_S, "the PLC's watchdog trip")
        proxy.restore()
        taken = wait_until(lambda: [w for w in rig.plc.writes(t_cut) if w["refused"] is None
                                    ] or None,
                                    EVENT_WAIT_S, "a command taken after the link returned")
        assert is_stop(taken[0], rig), f"first command taken after the cut: {taken[0]}"
        running(rig, 60.0)
    finally:
        rig.close()
        proxy.close()
        server.stop()


def test_a_cpu_in_stop_that_takes_writes_stops_the_bridge_as_alive_stale(rig):
    """The CPU in STOP as the S7-1500 manual describes it (the virtual PLC's default): its
    OPC UA server answers writes Good and the values land, but no scan takes them. The bridge
    sees the alive counter stand still and stops as plc_alive_stale, the detail naming STOP as
    a cause, on Redis and in what /diagnostics publishes; it keeps its session (the PLC
    answers), the PLC's program takes none of the writes; after RUN the first command it takes
    is a stop."""
    running(rig, 60.0)
    assert rig.plc.opcua()["stop_writes"] == "accept"
    session = rig.core.plc.session
    reconnects = counter(rig, "plc_reconnects")
    stopped_in_cpu_stop(rig, 20.0)
    assert rig.core.plc.session is session and counter(rig, "plc_reconnects") == reconnects
    t_run = time.monotonic()
    rig.plc.faults(cpu_stop=False)
    taken = wait_until(lambda: [w for w in rig.plc.writes(t_run) if w["refused"] is None]
                       or None, EVENT_WAIT_S, "a command taken after RUN")
    assert is_stop(taken[0], rig), f"the first command taken after RUN: {taken[0]}"
    running(rig, 60.0)
    assert rig.core.plc.session is session


def test_a_cpu_in_stop_is_named_and_run_resumes_with_a_stop(rig):
    """A server that answers writes in STOP with BadOutOfService (the virtual PLC with
    ``stop_writes`` "bad"; not what the S7-1500 manual describes, but a Bad status the
    bridge must name): the bridge stops as plc_cpu_stop, naming it on Redis and in what
    /diagnostics publishes, keeps its session (the PLC answers: no reconnect), and nothing
    reaches the PLC's program; after RUN the first command the PLC takes is a stop."""
    running(rig, 60.0)
    session = rig.core.plc.session
    reconnects = counter(rig, "plc_reconnects")
    rig.plc.opcua(stop_writes="bad")
    try:
        _cpu_stop_answered_bad(rig, session, reconnects)
    finally:
        rig.plc.faults(cpu_stop=False)
        rig.plc.opcua(stop_writes="accept")


def _cpu_stop_answered_bad(rig: HilRig, session: object, reconnects: int) -> None:
    rig.plc.faults(cpu_stop=True)
    wait_until(lambda: rig.get(keys.BRIDGE_STATUS) == "stopped:plc_cpu_stop", EVENT_WAIT_S,
               lambda: f"stopped:plc_cpu_stop (now {rig.get(keys.BRIDGE_STATUS)})")
    detail = rig.get(keys.BRIDGE_DETAIL) or ""
    assert "STOP" in detail and "BadOutOfService" in detail, detail
    snap = rig.core.snapshot()   # what /diagnostics publishes (status: detail)
    assert snap.status == "stopped:plc_cpu_stop" and "BadOutOfService" in snap.detail
    t_named = time.monotonic()
    assert rig.core.wait_cycles(5, EVENT_WAIT_S)
    assert rig.plc.writes(t_named) == [], "a write reached the program of a CPU in STOP"
    assert rig.core.plc.session is session and counter(rig, "plc_reconnects") == reconnects
    t_run = time.monotonic()
    rig.plc.faults(cpu_stop=False)
    first = wait_until(lambda: (rig.plc.writes(t_run) or [None])[0], EVENT_WAIT_S,
                       "the first command taken after RUN")
    assert is_stop(first, rig), f"the first command taken after RUN must be a stop: {first}"
    running(rig, 60.0)
    assert rig.core.plc.session is session


def test_the_opcua_server_restarted_in_a_running_plc_gets_a_new_session(rig):
    """The PLC's OPC UA server stopped and started again, the PLC itself (its process, its S7
    server, its scan) staying up: the bridge stops as plc_link_lost, then creates a new
    session, resolves and registers the nodes again, and starts with a stop. The bridge
    reads and writes; it subscribes to nothing, so the server holds no subscription before
    or after (none to duplicate)."""
    running(rig, 60.0)
    assert rig.plc.opcua()["subscriptions"] == 0
    old = rig.core.plc.session
    assert isinstance(old, OpcUaSession)
    started = rig.plc.status()["started_at"]
    assert rig.plc.opcua(up=False)["opcua_up"] is False
    wait_until(lambda: rig.get(keys.STATE_VALID) == "false", EVENT_WAIT_S, "invalid monitor")
    assert rig.get(keys.BRIDGE_STATUS) == "stopped:plc_link_lost"
    status = rig.plc.status()
    assert status["link_up"] and status["started_at"] == started   # the same PLC, still up
    t_back = time.monotonic()
    assert rig.plc.opcua(up=True)["opcua_up"] is True
    first = wait_until(lambda: (rig.plc.writes(t_back) or [None])[0], EVENT_WAIT_S, "first write")
    assert is_stop(first, rig), f"the first write after a reconnect must be a stop: {first}"
    new = rig.core.plc.session
    assert isinstance(new, OpcUaSession) and new is not old
    assert new.nodes.keys() == old.nodes.keys() and new.namespace_index == 3
    running(rig, 60.0)
    assert rig.plc.opcua()["subscriptions"] == 0
