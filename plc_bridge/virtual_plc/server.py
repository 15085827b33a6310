"""The virtual PLC: a python-snap7 ``Server`` with the bridge's data blocks, a plant and a watchdog.

ROS-free core for HIL tests and the demo. It registers the control DB (bridge -> PLC) and the
monitor DB (PLC -> bridge) with exactly the layout of ``config/plc.yaml`` and runs a PLC cycle
in a thread at ``virtual_plc.plant_hz``:

1. every received write of the control DB is judged when it arrives, in the S7 handler
   (``plant.CommandGuard``, the rules of docs/plc_setup.md section 4): a block whose ``crc``
   does not match is half written (``command_crc``) and no write at all (logged ``"torn"``,
   counted in ``status()["torn"]``, not a refusal, no sign of life); the watchdog is checked
   before the write is taken (a write delivered late after an outage finds it tripped), a trip
   latches until an explicit stop, a drive command must carry a ``seq`` newer than the last
   accepted one, and a NaN/inf/out-of-range setpoint is a latched ``setpoint_fault``. The cycle
   never reads the raw control DB: it uses only what the guard accepted;
2. watchdog on the bridge's alive counter: stale for ``watchdog_timeout_s`` -> outputs off;
3. drive the plant (first-order speeds, rate-limited steering,
   ``plc_bridge.virtual_plc.plant``): setpoints only when the guard has an accepted drive
   command, ready, automatic, no fault and no e-stop;
   otherwise the speed setpoints are 0 and the steering is held;
4. write the monitor DB: alive counter (+1 per cycle), status bits (``watchdog``,
   ``setpoint_fault``), the count of refused writes and the cause of the last one
   (``refused_reason``), the last accepted ``seq`` (``seq_accepted``, 0: none since start; a
   bridge continues from it when it connects), measured speeds and angles.

An unexpected error in a cycle is logged, stops the outputs and sets ``fault``; the cycle goes
on (a PLC does not stop scanning because of one bad value).

``plant_mode: external`` (config/virtual_plc.yaml; hardware in the loop, docs/plc_setup.md
section 7): the simulated machine is the plant instead of steps 3-4's first-order lag. The
server also holds the ``plant_in`` DB (written by the plant link: the simulation's sensors)
and the ``plant_out`` DB (read by it: the actuators); the guard, the watchdog, the stop bit
and the status bits are as above. Each scan ``hil_program.HilProgram`` closes the per-drive
PI speed loops (and the steering angle loops) on ``plant_in``'s measured values, watches its
alive counter (``plant_lost``, the safe state), and ``plant_out`` is written whole, in one
locked copy, its ``seq`` strictly increasing; the monitor DB reports what ``plant_in``
measured (so the bridge's direct model shows the simulated machine's motion), with
``plant_lost`` and ``drive_saturated``. ``internal`` (the default) registers neither block
and is unchanged.

Fault injection (tests, demo): ``set_faults(fault=, estop=, freeze_alive=, ready=, auto=,
stall=, nan_feedback=, freeze_plant_out=, cpu_stop=)``, ``link_down()`` / ``link_up()``
(stop/restart the S7 server: connections drop). ``cpu_stop``: the CPU in STOP for both servers
(no scan: alive counter and DBs as they were, outputs off; S7 writes land but are not taken,
logged ``refused: "cpu_stop"``; the S7 server's CPU state STOP, though python-snap7 3.3's SZL
answer does not report it; OPC UA writes land and are not taken either, as the S7-1500
manual describes, or are answered BadOutOfService with ``stop_writes="bad"``,
opcua_server.py). ``freeze_plant_out``: the plant program stops writing ``plant_out`` while
the communication still answers (a CPU in STOP answers PUT/GET).
``stall`` makes the server stop answering (a pulled cable): requests hang until it is cleared.
Every write of the control DB is logged with its monotonic time [s], decoded values and the
guard's verdict (``refused``: the reason, or None when taken; ``writes(since)``), every read
of the monitor DB with the alive value it carried (``reads(since)``), so a test in another
process can check what reached the PLC and when (``time.monotonic`` is the system-wide
CLOCK_MONOTONIC on Linux). In external mode the ``plant_in`` writes are logged too
(``plant_writes(since)``), the ``plant_out`` reads with the seq they carried
(``plant_reads(since)``) and the plant program's own ``plant_out`` writes
(``plant_out_writes(since)``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import struct
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from snap7.server import EVC_DATA_READ, EVC_DATA_WRITE, CPUState, Server
from snap7.type import SrvArea, SrvEvent

from plc_bridge.command_crc import is_whole
from plc_bridge.command_seq import to_dint
from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout
from plc_bridge.virtual_plc.exclusive_port import refuse_shared_port, refuse_taken_port
from plc_bridge.virtual_plc.hil_program import HilProgram
from plc_bridge.virtual_plc.plant import CommandGuard, VehiclePlant

_LOG = logging.getLogger("virtual_plc")


@dataclass
class Faults:
    """Injected conditions; all False/True defaults are a healthy PLC in automatic mode."""

    fault: bool = False
    estop: bool = False
    freeze_alive: bool = False
    ready: bool = True
    auto: bool = True
    stall: bool = False
    nan_feedback: bool = False   # a broken sensor: NaN in the first measured speed
    freeze_plant_out: bool = False   # HIL: plant_out no longer written (CPU in STOP)
    # the CPU in STOP: no scan (alive frozen, monitor and plant_out DBs keep their last bytes,
    # outputs off), control writes not taken (logged refused "cpu_stop"; OPC UA with
    # stop_writes="bad": answered BadOutOfService), the S7 server's CPU state STOP; RUN again:
    # the watchdog, tripped by the writes not taken, wants a stop first
    cpu_stop: bool = False


class VirtualPlc:
    """A simulated S7-1200/1500 serving the bridge's DBs on ``host:port``."""

    def __init__(self, config: BridgeConfig, host: str = "127.0.0.1", port: int = 102,
                 write_log_size: int = 50_000):
        self.config = config
        self.host, self.port = host, port
        vp = config.virtual_plc
        vehicle = config.vehicle_params
        self.plant = VehiclePlant(
            n_wheels=len(config.wheels), n_steer=len(config.steering),
            speed_time_constant_s=vp.speed_time_constant_s, steer_rate_rad_s=vp.steer_rate_rad_s,
            steer_limit_rad=float(vehicle.get("max_steer_angle_rad", np.pi)),
            speed_limit_m_s=float(vehicle.get("max_wheel_speed_m_s", 2.0)))
        self.guard = CommandGuard(
            len(config.wheels), len(config.steering), vp.watchdog_timeout_s,
            speed_limit_m_s=self.plant.speed_limit_m_s, steer_limit_rad=self.plant.steer_limit_rad)
        self.internal_error = ""   # the last unexpected error of a cycle (outputs stopped)
        self.drove_at: float | None = None   # monotonic time of the last scan that drove
        self.faults = Faults()
        self._control_buf = bytearray(config.control.size)
        self._monitor_buf = bytearray(config.monitor.size)
        self._server: Server | None = None
        self._lock = threading.Lock()           # faults, counters and snapshots
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # control-DB writes as (monotonic t, raw bytes, refusal reason or None): decoded only
        # when asked for, so the S7 handler answers the write without paying for the log
        self._writes: collections.deque[tuple[float, bytes, str | None]] = collections.deque(
            maxlen=write_log_size)
        # reads of the monitor DB that include its alive counter: (monotonic t, alive value)
        self._reads: collections.deque[tuple[float, int]] = collections.deque(
            maxlen=write_log_size)
        self._alive = 0
        self._watchdog_ok = False
        self._last_control: dict[str, Any] = config.control.zero_values()
        self._speed_sp_names = config.speed_sp_fields()
        self._angle_sp_names = config.angle_sp_fields()
        self.started_at: float | None = None     # monotonic time the server last came up
        # monotonic time at which each injected flag last changed in the monitor DB
        self.changed_at: dict[str, float] = {}
        self._published_faults = asdict(self.faults)
        self.cycles = 0
        self.torn = 0   # control blocks found half written (CRC mismatch): taken as no write
        # HIL (plant_mode external): the simulated machine is the plant
        self.external = vp.plant_mode == "external"
        self.program: HilProgram | None = None
        self._plant_in_buf = bytearray(config.plant_in.size)
        self._plant_out_buf = bytearray(config.plant_out.size)
        self._plant_writes: collections.deque[tuple[float, bytes]] = collections.deque(
            maxlen=write_log_size)
        self._plant_reads: collections.deque[tuple[float, int]] = collections.deque(
            maxlen=write_log_size)
        # the plant program's own plant_out writes (t after the write, seq): bench/hil_loop.py
        self._plant_out_writes: collections.deque[tuple[float, int]] = collections.deque(
            maxlen=write_log_size)
        # the program's mode changes (monotonic t of the scan, mode): what its drives did, for
        # a record that must not count a stopping machine as driving (the demo's figures)
        self._modes: collections.deque[tuple[float, str]] = collections.deque(
            maxlen=write_log_size)
        self._measured: tuple[list[float], list[float]] = ([0.0] * len(config.wheels),
                                                           [0.0] * len(config.steering))
        if self.external:
            self.program = HilProgram(config)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._start_server()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="virtual-plc-cycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2.0)
        with self._lock:
            self.faults.stall = False
        self._stop_server()

    def link_down(self) -> None:
        """Stop the S7 server: the listening socket closes and open connections drop."""
        with self._lock:
            self.faults.stall = False   # release stalled handlers so they can exit
        self._stop_server()

    def link_up(self) -> None:
        if self._server is None:
            self._start_server()

    def _start_server(self) -> None:
        refuse_taken_port(self.host, self.port)
        server = Server(log=False)
        server.register_area(SrvArea.DB, self.config.control_db, self._control_buf)
        server.register_area(SrvArea.DB, self.config.monitor_db, self._monitor_buf)
        if self.external:
            server.register_area(SrvArea.DB, self.config.plant_in_db, self._plant_in_buf)
            server.register_area(SrvArea.DB, self.config.plant_out_db, self._plant_out_buf)
        server.set_events_callback(self._on_event)
        server.start_to(self.host, self.port)
        sock = getattr(server, "server_socket", None)
        if sock is not None:
            self.port = int(sock.getsockname()[1])   # the port bound (for --port 0)
        try:
            refuse_shared_port(self.host, self.port)
        except OSError:
            server.stop()
            raise
        self._server = server
        self.started_at = time.monotonic()

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    # --- S7 events (run in the server's connection threads) ------------------------------------
    def _on_event(self, event: SrvEvent) -> None:
        if event.EvtCode == EVC_DATA_WRITE and event.EvtParam2 == self.config.control_db:
            now = time.monotonic()
            server = self._server
            if server is not None:
                server.lock_area(SrvArea.DB, self.config.control_db)
                try:
                    raw = bytes(self._control_buf)
                finally:
                    server.unlock_area(SrvArea.DB, self.config.control_db)
                why = "cpu_stop" if self.faults.cpu_stop else self._judge(now, raw)
                self._writes.append((now, raw, why))
        elif (event.EvtCode == EVC_DATA_READ and event.EvtParam2 == self.config.monitor_db
              and event.EvtParam3 == 0):
            # the bytes just left the PLC: remember which alive value they carried
            alive = (self._monitor_buf[0] << 8) | self._monitor_buf[1]
            self._reads.append((time.monotonic(), alive))
        elif self.external and event.EvtCode == EVC_DATA_WRITE and \
                event.EvtParam2 == self.config.plant_in_db:
            self._plant_writes.append((time.monotonic(), self._area(self.config.plant_in_db,
                                                                    self._plant_in_buf)))
        elif self.external and event.EvtCode == EVC_DATA_READ and \
                event.EvtParam2 == self.config.plant_out_db and event.EvtParam3 == 0:
            # the bytes just left the PLC: which actuation (seq) they carried
            seq = int.from_bytes(self._plant_out_buf[self._seq_at:self._seq_at + 4], "big",
                                 signed=True)
            self._plant_reads.append((time.monotonic(), seq))
        while self.faults.stall and not self._stop.is_set():
            time.sleep(0.002)   # a pulled cable: the request is never answered

    # --- the PLC cycle -------------------------------------------------------------------------
    def _run(self) -> None:
        period = 1.0 / self.config.virtual_plc.plant_hz
        next_t = time.monotonic()
        last = next_t
        while not self._stop.is_set():
            now = time.monotonic()
            self.cycle(now, now - last)
            last = now
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_t = time.monotonic()   # overrun: resynchronise rather than burst

    def _area(self, db: int, buf: bytearray) -> bytes:
        """A consistent copy of a DB the S7 server may be writing (its area lock)."""
        server = self._server
        if server is None:
            return bytes(buf)
        server.lock_area(SrvArea.DB, db)
        try:
            return bytes(buf)
        finally:
            server.unlock_area(SrvArea.DB, db)

    @property
    def _seq_at(self) -> int:
        return self.config.plant_out.field("seq").byte_offset

    def _judge(self, now: float, raw: bytes) -> str | None:
        """A control-DB write just arrived: the guard takes or refuses it (S7 handler thread);
        returns the refusal reason, None when taken, ``"torn"`` when the block's CRC does not
        match (a command half written: no write at all, not a refusal; it does not feed the
        watchdog either, so a writer whose every block is torn trips it)."""
        cfg = self.config
        why: str | None = None
        if not is_whole(cfg.control, raw):
            self.count_torn()
            return "torn"
        try:
            ctrl = cfg.control.decode(raw)
            with self._lock:
                why = self.guard.on_write(
                    now, int(ctrl["alive"]), bool(ctrl["enable"]), bool(ctrl["stop"]),
                    int(ctrl["seq"]) & 0xFFFFFFFF,
                    [float(ctrl[n]) for n in self._speed_sp_names],
                    [float(ctrl[n]) for n in self._angle_sp_names])
                self._last_control = ctrl
        except Exception as e:  # noqa: BLE001 - a bad write must not end the S7 handler
            _LOG.exception("virtual PLC: control write not judged")
            self.internal_error = f"{type(e).__name__}: {e}"
            why = "not_judged"
        return why

    def cycle(self, now: float, dt: float) -> None:
        """One PLC scan: guard, plant, monitor DB. Never raises: an unexpected error stops the
        outputs, sets ``fault`` in the monitor DB and the scan goes on."""
        try:
            self._cycle(now, dt)
        except Exception as e:  # noqa: BLE001 - a PLC keeps scanning
            _LOG.exception("virtual PLC cycle failed; outputs stopped, fault set")
            self.internal_error = f"{type(e).__name__}: {e}"
            with contextlib.suppress(Exception):
                self.plant.stop()
                self.plant.step(max(0.0, min(dt, 1.0)))

    def _cycle(self, now: float, dt: float) -> None:
        if self.faults.cpu_stop:
            self._cycle_stopped(now, dt)
            return
        server = self._server
        if server is not None and server.cpu_state != CPUState.RUN:
            server.set_cpu_status(8)   # RUN
        if self.program is not None:
            self._cycle_external(now, dt, self.program)
            return
        cfg = self.config
        server = self._server
        with self._lock:
            f = dataclasses.replace(self.faults)   # a copy (asdict is ~10x slower: GIL time)
            ok_drive, speeds, angles = self.guard.command(now)
            tripped = self.guard.tripped
            sp_fault = self.guard.setpoint_fault
            refused = self.guard.refused_total
            refused_reason = self.guard.refused_reason
            seq_accepted = self.guard.seq_accepted
        fault = f.fault or bool(self.internal_error)
        drive = ok_drive and f.ready and f.auto and not fault and not f.estop
        dt = min(max(dt, 0.0), 1.0)   # a paused process (SIGSTOP) resumes with one long step
        if drive:
            self.drove_at = now
            self.plant.step(dt, speeds, angles)
        else:   # stop, e-stop, watchdog: speeds ramp to 0, steering held where it is
            self.plant.stop()
            self.plant.step(dt)
        if not f.freeze_alive:
            self._alive = (self._alive + 1) & 0xFFFF
        values: dict[str, Any] = {
            "alive": self._alive, "ready": f.ready, "fault": fault, "estop": f.estop,
            "auto": f.auto}
        if cfg.monitor.has("watchdog"):
            values["watchdog"] = tripped
        if cfg.monitor.has("setpoint_fault"):
            values["setpoint_fault"] = sp_fault
        for name in ("plant_lost", "drive_saturated", "drive_fault"):   # HIL bits: no plant here
            if cfg.monitor.has(name):
                values[name] = False
        if cfg.monitor.has("refused"):
            values["refused"] = min(refused, 2**31 - 1)
        if cfg.monitor.has("refused_reason"):
            values["refused_reason"] = refused_reason
        values["seq_accepted"] = to_dint(seq_accepted)
        for name, v in zip(cfg.speed_fields(), self.plant.speeds, strict=True):
            values[name] = float(v)
        for name, v in zip(cfg.angle_fields(), self.plant.angles, strict=True):
            values[name] = float(v)
        data = cfg.monitor.encode(values)
        if f.nan_feedback:   # the encoder refuses NaN, so corrupt the bytes like a bad sensor
            field = cfg.monitor.field(cfg.speed_fields()[0])
            data = data[:field.byte_offset] + struct.pack(">f", math.nan) + \
                data[field.byte_offset + 4:]
        if server is not None:
            server.lock_area(SrvArea.DB, cfg.monitor_db)
            try:
                self._monitor_buf[:] = data
            finally:
                server.unlock_area(SrvArea.DB, cfg.monitor_db)
        else:
            self._monitor_buf[:] = data
        now_after = time.monotonic()
        with self._lock:
            self._watchdog_ok = not tripped
            self.cycles += 1
            flags = {**vars(f), "watchdog": tripped, "setpoint_fault": sp_fault}
            for name, value in flags.items():
                if self._published_faults.get(name) != value:
                    self.changed_at[name] = now_after   # visible to readers from now on
            self._published_faults = dict(flags)

    def _cycle_external(self, now: float, dt: float, program: HilProgram) -> None:
        """One scan in HIL: guard, the speed and steering loops on plant_in, plant_out written
        whole (one locked copy), the monitor DB from what plant_in measured."""
        cfg = self.config
        with self._lock:
            f = dataclasses.replace(self.faults)
            ok_drive, speeds, angles = self.guard.command(now)
            drive_requested = self.guard.drive_command
            tripped = self.guard.tripped
            sp_fault = self.guard.setpoint_fault
            refused = self.guard.refused_total
            refused_reason = self.guard.refused_reason
            seq_accepted = self.guard.seq_accepted
        plant_in = cfg.plant_in.decode(self._area(cfg.plant_in_db, self._plant_in_buf))
        plc_fault = f.fault or bool(self.internal_error)
        safe = plc_fault or f.estop
        drive = ok_drive and f.ready and f.auto and not safe
        dt = min(max(dt, 0.0), 1.0)
        res = program.scan(now, dt, drive, safe, speeds, angles, plant_in, drive_requested)
        if res.mode == "drive":
            self.drove_at = now
        if not self._modes or self._modes[-1][1] != res.mode:
            self._modes.append((now, res.mode))
        if not f.freeze_plant_out:
            self._put(cfg.plant_out_db, self._plant_out_buf, cfg.plant_out.encode(res.plant_out))
            self._plant_out_writes.append((time.monotonic(), int(res.plant_out["seq"])))
        if not f.freeze_alive:
            self._alive = (self._alive + 1) & 0xFFFF
        values: dict[str, Any] = {
            "alive": self._alive, "ready": f.ready, "fault": plc_fault or bool(res.fault),
            "estop": f.estop, "auto": f.auto}
        optional = {"watchdog": tripped, "setpoint_fault": sp_fault, "plant_lost":
                    res.plant_lost, "drive_saturated": res.saturated,
                    "drive_fault": bool(res.fault) and not res.plant_lost,
                    "refused": min(refused, 2**31 - 1), "refused_reason": refused_reason}
        values.update({k: v for k, v in optional.items() if cfg.monitor.has(k)})
        values["seq_accepted"] = to_dint(seq_accepted)
        values.update(zip(cfg.speed_fields(), res.speeds, strict=True))
        values.update(zip(cfg.angle_fields(), res.angles, strict=True))
        data = cfg.monitor.encode(values, nonfinite_ok=True)   # a bad sensor shows as it is
        if f.nan_feedback:
            field = cfg.monitor.field(cfg.speed_fields()[0])
            data = data[:field.byte_offset] + struct.pack(">f", math.nan) + \
                data[field.byte_offset + 4:]
        self._put(cfg.monitor_db, self._monitor_buf, data)
        now_after = time.monotonic()
        with self._lock:
            self._watchdog_ok = not tripped
            self._measured = (res.speeds, res.angles)
            self.cycles += 1
            flags = {**vars(f), "watchdog": tripped, "setpoint_fault": sp_fault,
                     "plant_lost": res.plant_lost, "drive_saturated": res.saturated,
                     "hil_fault": bool(res.fault)}
            for name, value in flags.items():
                if self._published_faults.get(name) != value:
                    self.changed_at[name] = now_after   # visible to readers from now on
            self._published_faults = dict(flags)

    def _cycle_stopped(self, now: float, dt: float) -> None:
        """The CPU in STOP: the program does not run. Outputs off (the internal plant's speeds
        ramp to 0, steering held), the alive counter and every DB as they were; the S7
        server's CPU state is STOP."""
        server = self._server
        if server is not None and server.cpu_state != CPUState.STOP:
            server.set_cpu_status(4)   # STOP
        if self.program is None:
            self.plant.stop()
            self.plant.step(min(max(dt, 0.0), 1.0))
        now_after = time.monotonic()
        with self._lock:
            flags = {**self._published_faults, "cpu_stop": True}
            for name, value in flags.items():
                if self._published_faults.get(name) != value:
                    self.changed_at[name] = now_after
            self._published_faults = flags

    def _put(self, db: int, buf: bytearray, data: bytes) -> None:
        """Replace a DB's bytes in one locked copy: a reader sees all of it or none of it."""
        server = self._server
        if server is None:
            buf[:] = data
            return
        server.lock_area(SrvArea.DB, db)
        try:
            buf[:] = data
        finally:
            server.unlock_area(SrvArea.DB, db)

    # --- inspection and fault injection --------------------------------------------------------
    def set_faults(self, **flags: bool) -> dict[str, bool]:
        with self._lock:
            for name, value in flags.items():
                if not hasattr(self.faults, name):
                    raise ValueError(f"unknown fault {name!r}; known: "
                                     f"{', '.join(asdict(self.faults))}")
                setattr(self.faults, name, bool(value))
            return asdict(self.faults)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "faults": asdict(self.faults), "watchdog_ok": self._watchdog_ok,
                "setpoint_fault": self.guard.setpoint_fault, "fault_text": self.guard.fault_text,
                "refused": dict(self.guard.refused), "last_seq": self.guard.last_seq,
                "last_refusal": self.guard.last_refusal,
                "seq_accepted": self.guard.seq_accepted,
                "internal_error": self.internal_error, "port": self.port,
                "drove_at": self.drove_at,
                # the scan that last saw plant_in's alive counter change (its watchdog's time)
                "plant_alive_seen_at": (self.program.watchdog.last_change_s
                                        if self.program is not None else None),
                "control": dict(self._last_control), "alive": self._alive,
                "speeds": (list(self._measured[0]) if self.external
                           else [float(v) for v in self.plant.speeds]),
                "angles": (list(self._measured[1]) if self.external
                           else [float(v) for v in self.plant.angles]),
                "plant_mode": self.config.virtual_plc.plant_mode,
                "hil": self._hil_status(),
                "link_up": self._server is not None, "started_at": self.started_at,
                "cycles": self.cycles, "writes": len(self._writes), "torn": self.torn,
                "now": time.monotonic(),
                "changed_at": dict(self.changed_at),
            }

    def _hil_status(self) -> dict[str, Any] | None:
        res = self.program.last if self.program is not None else None
        if res is None:
            return None
        return {"mode": res.mode, "plant_lost": res.plant_lost, "saturated": res.saturated,
                "fault": res.fault, "torques": res.torques, "steer_rates": res.steer_rates,
                "seq": res.plant_out["seq"], "plant_out_alive": res.plant_out["alive"]}

    def plant_writes(self, since: float = 0.0) -> list[dict[str, Any]]:
        """Logged plant_in writes with ``t >= since`` (monotonic seconds), decoded."""
        decode = self.config.plant_in.decode
        return [{**decode(raw), "t": t} for t, raw in list(self._plant_writes) if t >= since]

    def plant_reads(self, since: float = 0.0) -> list[tuple[float, int]]:
        """Logged plant_out reads ``(t, seq)`` with ``t >= since``."""
        return [r for r in list(self._plant_reads) if r[0] >= since]

    def modes(self, since: float = 0.0) -> list[tuple[float, str]]:
        """HIL: the program's mode changes ``(t, mode)`` (monotonic t of the scan that changed
        it; ``drive``, ``stopping``, ``parked`` or ``safe``), the one in force at ``since``
        first."""
        log = list(self._modes)
        first = max((k for k, (t, _) in enumerate(log) if t <= since), default=0)
        return log[first:]

    def plant_out_writes(self, since: float = 0.0) -> list[tuple[float, int]]:
        """The plant program's logged plant_out writes ``(t, seq)`` with ``t >= since`` (t just
        after the block was in place)."""
        return [w for w in list(self._plant_out_writes) if w[0] >= since]

    def reads(self, since: float = 0.0) -> list[tuple[float, int]]:
        """Logged monitor-DB reads ``(t, alive)`` with ``t >= since`` (benchmark)."""
        return [r for r in list(self._reads) if r[0] >= since]

    def writes(self, since: float = 0.0) -> list[dict[str, Any]]:
        """Logged control-DB writes with ``t >= since`` (monotonic seconds), decoded, with the
        guard's verdict (``refused``: the reason, or None when the write was taken)."""
        decode = self.config.control.decode
        return [{**decode(raw), "t": t, "refused": why}
                for t, raw, why in list(self._writes) if t >= since]

    # --- the same state for the OPC UA server (virtual_plc.opcua_server) -----------------------
    def blocks(self) -> dict[str, tuple[DbLayout, bytearray, bool]]:
        """The data blocks this PLC serves: role -> (layout, its bytes, writable by clients)."""
        cfg = self.config
        out = {"control": (cfg.control, self._control_buf, True),
               "monitor": (cfg.monitor, self._monitor_buf, False)}
        if self.external:
            out["plant_in"] = (cfg.plant_in, self._plant_in_buf, True)
            out["plant_out"] = (cfg.plant_out, self._plant_out_buf, False)
        return out

    def snapshot(self, role: str) -> bytes:
        """A consistent copy of a block (the S7 server's area lock)."""
        layout, buf, _ = self.blocks()[role]
        return self._area(layout.db_number, buf)

    def write_field(self, role: str, name: str, value: float | int | bool) -> bytes:
        """Set one variable of a block, as an OPC UA write does, under the S7 area lock (read,
        change, write back: an S7 write cannot interleave); returns the block's new bytes."""
        layout, buf, _ = self.blocks()[role]
        server = self._server
        if server is not None:
            server.lock_area(SrvArea.DB, layout.db_number)
        try:
            values = layout.decode(bytes(buf))
            values[name] = value
            buf[:] = layout.encode(values, nonfinite_ok=True)
            return bytes(buf)
        finally:
            if server is not None:
                server.unlock_area(SrvArea.DB, layout.db_number)

    def count_torn(self) -> None:
        """A control block found half written (its CRC does not match): no write at all."""
        with self._lock:
            self.torn += 1

    def take_control(self, now: float, raw: bytes) -> str | None:
        """The control block as a PLC scan finds it after an OPC UA write: judged and logged as
        an S7 write is (``writes``); returns the refusal reason, None when taken, ``"torn"``
        when half written."""
        why = self._judge(now, raw)
        self._writes.append((now, raw, why))
        return why

    def log_untaken_control(self, now: float, raw: bytes) -> None:
        """An OPC UA write that landed in the control block of a CPU in STOP: no scan takes it;
        logged as an S7 write in STOP is (``refused: "cpu_stop"``)."""
        self._writes.append((now, raw, "cpu_stop"))

    def log_read(self, role: str, raw: bytes, now: float) -> None:
        """An OPC UA read that carried the monitor's alive counter or plant_out's seq."""
        if role == "monitor":
            self._reads.append((now, (raw[0] << 8) | raw[1]))
        elif role == "plant_out":
            self._plant_reads.append(
                (now, int.from_bytes(raw[self._seq_at:self._seq_at + 4], "big", signed=True)))

    def log_plant_in(self, raw: bytes, now: float) -> None:
        self._plant_writes.append((now, raw))
