"""The bridge loop: Redis control keys -> inverse model -> S7 control DB, and back.

ROS-free core, in its own thread (an rclpy timer jitters ~4 ms p99 at 100 Hz). Each cycle:

1. one MGET of the control keys (velocities, heartbeat);
2. validate (``input_validation``), track the heartbeat edges, decide forward/stop
   (``command_gate``), inverse model;
3. one ``db_write`` of the whole control DB (alive counter, enable/stop, seq, setpoints, and
   the CRC that lets the PLC take the command only whole: ``command_crc``);
4. one ``db_read`` of the whole monitor DB; direct model;
5. one MSET of the monitor keys, ``plc.bridge.status``/``detail`` and the counters.

Steps 1-3 are the command half, 4-5 the monitor half; a control key that changes while the
command half runs gets a second command half before the monitor half (``run_cycle``).
The loop runs on a fixed tick (``cycle_hz``) and also wakes at once when a ``plc.control.*``
key changes (``redis_link.Waker``: the loop sleeps in ``select()`` on the subscription).
Overruns (a cycle that ends after the next tick) are counted, kept in ``overruns`` and logged.
Fail-safe behaviour (design note plc_bridge.md):

- stop within one cycle on: Redis lost, invalid/NaN/inf/garbage/out-of-envelope input,
  infeasible command, heartbeat not toggled for ``heartbeat_timeout_s``, PLC link lost, PLC
  fault / e-stop / not ready / not automatic / alive counter stale, ``set_enabled(False)``
  (lifecycle deactivate) and ``stop()`` (SIGTERM). A fault bit read in a cycle that forwarded a
  command is answered by a second write (the stop) in the same cycle.
- after any stop, commands are forwarded again only after a fresh heartbeat edge.
- PLC link: socket timeout ``plc_timeout_s`` (link loss seen within ``plc_timeout_s`` + one cycle),
  the lost socket aborted (RST: nothing queued is delivered late), monitor keys set to ``nan``
  and ``plc.monitor.state.valid = false`` at once, reconnect in the background with capped
  back-off + jitter, the first write after a reconnect is a stop.
- every write carries ``seq`` (``command_seq``): the PLC refuses a drive command that is not
  newer than the last one it accepted, so an old write delivered late is never obeyed
  (docs/plc_setup.md section 4). At every connect the bridge reads the PLC's last accepted
  ``seq`` (``seq_accepted``) and starts beyond it and beyond everything it sent before; within
  a connection ``seq`` advances with the bridge's monotonic clock. The wall clock is never read:
  a host clock stepped back across a restart changes nothing.
- the PLC's verdicts: a monitor read whose ``refused`` count went up, or whose ``seq_accepted``
  is newer than anything this bridge sent (another writer), stops the bridge as
  ``stopped:plc_refused`` with the PLC's cause (``refused_reason``) until the PLC has refused
  nothing for ``command_seq.QUIET_S`` and took this bridge's writes again; refused as stale
  while another writer's ``seq_accepted`` stands still for ``QUIET_S``, the bridge starts a new
  sequence session (a stop first).
- liveness in Redis: ``plc.bridge.live``, ``plc.bridge.status`` and ``plc.monitor.state.valid``
  are written every cycle with a TTL of ``monitor_ttl_s``: within that time of the bridge's death
  (even SIGKILL) they are gone, so no consumer takes the last values for live ones. After a
  Redis outage the stop status is written as the first thing on the new connection.
- every stop names its cause (``plc.bridge.detail``, the log, /diagnostics), from the first
  cycle on: redis-py's and snap7's own error text, the parameter to change.
- the bridge's alive counter in the control DB runs only while commands are fresh (Redis up,
  heartbeat fresh): the PLC's own watchdog then stops the machine if the bridge dies or
  its inputs go stale.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from excavator_common import realtime, stall_probe
from excavator_kinematics.errors import InvalidInputError, KinematicsError
from excavator_kinematics.vehicle import (
    BodyTwist,
    VehicleModel,
    WheelCommand,
    artof_from_twist,
    make_vehicle_model,
)
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.command_gate import CommandGate
from plc_bridge.bridge.input_validation import (
    Envelope,
    parse_bool,
    parse_control,
)
from plc_bridge.bridge.redis_link import RedisLink, Waker
from plc_bridge.command_crc import CRC_FIELD, seal
from plc_bridge.command_seq import (
    SEQ_MODULUS,
    CommandSequence,
    RefusalWatch,
    from_dint,
    refusal_name,
    to_dint,
)
from plc_bridge.config import BRIDGE, BridgeConfig
from plc_bridge.errors import BridgeConfigError, InputRejectedError
from plc_bridge.transport.plc_link import PlcLink

_LOG = logging.getLogger("plc_bridge")
# The parameters the loop reads afresh every cycle: they may change while it runs
# (``update_parameters``); the node's own dynamic ones (publish_rate_hz, cmd_vel_timeout_s)
# are applied by the node.
DYNAMIC = frozenset(s.name for s in BRIDGE.parameters if s.dynamic) - \
    {"publish_rate_hz", "cmd_vel_timeout_s"}
# stops that are normal operation (logged as info; every other stop is a warning with its cause)
_NORMAL_STOPS = frozenset({"waiting_heartbeat", "waiting_heartbeat_edge", "deactivated",
                           "inactive", "starting"})


def _fmt(value: float) -> str:
    """10 significant digits, as ARTOF writes them."""
    return f"{value:.10g}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


@dataclass(frozen=True)
class Overrun:
    """A cycle that ended after the tick following the one it served (monotonic seconds)."""

    tick_s: float    # the tick the cycle served
    start_s: float   # when the cycle started (late when the thread woke late)
    end_s: float     # when it ended: >= tick_s + period


@dataclass
class BridgeSnapshot:
    """The latest cycle's outcome, for the ROS shell (odom, wheel states, diagnostics)."""

    stamp_s: float = 0.0
    status: str = "stopped:starting"
    detail: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    plc_connected: bool = False
    redis_connected: bool = False
    monitor_valid: bool = False
    measured: BodyTwist | None = None          # REP-103 twist from the direct model
    commanded: BodyTwist = field(default_factory=BodyTwist)   # achieved twist sent to the PLC
    wheel_speeds: dict[str, float] = field(default_factory=dict)   # [m/s]
    wheel_angles: dict[str, float] = field(default_factory=dict)   # [rad]
    plc_state: dict[str, Any] = field(default_factory=dict)
    seq: int | None = None          # the seq of the last write (unsigned 32 bit)


class BridgeCore:
    """Redis <-> S7 bridge for one vehicle model. ``start()`` runs the loop in a thread.

    ``clock`` is the bridge's only time source (monotonic seconds; only differences count): the
    loop's ticks, the heartbeat and PLC alive ages, and the advance of ``seq``."""

    def __init__(self, config: BridgeConfig, model: VehicleModel | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None):
        self.config = config
        try:
            self.model = model or make_vehicle_model(config.model, config.vehicle_params)
        except KinematicsError as exc:
            raise BridgeConfigError(str(exc)) from exc
        if tuple(self.model.wheel_names) != config.wheels or \
                tuple(self.model.steer_names) != config.steering:
            raise BridgeConfigError(
                f"parameter 'actuators.{config.model}': wheels {list(config.wheels)} / steering "
                f"{list(config.steering)} must equal the model's wheel_names "
                f"{list(self.model.wheel_names)} / steer_names {list(self.model.steer_names)}")
        self.clock = clock
        self.log = logger or _LOG
        self.plc = PlcLink(config, clock=clock)
        self.redis = RedisLink(config, clock)
        self.gate = CommandGate(config.heartbeat_timeout_s)
        self.waker = Waker(config, enabled=config.wake_on_change)
        self.envelope = Envelope(config.max_longitudinal_m_s, config.max_lateral_m_s,
                                 config.max_angular_rad_s)
        self.counters: dict[str, int] = dict.fromkeys(keys.COUNTERS, 0)
        self._speed_sp = config.speed_sp_fields()
        self._angle_sp = config.angle_sp_fields()
        self._speed_mon = config.speed_fields()
        self._angle_mon = config.angle_fields()
        self._measured_keys = keys.measured_keys(config.wheels, config.steering)
        self._alive = 0
        self.seq = CommandSequence(clock)   # seq of the writes: restart-safe, no wall clock
        self.refusals = RefusalWatch(config.control_db)   # the PLC's verdicts on them
        # velocity keys seen since the Redis connection: one missing after that vanished
        self._keys_seen = [False, False, False]
        self._held = np.zeros(len(config.steering))
        self._plc_state: dict[str, Any] | None = None    # last decoded monitor DB
        self._feedback_ok = True
        self._watchdog_since: float | None = None   # first read with the PLC's watchdog set
        self._plc_alive: int | None = None
        self._plc_alive_change_s = 0.0
        self._last_rejection: tuple[Any, ...] | None = None
        self._enabled = True
        self._disabled_reason = "deactivated"
        self._was_running = False
        self._status = "stopped:starting"
        self._detail = ""
        self._redis_reconnects_seen = 0
        self._published: dict[str, str] = {}   # values Redis holds from this bridge
        self._published_epoch = -1
        self._logged: tuple[str, str] = ("", "")
        self.redis.on_connect = self._on_redis_connect
        self._lock = threading.Lock()
        self._snapshot = BridgeSnapshot()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycle_done = threading.Condition()
        self._cycles_done = 0
        self.priority_passes = 0   # command halves run again at once for a mid-cycle change
        self.overruns: collections.deque[Overrun] = collections.deque(maxlen=1000)
        self._overruns_unlogged = 0
        self._overrun_logged_s = -math.inf
        self.failed = ""   # set when the loop died of an unexpected exception
        self._pending: dict[str, Any] = {}   # run-time parameter changes for the next cycle
        self._pending_lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="plc-bridge-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the loop; its last act writes a stop to the PLC and the status to Redis."""
        self._stop.set()
        self.waker.notify()
        thread, self._thread = self._thread, None
        if thread is not None:
            # "cannot join thread before it is started": a Ctrl-C landed inside
            # Thread.start(); the loop, if it runs, sees _stop at its first cycle
            with contextlib.suppress(RuntimeError):
                thread.join(timeout_s)

    def set_enabled(self, enabled: bool, reason: str = "deactivated", wait_s: float = 0.5
                    ) -> None:
        """Disabled: the loop keeps running (monitor keys stay live) but sends only stops.
        Waits until a cycle has applied the change (when the loop runs)."""
        self._disabled_reason = reason
        self._enabled = enabled
        if self._thread is not None:
            self.wait_cycles(2, wait_s)   # the cycle in flight may predate the change

    def wait_cycles(self, n: int, timeout_s: float) -> bool:
        with self._cycle_done:
            target = self._cycles_done + n
            self.waker.notify()
            return self._cycle_done.wait_for(lambda: self._cycles_done >= target, timeout_s)

    def snapshot(self) -> BridgeSnapshot:
        with self._lock:
            return self._snapshot

    @property
    def status(self) -> str:
        return self._status

    @property
    def loop_alive(self) -> bool:
        """False once the loop thread has ended (after ``stop()`` or a failure: ``failed``)."""
        return self._thread is not None and self._thread.is_alive()

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        realtime.name_thread("plc-bridge-loop")   # ps -L, top -H, chrt -p, perf sched show it
        if self.config.rt_priority > 0:
            try:   # SCHED_FIFO for this thread (Linux: pid 0 = the calling thread)
                realtime.fifo(self.config.rt_priority)
            except (OSError, AttributeError) as e:
                self.log.warning("plc_bridge: rt_priority %d not applied (%s); running with "
                                 "normal scheduling", self.config.rt_priority, e)
        gc.freeze()   # start-up objects out of the collector's way: shorter GC pauses in the loop
        stall_probe.note("thread", thread="plc-bridge-loop", tid=threading.get_native_id())
        period = self.config.period_s
        next_tick = self.clock()
        try:
            while not self._stop.is_set():
                start = self.clock()
                self.run_cycle()
                with self._cycle_done:
                    self._cycles_done += 1
                    self._cycle_done.notify_all()
                now = self.clock()
                if now >= next_tick:
                    served = next_tick
                    next_tick += period
                    if now >= next_tick:   # the cycle ran past the next tick: overrun
                        self._overrun(Overrun(served, start, now))
                        next_tick += (int((now - next_tick) // period) + 1) * period
                self.waker.wait(max(0.0, next_tick - self.clock()))
        except Exception as e:
            # a bug must not leave the machine moving: stop, say why, end the loop
            self.log.exception("plc_bridge loop failed")
            self._shutdown_io("internal_error", f"{type(e).__name__}: {e}")
            self.failed = f"{type(e).__name__}: {e}"
        else:
            self._shutdown_io("shutdown", "bridge stopped")

    def _overrun(self, o: Overrun) -> None:
        """Count, keep for diagnosis, and warn (at most once a second, with the count)."""
        self.counters["overruns"] += 1
        self.overruns.append(o)
        stall_probe.note("overrun", tick_s=o.tick_s, start_s=o.start_s, end_s=o.end_s)
        self._overruns_unlogged += 1
        if o.end_s - self._overrun_logged_s >= 1.0:
            self.log.warning(
                "plc_bridge: %d cycle(s) ran past the next %g Hz tick; the last ended %.1f ms "
                "after the tick it served (started %.1f ms after it, ran %.1f ms): a slow PLC "
                "or Redis reply, or the loop thread not scheduled (see rt_priority)",
                self._overruns_unlogged, self.config.cycle_hz, (o.end_s - o.tick_s) * 1e3,
                (o.start_s - o.tick_s) * 1e3, (o.end_s - o.start_s) * 1e3)
            self._overrun_logged_s = o.end_s
            self._overruns_unlogged = 0

    def _shutdown_io(self, reason: str, detail: str) -> None:
        """SIGTERM / stop() / a failure: write a stop (alive counter not advanced), report,
        close."""
        if self.plc.connected:
            with contextlib.suppress(Exception):
                self.plc.write(self.config.control_db, self._encode(None))
        self._status, self._detail = f"stopped:{reason}", detail
        with self._lock:
            self._snapshot = dataclasses.replace(
                self._snapshot, stamp_s=self.clock(), status=self._status, detail=detail,
                monitor_valid=False, measured=None, commanded=BodyTwist(),
                plc_connected=False, redis_connected=False)
        self.log.info("plc_bridge %s (%s)", self._status, detail)
        if self.redis.connected:
            self.redis.mset({keys.BRIDGE_STATUS: self._status, keys.BRIDGE_DETAIL: detail,
                             keys.STATE_VALID: "false",
                             **dict.fromkeys(self._measured_keys, keys.INVALID)},
                            wait=True, delete=(keys.BRIDGE_LIVE,))   # before the close
        self.plc.close()
        self.redis.close()
        self.waker.close()

    def _on_redis_connect(self, client: Any) -> None:
        """Connect thread, before the loop adopts the connection: Redis gets the stop status
        the loop is in (the outage's cause) at once, never a stale ``running``."""
        status = self._status if self._status != "running" else "stopped:redis_lost"
        detail = self._detail or "Redis was unreachable"
        ttl = int(self.config.monitor_ttl_s * 1000)
        pipe = client.pipeline(transaction=False)
        pipe.set(keys.BRIDGE_STATUS, status, px=ttl)
        pipe.set(keys.STATE_VALID, "false", px=ttl)
        pipe.set(keys.BRIDGE_DETAIL, detail)
        pipe.execute()

    # --- run-time parameter changes -----------------------------------------------------------
    def update_parameters(self, changes: Mapping[str, Any], wait_s: float = 1.0) -> None:
        """Change parameters that may change at run time (``DYNAMIC``: the heartbeat and PLC
        alive timeouts, the command envelope, the liveness TTL). Checked like the start-up
        values (``plc_bridge.parameters.BRIDGE``: range, the rules between parameters; a
        read-only one raises ``BridgeConfigError`` with the reason), then applied by the loop
        before its next cycle, never in the middle of one. Returns once a cycle has run with
        them (when the loop runs; at most ``wait_s``)."""
        checked = BRIDGE.validate_change(self.config.parameters, changes,
                                         "bridge parameter change")
        checked = {k: v for k, v in checked.items() if k in DYNAMIC}
        with self._pending_lock:
            self._pending.update(checked)
        if self._thread is None:
            self._apply_pending()
        else:
            self.wait_cycles(1, wait_s)

    def _apply_pending(self) -> None:
        if not self._pending:
            return
        with self._pending_lock:
            changes, self._pending = self._pending, {}
        cfg = dataclasses.replace(self.config, **changes,
                                  parameters={**self.config.parameters, **changes})
        self.gate.heartbeat_timeout_s = cfg.heartbeat_timeout_s
        self.envelope = Envelope(cfg.max_longitudinal_m_s, cfg.max_lateral_m_s,
                                 cfg.max_angular_rad_s)
        self.config = cfg
        self.log.info("plc_bridge: parameters changed: %s",
                      ", ".join(f"{k} = {v:g}" for k, v in changes.items()))

    # --- one cycle -----------------------------------------------------------------------------
    def run_cycle(self) -> None:
        """The command half (Redis -> PLC), then the monitor half (PLC -> Redis).

        A control key that changes while the command half runs (the loop is busy, so its
        wake-up is pending) gets one more command half at once instead of waiting for the
        monitor half and the next wake-up: the Redis -> PLC path comes first. At most one such
        pass per cycle, so a stream of changes cannot starve the monitor half, and only while
        the cycle is within a quarter period: a cycle slowed by a slow PLC or Redis reply
        finishes first (the change is then served by the next cycle, which starts at once)
        rather than running past the next tick."""
        self._apply_pending()   # run-time parameter changes take effect between cycles
        start = now = self.clock()
        self.counters["cycles"] += 1
        command, reason, detail, read_done = self._command_half(now)
        if not read_done and self.plc.connected and \
                self.clock() - start < 0.25 * self.config.period_s and self.waker.take_pending():
            self.priority_passes += 1
            now = self.clock()
            command, reason, detail, read_done = self._command_half(now)
        if self.plc.connected and not read_done:
            command, reason, detail = self._monitor_half(command, reason, detail, now)
        elif not self.plc.connected:
            self._plc_state = None
        self._publish(reason, detail, command, now)

    def _command_half(self, now: float) -> tuple[WheelCommand | None, str, str, bool]:
        """MGET, validate, gate, inverse model, one control-DB write. Returns the command sent
        (None: a stop), the reason and detail, and whether the monitor DB was read already
        (the first cycle after a connect reads it before writing)."""
        cfg = self.config

        # 1. Redis: one MGET
        raw = self.redis.mget(keys.CONTROL_KEYS) if self.redis.poll(now) else None
        redis_ok = raw is not None
        if self.redis.reconnects != self._redis_reconnects_seen:
            self._redis_reconnects_seen = self.redis.reconnects
            self.gate.forget_heartbeat()
            self._keys_seen = [False, False, False]   # a restarted Redis may be empty
        blocker: str | None = None
        detail = ""
        twist = BodyTwist()
        edge = False
        if not redis_ok:
            self.gate.forget_heartbeat()
            blocker, detail = "redis_lost", f"Redis unreachable: {self.redis.last_error}"
        else:
            assert raw is not None
            try:
                edge = self.gate.observe_heartbeat(parse_bool(keys.HEARTBEAT, raw[3]), now)
                seen = self._keys_seen
                for i in range(3):
                    seen[i] = seen[i] or raw[i] is not None
                twist = parse_control(keys.CONTROL_KEYS, raw, self.envelope,
                                      cfg.lateral_positive,
                                      required=(seen[0], seen[1], seen[2])).twist
            except InputRejectedError as e:
                blocker, detail = "invalid_input", str(e)
                self._count_rejection((blocker, detail))

        # 2. inverse model; an infeasible request is rejected like bad input
        candidate: WheelCommand | None = None
        if blocker is None:
            try:
                candidate = self.model.inverse(twist, self._held)
            except InvalidInputError as e:
                blocker, detail = "invalid_input", str(e)
            else:
                if not candidate.feasible:
                    blocker, detail = "infeasible_command", f"infeasible: {candidate.note}"
                    candidate = None
            if blocker is not None:
                self._count_rejection((blocker, detail))
            else:
                self._last_rejection = None

        # 3. PLC state from the last read, lifecycle
        plc_up = self.plc.poll(now)
        if blocker is None:
            blocker, detail = self._plc_blocker(plc_up, now)
        if blocker is None and not self._enabled:
            blocker, detail = self._disabled_reason, "bridge disabled (lifecycle deactivate)"

        # 4. decide
        armed_before = self.gate.armed
        decision = self.gate.decide(now, edge, blocker, redis_ok)
        command = candidate if decision.forward else None
        reason = "running" if command is not None else self.gate.reason
        if reason == "heartbeat_stale":
            detail = (f"{keys.HEARTBEAT} has not toggled for more than "
                      f"{cfg.heartbeat_timeout_s:g} s (parameter heartbeat_timeout_s)")
        elif reason in ("waiting_heartbeat", "waiting_heartbeat_edge"):
            detail = f"waiting for a toggle of {keys.HEARTBEAT} before forwarding commands"
        if decision.alive_may_run:
            self._alive = (self._alive + 1) & 0xFFFF

        # 5. PLC: one write
        if not plc_up:
            return None, reason, detail, False
        if self.plc.just_connected:
            # learn the PLC's state, steering and last accepted seq first, then a zero command
            # that starts a new seq session beyond it
            self.plc.just_connected = False
            self._plc_alive_change_s = now
            self._plc_alive = None
            data = self.plc.read(cfg.monitor_db, cfg.monitor.size)
            if data is None:
                self._plc_state = None
                return None, "plc_link_lost", f"PLC read failed: {self.plc.last_error}", True
            self.refusals.new_session()
            self._apply_monitor(data, now)
            self._start_session("connected")
            self.plc.write(cfg.control_db, self._encode(None))
            return None, reason, detail, True
        if self.refusals.resync_due(now, self.seq):
            # refused as stale, and whoever the PLC obeyed has been silent for a while: a new
            # session beyond its seq (the gate is disarmed: this cycle writes a stop)
            self.counters["seq_resyncs"] += 1
            self._start_session("re-synchronised (the other writer went quiet)")
        st = self._plc_state
        if command is not None and not armed_before:
            self._watchdog_since = None   # judge the PLC's watchdog afresh from this start
        if command is not None and st is not None and st.get("watchdog") \
                and not self.plc.write(cfg.control_db, self._encode(None)):
            # the PLC's watchdog is latched (the alive counter was frozen while the heartbeat
            # was stale, or the bridge stalled longer than the PLC's watchdog time): the
            # explicit stop it needs goes first, then this fresh command (newer seq)
            command = None
        if not self.plc.connected or not self.plc.write(cfg.control_db, self._encode(command)):
            if self.plc.connected and self.plc.cpu_stop:
                # the PLC answered that its CPU is in STOP: the session stays, the monitor is
                # still read (its alive counter stands still); a stop goes out every cycle
                reason = "plc_cpu_stop"
                self.gate.disarm(reason)
                return None, reason, f"PLC in STOP: {self.plc.cpu_stop}", False
            self._plc_state = None
            reason, detail = "plc_link_lost", f"PLC write failed: {self.plc.last_error}"
            self.gate.disarm(reason)
            return None, reason, detail, False
        return command, reason, detail, False

    def _monitor_half(self, command: WheelCommand | None, reason: str, detail: str, now: float
                      ) -> tuple[WheelCommand | None, str, str]:
        """One monitor-DB read; a fault bit read in a cycle that forwarded a command is
        answered by a second write (the stop) in the same cycle."""
        cfg = self.config
        data = self.plc.read(cfg.monitor_db, cfg.monitor.size)
        if data is None:
            self._plc_state = None
            reason = "plc_link_lost"
            self.gate.disarm(reason)
            return None, reason, f"PLC read failed: {self.plc.last_error}"
        self._apply_monitor(data, now)
        if command is not None:
            new_blocker, text = self._plc_blocker(True, now)
            if new_blocker is not None:   # a fault appeared: answer it in this cycle
                self.gate.disarm(new_blocker)
                self.plc.write(cfg.control_db, self._encode(None))
                return None, new_blocker, text
        return command, reason, detail

    def _plc_blocker(self, plc_up: bool, now: float) -> tuple[str | None, str]:
        st = self._plc_state
        if not plc_up or st is None:
            # the PLC's address on the link's transport (S7 host:port or the opc.tcp URL)
            return "plc_link_lost", f"{self.plc.where} unreachable: {self.plc.last_error}"
        if st["estop"]:
            return "plc_estop", "PLC reports emergency stop"
        if st.get("plant_lost"):   # before fault, which the PLC sets with it: name the cause
            return "plc_plant_lost", ("PLC reports plant_lost: the simulation's alive counter "
                                      "in plant_in stopped (simulation frozen or ended, or the "
                                      "plant link down); drives in their safe state")
        if st.get("drive_fault"):
            return "plc_drive_fault", ("PLC reports drive_fault: a drive in fault (the "
                                       "simulation refused an actuation: NaN, inf or out of "
                                       "range in plant_out; or a measurement not finite); "
                                       "drives in their safe state, see sim_node's "
                                       "/diagnostics")
        if st["fault"]:
            return "plc_fault", "PLC reports a fault"
        refusal = self.refusals.refusal
        if refusal is not None:
            return "plc_refused", refusal.detail
        if st.get("setpoint_fault"):
            return "plc_setpoint_fault", ("PLC refused a setpoint (NaN/inf/out of range): "
                                          "setpoint_fault set; a stop clears it")
        if not self._feedback_ok:
            return "plc_feedback_invalid", ("PLC monitor DB holds NaN/inf speeds or angles; "
                                            "check the PLC program's measurements")
        if not st["ready"]:
            return "plc_not_ready", "PLC not ready"
        if not st["auto"]:
            return "plc_manual", "PLC not in automatic mode"
        if self.plc.cpu_stop:
            return "plc_cpu_stop", f"PLC in STOP: {self.plc.cpu_stop}"
        if now - self._plc_alive_change_s > self.config.plc_alive_timeout_s:
            return "plc_alive_stale", (f"PLC alive counter unchanged for more than "
                                       f"{self.config.plc_alive_timeout_s:g} s: the CPU in STOP "
                                       f"(PUT/GET and an S7-1500's OPC UA server still answer "
                                       f"in STOP) or its program not running the block")
        if self._watchdog_since is not None and self.gate.armed and \
                now - self._watchdog_since > self.config.plc_alive_timeout_s:
            # the PLC's latched watchdog does not clear although every command goes out after
            # a stop, and the PLC reports no refusal: stop, say so
            return "plc_watchdog", (f"the PLC's watchdog on the bridge's alive counter stays "
                                    f"tripped for more than {self.config.plc_alive_timeout_s:g} "
                                    f"s although the bridge writes a stop before every command "
                                    f"and the PLC reports no refused write; check the PLC's "
                                    f"watchdog time against cycle_hz, that its program "
                                    f"clears the trip on a newer stop, and that it computes "
                                    f"the command's crc as this bridge does (a CRC mismatch "
                                    f"is no command at all: regenerate PlcBridge_Guard with "
                                    f"'excavator-hil plc-db-source' from this config)")
        return None, ""

    def _apply_monitor(self, data: bytearray, now: float) -> None:
        st = self.config.monitor.decode(data)
        self.refusals.update(now, from_dint(int(st["seq_accepted"])),
                             int(st["refused"]) if "refused" in st else None,
                             int(st["refused_reason"]) if "refused_reason" in st else None,
                             self.seq)
        self.counters["plc_refusals"] = self.refusals.seen
        if not st.get("watchdog"):
            self._watchdog_since = None
        elif self._watchdog_since is None:
            self._watchdog_since = now
        if st["alive"] != self._plc_alive:
            self._plc_alive = int(st["alive"])
            self._plc_alive_change_s = now
        measured = [st[n] for n in (*self._speed_mon, *self._angle_mon)]
        self._feedback_ok = all(math.isfinite(v) for v in measured)
        if self._angle_mon:
            angles = np.array([st[n] for n in self._angle_mon], dtype=float)
            if np.all(np.isfinite(angles)):
                self._held = angles
        self._plc_state = st

    def _start_session(self, why: str) -> None:
        """A new seq session beyond the PLC's last accepted seq (the last monitor read)."""
        st = self._plc_state
        accepted = from_dint(int(st["seq_accepted"])) if st is not None else 0
        first = self.seq.start_session(accepted)
        self.refusals.refusal = None   # judged afresh from the session's first write on
        self.log.info("plc_bridge: %s; the PLC's last accepted seq is %s, this bridge's writes "
                      "continue at seq %d", why, accepted or "none (0)", first % SEQ_MODULUS)

    def _encode(self, command: WheelCommand | None) -> bytes:
        values: dict[str, Any] = {"alive": self._alive, "enable": command is not None,
                                  "stop": command is None, "seq": to_dint(self.seq.next()),
                                  CRC_FIELD: 0}
        # "+ 0.0" turns -0.0 into 0.0: the PLC never sees a negative zero
        if command is None:
            for n in self._speed_sp:
                values[n] = 0.0
            for n, a in zip(self._angle_sp, self._held, strict=True):
                values[n] = float(a) + 0.0
        else:
            for n, v in zip(self._speed_sp, command.speeds, strict=True):
                values[n] = float(v) + 0.0
            for n, a in zip(self._angle_sp, command.angles, strict=True):
                values[n] = float(a) + 0.0
        # sealed: the PLC takes it only whole (command_crc), one request over any transport
        return seal(self.config.control, self.config.control.encode(values))

    def _count_rejection(self, key: tuple[Any, ...]) -> None:
        """Count each distinct rejection (reason and offending value) once, not once per cycle
        it persists."""
        if key != self._last_rejection:
            self.counters["rejected_inputs"] += 1
            self._last_rejection = key

    def _publish(self, reason: str, detail: str, command: WheelCommand | None, now: float
                 ) -> None:
        cfg = self.config
        running = command is not None
        if self._was_running and not running:
            self.counters["stops"] += 1
        self._was_running = running
        self.counters["plc_reconnects"] = self.plc.reconnects
        self.counters["redis_reconnects"] = self.redis.reconnects
        status = "running" if running else f"stopped:{reason}"
        if (status, detail) != self._logged:
            # every change of status or cause, once (a cause that repeats is not logged again)
            text = f"plc_bridge {status}" + (f" ({detail})" if detail else "")
            if running or reason in _NORMAL_STOPS:
                self.log.info("%s", text)
            else:
                self.log.warning("%s", text)
            self._logged = (status, detail)
        if self.plc.slow_warning:
            self.log.warning("plc_bridge: %s", self.plc.slow_warning)
            self.plc.slow_warning = ""
        self._status, self._detail = status, detail

        st = self._plc_state
        measured: BodyTwist | None = None
        speeds: dict[str, float] = {}
        angles: dict[str, float] = {}
        mapping: dict[str, str] = {}
        # HIL: with plant_lost the PLC's inputs are the last the simulation sent, frozen: not
        # a measurement of now (design: monitor keys never left frozen)
        if st is not None and not st.get("plant_lost"):
            sp = np.array([st[n] for n in self._speed_mon], dtype=float)
            an = np.array([st[n] for n in self._angle_mon], dtype=float)
            try:
                measured = self.model.direct(sp, an)
            except InvalidInputError as e:
                detail = f"{detail}; PLC feedback unusable: {e}".lstrip("; ")
        if st is not None:   # the PLC's own state, as read
            for bit in keys.STATE_BITS:
                if bit in st:
                    mapping[keys.state_key(bit)] = _bool(bool(st[bit]))
            mapping[keys.STATE_PLC_ALIVE] = str(st["alive"])
            mapping[keys.STATE_SEQ_ACCEPTED] = str(from_dint(int(st["seq_accepted"])))
            if "refused" in st:
                mapping[keys.STATE_REFUSED] = str(st["refused"])
            if "refused_reason" in st:
                mapping[keys.STATE_REFUSED_REASON] = refusal_name(int(st["refused_reason"]))
        if measured is not None and st is not None:   # what the machine does now
            lon, lat, ang = artof_from_twist(measured, cfg.lateral_positive)
            mapping[keys.MON_LONGITUDINAL] = _fmt(lon)
            mapping[keys.MON_LATERAL] = _fmt(lat)
            mapping[keys.MON_ANGULAR] = _fmt(ang)
            for w, n in zip(cfg.wheels, self._speed_mon, strict=True):
                speeds[w] = float(st[n])
                mapping[keys.wheel_speed_key(w)] = _fmt(speeds[w])
            for s, n in zip(cfg.steering, self._angle_mon, strict=True):
                angles[s] = float(st[n])
                mapping[keys.wheel_angle_key(s)] = _fmt(angles[s])
            mapping[keys.STATE_VALID] = "true"
        else:
            mapping.update(dict.fromkeys(self._measured_keys, keys.INVALID))
            mapping[keys.STATE_VALID] = "false"
        live = {keys.BRIDGE_STATUS: status, keys.STATE_VALID: mapping.pop(keys.STATE_VALID),
                keys.BRIDGE_LIVE: str(self._alive)}
        mapping[keys.BRIDGE_DETAIL] = detail
        mapping[keys.BRIDGE_ALIVE] = str(self._alive)
        seq = None if self.seq.last is None else self.seq.last % SEQ_MODULUS
        if seq is not None:
            mapping[keys.BRIDGE_SEQ] = str(seq)
        for name, value in self.counters.items():
            mapping[keys.counter_key(name)] = str(value)
        # the snapshot (what /diagnostics publishes) first: whatever a reader sees on Redis,
        # the snapshot already says (a test or a supervisor reading both never sees it behind)
        snap = BridgeSnapshot(
            stamp_s=now, status=status, detail=detail, counters=dict(self.counters),
            plc_connected=self.plc.connected, redis_connected=self.redis.connected,
            monitor_valid=measured is not None, measured=measured,
            commanded=command.achieved if command is not None else BodyTwist(),
            wheel_speeds=speeds, wheel_angles=angles, plc_state=dict(st or {}), seq=seq)
        with self._lock:
            self._snapshot = snap
        if self.redis.connected:
            # only what changed, plus a full refresh once a second (keys deleted by hand, a
            # restarted Redis): a smaller MSET keeps the cycle short
            full = self.redis.reconnects != self._published_epoch or \
                self.counters["cycles"] % max(1, int(cfg.cycle_hz)) == 0
            if full:
                self._published.clear()
                self._published_epoch = self.redis.reconnects
            delta = {k: v for k, v in mapping.items() if self._published.get(k) != v}
            if self.redis.mset(delta, expiring=live, ttl_ms=int(cfg.monitor_ttl_s * 1000)):
                self._published.update(delta)
            else:
                self._published.clear()
                with self._lock:   # this write lost the link: say so at once
                    self._snapshot = dataclasses.replace(snap, redis_connected=False)

