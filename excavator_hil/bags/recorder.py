"""Record live topics to a rosbag2 bag (``excavator-hil bag record``).

Subscribes with ``raw=True`` so the CDR bytes from DDS go to the bag untouched. Topics are
subscribed as soon as a publisher appears (the graph is polled), with the publishers' QoS
(transient-local topics such as ``robot_description`` are caught too). Timestamps are receive
times from the node's clock, as ``ros2 bag record`` does: wall time, or with ``use_sim_time``
(``--use-sim-time``) the ``/clock`` of the simulation, the time base of the messages' header
stamps, so that ``bag play --clock`` and ``use_sim_time`` consumers agree. Each topic's RIHS01
type hash is the one its publishers announce.
"""

from __future__ import annotations

import importlib
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rclpy.clock import Clock as RosClock
from rclpy.clock_type import ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from excavator_hil.bags.io import BagWriter, TopicQos
from excavator_hil.bags.tf import TF_TOPIC, TF_TYPE, TfDeriver, namespace_of
from excavator_hil.errors import BagError

# At a stop, what was sent before it is still written for this long at most [s], a topic until
# nothing came for DRAIN_QUIET_S [s] (BagRecorder.drain).
DRAIN_BOUND_S = 1.0
DRAIN_QUIET_S = 0.1


def message_class(msgtype: str) -> type:
    """``"sensor_msgs/msg/JointState"`` -> the rclpy message class."""
    pkg, kind, name = msgtype.split("/")
    cls: type = getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    return cls


class BagRecorder(Node):
    """Writes every message of the chosen topics (or all topics) to ``output``."""

    def __init__(self, output: str | Path, topics: Sequence[str] | None, storage: str = "mcap",
                 max_messages: int = 0, use_sim_time: bool = False,
                 tf_rate_hz: float = 0.0) -> None:
        super().__init__("bag_recorder", parameter_overrides=[
            Parameter("use_sim_time", value=use_sim_time)])
        self.use_sim_time = use_sim_time
        # With sim time, messages that arrive before the first /clock wait for it (stamped with
        # it): the bag never mixes a zero or wall-clock stamp into simulation time.
        self._before_clock: list[tuple[str, bytes]] = []
        self.writer = BagWriter(output, storage)
        self.topics = None if topics is None else [self._absolute(t) for t in topics]
        self.max_messages = max_messages
        self.total = 0
        self.done = False
        self._subscribed: set[str] = set()
        self._recorded: list[tuple[str, Any]] = []
        # --tf: /tf derived from each recorded robot_description + joint_states (bags/tf.py)
        self.tf = TfDeriver(round(1e9 / tf_rate_hz)) if tf_rate_hz > 0 else None
        self._tf_error_said = False
        # Graph polling on the steady clock: with use_sim_time a ROS-time timer would wait for
        # /clock.
        self.create_timer(0.1, self._discover, clock=RosClock(clock_type=ClockType.STEADY_TIME))
        self._discover()

    def _absolute(self, topic: str) -> str:
        return topic if topic.startswith("/") else f"/{topic}"

    def _discover(self) -> None:
        for topic, types in self.get_topic_names_and_types():
            if topic in self._subscribed or (self.topics is not None and topic not in self.topics):
                continue
            if self.topics is None and topic in ("/rosout", "/parameter_events"):
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if not publishers:
                continue
            qos = TopicQos(
                reliable=all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE
                             for p in publishers),
                transient_local=any(p.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                                    for p in publishers),
            )
            hashes = {_rihs(p.topic_type_hash) for p in publishers} - {None}
            try:
                cls = message_class(types[0])
                self.writer.add_topic(topic, types[0], qos,
                                      type_hash=hashes.pop() if len(hashes) == 1 else None)
            except (BagError, ImportError, AttributeError, ValueError) as exc:
                self.get_logger().error(f"not recording {topic}: {exc}")
                self._subscribed.add(topic)
                continue
            profile = QoSProfile(
                depth=1000,
                reliability=(ReliabilityPolicy.RELIABLE if qos.reliable
                             else ReliabilityPolicy.BEST_EFFORT),
                durability=(DurabilityPolicy.TRANSIENT_LOCAL if qos.transient_local
                            else DurabilityPolicy.VOLATILE),
            )
            subscription = self.create_subscription(
                cls, topic, lambda data, t=topic: self._on_message(t, data), profile, raw=True)
            self._recorded.append((topic, subscription))
            self._subscribed.add(topic)
            self.get_logger().info(f"recording {topic} [{types[0]}]")

    def _on_message(self, topic: str, data: bytes) -> None:
        if self.done:
            return
        now = self.get_clock().now().nanoseconds
        if self.use_sim_time and now == 0:  # no /clock yet
            self._before_clock.append((topic, data))
            return
        for early in self._before_clock:
            self._write(*early, now)
        self._before_clock.clear()
        self._write(topic, data, now)

    def drain(self, stop_ns: int, bound_s: float = DRAIN_BOUND_S) -> int:
        """At a stop: write what was published before it (source timestamp <= ``stop_ns``,
        wall clock [ns]) and is still on its way to, or queued in, the subscriptions. A recorder
        that fell behind on a busy host holds a second or two there, and a Ctrl-C must not lose
        what it had been sent. A topic is complete at its first message sent after the stop, or
        when nothing came for ``DRAIN_QUIET_S``; the whole drain takes at most ``bound_s``.
        Returns how many messages it wrote."""
        from excavator_common.command_age_node import take_waiting

        before = self.total
        deadline = time.monotonic() + bound_s
        last = {topic: time.monotonic() for topic, _ in self._recorded}
        pending = dict(self._recorded)
        while pending and not self.done and time.monotonic() < deadline:
            for topic, subscription in list(pending.items()):
                taken = take_waiting(subscription)
                now = time.monotonic()
                if taken:
                    last[topic] = now
                elif now - last[topic] >= DRAIN_QUIET_S:
                    del pending[topic]
                for data, info in taken:
                    if info["source_timestamp"] > stop_ns:
                        pending.pop(topic, None)
                        break
                    self._on_message(topic, data)
            time.sleep(0.01)
        return self.total - before

    def _write(self, topic: str, data: bytes, stamp_ns: int) -> None:
        if self.done:
            return
        self.writer.write(topic, stamp_ns, data)
        self.total += 1
        if self.tf is not None:
            self._derive_tf(topic, data, stamp_ns)
        if self.max_messages and self.total >= self.max_messages:
            self.done = True

    def _derive_tf(self, topic: str, data: bytes, stamp_ns: int) -> None:
        assert self.tf is not None
        ns = namespace_of(topic, "robot_description")
        if ns is not None:
            self.tf.description(ns, data)
            for error in self.tf.errors:
                self.get_logger().error(f"no /tf from it: {error}")
            if not self.tf.errors:
                self.get_logger().info(
                    f"/tf of {ns or '/'} from its robot_description "
                    f"({len(self.tf.trees[ns].joints)} joints) at its joint_states")
            self.tf.errors.clear()
            return
        ns = namespace_of(topic, "joint_states")
        tf = self.tf.transforms(ns, data) if ns is not None else None
        if self.tf.errors:   # said once: the same fault would repeat at the joint states' rate
            if not self._tf_error_said:
                self.get_logger().error(f"/tf not written for a message: {self.tf.errors[0]}")
            self._tf_error_said = True
            self.tf.errors.clear()
        if tf is not None:
            self.writer.add_topic(TF_TOPIC, TF_TYPE)
            self.writer.write(TF_TOPIC, stamp_ns, tf)

    def close(self) -> None:
        if self._before_clock:
            self.get_logger().error(
                f"{len(self._before_clock)} messages not written: --use-sim-time, but no /clock "
                "was published (start the simulation with use_sim_time:=true, or record "
                "without --use-sim-time)")
        self.writer.close()
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(self.writer.counts.items()))
        self.get_logger().info(f"bag {self.writer.path} closed ({counts or 'no messages'})")


def _executor() -> Any:
    """rclpy's EventsExecutor (C++, Kilted's rclpy.experimental) where it exists, else the
    single-threaded one."""
    try:
        from rclpy.experimental.events_executor import EventsExecutor
    except ImportError:
        from rclpy.executors import SingleThreadedExecutor

        return SingleThreadedExecutor()
    return EventsExecutor()


def _rihs(type_hash: object) -> str | None:
    """rclpy's TypeHash -> ``RIHS01_<hex>`` (None when the publisher announced none)."""
    version, value = getattr(type_hash, "version", -1), getattr(type_hash, "value", b"")
    return f"RIHS{version:02d}_{value.hex()}" if version == 1 else None


def record(output: str, topics: Sequence[str] | None, storage: str, duration_s: float,
           max_messages: int, use_sim_time: bool = False, tf_rate_hz: float = 0.0) -> int:
    """Run a recorder until Ctrl-C, ``duration_s`` (0 = no limit; wall time) or
    ``max_messages``."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    from excavator_common import realtime, stall_probe
    from excavator_common.ros_runtime import shutdown_quietly

    stall_probe.start_from_environment("bag_recorder")
    # Ctrl-C and SIGTERM end the loop below, not rclpy: its own handler shuts the context down
    # at once, destroying the subscriptions with the messages still queued in them.
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    stopping: list[int] = []   # wall time [ns] of the stop request

    def on_signal(_signum: int, _frame: object) -> None:
        stopping.append(time.time_ns())

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        node = BagRecorder(output, topics, storage, max_messages, use_sim_time, tf_rate_hz)
    except BagError as exc:
        print(f"error: {exc}")
        rclpy.try_shutdown()
        return 2
    deadline = time.monotonic() + duration_s if duration_s > 0 else float("inf")
    realtime.quiet_gc()   # start-up objects frozen: no full collection over them while recording
    # One executor for the whole recording, rclpy's events executor: the recorder runs niced
    # (the demo's background_nice) and must keep up with every 100 Hz stream on a busy host.
    # rclpy.spin_once(node) added and removed the node on the global executor for every message
    # (~200 us of CPU a message); the soak under load then lost most of joint_states and
    # soil/wrench that its observer received (the subscriptions' depth ran over while the
    # recorder waited for a CPU). The events executor takes a message for ~80 us.
    executor = _executor()
    executor.add_node(node)
    try:
        while not stopping and rclpy.ok() and not node.done and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # ros2 launch's second Ctrl-C
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if rclpy.ok():
            drained = node.drain(stopping[0] if stopping else time.time_ns())
            if drained:
                node.get_logger().info(f"{drained} messages that had arrived written at the "
                                       "stop")
    except (KeyboardInterrupt, ExternalShutdownException):  # a stop from outside rclpy's
        pass
    finally:
        shutdown_quietly(node, node.close)
    return 0
