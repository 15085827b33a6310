"""The virtual PLC in its own process, driven by a plain snap7 client: layout, plant, watchdog,
status bits, and the watchdog stopping the machine when the bridge process dies.

The test process plays the bridge here, and a loaded host may stall it for longer than the
PLC's 0.25 s watchdog, or the PLC's own scan. So nothing is timed on the test's clock: the
watchdog's timing is judged on the PLC's timestamps (its write log, ``drove_at``,
``changed_at``), the stand-in bridge re-arms a tripped watchdog as the real one does, the tests
not about the watchdog give the PLC a 10 s one (``steady_plc``), and a state the PLC publishes
is waited for, not assumed after a sleep."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import snap7
from helpers import EVENT_WAIT_S, STARTUP_TIMEOUT_S, NodeProcess, ros_parameters_file, wait_for

from excavator_hil.hil_harness import HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.command_crc import seal
from plc_bridge.config import load_config
from plc_bridge.virtual_plc.control import ControlClient

# the longest watchdog the virtual PLC takes (plc_bridge/parameters.py): a stall of the test
# process that long is a broken host, not a race
PATIENT_WATCHDOG_S = 10.0


def _serve(node_processes, tmp_path, extra: list[str]) -> Iterator[tuple[snap7.Client,
                                                                            ControlClient]]:
    # port 0: the ports the PLC bound, from its READY line (a port picked here and passed on
    # could be bound by another worker's server in between)
    proc = NodeProcess("plc_bridge.virtual_plc.cli",
                       ["--port", "0", "--control-port", "0", "--model", "ackermann", *extra],
                       log_dir=tmp_path)
    node_processes.append(proc)
    ready = wait_for(lambda: re.search(r"READY port=(\d+) control_port=(\d+)", proc.log()),
                     STARTUP_TIMEOUT_S, "virtual PLC READY")
    port, cport = int(ready.group(1)), int(ready.group(2))
    control = wait_for(lambda: _try(cport), EVENT_WAIT_S, "virtual PLC control channel")
    client = snap7.Client()
    client.connect("127.0.0.1", 0, 1, port)
    yield client, control
    client.disconnect()
    control.close()


@pytest.fixture
def plc(node_processes, tmp_path):
    """The virtual PLC as shipped (config/virtual_plc.yaml: the 0.25 s watchdog)."""
    yield from _serve(node_processes, tmp_path, [])


@pytest.fixture
def steady_plc(node_processes, tmp_path):
    """The virtual PLC with a 10 s watchdog, for tests not about the watchdog: their stand-in
    bridge (this process) may stall longer than 0.25 s on a loaded host."""
    path = ros_parameters_file(tmp_path / "virtual_plc_patient.yaml",
                               {"watchdog_timeout_s": PATIENT_WATCHDOG_S})
    yield from _serve(node_processes, tmp_path, ["--plant-config", str(path)])


def _try(port: int) -> ControlClient | None:
    try:
        return ControlClient(port)
    except OSError:
        return None


def _last_alive_change(writes: list[dict[str, Any]]) -> float:
    """The PLC's time [s] of the logged control write that last changed the alive counter: the
    moment the watchdog times from."""
    i = len(writes) - 1
    while i > 0 and writes[i - 1]["alive"] == writes[i]["alive"]:
        i -= 1
    return float(writes[i]["t"])


def test_plant_follows_setpoints_while_alive_and_watchdog_stops_it(plc):
    client, control = plc
    w = Writer(client)
    timeout = w.cfg.virtual_plc.watchdog_timeout_s   # the PLC's (config/virtual_plc.yaml)
    w.run(3, enable=False)                       # a live bridge: stops, then commands
    mon = w.settle(control, (0.5, 0.7), (0.2, 0.15), tol=1e-4, angle_tol=1e-6)
    assert mon["ready"] and mon["auto"] and not mon["fault"] and not mon["watchdog"]
    assert mon["speed_rl"] == pytest.approx(0.5, abs=1e-4)
    assert mon["speed_rr"] == pytest.approx(0.7, abs=1e-4)
    assert mon["angle_fl"] == pytest.approx(0.2, abs=1e-6)   # 2 rad/s: 0.1 s to get there
    assert mon["angle_fr"] == pytest.approx(0.15, abs=1e-6)
    alive0 = mon["alive"]
    wait_for(lambda: w.monitor()["alive"] != alive0,
             EVENT_WAIT_S, "the PLC's alive counter to count")
    # the bridge's counter stops (settle returned on a command the PLC took, untripped): after
    # watchdog_timeout_s the outputs go to zero. Timed on the PLC's clock: from the last write
    # that changed the alive counter, no scan drove later than the timeout, and the trip is not
    # raised before it.
    wait_for(lambda: not control.status()["watchdog_ok"], EVENT_WAIT_S, "watchdog trip")
    st = control.status()
    t_last = _last_alive_change(control.writes())
    assert st["drove_at"] - t_last <= timeout
    assert st["changed_at"]["watchdog"] - t_last > timeout
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3, EVENT_WAIT_S, "stop")
    st = control.status()
    assert st["angles"] == pytest.approx([0.2, 0.15], abs=1e-6)   # steering held
    assert w.monitor()["watchdog"]


def test_status_bits_and_stop_bit(plc):
    client, control = plc
    cfg = load_config(None, {"model": "ackermann"})
    control.faults(fault=True, estop=True, auto=False)
    wait_for(lambda: (m := cfg.monitor.decode(client.db_read(cfg.monitor_db, 0,
                                                             cfg.monitor.size)))["fault"]
             and m["estop"] and not m["auto"] and m["ready"], EVENT_WAIT_S,
             "fault, estop, manual and ready in the monitor DB")
    control.faults(fault=False, estop=False, auto=True)
    values = {"alive": 0, "enable": True, "stop": True, "seq": 0, "crc": 0, "speed_sp_rl": 0.5,
              "speed_sp_rr": 0.5, "angle_sp_fl": 0.0, "angle_sp_fr": 0.0}
    # two plain stops clear the latched watchdog the PLC starts with (so a drive command would
    # drive), then enable with the stop bit set: alive and newer, but the stop bit wins
    for i in range(1, 30):
        values.update(alive=i, seq=i, enable=i > 2)
        client.db_write(cfg.control_db, 0, bytearray(seal(cfg.control,
                                                          cfg.control.encode(values))))
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
    bridge = spawn("plc_bridge.bridge.cli", ["--redis-url", redis_server.url, "--plc-port",
                                             str(rig.plc_port), "--model", "skid_steer"])
    try:
        rig.command(0.8, 0.0, 0.0)
        wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S, "bridge running")
        wait_for(lambda: rig.plc.status()["speeds"][0] > 0.7, EVENT_WAIT_S, "tracks at speed")
        bridge.proc.send_signal(signal.SIGKILL)  # no goodbye stop: only the PLC can react
        bridge.proc.wait(EVENT_WAIT_S)
        wait_for(lambda: not rig.plc.status()["watchdog_ok"], EVENT_WAIT_S, "PLC watchdog trip")
        # on the PLC's clock: no scan drove later than watchdog_timeout_s after the last write
        # that changed the bridge's alive counter (the killed bridge's last sign of life)
        st = rig.plc.status()
        t_last = _last_alive_change(rig.plc.writes())
        assert st["drove_at"] is not None
        assert st["drove_at"] - t_last <= rig.config.virtual_plc.watchdog_timeout_s
        wait_for(lambda: np.max(np.abs(rig.plc.status()["speeds"])) < 1e-3, EVENT_WAIT_S,
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
        values = {"alive": self.alive, "enable": enable, "stop": not enable, "seq": seq,
                  "crc": 0}
        values.update(zip(self.cfg.speed_sp_fields(), speeds, strict=True))
        values.update(zip(self.cfg.angle_sp_fields(), angles, strict=True))
        self.client.db_write(self.cfg.control_db, 0,
                             bytearray(seal(self.cfg.control, self.cfg.control.encode(values))))
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
        self.client.db_write(self.cfg.control_db, 0,
                             bytearray(seal(self.cfg.control, head[:first] + body)))

    def monitor(self) -> dict:
        return self.cfg.monitor.decode(self.client.db_read(self.cfg.monitor_db, 0,
                                                           self.cfg.monitor.size))

    def run(self, n: int, **kw) -> None:
        for _ in range(n):
            self.write(**kw)
            time.sleep(0.01)

    def settle(self, control: ControlClient, speeds: tuple[float, float],
               angles: tuple[float, float] = (0.0, 0.0), tol: float = 1e-3,
               angle_tol: float | None = None) -> dict[str, Any]:
        """Keep commanding as a live bridge until the plant is at ``speeds`` (and ``angles``
        within ``angle_tol``, if given); returns the monitor DB read then (generous limit: no
        timing in tests).

        As ``plc_bridge.bridge.core`` does after a stall: when the monitor DB shows the watchdog
        tripped, an explicit stop goes before the next command (the latch clears only on one).
        Returns only when the PLC took the last command and its watchdog is clear, so the last
        write is the last sign of life and the PLC was driving then."""
        t_end = time.monotonic() + EVENT_WAIT_S
        tripped = False
        while time.monotonic() < t_end:
            if tripped:
                self.write(False)
            self.write(True, speeds, angles)
            mon = self.monitor()
            st = control.status()
            there = all(abs(mon[n] - v) < tol
                        for n, v in zip(self.cfg.speed_fields(), speeds, strict=True))
            if angle_tol is not None:
                there = there and all(abs(mon[n] - v) < angle_tol for n, v in
                                      zip(self.cfg.angle_fields(), angles, strict=True))
            if there and not mon["watchdog"] and st["watchdog_ok"] \
                    and st["last_seq"] == self.seq % 2**32:
                return mon
            tripped = bool(mon["watchdog"])
            time.sleep(0.01)
        raise AssertionError(f"plant at {st['speeds']} {st['angles']}, not {speeds} {angles}; "
                             f"refused {st['refused']}")

    def stop_until_clear(self) -> None:
        """Explicit stops (a live bridge's) until the monitor DB shows the watchdog clear: one
        clears the latch, the next keep it clear however long this process stalls between."""
        wait_for(lambda: (self.write(False), not self.monitor()["watchdog"])[1], EVENT_WAIT_S,
                 "the watchdog cleared by an explicit stop")


def test_watchdog_trip_latches_until_an_explicit_stop(plc):
    client, control = plc
    w = Writer(client)
    w.run(5, enable=False)
    w.settle(control, (0.5, 0.5))
    time.sleep(w.cfg.virtual_plc.watchdog_timeout_s + 0.2)    # the bridge stalls: trip
    wait_for(lambda: w.monitor()["watchdog"], EVENT_WAIT_S, "the watchdog bit")
    t_resume = time.monotonic()
    before = control.status()["refused"]
    w.run(20, enable=True, speeds=(0.5, 0.5))   # alive +1, newer seq: still refused
    st = control.status()
    assert st["refused"] == {**before, "watchdog_tripped": before["watchdog_tripped"] + 20}
    assert st["drove_at"] < t_resume
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3, EVENT_WAIT_S,
             "the outputs at 0")
    total = sum(st["refused"].values())
    wait_for(lambda: (m := w.monitor())["watchdog"] and m["refused"] == total
             and m["refused_reason"] == 2, EVENT_WAIT_S,
             "the refusals counted in the monitor DB, with their cause (2: watchdog_tripped)")
    w.stop_until_clear()                         # the explicit stop clears it
    assert not w.settle(control, (0.5, 0.5))["watchdog"]


def test_a_write_not_newer_than_the_last_accepted_is_refused(steady_plc):
    client, control = steady_plc
    w = Writer(client)
    w.run(5, enable=False)
    w.settle(control, (0.5, 0.5))
    last = w.seq                                 # settle returns on a command the PLC took
    refused = control.status()["refused"]
    t_replay = control.status()["now"]
    for _ in range(30):                          # an old command replayed: refused
        w.write(True, speeds=(1.5, 1.5), seq=last - 5)
        time.sleep(0.01)
    st = control.status()
    assert st["refused"] == {**refused, "stale_seq": refused["stale_seq"] + 30}
    # the write log says so per write (what the soak judges by): each replay refused
    replays = [x for x in control.writes(t_replay) if x["speed_sp_rl"] == pytest.approx(1.5)]
    assert [x["refused"] for x in replays] == ["stale_seq"] * 30
    assert [x["refused"] for x in control.writes(0.0) if x["seq"] == last][-1] is None
    assert st["speeds"][0] == pytest.approx(0.5, abs=1e-3)
    assert st["last_seq"] == last
    # the monitor DB says so: the cause (1: stale_seq) and the last seq taken, for a bridge
    # that connects to continue from
    wait_for(lambda: (m := w.monitor())["refused_reason"] == 1 and m["seq_accepted"] == last,
             EVENT_WAIT_S, "refused_reason 1 and seq_accepted in the monitor DB")
    # wrap-around of the 32-bit ms counter is newer, not older
    w.seq = 2**31 - 3
    w.run(5, enable=False)                       # seq passes 2^31 - 1 and wraps negative
    mon = w.settle(control, (0.8, 0.8))
    assert w.seq > 2**31 and control.status()["last_seq"] == w.seq % 2**32
    assert mon["speed_rl"] == pytest.approx(0.8, abs=1e-3)
    wait_for(lambda: w.monitor()["seq_accepted"] == w.seq - 2**32, EVENT_WAIT_S,
             "seq_accepted: the DINT of the wrapped value")


def test_a_command_half_written_over_s7_is_no_write_and_feeds_no_watchdog(steady_plc):
    """PUTs of parts of the control DB (a writer that sends the setpoints, then the header):
    the block between them is half written, its crc does not match: the PLC takes nothing
    from it (logged "torn", not a refusal), and a writer whose every block is torn (no valid
    crc: a PLC program or bridge of another version) has no command taken at all and trips
    the watchdog, although its alive counter changes."""
    client, control = steady_plc
    w = Writer(client)
    w.run(5, enable=False)
    w.settle(control, (0.5, 0.5))
    cfg = w.cfg
    first = cfg.control.field(cfg.speed_sp_fields()[0]).byte_offset
    before = control.status()
    t0 = before["now"]
    for k in range(20):   # the new setpoints first, then the header with the new seq and crc
        w.alive, w.seq = (w.alive + 1) & 0xFFFF, w.seq + 1
        speed = 1.0 if k % 2 else 0.9   # each differs from the last: the first PUT tears it
        v = {**cfg.control.zero_values(), "alive": w.alive, "enable": True, "seq": w.seq,
             "speed_sp_rl": speed, "speed_sp_rr": speed}
        raw = seal(cfg.control, cfg.control.encode(v))
        client.db_write(cfg.control_db, first, bytearray(raw[first:]))
        client.db_write(cfg.control_db, 0, bytearray(raw[:first]))
        time.sleep(0.01)
    writes = control.writes(t0)
    assert len(writes) == 40
    assert [x["refused"] for x in writes[0::2]] == ["torn"] * 20   # the setpoints alone
    assert [x["refused"] for x in writes[1::2]] == [None] * 20     # whole once the header is in
    st = control.status()
    assert st["refused"] == before["refused"] and st["torn"] == before["torn"] + 20
    # no valid crc at all: nothing taken, the alive counter's changes feed no watchdog
    t1 = control.status()["now"]
    for _ in range(40):
        w.alive, w.seq = (w.alive + 1) & 0xFFFF, w.seq + 1
        v = {**cfg.control.zero_values(), "alive": w.alive, "enable": True, "seq": w.seq,
             "crc": 12345, "speed_sp_rl": 1.5, "speed_sp_rr": 1.5}
        client.db_write(cfg.control_db, 0, bytearray(cfg.control.encode(v)))
        time.sleep(0.01)
    assert {x["refused"] for x in control.writes(t1)} == {"torn"}
    wait_for(lambda: not control.status()["watchdog_ok"], EVENT_WAIT_S, "the watchdog trip")
    assert control.status()["last_seq"] == writes[-1]["seq"] % 2**32
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3,
             EVENT_WAIT_S, "outputs 0")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 3.0e38, 5.0])
def test_bad_setpoint_is_a_latched_fault_and_the_cycle_keeps_running(steady_plc, bad):
    client, control = steady_plc
    w = Writer(client)
    w.run(5, enable=False)
    w.run(20, enable=True, speeds=(0.5, 0.5))
    w.raw(True, [bad, 0.5, 0.0, 0.0])
    t_fault = time.monotonic()                   # the write was judged before its reply
    mon = wait_for(lambda: (m := w.monitor())["setpoint_fault"] and m,
                   EVENT_WAIT_S, "setpoint_fault")
    alive = mon["alive"]
    st = control.status()
    assert st["refused"]["bad_setpoint"] == 1 and "speed setpoint 0" in st["fault_text"]
    assert mon["refused_reason"] == 4 and st["last_refusal"] == "bad_setpoint"
    before = st["refused"]
    w.run(20, enable=True, speeds=(0.5, 0.5))    # valid, but no stop yet: still refused
    st = control.status()
    assert st["drove_at"] < t_fault
    assert st["refused"] == {**before, "setpoint_fault": before["setpoint_fault"] + 20}
    wait_for(lambda: max(abs(v) for v in control.status()["speeds"]) < 1e-3,
             EVENT_WAIT_S, "outputs 0")
    wait_for(lambda: w.monitor()["alive"] != alive, EVENT_WAIT_S,
             "the PLC cycle to keep running (its alive counter)")
    w.run(2, enable=False)                        # a stop clears it
    assert not w.settle(control, (0.5, 0.6))["setpoint_fault"]


def test_fuzzed_setpoints_over_s7_never_kill_the_plc(steady_plc):
    """Hypothesis REALs (NaN, inf, huge, tiny, -0.0) written with enable set, then one valid
    command after a stop: the PLC is alive and answers it exactly."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    client, control = steady_plc
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
    mon = w.settle(control, (0.3, -0.4), (0.1, 0.12))
    assert mon["alive"] != alive and not mon["fault"] and not mon["setpoint_fault"]
    assert mon["speed_rl"] == pytest.approx(0.3, abs=1e-3)
    assert mon["speed_rr"] == pytest.approx(-0.4, abs=1e-3)
    assert control.status()["internal_error"] == ""


def test_port_zero_reports_the_port_bound(node_processes, tmp_path):
    proc = NodeProcess("plc_bridge.virtual_plc.cli", ["--port", "0", "--control-port", "-1"],
                       log_dir=tmp_path)
    node_processes.append(proc)

    line = wait_for(lambda: re.search(r"READY port=(\d+)", proc.log()), STARTUP_TIMEOUT_S,
                    "READY")
    port = int(line.group(1))
    assert port != 0
    client = snap7.Client()
    client.connect("127.0.0.1", 0, 1, port)   # it really listens there
    assert client.get_connected()
    client.disconnect()


def test_the_write_log_keeps_the_newest_log_size_writes(node_processes, tmp_path):
    """``--log-size``: a long run (the chaos soak, which copies the log every second) keeps the
    PLC's memory flat with a small log; the newest writes are the ones kept."""
    for client, control in _serve(node_processes, tmp_path, ["--log-size", "100"]):
        w = Writer(client)
        w.run(150, enable=False)
        writes = control.writes(0.0)
        assert len(writes) == 100
        assert writes[-1]["seq"] == w.seq and writes[0]["seq"] == w.seq - 99


@pytest.mark.parametrize("args, text", [
    (["--port", "70000"], "70000 is outside 0..65535"),
    (["--port", "-5"], "-5 is outside 0..65535"),
    (["--control-port", "99999"], "99999 is outside -1..65535"),
    (["--port", "x"], "'x' is not an integer"),
    (["--log-size", "5"], "5 is outside 100..10000000"),
])
def test_bad_ports_end_with_one_message_and_exit_2(args, text):
    import subprocess
    import sys

    from helpers import REPO

    proc = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc.cli", *args],
                          check=False, cwd=REPO, capture_output=True, text=True,
                          timeout=STARTUP_TIMEOUT_S)
    assert proc.returncode == 2
    assert text in proc.stderr and "Traceback" not in proc.stderr


def test_a_second_virtual_plc_on_a_served_port_is_refused_and_the_first_serves_on(
        node_processes, tmp_path):
    """python-snap7's server binds with SO_REUSEPORT: without the check a second server joins
    the port and takes every other connection (exclusive_port.py)."""
    import subprocess
    import sys

    from helpers import REPO

    first = NodeProcess("plc_bridge.virtual_plc.cli", ["--port", "0", "--control-port", "-1"],
                        log_dir=tmp_path)
    node_processes.append(first)
    port = int(wait_for(lambda: re.search(r"READY port=(\d+)", first.log()), STARTUP_TIMEOUT_S,
                        "READY").group(1))
    second = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc.cli", "--port",
                             str(port), "--control-port", "-1"], check=False, cwd=REPO,
                            capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"another server already listens on 127.0.0.1:{port}" in second.stderr
    for _ in range(8):   # a shared port would hand some of these to the second server
        client = snap7.Client()
        client.connect("127.0.0.1", 0, 1, port)
        assert client.get_connected()
        client.disconnect()


def test_listeners_on_counts_servers_that_share_a_port_and_no_other_address():
    import socket

    from plc_bridge.virtual_plc.exclusive_port import listeners_on

    def reuse_port_server(port: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return s

    with reuse_port_server(0) as a:
        port = a.getsockname()[1]
        assert listeners_on("127.0.0.1", port) == 1
        with reuse_port_server(port):
            assert listeners_on("127.0.0.1", port) == 2
            assert listeners_on("localhost", port) == 2
            assert listeners_on("0.0.0.0", port) == 2   # the wildcard overlaps them
            assert listeners_on("127.0.0.2", port) == 0


def test_port_in_use_ends_with_one_message_and_exit_2(tmp_path):
    import socket
    import subprocess
    import sys

    from helpers import REPO

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc.cli", "--port",
                               str(port), "--control-port", "-1"], check=False, cwd=REPO,
                              capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot serve S7 on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
