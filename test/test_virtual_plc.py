"""The virtual PLC in its own process, driven by a plain snap7 client: layout, plant, watchdog,
status bits, and the watchdog stopping the machine when the bridge process dies."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
import snap7
from helpers import NodeProcess, free_port, wait_for

from excavator_hil.hil_harness import HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.config import load_config
from plc_bridge.virtual_plc_control import ControlClient


@pytest.fixture
def plc(node_processes, tmp_path):
    port, cport = free_port(), free_port()
    node_processes.append(NodeProcess(
        "plc_bridge.virtual_plc_cli",
        ["--port", str(port), "--control-port", str(cport), "--model", "ackermann"],
        log_dir=tmp_path))
    control = wait_for(lambda: _try(cport), 20.0, "virtual PLC control channel")
    client = snap7.Client()
    client.connect("127.0.0.1", 0, 1, port)
    yield client, control
    client.disconnect()
    control.close()


def _try(port: int) -> ControlClient | None:
    try:
        return ControlClient(port)
    except OSError:
        return None


def test_plant_follows_setpoints_while_alive_and_watchdog_stops_it(plc):
    client, control = plc
    cfg = load_config(None, {"model": "ackermann"})
    values = {"alive": 0, "enable": False, "stop": True, "seq": 0, "speed_sp_rl": 0.5,
              "speed_sp_rr": 0.7, "angle_sp_fl": 0.2, "angle_sp_fr": 0.15}
    for i in range(1, 60):                       # 0.6 s of a live bridge: stops, then commands
        values.update(alive=i, seq=i, enable=i > 3, stop=i <= 3)
        client.db_write(cfg.control_db, 0, bytearray(cfg.control.encode(values)))
        time.sleep(0.01)
    mon = cfg.monitor.decode(client.db_read(cfg.monitor_db, 0, cfg.monitor.size))
    assert mon["ready"] and mon["auto"] and not mon["fault"] and not mon["watchdog"]
    assert mon["speed_rl"] == pytest.approx(0.5, abs=1e-4)
    assert mon["speed_rr"] == pytest.approx(0.7, abs=1e-4)
    assert mon["angle_fl"] == pytest.approx(0.2, abs=1e-6)   # 2 rad/s: 0.1 s to get there
    alive0 = mon["alive"]
    time.sleep(0.05)
    assert cfg.monitor.decode(client.db_read(cfg.monitor_db, 0, cfg.monitor.size))["alive"] \
        != alive0
    # the bridge's counter stops: after watchdog_timeout_s the outputs go to zero
    t0 = time.monotonic()
    wait_for(lambda: not control.status()["watchdog_ok"], 1.0, "watchdog trip")
    assert time.monotonic() - t0 <= cfg.virtual_plc.watchdog_timeout_s + 0.05
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3, 1.0, "stop")
    st = control.status()
    assert st["angles"] == pytest.approx([0.2, 0.15], abs=1e-6)   # steering held
    mon = cfg.monitor.decode(client.db_read(cfg.monitor_db, 0, cfg.monitor.size))
    assert mon["watchdog"]


def test_status_bits_and_stop_bit(plc):
    client, control = plc
    cfg = load_config(None, {"model": "ackermann"})
    control.faults(fault=True, estop=True, auto=False)
    time.sleep(0.02)
    mon = cfg.monitor.decode(client.db_read(cfg.monitor_db, 0, cfg.monitor.size))
    assert mon["fault"] and mon["estop"] and not mon["auto"] and mon["ready"]
    control.faults(fault=False, estop=False, auto=True)
    values = {"alive": 0, "enable": True, "stop": True, "seq": 0, "speed_sp_rl": 0.5,
              "speed_sp_rr": 0.5, "angle_sp_fl": 0.0, "angle_sp_fr": 0.0}
    for i in range(1, 30):                       # alive, but the stop bit is set
        values.update(alive=i, seq=i)
        client.db_write(cfg.control_db, 0, bytearray(cfg.control.encode(values)))
        time.sleep(0.01)
    assert control.status()["speeds"] == [0.0, 0.0]
    assert len(control.writes()) == 29
    with pytest.raises(RuntimeError, match="unknown fault 'smoke'"):
        control.faults(smoke=True)


def test_plc_watchdog_stops_the_machine_when_the_bridge_is_killed(redis_server, node_processes,
                                                                  tmp_path):
    def spawn(module, args):
        proc = NodeProcess(module, args, log_dir=tmp_path)
        node_processes.append(proc)
        return proc
    rig = HilRig("skid_steer", redis_server.url, spawn)
    rig.heartbeat.start()
    bridge = spawn("plc_bridge.bridge_cli", ["--redis-url", redis_server.url, "--plc-port",
                                             str(rig.plc_port), "--model", "skid_steer"])
    try:
        rig.command(0.8, 0.0, 0.0)
        wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", 10.0, "bridge running")
        wait_for(lambda: rig.plc.status()["speeds"][0] > 0.7, 2.0, "tracks at speed")
        t0 = time.monotonic()
        bridge.proc.send_signal(signal.SIGKILL)  # no goodbye stop: only the PLC can react
        bridge.proc.wait(5)
        wait_for(lambda: not rig.plc.status()["watchdog_ok"], 1.0, "PLC watchdog trip")
        assert time.monotonic() - t0 <= rig.config.virtual_plc.watchdog_timeout_s + 0.05
        wait_for(lambda: np.max(np.abs(rig.plc.status()["speeds"])) < 1e-3, 1.0,
                 "the plant to stop")
    finally:
        rig.heartbeat.stop()
        rig.plc.close()
