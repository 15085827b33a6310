"""The soak's observer: a process of its own that watches the stack from outside and writes what
it saw, for the checks (``excavator_hil.soak.checks``) to judge after the run.

None of the stack's own code runs here: its own snap7 client reads the PLC's monitor DB (offsets
from the data-block contract, config/plc.yaml, decoded here), its own rclpy node subscribes to
what the simulation receives and sends (``joint_states``, ``joint_command``, ``soil/wrench``,
``/diagnostics``), its own redis-py client follows the bridge's status key. It also copies the
virtual PLC's record of every control-DB write with its verdict (the control channel's
``writes``), once a second, so that a PLC killed later does not take its log with it.

    python -m excavator_hil.soak.observer --out DIR --plc-port P --plc-control-port C
                                          --redis-url URL

Output, one JSON array per line, appended as it comes (a line per batch, flushed each second):
``plc_samples.jsonl`` ``[t0, t1, [speeds], watchdog, alive]``, ``plc_writes.jsonl``
``[t, enable, stop, seq, [speeds], refused]``, ``joint_states.jsonl`` ``[stamp_s, t]``,
``wrenches.jsonl`` ``[stamp_s, t]``, ``joint_commands.jsonl`` ``[t_stamp, t, [q]]``,
``soil_mass.jsonl`` ``[t, drift]``, ``bridge_status.jsonl`` ``[t, status]`` (on change). Ends
on SIGINT/SIGTERM after a last flush.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from excavator_common import supervisor_watch
from excavator_common.clock_offset import realtime_minus_monotonic
from excavator_common.dds_profile import use_project_profile

SAMPLE_PERIOD_S = 0.05   # monitor-DB reads [s]
FETCH_PERIOD_S = 1.0     # the PLC's write log and the files [s]
ACTIVE = ("swing", "boom", "arm", "bucket")


class Sink:
    """Rows per stream, appended to ``<out>/<stream>.jsonl`` by :meth:`flush`."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self._rows: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def add(self, stream: str, row: Any) -> None:
        with self._lock:
            self._rows.setdefault(stream, []).append(row)

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, {}
        for stream, batch in rows.items():
            with (self.out / f"{stream}.jsonl").open("a") as f:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in batch))


class PlcWatch:
    """The own snap7 client (monitor DB every SAMPLE_PERIOD_S) and the PLC's write log."""

    def __init__(self, sink: Sink, port: int, control_port: int, stop: threading.Event):
        from plc_bridge.config import load_config

        self.cfg = load_config()
        self.sink, self.port, self.control_port, self.stop = sink, port, control_port, stop
        mon = self.cfg.monitor
        self._speeds = [mon.field(n).byte_offset for n in self.cfg.speed_fields()]
        wd = mon.field("watchdog")
        self._watchdog = (wd.byte_offset, wd.bit or 0)
        self._alive = mon.field("alive").byte_offset   # UINT: +1 per PLC scan
        self._size = mon.size
        self.since = 0.0

    def sample_loop(self) -> None:
        import snap7

        client: Any = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = snap7.Client()
                    client.connect("127.0.0.1", 0, 1, self.port)
                    client.connection.socket.settimeout(1.0)
                t0 = time.monotonic()
                data = bytes(client.db_read(self.cfg.monitor_db, 0, self._size))
                t1 = time.monotonic()
                speeds = [struct.unpack_from(">f", data, o)[0] for o in self._speeds]
                byte, bit = self._watchdog
                alive = struct.unpack_from(">H", data, self._alive)[0]
                self.sink.add("plc_samples", [t0, t1, speeds, bool(data[byte] >> bit & 1),
                                              alive])
            except Exception:  # noqa: BLE001 - the PLC is down, paused or restarting
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.disconnect()
                client = None
                self.stop.wait(0.5)
                continue
            self.stop.wait(SAMPLE_PERIOD_S)

    def fetch_writes(self, control: Any) -> Any:
        """Copy the PLC's new write records; returns the control client (None when lost)."""
        from plc_bridge.virtual_plc.control import ControlClient

        try:
            control = control or ControlClient(self.control_port, timeout=3.0)
            names = self.cfg.speed_sp_fields()
            for w in control.writes(self.since):
                if w["t"] <= self.since:
                    continue
                self.since = w["t"]
                self.sink.add("plc_writes", [w["t"], bool(w["enable"]), bool(w["stop"]),
                                             int(w["seq"]), [float(w[n]) for n in names],
                                             w.get("refused")])
            return control
        except (OSError, RuntimeError, ValueError):
            if control is not None:
                control.close()
            return None


def _ros_watch(sink: Sink, stop: threading.Event) -> None:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import WrenchStamped
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import JointState

    use_project_profile()   # before the first participant: Fast DDS reads it then
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)   # this process's own handlers
    node = rclpy.create_node("soak_observer")

    def stamp(msg: Any) -> float:
        return float(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)

    def on_states(msg: JointState) -> None:
        sink.add("joint_states", [stamp(msg), time.monotonic()])

    def on_command(msg: JointState) -> None:
        pos = dict(zip(msg.name, msg.position, strict=False))
        if all(n in pos for n in ACTIVE):
            # the wall stamp onto CLOCK_MONOTONIC with the offset of now, not of a while ago:
            # the wall clock can step (NTP; a VM resumed from a snapshot steps it by the pause)
            sink.add("joint_commands", [stamp(msg) - realtime_minus_monotonic(), time.monotonic(),
                                        [float(pos[n]) for n in ACTIVE]])

    def on_wrench(msg: WrenchStamped) -> None:
        sink.add("wrenches", [stamp(msg), time.monotonic()])

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("soil_node"):
                values = {kv.key: kv.value for kv in status.values}
                with contextlib.suppress(KeyError, ValueError):
                    sink.add("soil_mass", [time.monotonic(), int(values["mass_drift_units"])])

    node.create_subscription(JointState, "joint_states", on_states, 200)
    node.create_subscription(JointState, "joint_command", on_command, 200)
    node.create_subscription(WrenchStamped, "soil/wrench", on_wrench, 200)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.2)
    except ExternalShutdownException:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _redis_watch(sink: Sink, url: str, stop: threading.Event) -> None:
    import redis

    from plc_bridge import redis_keys as keys

    client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0,
                                  decode_responses=True)
    last: str | None = ""
    while not stop.wait(0.1):
        try:
            value = client.get(keys.BRIDGE_STATUS)
            status = value.decode() if isinstance(value, bytes) else value
        except (redis.RedisError, OSError):
            status = "(redis unreachable)"
        if status != last:
            sink.add("bridge_status", [time.monotonic(), status])
            last = status


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m excavator_hil.soak.observer",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the records")
    p.add_argument("--plc-port", type=int, required=True, help="the PLC's S7 port")
    p.add_argument("--plc-control-port", type=int, required=True,
                   help="the virtual PLC's control channel (its write log)")
    p.add_argument("--redis-url", required=True, help="the bridge's Redis")
    args = p.parse_args(argv)
    supervisor_watch.end_with_supervisor()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sink = Sink(args.out)
    plc = PlcWatch(sink, args.plc_port, args.plc_control_port, stop)
    def fetch_loop() -> None:
        control: Any = None
        while not stop.wait(FETCH_PERIOD_S):
            control = plc.fetch_writes(control)
            sink.flush()
        plc.fetch_writes(control)

    threads = [threading.Thread(target=plc.sample_loop, daemon=True, name="plc-samples"),
               threading.Thread(target=_redis_watch, args=(sink, args.redis_url, stop),
                                daemon=True, name="redis"),
               threading.Thread(target=fetch_loop, daemon=True, name="plc-log")]
    for t in threads:
        t.start()
    print("SOAK_OBSERVER READY", flush=True)
    _ros_watch(sink, stop)   # until SIGINT/SIGTERM
    for t in threads:
        t.join(5.0)
    sink.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
