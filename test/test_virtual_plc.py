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


# --- the PLC-side guard over S7 (docs/plc_setup.md section 4) --------------------------------
class Writer:
    """A bridge stand-in: writes whole control DBs with its own alive counter and seq."""

    def __init__(self, client: snap7.Client, model: str = "ackermann") -> None:
        self.client = client
        self.cfg = load_config(None, {"model": model})
        self.alive = 0
        self.seq = 1000

    def write(self, enable: bool, speeds=(0.0, 0.0), angles=(0.0, 0.0), seq: int | None = None,
              alive_step: int = 1) -> dict:
        self.alive = (self.alive + alive_step) & 0xFFFF
        if seq is None:
            self.seq += 1
            seq = self.seq
        seq = (seq + 2**31) % 2**32 - 2**31          # the DINT's two's complement
        values = {"alive": self.alive, "enable": enable, "stop": not enable, "seq": seq}
        values.update(zip(self.cfg.speed_sp_fields(), speeds, strict=True))
        values.update(zip(self.cfg.angle_sp_fields(), angles, strict=True))
        self.client.db_write(self.cfg.control_db, 0, bytearray(self.cfg.control.encode(values)))
        return values

    def raw(self, enable: bool, reals: list[float]) -> None:
        """Any REAL bit pattern in the setpoints (NaN, inf, -0.0, huge), as S7 carries it."""
        import struct

        self.alive = (self.alive + 1) & 0xFFFF
        self.seq += 1
        head = self.cfg.control.encode({**self.cfg.control.zero_values(), "alive": self.alive,
                                        "enable": enable, "stop": not enable, "seq": self.seq})
        first = self.cfg.control.field(self.cfg.speed_sp_fields()[0]).byte_offset
        body = b"".join(struct.pack(">f", v) for v in reals)
        self.client.db_write(self.cfg.control_db, 0, bytearray(head[:first] + body))

    def monitor(self) -> dict:
        return self.cfg.monitor.decode(self.client.db_read(self.cfg.monitor_db, 0,
                                                           self.cfg.monitor.size))

    def run(self, n: int, **kw) -> None:
        for _ in range(n):
            self.write(**kw)
            time.sleep(0.01)

    def settle(self, control: ControlClient, speeds: tuple[float, float],
               angles: tuple[float, float] = (0.0, 0.0), tol: float = 1e-3) -> None:
        """Keep commanding (a live bridge) until the plant is at ``speeds`` (generous limit:
        no timing in tests)."""
        t_end = time.monotonic() + 20.0
        while time.monotonic() < t_end:
            self.write(True, speeds, angles)
            got = control.status()["speeds"]
            if all(abs(a - b) < tol for a, b in zip(got, speeds, strict=True)):
                return
            time.sleep(0.01)
        raise AssertionError(f"plant at {got}, not {speeds}")


def test_watchdog_trip_latches_until_an_explicit_stop(plc):
    client, control = plc
    w = Writer(client)
    w.run(5, enable=False)
    w.settle(control, (0.5, 0.5))
    time.sleep(w.cfg.virtual_plc.watchdog_timeout_s + 0.2)    # the bridge stalls: trip
    wait_for(lambda: w.monitor()["watchdog"], 5.0, "the watchdog bit")
    t_resume = time.monotonic()
    w.run(20, enable=True, speeds=(0.5, 0.5))   # alive +1, newer seq: still refused
    st = control.status()
    assert st["refused"]["watchdog_tripped"] >= 20
    assert max(abs(v) for v in st["speeds"]) < 1e-3
    assert st["drove_at"] < t_resume
    wait_for(lambda: (m := w.monitor())["watchdog"] and m["refused"] >= 20, 5.0,
             "the refusals counted in the monitor DB")
    w.run(2, enable=False)                       # the explicit stop clears it
    w.settle(control, (0.5, 0.5))
    assert not w.monitor()["watchdog"]


def test_a_write_not_newer_than_the_last_accepted_is_refused(plc):
    client, control = plc
    w = Writer(client)
    w.run(5, enable=False)
    w.settle(control, (0.5, 0.5))
    last = w.seq
    refused = control.status()["refused"]["stale_seq"]
    for _ in range(30):                          # an old command replayed: refused
        w.write(True, speeds=(1.5, 1.5), seq=last - 5)
        time.sleep(0.01)
    st = control.status()
    assert st["refused"]["stale_seq"] == refused + 30
    assert st["speeds"][0] == pytest.approx(0.5, abs=1e-3)
    assert st["last_seq"] == last
    # wrap-around of the 32-bit ms counter is newer, not older
    w.seq = 2**31 - 3
    w.run(5, enable=False)                       # seq passes 2^31 - 1 and wraps negative
    w.settle(control, (0.8, 0.8))
    assert w.seq > 2**31 and control.status()["last_seq"] == w.seq % 2**32
    assert control.status()["speeds"][0] == pytest.approx(0.8, abs=1e-3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 3.0e38, 5.0])
def test_bad_setpoint_is_a_latched_fault_and_the_cycle_keeps_running(plc, bad):
    client, control = plc
    w = Writer(client)
    w.run(5, enable=False)
    w.run(20, enable=True, speeds=(0.5, 0.5))
    w.raw(True, [bad, 0.5, 0.0, 0.0])
    t_fault = time.monotonic()                   # the write was judged before its reply
    mon = wait_for(lambda: (m := w.monitor())["setpoint_fault"] and m, 5.0, "setpoint_fault")
    alive = mon["alive"]
    st = control.status()
    assert st["refused"]["bad_setpoint"] == 1 and "speed setpoint 0" in st["fault_text"]
    w.run(20, enable=True, speeds=(0.5, 0.5))    # valid, but no stop yet: still refused
    st = control.status()
    # refused as setpoint_fault (or watchdog_tripped, should the loaded host stall us 0.25 s)
    assert st["drove_at"] < t_fault
    assert st["refused"]["setpoint_fault"] + st["refused"]["watchdog_tripped"] >= 20
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3, 5.0, "outputs 0")
    assert w.monitor()["alive"] != alive          # the PLC cycle keeps running
    w.run(2, enable=False)                        # a stop clears it
    w.settle(control, (0.5, 0.6))
    assert not w.monitor()["setpoint_fault"]


def test_fuzzed_setpoints_over_s7_never_kill_the_plc(plc):
    """Hypothesis REALs (NaN, inf, huge, tiny, -0.0) written with enable set, then one valid
    command after a stop: the PLC is alive and answers it exactly."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    client, control = plc
    w = Writer(client)
    real = st.floats(width=32, allow_nan=True, allow_infinity=True) | st.sampled_from(
        [-0.0, 1e-45, 3.4028235e38, -3.4028235e38, float("nan")])

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(real, min_size=4, max_size=4))
    def feed(reals):
        w.raw(True, reals)

    w.run(3, enable=False)
    feed()
    alive = w.monitor()["alive"]
    w.run(3, enable=False)
    w.settle(control, (0.3, -0.4), (0.1, 0.12))
    mon = w.monitor()
    assert mon["alive"] != alive and not mon["fault"] and not mon["setpoint_fault"]
    assert mon["speed_rl"] == pytest.approx(0.3, abs=1e-3)
    assert mon["speed_rr"] == pytest.approx(-0.4, abs=1e-3)
    assert control.status()["internal_error"] == ""


def test_port_zero_reports_the_port_bound(node_processes, tmp_path):
    proc = NodeProcess("plc_bridge.virtual_plc_cli", ["--port", "0", "--control-port", "-1"],
                       log_dir=tmp_path)
    node_processes.append(proc)
    import re

    line = wait_for(lambda: re.search(r"READY port=(\d+)", proc.log()), 20.0, "READY")
    port = int(line.group(1))
    assert port != 0
    client = snap7.Client()
    client.connect("127.0.0.1", 0, 1, port)   # it really listens there
    assert client.get_connected()
    client.disconnect()


@pytest.mark.parametrize("args, text", [
    (["--port", "70000"], "70000 is outside 0..65535"),
    (["--port", "-5"], "-5 is outside 0..65535"),
    (["--control-port", "99999"], "99999 is outside -1..65535"),
    (["--port", "x"], "'x' is not an integer"),
])
def test_bad_ports_end_with_one_message_and_exit_2(args, text):
    import subprocess
    import sys

    from helpers import REPO

    proc = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc_cli", *args],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert text in proc.stderr and "Traceback" not in proc.stderr


def test_port_in_use_ends_with_one_message_and_exit_2(tmp_path):
    import socket
    import subprocess
    import sys

    from helpers import REPO

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc_cli", "--port",
                               str(port), "--control-port", "-1"], check=False, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot serve S7 on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
