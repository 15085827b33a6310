"""Replay a rosbag2 bag into the live graph (``excavator-hil bag play``).

Publishes the bag's raw CDR bytes with the original timing (scaled by ``rate``), optionally in a
loop, for chosen topics, with the QoS the topics were recorded with, and optionally a ``/clock``
carrying the bag's time (for nodes with ``use_sim_time``). Plays bags written by this tool and by
``ros2 bag record`` (mcap or sqlite3).

``follow_clock`` replays into a running simulation instead: each message is published when the
graph's ``/clock`` (the simulation's) reaches the message's bag time less ``lead_s``, whatever
the wall clock does. A bag recorded with ``--use-sim-time`` replayed into a fresh simulation
(which starts at the same simulated time) then meets the machine in the same state at every
message: a slow machine stretches the run, not the session (docs/teleoperation.md, "Replay").

The player keeps a record of its pacing (:class:`PacingRecord`): per message the time it was due
and the time it was handed to DDS, both from the player's start. ``--pacing-report FILE`` writes
it as CSV and the log ends with its summary (how late, never early). That record, not an arrival
time measured elsewhere, is what a test can hold the player to on a loaded host: a message is
never sent before it is due, and the due times are the bag's intervals scaled by the rate.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from excavator_common.dds_profile import use_project_profile
from excavator_hil.bags.io import BagContents, iter_schedule, read_bag, sleep_until
from excavator_hil.bags.recorder import message_class

# after the publishers see their subscribers, time for the subscribers to match them [s]
DISCOVERY_SETTLE_S = 0.5

@dataclass
class PacingRecord:
    """What the player decided and did, per published message, in the order published.

    ``due_s``: when the schedule said to publish it, from the player's start [s] (the bag's
    interval scaled by ``rate``; the graph's /clock decides with ``follow_clock``, then NaN);
    ``sent_s``: when it was handed to DDS, from the same start [s], on ``time.perf_counter``.
    """

    # a looping player runs for days: the record keeps its first rows only
    max_rows: int = 100_000
    stamps_ns: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    due_s: list[float] = field(default_factory=list)
    sent_s: list[float] = field(default_factory=list)
    dropped: int = 0  # rows past max_rows, not kept

    def add(self, stamp_ns: int, topic: str, due_s: float, sent_s: float) -> None:
        if len(self.sent_s) >= self.max_rows:
            self.dropped += 1
            return
        self.stamps_ns.append(stamp_ns)
        self.topics.append(topic)
        self.due_s.append(due_s)
        self.sent_s.append(sent_s)

    def lateness_s(self) -> np.ndarray:
        """sent - due per message [s] (never negative for a player that paces)."""
        late: np.ndarray = np.asarray(self.sent_s, dtype=float) - np.asarray(self.due_s,
                                                                             dtype=float)
        return late

    def summary(self) -> str:
        late = self.lateness_s()
        late = late[np.isfinite(late)]
        kept = f" (the first {len(self.sent_s)} kept)" if self.dropped else ""
        if late.size == 0:
            return f"{len(self.sent_s) + self.dropped} messages published{kept}"
        return (f"{len(self.sent_s) + self.dropped} messages published{kept}; lateness "
                f"p50 {np.median(late) * 1e3:.2f} ms, "
                f"p99 {np.percentile(late, 99) * 1e3:.2f} ms, max {late.max() * 1e3:.2f} ms, "
                f"earliest {late.min() * 1e3:+.3f} ms")

    def write_csv(self, path: str | Path) -> None:
        with Path(path).open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["bag_stamp_ns", "topic", "due_s", "sent_s"])
            for row in zip(self.stamps_ns, self.topics, self.due_s, self.sent_s, strict=True):
                out.writerow([row[0], row[1], repr(row[2]), repr(row[3])])


def read_pacing_csv(path: str | Path) -> PacingRecord:
    """A ``--pacing-report`` file read back."""
    record = PacingRecord()
    with Path(path).open(newline="") as f:
        for row in csv.DictReader(f):
            record.add(int(row["bag_stamp_ns"]), row["topic"], float(row["due_s"]),
                       float(row["sent_s"]))
    return record


class BagPlayer(Node):
    """Publishes a bag's messages on schedule from a worker thread (publishing needs no spin)."""

    def __init__(self, contents: BagContents, rate: float = 1.0, loop: bool = False,
                 clock: bool = False, clock_hz: float = 100.0, wait_for_subscribers_s: float = 0.0,
                 follow_clock: bool = False, lead_s: float = 0.0,
                 remap: dict[str, str] | None = None) -> None:
        super().__init__("bag_player")
        if follow_clock and (clock or loop):
            raise ValueError("follow_clock paces by the graph's /clock: it cannot publish /clock"
                             " itself or loop")
        self.follow_clock = follow_clock
        self._lead_ns = round(lead_s * 1e9)
        self._graph_ns = -1  # the latest /clock seen [ns] (follow_clock)
        self._clock_seen = threading.Condition()
        if follow_clock:
            self.create_subscription(Clock, "/clock", self._on_clock, 10)
        self.contents = contents
        self.rate = rate
        self.loop = loop
        self.published = 0
        self.pacing = PacingRecord()
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._topic_publishers: dict[str, Any] = {}
        for topic, (msgtype, qos) in contents.topics.items():
            profile = QoSProfile(
                # following the clock, a stalled subscriber must not lose messages: deeper
                depth=max(qos.depth, 100 if follow_clock else 10),
                reliability=(ReliabilityPolicy.RELIABLE if qos.reliable
                             else ReliabilityPolicy.BEST_EFFORT),
                durability=(DurabilityPolicy.TRANSIENT_LOCAL if qos.transient_local
                            else DurabilityPolicy.VOLATILE),
            )
            try:
                cls = message_class(msgtype)
            except (ImportError, AttributeError, ValueError) as exc:
                self.get_logger().error(f"skipping {topic}: type {msgtype} not importable ({exc})")
                continue
            self._topic_publishers[topic] = self.create_publisher(
                cls, (remap or {}).get(topic, topic), profile)
        self._clock_pub = self.create_publisher(Clock, "/clock", 10) if clock else None
        self._clock_period = 1.0 / clock_hz
        self._wait_s = wait_for_subscribers_s
        self._bag_time_ns = contents.messages[0].timestamp_ns if contents.messages else 0
        self._thread = threading.Thread(target=self._play, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _wait_for_subscribers(self) -> None:
        """Up to ``wait_for_subscribers_s`` for a subscriber on every topic, then
        ``DISCOVERY_SETTLE_S`` more: DDS matching is one-sided, this publisher may see the
        subscriber before the subscriber has matched it, and a volatile subscriber drops what
        arrives before (a fresh-clone run lost the first of 120 replayed messages)."""
        deadline = time.monotonic() + self._wait_s
        while time.monotonic() < deadline and not self._stop.is_set():
            if all(p.get_subscription_count() > 0 for p in self._topic_publishers.values()):
                self._stop.wait(DISCOVERY_SETTLE_S)
                return
            time.sleep(0.01)

    def _on_clock(self, msg: Clock) -> None:
        with self._clock_seen:
            self._graph_ns = msg.clock.sec * 1_000_000_000 + msg.clock.nanosec
            self._clock_seen.notify_all()

    def _play_following(self) -> None:
        start = time.perf_counter()
        for msg in self.contents.messages:
            due = msg.timestamp_ns - self._lead_ns
            with self._clock_seen:
                while self._graph_ns < due and not self._stop.is_set():
                    self._clock_seen.wait(0.1)
            if self._stop.is_set():
                break
            pub = self._topic_publishers.get(msg.topic)
            if pub is not None:
                sent = time.perf_counter() - start
                pub.publish(msg.data)
                self.pacing.add(msg.timestamp_ns, msg.topic, float("nan"), sent)
                self.published += 1
        self.finished.set()

    def _play(self) -> None:
        self._wait_for_subscribers()
        if self.follow_clock:
            self._play_following()
            return
        start = time.perf_counter()
        # /clock ticks between messages, in integer bag nanoseconds so they never run backwards
        # or pass the next message's stamp; a new loop lap restarts them.
        step_ns = max(1, int(self._clock_period * self.rate * 1e9))
        tick_ns = self._bag_time_ns
        lap_start_s, lap_first_ns, last_ns = 0.0, self._bag_time_ns, -1
        for due, msg, stamp_ns in iter_schedule(self.contents, self.rate, self.loop):
            if stamp_ns < last_ns:  # loop: the bag starts again
                lap_start_s, lap_first_ns, tick_ns = due, stamp_ns, stamp_ns
            last_ns = stamp_ns
            while self._clock_pub is not None and tick_ns < stamp_ns and not self._stop.is_set():
                sleep_until(start + lap_start_s + (tick_ns - lap_first_ns) * 1e-9 / self.rate)
                self._publish_clock(tick_ns)
                tick_ns += step_ns
            sleep_until(start + due)
            if self._stop.is_set():
                break
            pub = self._topic_publishers.get(msg.topic)
            if pub is not None:
                if self._clock_pub is not None and tick_ns <= stamp_ns:
                    self._publish_clock(stamp_ns)
                    tick_ns = stamp_ns + step_ns
                sent = time.perf_counter() - start
                pub.publish(msg.data)
                self.pacing.add(stamp_ns, msg.topic, due, sent)
                self.published += 1
        self.finished.set()

    def _publish_clock(self, stamp_ns: int) -> None:
        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(stamp_ns, 1_000_000_000)
        self._clock_pub.publish(msg)  # type: ignore[union-attr]


def _absolute(topic: str) -> str:
    return topic if topic.startswith("/") else f"/{topic}"


def play(bag: str, topics: Sequence[str] | None, rate: float, loop: bool, clock: bool,
         wait_for_subscribers_s: float, follow_clock: bool = False, lead_s: float = 0.0,
         remap: Sequence[str] = (), pacing_report: str | None = None) -> int:
    import rclpy

    from excavator_common.ros_runtime import shutdown_quietly
    from excavator_hil.errors import BagError

    if follow_clock and (clock or loop or rate != 1.0):
        print("error: --follow-clock paces by the simulation's /clock: drop --clock, --loop "
              "and --rate")
        return 2
    if not 0.0 <= lead_s <= 60.0:
        print(f"error: --lead {lead_s:.6g} s outside 0..60 s: how long before its bag time a "
              "message is published with --follow-clock")
        return 2
    renames = {}
    for rule in remap:
        old, sep, new = rule.partition(":=")
        if not sep or not old or not new:
            print(f"error: --remap {rule!r}: write FROM:=TO, e.g. /teleop/joy_applied:=/joy")
            return 2
        renames[_absolute(old)] = _absolute(new)
    try:
        contents = read_bag(bag, [t if t.startswith("/") else f"/{t}" for t in topics]
                            if topics else None)
    except BagError as exc:
        print(f"error: {exc}")
        return 2
    use_project_profile()   # before the first participant: Fast DDS reads it then
    rclpy.init()
    node = BagPlayer(contents, rate=rate, loop=loop, clock=clock,
                     wait_for_subscribers_s=wait_for_subscribers_s, follow_clock=follow_clock,
                     lead_s=lead_s, remap=renames)
    pace = (f"following /clock (lead {lead_s:g} s)" if follow_clock else f"at rate {rate}")
    node.get_logger().info(f"playing {bag}: {len(contents.messages)} messages on "
                           f"{len(contents.topics)} topics, {contents.duration_ns / 1e9:.2f} s "
                           f"{pace}" + (" in a loop" if loop else ""))
    node.start()
    try:
        while rclpy.ok() and not node.finished.is_set():
            rclpy.spin_once(node, timeout_sec=0.05)
        time.sleep(0.2)  # let the last messages leave before the publishers go away
    except KeyboardInterrupt:
        pass
    finally:
        shutdown_quietly(node, node.stop)
    print(f"bag play: {node.pacing.summary()}")
    if pacing_report:
        node.pacing.write_csv(pacing_report)
    return 0
