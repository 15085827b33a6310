"""The plant link's exchange thread (no rclpy): at ``exchange_hz``, one read of ``plant_out``
and one write of ``plant_in``, one S7 request in flight, over the bridge's own PLC link code
(``plc_bridge.transport.plc_link.PlcLink``: socket timeouts, RST on loss, background reconnect with
capped back-off, the PDU and reply-time checks at connect, the write allow-list).

Each period:

1. read ``plant_out``; ``core.PlantLinkCore`` decides what of it is forwarded (a newer seq,
   finite values; a baseline after a (re)connect) and ``publish`` gets it at once, in this
   thread, before anything else: the read and its forwarding are one step, so nothing read
   before a link fault can be forwarded after it;
2. write ``plant_in`` from the latest sensors and IMU: ``take_inputs()`` (the node's: it
   takes what arrived on ``plant/sensors`` and ``imu`` since the last period, in this thread)
   just before, so the block carries the newest measurement; ``set_sensors`` / ``set_imu`` (a
   lock and an assignment) are how the values get here either way. Nothing is written before
   the first sensors arrived.

A failed request is a link fault: counted, the link dropped (RST) and reconnected in the
background, the core told (the next read is a baseline), and one braking actuation published
(the simulation brakes at once instead of after its actuation timeout). A period whose exchange
ends after the next tick is ``late``; ticks skipped because of it are ``missed``; periods
without a link are ``link_down_periods``. ``snapshot()`` is what the node reports on
``/diagnostics``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from excavator_common import realtime
from plc_bridge.plant_link.config import PlantLinkConfig
from plc_bridge.plant_link.core import Actuation, ImuReading, PlantLinkCore, Sensors
from plc_bridge.transport.plc_link import PlcLink

_LOG = logging.getLogger("plant_link")

# torn plant_out reads in a row that make the status say so: one is a scan caught mid-write,
# ten (0.1 s at 100 Hz) a PLC program that does not seal the block (another version's)
TORN_RUN_STATUS = 10
STOP_LATENCY_S = 0.1   # longest sleep between two looks at the stop flag
COUNTERS = ("exchanges", "late", "missed", "link_down_periods", "link_faults", "take_errors")


@dataclass
class PlantLinkSnapshot:
    """The state for diagnostics: ``status`` running / waiting_sensors / connecting /
    link_lost / stopped, why (``detail``), the counters (the core's and the loop's)."""

    status: str = "connecting"
    detail: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    connected: bool = False
    plant_in_alive: int = 0
    last_forwarded: int | None = None
    last_refusal: str = ""
    drive_fault: str = ""      # a refused plant_out in force (plant_in drive_fault set)


class PlantLink:
    """The exchange loop of one plant link. ``publish(actuation)`` is called from its thread."""

    def __init__(self, config: PlantLinkConfig, publish: Callable[[Actuation], None],
                 clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None,
                 take_inputs: Callable[[], None] | None = None) -> None:
        self.config = config
        plc = config.plc
        self.core = PlantLinkCore(plc)
        self.plc = PlcLink(plc, read_block=plc.plant_out, write_block=plc.plant_in,
                           allow_list=config.write_allow_list, rate_hz=config.exchange_hz,
                           rate_parameter="exchange_hz", name="plant", who="the plant link",
                           clock=clock)
        self._publish = publish
        self._take_inputs = take_inputs
        self.clock = clock
        self.log = logger or _LOG
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._sensors: Sensors | None = None
        self._imu: ImuReading | None = None
        self._status, self._detail = "connecting", ""
        self._braked = True        # the last thing published was a brake (or nothing yet)
        self._stop = threading.Event()
        self._sleep_fails = False   # time.sleep raised: Event.wait paces (_sleep_until)
        self._thread: threading.Thread | None = None
        self._done = threading.Condition()
        self._exchanges_done = 0

    # --- inputs from the ROS side (any thread) -------------------------------------------------
    def set_sensors(self, sensors: Sensors) -> None:
        with self._lock:
            self._sensors = sensors

    def set_imu(self, imu: ImuReading) -> None:
        with self._lock:
            self._imu = imu

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="plant-link", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """End the loop; the drives are braked (one braking actuation) and the link closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._brake("plant link stopped")
        self.plc.close()
        self._set_status("stopped", "plant link stopped")

    def wait_exchanges(self, n: int, timeout_s: float) -> bool:
        """Wait until ``n`` more periods have run (with or without a link)."""
        with self._done:
            target = self._exchanges_done + n
            return self._done.wait_for(lambda: self._exchanges_done >= target, timeout_s)

    def snapshot(self) -> PlantLinkSnapshot:
        with self._lock:
            status, detail = self._status, self._detail
        return PlantLinkSnapshot(
            status=status, detail=detail,
            counters={**self.counters, **self.core.counters,
                      "plc_reconnects": self.plc.reconnects},
            connected=self.plc.connected, plant_in_alive=self.core.alive,
            last_forwarded=self.core.last_forwarded, last_refusal=self.core.last_refusal,
            drive_fault=self.core.drive_fault)

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        realtime.name_thread("plant-link")
        if self.config.rt_priority > 0:
            try:
                realtime.fifo(self.config.rt_priority)
            except (OSError, AttributeError) as e:
                self.log.warning("plant_link: rt_priority %d not applied (%s); normal "
                                 "scheduling", self.config.rt_priority, e)
        period = self.config.period_s
        next_tick = self.clock()
        while not self._stop.is_set():
            try:
                self.exchange(self.clock())
            except Exception as e:
                self.log.exception("plant_link exchange failed")
                self._fault(f"internal error: {type(e).__name__}: {e}")
            with self._done:
                self._exchanges_done += 1
                self._done.notify_all()
            now = self.clock()
            next_tick += period
            if now >= next_tick:              # the exchange ran past the next tick
                self.counters["late"] += 1
                skipped = int((now - next_tick) // period)
                self.counters["missed"] += skipped
                next_tick += (skipped + 1) * period
            self._sleep_until(next_tick)

    def _sleep_until(self, tick: float) -> None:
        """Until ``tick`` on ``clock`` or a stop. time.sleep, not Event.wait: ~40 us less CPU a
        period (a wait builds a lock and a condition each time); slices of STOP_LATENCY_S keep
        stop() prompt at 1 Hz. Where time.sleep fails (libfaketime with the monotonic clock
        left alone fails Python 3.11's every sleep: wolfcw/libfaketime#426), Event.wait from
        then on, said once: the exchange thread must not end on it."""
        while (delay := tick - self.clock()) > 0.0 and not self._stop.is_set():
            if not self._sleep_fails:
                try:
                    time.sleep(min(delay, STOP_LATENCY_S))
                    continue
                except OSError as e:
                    self._sleep_fails = True
                    self.log.warning("plant_link: time.sleep failed (%s); the exchange is paced "
                                     "by Event.wait from now on", e)
            self._stop.wait(min(delay, STOP_LATENCY_S))

    def exchange(self, now: float) -> None:
        """One period: read plant_out (forward what is fresh), write plant_in."""
        cfg = self.config.plc
        if not self.plc.poll(now):
            self._take()          # sensors judged (and counted) while the link is down too
            self.counters["link_down_periods"] += 1
            self._set_status("connecting" if not self.counters["link_faults"] else "link_lost",
                             f"{self.plc.where}: {self.plc.last_error}")
            return
        if self.plc.just_connected:
            self.plc.just_connected = False
            self.core.link_fault()   # what the PLC holds now may predate the link: a baseline
            if self.plc.slow_warning:
                self.log.warning("plant_link: %s", self.plc.slow_warning)
                self.plc.slow_warning = ""
        raw = self.plc.read(cfg.plant_out_db, cfg.plant_out.size)
        if raw is None:
            self._fault(f"read of plant_out DB{cfg.plant_out_db} failed: {self.plc.last_error}")
            return
        self.counters["exchanges"] += 1
        fault_before = self.core.drive_fault
        act = self.core.plant_out(raw)
        if act is not None:
            if self.core.drive_fault and not fault_before:   # said at its onset, counted after
                self.log.error("plant_link: drive fault: %s (plant_in drive_fault set until a "
                               "valid plant_out is forwarded)", self.core.drive_fault)
            elif fault_before and not self.core.drive_fault:
                self.log.info("plant_link: drive fault cleared: a valid plant_out forwarded")
            self._send(act)
        self._take()
        with self._lock:
            sensors, imu = self._sensors, self._imu
        if sensors is None:
            self._set_status("waiting_sensors", "no plant/sensors received yet: plant_in not "
                             "written (the PLC sees its plant lost)")
            return
        if not self.plc.write(cfg.plant_in_db, self.core.plant_in(sensors, imu)):
            self._fault(f"write of plant_in DB{cfg.plant_in_db} failed: {self.plc.last_error}")
            return
        if self.core.torn_run >= TORN_RUN_STATUS:
            detail = (f"{TORN_RUN_STATUS} or more plant_out reads in a row with a crc that does "
                      "not match the block: nothing forwarded, the drives braked; is the PLC "
                      "program generated from this config/plc.yaml (python -m "
                      "plc_bridge.scl_export --hil, docs/plc_setup.md section 7)?")
            self._brake(detail)   # once: what the simulation last got must not go on acting
            self._set_status("plant_out_torn", detail)
            return
        self._set_status("running", "")

    def _take(self) -> None:
        """The inputs that arrived since the last period (``take_inputs``), if the owner takes
        them here; an error (the node's context gone at shutdown) is counted, said once, and
        never ends the exchange (plant_in is then written from the last values taken)."""
        if self._take_inputs is None:
            return
        try:
            self._take_inputs()
        except Exception:
            self.counters["take_errors"] += 1
            if self.counters["take_errors"] == 1:
                self.log.exception("plant_link: taking plant/sensors and imu failed")

    def _fault(self, detail: str) -> None:
        """A link fault: the link dropped (RST), the core told, the drives braked."""
        self.counters["link_faults"] += 1
        if self.plc.connected:
            self.plc.lost(detail)
        self.core.link_fault()
        self._brake(detail)
        self._set_status("link_lost", detail)

    def _brake(self, reason: str) -> None:
        """One braking actuation, unless the last one published braked already."""
        if not self._braked:
            cfg = self.config.plc
            self._send(Actuation.braking(len(cfg.wheels), len(cfg.steering), reason))

    def _send(self, act: Actuation) -> None:
        self._braked = act.brake and not act.enable
        with contextlib.suppress(Exception):   # a publisher gone at shutdown
            self._publish(act)

    def _set_status(self, status: str, detail: str) -> None:
        with self._lock:
            changed = (status, detail) != (self._status, self._detail)
            self._status, self._detail = status, detail
        if changed:
            text = f"plant_link {status}" + (f" ({detail})" if detail else "")
            (self.log.info if status in ("running", "waiting_sensors", "connecting")
             else self.log.warning)("%s", text)

    def status_values(self) -> dict[str, Any]:
        """Key/values for /diagnostics."""
        snap = self.snapshot()
        cfg = self.config.plc
        return {"status": snap.status, "detail": snap.detail, "plc": f"{cfg.plc_host}:"
                f"{cfg.plc_port}", "plant_in_db": cfg.plant_in_db,
                "plant_out_db": cfg.plant_out_db, "exchange_hz": self.config.exchange_hz,
                "connected": snap.connected, "plant_in_alive": snap.plant_in_alive,
                "last_forwarded_seq": snap.last_forwarded, "last_refusal": snap.last_refusal,
                "drive_fault": snap.drive_fault,
                **{f"counter.{k}": v for k, v in snap.counters.items()}}


def with_overrides(config: PlantLinkConfig, **plc: Any) -> PlantLinkConfig:
    """``config`` with fields of its PLC configuration replaced (tests: a proxy's port)."""
    return dataclasses.replace(config, plc=dataclasses.replace(config.plc, **plc))
