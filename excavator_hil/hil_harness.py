"""A hardware-in-the-loop rig for tests, the benchmark and demos: Redis + virtual PLC + bridge.

``HilRig`` starts the virtual PLC in its own process (through a ``spawn(module, args)``
callable, e.g. the tests' ``NodeProcess``), talks to it over its control channel, runs a
``BridgeCore`` in this process and plays the operational layer: command keys and a heartbeat
that toggles every 500 ms (``Heartbeat``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from excavator_common.clock_offset import realtime_minus_monotonic
from excavator_hil.local_services import STARTUP_TIMEOUT_S, free_port, wait_for
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.core import BridgeCore
from plc_bridge.config import BridgeConfig, load_config
from plc_bridge.virtual_plc.control import ControlClient


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``local_services.wait_for`` polling every 2 ms (latency tests time the answer)."""
    return wait_for(predicate, timeout_s, what, period=0.002)


def timed_mset(client: redis.Redis, mapping: Mapping[str, str]) -> float:
    """MSET ``mapping``; returns the moment Redis set it, as ``time.monotonic()`` [s]: Redis's
    own ``TIME`` in the same MULTI/EXEC (right after the MSET, before any other client's
    command), mapped from CLOCK_REALTIME to CLOCK_MONOTONIC (the virtual PLC logs its writes
    with the latter). A latency from it to the PLC write is the bridge's alone: a writer's
    clock read before its write would add the writer's own wait for a CPU."""
    return _timed(client, lambda pipe: pipe.mset(dict(mapping)))


def timed_delete(client: redis.Redis, *names: str) -> float:
    """DEL ``names``; returns the moment Redis deleted them, as ``timed_mset`` does."""
    return _timed(client, lambda pipe: pipe.delete(*names))


def _timed(client: redis.Redis, write: Callable[[Any], Any]) -> float:
    pipe = client.pipeline(transaction=True)
    write(pipe)
    pipe.time()
    *_, (seconds, microseconds) = pipe.execute()
    return float(seconds) + float(microseconds) * 1e-6 - realtime_minus_monotonic()


class Heartbeat:
    """Toggles ``plc.control.navigation.heartbeat`` every ``period_s`` like ARTOF does."""

    def __init__(self, redis_url: str, period_s: float = 0.5):
        self.redis_url = redis_url
        self.period_s = period_s
        self._run = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="heartbeat")
        self._toggle_lock = threading.Lock()
        self.level = False
        self.toggles = 0
        self.last_toggle_s = 0.0   # monotonic time Redis applied the last toggle (its TIME)

    def start(self) -> Heartbeat:
        self._run.set()
        self._thread.start()
        return self

    def pause(self) -> None:
        """No toggle after this returns (one in progress completes first)."""
        self._run.clear()
        with self._toggle_lock:
            pass

    def resume(self) -> None:
        self._run.set()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _loop(self) -> None:
        client: redis.Redis | None = None
        while not self._stop.is_set():
            self._run.wait()
            if self._stop.is_set():
                break
            with self._toggle_lock:
                if not self._run.is_set():
                    continue
                try:
                    client = client or redis.Redis.from_url(self.redis_url, socket_timeout=0.2,
                                                            socket_connect_timeout=0.2)
                    # Redis's own time of the toggle: this thread may get the CPU late
                    t = timed_mset(client, {keys.HEARTBEAT: "false" if self.level else "true"})
                    self.level = not self.level
                    self.last_toggle_s = t
                    self.toggles += 1
                except (redis.RedisError, OSError):
                    client = None
            self._stop.wait(self.period_s)


class HilRig:
    """Virtual PLC process + in-process bridge + operational-layer helpers."""

    def __init__(self, model: str, redis_url: str, spawn: Callable[[str, list[str]], Any],
                 overrides: Mapping[str, Any] | None = None, config_path: str | None = None,
                 heartbeat_period_s: float = 0.25, plc_args: Sequence[str] = ()):
        """``plc_args``: more options of the virtual PLC (e.g. ``--plant-mode external``)."""
        self.model = model
        self.plc_args = list(plc_args)
        self.redis_url = redis_url
        self._spawn = spawn
        self.plc_port = free_port()
        self.control_port = free_port()
        self.config_path = config_path
        self.plc_proc: Any = None
        self.plc: ControlClient | None = None
        self.start_plc()
        self.config: BridgeConfig = load_config(config_path, {
            "redis_url": redis_url, "plc_port": self.plc_port, "model": model,
            **(overrides or {})})
        self.core = BridgeCore(self.config)
        # the operational layer's keys and the checks' reads: no deadline of the product's, and
        # no time is taken from a reply (timed_mset reads Redis's own TIME), so a starved
        # redis-server's late answer (over 1 s under load) is awaited, not an error
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=10.0)
        # ARTOF toggles every 0.5 s; tests toggle faster so a loaded CI box keeps a wide margin
        # to the 0.75 s timeout
        self.heartbeat = Heartbeat(redis_url, heartbeat_period_s)

    # --- virtual PLC process -------------------------------------------------------------------
    def start_plc(self) -> None:
        args = ["--port", str(self.plc_port), "--control-port", str(self.control_port),
                "--model", self.model]
        if self.config_path:
            args += ["--config", self.config_path]
        self.plc_proc = self._spawn("plc_bridge.virtual_plc.cli", [*args, *self.plc_args])
        # a start-up (STARTUP_TIMEOUT_S: why); a PLC that ended meanwhile fails at once, with
        # its exit code and log
        self.plc = wait_until(self._plc_started, STARTUP_TIMEOUT_S,
                              "the virtual PLC's control channel")

    def _plc_started(self) -> ControlClient | None:
        proc = getattr(self.plc_proc, "proc", self.plc_proc)
        if proc.poll() is not None:
            log = self.plc_proc.log() if hasattr(self.plc_proc, "log") else ""
            raise RuntimeError(f"the virtual PLC ended with {proc.returncode} while starting"
                               + (f"; its log:\n{log}" if log else ""))
        return self._try_control()

    def _try_control(self) -> ControlClient | None:
        try:
            return ControlClient(self.control_port, timeout=5.0)
        except OSError:
            return None

    def kill_plc(self) -> None:
        """SIGKILL the virtual PLC process (abrupt loss of the PLC)."""
        import signal

        if self.plc is not None:
            self.plc.close()
            self.plc = None
        proc = getattr(self.plc_proc, "proc", self.plc_proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)

    # --- operational layer ---------------------------------------------------------------------
    def start(self) -> None:
        self.core.start()
        self.heartbeat.start()

    def command(self, longitudinal: float = 0.0, lateral: float = 0.0, angular: float = 0.0
                ) -> float:
        """Write the three velocity keys (one MSET); returns the monotonic time just before."""
        t = time.monotonic()
        self.redis.mset({keys.LONGITUDINAL: f"{longitudinal:.10g}",
                         keys.LATERAL: f"{lateral:.10g}", keys.ANGULAR: f"{angular:.10g}"})
        return t

    def get(self, key: str) -> str | None:
        v = self.redis.get(key)
        return v.decode() if isinstance(v, bytes) else v

    def wait_status(self, status: str, timeout_s: float = 3.0) -> None:
        try:
            wait_until(lambda: self.core.status == status, timeout_s, f"bridge status {status!r}")
        except TimeoutError as e:   # say where it is stuck, as of now
            raise TimeoutError(f"{e} (now {self.core.status!r}, detail "
                               f"{self.core.snapshot().detail!r})") from None

    def close(self) -> None:
        self.heartbeat.stop()
        self.core.stop()
        if self.plc is not None:
            self.plc.close()
        self.redis.close()
