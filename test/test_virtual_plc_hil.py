"""The virtual PLC in HIL mode (``plant_mode: external``) in its own process, over real S7: the
test plays the bridge (control DB, ``test_virtual_plc.Writer``) and the plant link / simulation
(a thread writing ``plant_in`` with its own snap7 connection, reads of ``plant_out``).

Nothing is timed on the test's clock (see test_virtual_plc.py): the plant watchdog is judged
on the PLC's own log of plant_in writes and the moment ``plant_lost`` reached its monitor DB;
the tests not about a watchdog give the PLC 10 s ones, so a stalled test process cannot trip
them; states are waited for."""

from __future__ import annotations

import itertools
import math
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import snap7
from helpers import EVENT_WAIT_S, NodeProcess, free_port, ros_parameters_file, wait_for
from test_virtual_plc import PATIENT_WATCHDOG_S, Writer

from plc_bridge.config import BridgeConfig, load_config, load_virtual_plc
from plc_bridge.virtual_plc.control import ControlClient

VP = load_virtual_plc()
LIMIT = VP.torque_limit_nm


class PlantFeeder:
    """The simulation side: writes plant_in every 10 ms with its alive counter +1 (while
    ``alive``), the measured ``speeds`` and flags given, on its own S7 connection."""

    def __init__(self, cfg: BridgeConfig, port: int, alive: bool = True) -> None:
        self.cfg = cfg
        self.client = snap7.Client()
        self.client.connect("127.0.0.1", 0, 1, port)
        self.values: dict[str, Any] = {**cfg.plant_in.zero_values(), "drive_ready": True}
        self.alive = alive
        self.raw_speed0: float | None = None   # a REAL bit pattern for the first speed (NaN)
        self.writes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def set(self, **values: Any) -> None:
        with self._lock:
            self.values.update(values)

    def speeds(self, *speeds: float) -> None:
        self.set(**dict(zip(self.cfg.speed_fields(), speeds, strict=True)))

    def _run(self) -> None:
        lay = self.cfg.plant_in
        while not self._stop.is_set():
            with self._lock:
                if self.alive:
                    self.values["alive"] = (self.values["alive"] + 1) & 0xFFFF
                    self.values["sim_time"] = (self.values["sim_time"] + 10) % 2**31
                data = bytearray(lay.encode(self.values))
                if self.raw_speed0 is not None:
                    at = lay.field(self.cfg.speed_fields()[0]).byte_offset
                    data[at:at + 4] = struct.pack(">f", self.raw_speed0)
            self.client.db_write(self.cfg.plant_in_db, 0, data)
            self.writes += 1
            self._stop.wait(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.client.disconnect()


class Hil:
    """The virtual PLC (external mode) + a bridge stand-in + a plant feeder."""

    def __init__(self, node_processes, tmp_path, plant_watchdog_s: float = PATIENT_WATCHDOG_S,
                 model: str = "skid_steer", plant_alive: bool = True) -> None:
        port, cport = free_port(), free_port()
        plant = ros_parameters_file(tmp_path / "virtual_plc_hil.yaml", {
            "watchdog_timeout_s": PATIENT_WATCHDOG_S, "plant_mode": "external",
            "plant_watchdog_timeout_s": plant_watchdog_s})
        self.proc = NodeProcess("plc_bridge.virtual_plc.cli",
                                ["--port", str(port), "--control-port", str(cport), "--model",
                                 model, "--plant-config", str(plant)], log_dir=tmp_path)
        node_processes.append(self.proc)
        self.control: ControlClient = wait_for(lambda: _try(cport), EVENT_WAIT_S, "control channel")
        self.cfg = load_config(None, {"model": model})
        self.client = snap7.Client()
        self.client.connect("127.0.0.1", 0, 1, port)
        self.bridge = Writer(self.client, model)
        self.plant = PlantFeeder(self.cfg, port, plant_alive)
        self.port = port

    def plant_out(self) -> dict[str, Any]:
        cfg = self.cfg
        return cfg.plant_out.decode(self.client.db_read(cfg.plant_out_db, 0, cfg.plant_out.size))

    def torques(self) -> list[float]:
        out = self.plant_out()
        return [out[n] for n in self.cfg.torque_sp_fields()]

    def stop(self) -> None:
        """A live bridge's explicit stop."""
        self.bridge.write(False, (0.0,) * len(self.cfg.wheels), (0.0,) * len(self.cfg.steering))

    def drive(self, *speeds: float, angles: tuple[float, ...] | None = None) -> None:
        """A live bridge's command (after a stop if the PLC's latch wants one)."""
        if self.bridge.monitor()["watchdog"]:
            self.stop()
        self.bridge.write(True, speeds, angles if angles is not None
                          else (0.0,) * len(self.cfg.steering))

    def rates(self) -> list[float]:
        out = self.plant_out()
        return [out[n] for n in self.cfg.steer_rate_sp_fields()]

    def close(self) -> None:
        self.plant.close()
        self.client.disconnect()
        self.control.close()


def _try(port: int) -> ControlClient | None:
    try:
        return ControlClient(port)
    except OSError:
        return None


@pytest.fixture
def hil(node_processes, tmp_path) -> Iterator[Hil]:
    rig = Hil(node_processes, tmp_path)
    yield rig
    rig.close()


def _alive_plant(rig: Hil) -> None:
    """Stops from a live bridge until the PLC sees the plant alive (plant_lost clear) and the
    speeds the feeder was last given."""
    def seen() -> bool:
        rig.stop()
        mon = rig.bridge.monitor()
        with rig.plant._lock:
            fed = [rig.plant.values[n] for n in rig.cfg.speed_fields()]
        return not mon["plant_lost"] and all(
            mon[n] == pytest.approx(v, abs=1e-6) for n, v in
            zip(rig.cfg.speed_fields(), fed, strict=True))

    wait_for(seen,
             EVENT_WAIT_S, "plant_lost cleared by a live plant and a stop, the fed speeds seen")


def test_external_mode_serves_the_plant_blocks_and_starts_with_the_plant_lost(
        node_processes, tmp_path):
    """A plant_in whose alive counter never moved: plant_lost and fault in the monitor DB, the
    drives in the safe state (enable off, brake on, torque 0), also under a drive command."""
    rig = Hil(node_processes, tmp_path, plant_alive=False)
    try:
        for _ in range(3):
            rig.stop()
        rig.drive(0.5, 0.5)
        mon = wait_for(lambda: (m := rig.bridge.monitor())["plant_lost"] and m, EVENT_WAIT_S,
                       "plant_lost")
        assert mon["fault"] and not mon["drive_saturated"]
        out = rig.plant_out()
        assert not out["enable"] and out["brake"] and rig.torques() == [0.0, 0.0]
        st = rig.control.status()
        assert st["plant_mode"] == "external" and st["hil"]["mode"] == "safe"
        assert "plant lost" in st["hil"]["fault"] and st["drove_at"] is None
    finally:
        rig.close()


def test_set_point_gives_torque_of_the_right_sign_and_pi_behaviour(hil):
    """Measured speeds held at 0.4 / 0.4 m/s, set-points +1.0 / -0.2: the left torque is
    positive and grows (integral action), the right negative; the monitor DB carries the fed
    speeds, never the set-points; plant_out.seq strictly increases."""
    hil.plant.speeds(0.4, 0.4)
    _alive_plant(hil)
    hil.drive(1.0, -0.2)
    first = wait_for(lambda: (o := hil.plant_out())["enable"] and o, EVENT_WAIT_S, "drives enabled")
    assert not first["brake"]
    seqs, left = [first["seq"]], [first["torque_sp_left"]]
    for _ in range(20):
        time.sleep(0.02)
        out = hil.plant_out()
        seqs.append(out["seq"])
        left.append(out["torque_sp_left"])
        assert out["torque_sp_left"] > 0.0 and out["torque_sp_right"] < 0.0
    # two reads may fall in one scan (a starved scan thread): never backwards, and each new
    # block newer; the integral grows once the scans have run
    assert all(b >= a for a, b in itertools.pairwise(seqs))
    assert all(b >= a for a, b in itertools.pairwise(left)), left
    wait_for(lambda: hil.plant_out()["torque_sp_left"] > left[0],
             EVENT_WAIT_S, "the integral growing")
    wait_for(lambda: hil.plant_out()["seq"] > seqs[-1], EVENT_WAIT_S, "a newer plant_out seq")
    mon = hil.bridge.monitor()
    assert mon["speed_left"] == pytest.approx(0.4) and mon["speed_right"] == pytest.approx(0.4)
    assert not mon["fault"] and not mon["plant_lost"]
    # the error persists: the integrator drives the left torque to its limit -> saturated
    wait_for(lambda: hil.torques()[0] == pytest.approx(LIMIT),
             EVENT_WAIT_S, "left torque at its limit")
    wait_for(lambda: hil.bridge.monitor()["drive_saturated"], EVENT_WAIT_S, "drive_saturated")
    # the measurement reaches the set-point: no more error, the torques stop changing
    hil.plant.speeds(1.0, -0.2)
    wait_for(lambda: not hil.bridge.monitor()["drive_saturated"], EVENT_WAIT_S, "not saturated")
    a = hil.torques()
    time.sleep(0.2)
    assert hil.torques() == pytest.approx(a, abs=1e-3)


def test_a_stop_is_a_controlled_stop_then_the_brakes(hil):
    """Driving at 0.6 m/s, the bridge stops: the speed loops brake the drives (negative torque,
    still enabled) until the measured speeds are at rest, then brakes on, drives off."""
    hil.plant.speeds(0.6, 0.6)
    _alive_plant(hil)
    hil.drive(0.6, 0.6)
    wait_for(lambda: hil.plant_out()["enable"], EVENT_WAIT_S, "driving")
    hil.stop()
    wait_for(lambda: hil.control.status()["hil"]["mode"] == "stopping", EVENT_WAIT_S, "stopping")
    torques = hil.torques()
    out = hil.plant_out()
    assert out["enable"] and not out["brake"] and all(t < 0.0 for t in torques)
    wait_for(lambda: hil.torques()[0] < torques[0], EVENT_WAIT_S, "the braking torque growing")
    hil.plant.speeds(0.0, 0.0)
    out = wait_for(lambda: (o := hil.plant_out())["brake"] and o, EVENT_WAIT_S, "parked")
    assert not out["enable"] and hil.torques() == [0.0, 0.0]


def test_plant_lost_when_the_simulation_stops_latched_until_a_stop(node_processes, tmp_path):
    """The shipped plant watchdog: the simulation's alive counter stops -> within
    plant_watchdog_timeout_s (on the PLC's clock) the drives are in the safe state, plant_lost
    and fault in the monitor DB. The counter running again does not clear it while the bridge
    keeps commanding; a stop does, and then the drives answer again."""
    rig = Hil(node_processes, tmp_path, plant_watchdog_s=VP.plant_watchdog_timeout_s)
    try:
        rig.plant.speeds(0.3, 0.3)
        _alive_plant(rig)
        rig.drive(0.5, 0.5)
        wait_for(lambda: rig.plant_out()["enable"], EVENT_WAIT_S, "driving")
        rig.plant.alive = False                    # the simulation freezes
        mon = wait_for(lambda: (m := rig.bridge.monitor())["plant_lost"] and m, EVENT_WAIT_S,
                       "plant_lost")
        assert mon["fault"]
        out = rig.plant_out()
        assert not out["enable"] and out["brake"] and rig.torques() == [0.0, 0.0]
        st = rig.control.status()
        writes = rig.control.plant_writes()
        i = len(writes) - 1                        # the last write that changed alive
        while i > 0 and writes[i - 1]["alive"] == writes[i]["alive"]:
            i -= 1
        t_before = writes[i - 1]["t"] if i > 0 else -math.inf
        # the PLC sees a change in the first scan after the write (a starved scan thread sees
        # it late): its watchdog runs from that scan, as a real PLC's does from its OB1 scan.
        # The write log's time is the server's event, which comes after the bytes are in the
        # block: a scan may see them first (1.5 ms before the event with a core kept busy), so
        # the scan that saw the change is bounded by the write before it, not by its own event
        seen = st["plant_alive_seen_at"]
        assert t_before < seen
        assert st["drove_at"] - seen <= VP.plant_watchdog_timeout_s
        assert st["changed_at"]["plant_lost"] - seen >= VP.plant_watchdog_timeout_s
        rig.plant.alive = True                     # back, but the bridge still commands
        for _ in range(30):
            rig.drive(0.5, 0.5)
            time.sleep(0.01)
        assert rig.bridge.monitor()["plant_lost"] and not rig.plant_out()["enable"]
        _alive_plant(rig)                          # a stop clears it
        rig.drive(0.5, 0.5)
        wait_for(lambda: rig.plant_out()["enable"], EVENT_WAIT_S, "driving again")
    finally:
        rig.close()


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_measured_speed_is_a_fault_with_zero_torque(hil, bad):
    hil.plant.speeds(0.3, 0.3)
    _alive_plant(hil)
    hil.drive(0.5, 0.5)
    wait_for(lambda: hil.plant_out()["enable"], EVENT_WAIT_S, "driving")
    hil.plant.raw_speed0 = bad
    mon = wait_for(lambda: (m := hil.bridge.monitor())["fault"] and m, EVENT_WAIT_S, "fault")
    assert not math.isfinite(mon["speed_left"])             # passed on as the sensor gave it
    out = hil.plant_out()
    assert not out["enable"] and out["brake"] and hil.torques() == [0.0, 0.0]
    assert "measured speed of drive left" in hil.control.status()["hil"]["fault"]
    hil.plant.raw_speed0 = None                              # sensor back, still commanding:
    for _ in range(10):
        hil.drive(0.5, 0.5)
    assert hil.bridge.monitor()["fault"]                     # held until a stop
    _alive_plant(hil)
    wait_for(lambda: not hil.bridge.monitor()["fault"], EVENT_WAIT_S, "fault cleared by the stop")


def test_the_simulations_drive_fault_and_an_estop_give_the_safe_state(hil):
    hil.plant.speeds(0.3, 0.3)
    _alive_plant(hil)
    hil.drive(0.5, 0.5)
    wait_for(lambda: hil.plant_out()["enable"], EVENT_WAIT_S, "driving")
    hil.plant.set(drive_fault=True)
    wait_for(lambda: hil.bridge.monitor()["fault"], EVENT_WAIT_S, "fault from drive_fault")
    assert hil.plant_out()["brake"] and hil.torques() == [0.0, 0.0]
    hil.plant.set(drive_fault=False)
    wait_for(lambda: not hil.bridge.monitor()["fault"], EVENT_WAIT_S, "fault gone with drive_fault")
    hil.drive(0.5, 0.5)
    wait_for(lambda: hil.plant_out()["enable"], EVENT_WAIT_S, "driving")
    hil.control.faults(estop=True)                           # no controlled stop: brakes now
    out = wait_for(lambda: (o := hil.plant_out())["brake"] and o, EVENT_WAIT_S, "brakes on e-stop")
    assert not out["enable"] and hil.torques() == [0.0, 0.0]


def test_a_frozen_plant_program_stops_the_seq(hil):
    """freeze_plant_out (a CPU in STOP still answers PUT/GET): plant_out no longer changes, so
    its seq stays where it was: nothing new for the plant link to forward."""
    hil.plant.speeds(0.0, 0.0)
    _alive_plant(hil)
    wait_for(lambda: hil.control.status()["cycles"] > 10, EVENT_WAIT_S, "scans")
    hil.control.faults(freeze_plant_out=True)
    c = hil.control.status()["cycles"]        # a scan begun before the freeze may still write
    wait_for(lambda: hil.control.status()["cycles"] >= c + 2,
             EVENT_WAIT_S, "a scan after the freeze")
    seq = hil.plant_out()["seq"]
    c = hil.control.status()["cycles"]
    wait_for(lambda: hil.control.status()["cycles"] >= c + 10, EVENT_WAIT_S, "ten frozen scans")
    assert hil.plant_out()["seq"] == seq
    hil.control.faults(freeze_plant_out=False)
    wait_for(lambda: hil.plant_out()["seq"] != seq, EVENT_WAIT_S, "seq moving again")
    reads = hil.control.plant_reads()
    assert reads and all(isinstance(s, int) for _, s in reads)


# --- wheeled machines over S7: their own torque limits and steering rates --------------------
class KeepWriting:
    """The bridge's command written every 20 ms from a thread on its own S7 connection (a live
    bridge: the PLC's watchdog sees its alive counter run; a snap7 client is one thread's),
    continuing ``rig.bridge``'s alive counter and seq. A context manager."""

    def __init__(self, rig: Hil, *speeds: float, angles: tuple[float, ...]) -> None:
        self.client = snap7.Client()
        self.client.connect("127.0.0.1", 0, 1, rig.port)
        self.writer = Writer(self.client, rig.cfg.model)
        self.writer.alive, self.writer.seq = rig.bridge.alive, rig.bridge.seq
        self.command = (speeds, angles)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.writer.write(True, *self.command)

    def __enter__(self) -> KeepWriting:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.client.disconnect()


def test_an_ackermann_machine_gets_its_wheel_drives_limit_and_its_steering_rate(
        node_processes, tmp_path):
    """model ackermann: the rear wheels' speed loops saturate at the wheel drive's limit
    (wheeled.ackermann.torque_limit_nm, 7.79 kN m, not the tracks' 8.55), and the front
    wheels' angle loops command at most the machine's 0.35 rad/s (a 2 rad/s command, the
    internal plant's figure, is a drive fault in the simulation), P below it."""
    rig = Hil(node_processes, tmp_path, model="ackermann")
    tuning = VP.drive_tuning("ackermann")
    assert (tuning.torque_limit_nm, tuning.steer_rate_rad_s) == (7790.0, 0.35)
    try:
        _alive_plant(rig)
        rig.drive(1.0, 1.0, angles=(0.4, 0.05))
        with KeepWriting(rig, 1.0, 1.0, angles=(0.4, 0.05)):
            wait_for(lambda: rig.plant_out()["enable"], EVENT_WAIT_S, "driving")
            rates = rig.rates()
            assert rates == pytest.approx([0.35, VP.steer_kp_1_s * 0.05]), rates
            wait_for(lambda: rig.torques() == pytest.approx([7790.0, 7790.0]), EVENT_WAIT_S,
                     lambda: f"the rear wheels at their drives' limit (now {rig.torques()})")
            wait_for(lambda: rig.bridge.monitor()["drive_saturated"],
                     EVENT_WAIT_S, "drive_saturated")
            assert max(rig.torques()) < LIMIT
    finally:
        rig.close()


def test_a_4ws_machine_steers_first_then_drives(node_processes, tmp_path):
    """model 4wd4ws, a crab command (all wheels to 90 deg) with the wheels straight: the
    steering valves open at the machine's rate, the drives give no torque until the wheels
    point where they should (steer, then drive); once the measured angles are there, they
    drive."""
    rig = Hil(node_processes, tmp_path, model="4wd4ws")
    crab = (math.pi / 2,) * 4
    try:
        _alive_plant(rig)
        rig.drive(0.5, 0.5, 0.5, 0.5, angles=crab)
        with KeepWriting(rig, 0.5, 0.5, 0.5, 0.5, angles=crab):
            wait_for(lambda: rig.plant_out()["enable"], EVENT_WAIT_S, "driving")
            for _ in range(10):
                assert rig.rates() == pytest.approx([0.35] * 4)
                assert rig.torques() == [0.0] * 4           # the wheels point the wrong way
                out = rig.plant_out()   # not held on the brakes: they would lock the steering
                assert out["enable"] and not out["brake"], out
                time.sleep(0.02)
            rig.plant.set(**dict(zip(rig.cfg.angle_fields(), crab, strict=True)))
            wait_for(lambda: all(t > 100.0 for t in rig.torques()), EVENT_WAIT_S,
                     lambda: f"the drives once the wheels are at 90 deg ({rig.torques()})")
            assert rig.rates() == pytest.approx([0.0] * 4, abs=1e-9)
    finally:
        rig.close()


# --- the program alone (pure, no S7): steering loops of the wheeled models, seq ---------------
def _program(model: str):
    import dataclasses

    from plc_bridge.virtual_plc.hil_program import HilProgram

    cfg = load_config(None, {"model": model})
    cfg = dataclasses.replace(cfg, virtual_plc=dataclasses.replace(cfg.virtual_plc,
                                                                  plant_mode="external"))
    return cfg, HilProgram(cfg, seq_start=2**31 - 1)


def _plant_in(cfg: BridgeConfig, alive: int, **values: float) -> dict[str, Any]:
    return {**cfg.plant_in.zero_values(), "alive": alive, **values}


def test_steering_rate_commands_follow_the_angle_error_within_the_rate_limit():
    import numpy as np

    cfg, prog = _program("ackermann")
    t = 0.0
    for k in range(1, 5):   # the plant alive (three changes), no command: lost cleared
        t += 0.005
        res = prog.scan(t, 0.005, False, False, np.zeros(2), np.zeros(2),
                        _plant_in(cfg, k, angle_fl=0.1, angle_fr=0.1), False)
    assert not res.plant_lost and res.mode == "parked" and res.steer_rates == [0.0, 0.0]
    res = prog.scan(t + 0.005, 0.005, True, False, np.array([0.5, 0.5]),
                    np.array([0.3, -0.5]), _plant_in(cfg, 9, angle_fl=0.1, angle_fr=0.1), True)
    kp, rate = VP.steer_kp_1_s, VP.drive_tuning("ackermann").steer_rate_rad_s
    assert rate == 0.35                  # the wheeled machine's steering, not the internal 2.0
    assert res.steer_rates == pytest.approx([min(kp * 0.2, rate), -min(kp * 0.6, rate)])
    assert res.plant_out["steer_rate_sp_fl"] == res.steer_rates[0]
    res = prog.scan(t + 0.01, 0.005, True, False, np.array([0.5, 0.5]),
                    np.array([0.3, -0.5]),
                    _plant_in(cfg, 10, angle_fl=math.nan, angle_fr=0.1), True)
    assert res.mode == "safe" and "angle of fl is nan" in res.fault
    assert res.steer_rates == [0.0, 0.0] and res.torques == [0.0, 0.0]
    assert not res.plant_out["enable"] and res.plant_out["brake"]


def test_a_halted_machine_under_a_zero_command_is_held_on_its_brakes():
    """A zero set-point with the tracks at rest holds the machine on its brakes (the bucket's
    drag must not pull it along against a speed loop holding zero); a set-point releases
    them; a zero set-point while moving is the speed loop's to bring down first."""
    import numpy as np

    cfg, prog = _program("skid_steer")
    t, k = 0.0, 0

    def scan(sp: float, v: float) -> Any:
        nonlocal t, k
        t, k = t + 0.005, k + 1
        return prog.scan(t, 0.005, True, False, np.array([sp, sp]), np.zeros(0),
                         _plant_in(cfg, k, speed_left=v, speed_right=v), True)

    for _ in range(4):                         # the plant alive: lost cleared
        prog.scan(t := t + 0.005, 0.005, False, False, np.zeros(2), np.zeros(0),
                  _plant_in(cfg, k := k + 1), False)
    res = scan(0.0, 0.0)
    assert res.mode == "drive" and res.plant_out["brake"] and res.torques == [0.0, 0.0]
    res = scan(0.0, 0.01)                      # crept below standstill: still held
    assert res.plant_out["brake"] and res.torques == [0.0, 0.0]
    res = scan(0.5, 0.0)                       # a set-point: released, the loop drives
    assert not res.plant_out["brake"] and res.plant_out["enable"]
    assert min(res.torques) > 0.0
    res = scan(0.0, 0.4)                       # zero while moving: the loop brakes it down
    assert not res.plant_out["brake"] and max(res.torques) < 0.0


def test_one_late_plant_in_write_does_not_bring_a_lost_plant_back():
    """A plant_in write held up on a cut link arrives after the fault (a newer alive counter,
    measurements seconds old): plant_lost stays latched; only a counter that runs again clears
    it (three changes, with no drive command in force)."""
    import numpy as np

    cfg, prog = _program("skid_steer")
    wd = VP.plant_watchdog_timeout_s
    t, alive = 0.0, 0

    def scan(step: bool) -> Any:
        nonlocal t, alive
        t += 0.005
        alive += int(step)
        return prog.scan(t, 0.005, False, False, np.zeros(2), np.zeros(0),
                         _plant_in(cfg, alive, speed_left=0.5, speed_right=0.5), False)

    while t < 2 * wd:
        res = scan(True)
    assert not res.plant_lost
    while t < 4 * wd:                                  # the link cut: nothing arrives
        res = scan(False)
    assert res.plant_lost
    res = scan(True)                                   # the one held-up write
    while t < 7 * wd:
        res = scan(False)
        assert res.plant_lost, f"cleared at {t:.3f} s by one late write"
    for k in range(1, 4):                              # the plant link back: running again
        assert scan(True).plant_lost is (k < 3), k     # cleared at the third change


def test_plant_out_seq_is_a_counter_strictly_increasing_across_the_dint_wrap():
    import numpy as np

    from plc_bridge.virtual_plc.plant import seq_newer

    cfg, prog = _program("skid_steer")
    seqs = []
    for k in range(4):
        # the plant link forwarded the previous scan's seq (older than this scan's)
        fwd = seqs[-1] if seqs else 0
        res = prog.scan(0.005 * k, 0.005, False, False, np.zeros(2), np.zeros(0),
                        _plant_in(cfg, k, actuation_seq=fwd), False)
        seqs.append(res.plant_out["seq"])
        assert -(2**31) <= res.plant_out["seq"] < 2**31          # fits the DINT
    assert seqs == [2**31 - 1, -(2**31), -(2**31) + 1, -(2**31) + 2]   # +1 a scan, the wrap
    assert all(seq_newer(b % 2**32, a % 2**32) for a, b in itertools.pairwise(seqs))
    assert prog.seq.sessions == 0                     # given a start: no session was begun


def _block(cfg: BridgeConfig, res: Any) -> bytes:
    return cfg.plant_out.encode(res.plant_out)


def test_a_restarted_program_is_forwarded_at_once_and_nothing_of_the_earlier_run_acts():
    """The plant link stays connected while the PLC program restarts with its counter lost (a
    CPU's STOP -> RUN; the virtual PLC's counter starts afresh too): the new run's first
    plant_out is already newer than everything the link forwarded (it starts beyond the
    link's ``actuation_seq`` in plant_in), so the link forwards it; the earlier run's last
    block, read again, is not forwarded. Both cores are the real ones (HilProgram, the plant
    link's PlantLinkCore), the S7 bytes between them as the blocks hold them."""
    import numpy as np

    from plc_bridge.plant_link.core import PlantLinkCore, Sensors
    from plc_bridge.virtual_plc.hil_program import HilProgram

    cfg, _ = _program("skid_steer")
    link = PlantLinkCore(cfg)

    def exchange(prog: HilProgram, k: int, raw: bytes | None = None) -> tuple[Any, Any]:
        """One exchange of the link (plant_in written, plant_out read) and one PLC scan."""
        sensors = Sensors(stamp_ns=(k + 1) * 10_000_000, speeds=(0.0, 0.0),
                          torques=(0.0, 0.0), angles=(), ground_speed=0.0,
                          drive_ready=True)
        plant_in = cfg.plant_in.decode(link.plant_in(sensors, None))
        res = prog.scan(0.01 * k, 0.01, False, False, np.zeros(2), np.zeros(0), plant_in,
                        False)
        return res, link.plant_out(raw if raw is not None else _block(cfg, res))

    first = HilProgram(cfg)
    forwarded = [act for k in range(50) if (act := exchange(first, k)[1]) is not None]
    assert len(forwarded) == 49              # the first read is the link's baseline
    old_last = _block(cfg, first.last)
    restarted = HilProgram(cfg)              # its counter lost, the link still connected
    res, act = exchange(restarted, 50)
    assert act is not None and act.seq == res.plant_out["seq"] % 2**32, (
        f"the restarted program's first seq {res.plant_out['seq']} was not forwarded (the "
        f"link last forwarded {link.last_forwarded}): its drives would stay braked")
    _, stale = exchange(restarted, 51, raw=old_last)
    assert stale is None                     # the earlier run's block never acts again
    assert all(exchange(restarted, k)[1] is not None for k in range(52, 60))
    # a run whose first scans come before the link's first plant_in (a zero block): once
    # plant_in shows the link forwarded what this run never wrote, it starts beyond that
    early = HilProgram(cfg)
    zero = {**cfg.plant_in.zero_values(), "alive": 0}
    for k in range(3):
        res = early.scan(0.01 * k, 0.01, False, False, np.zeros(2), np.zeros(0), zero, False)
        assert link.plant_out(_block(cfg, res)) is None      # older than what the link holds
    assert exchange(early, 70)[1] is not None and early.seq.sessions == 2
