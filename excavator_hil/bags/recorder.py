"""Record live topics to a rosbag2 bag (``excavator-hil bag record``).

Subscribes with ``raw=True`` so the CDR bytes from DDS go to the bag untouched. Topics are
subscribed as soon as a publisher appears (the graph is polled), with the publishers' QoS
(transient-local topics such as ``robot_description`` are caught too). Timestamps are the times
DDS received the messages, as ``ros2 bag record`` stores: wall time, or with ``--use-sim-time``
that time on the simulation's ``/clock`` (:mod:`excavator_hil.sim_clock_map`), the time
base of the messages' header stamps, so that ``bag play --clock`` and ``use_sim_time``
consumers agree. Each topic's RIHS01 type hash is the one its publishers announce.
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rclpy.context import Context
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from excavator_common.dds_profile import use_project_profile
from excavator_common.heap import release_free_pages
from excavator_hil.bags.io import BagWriter, TopicQos
from excavator_hil.bags.reader_links import OverlapJoin, ReaderLink, SeenSamples
from excavator_hil.bags.tf import TF_TOPIC, TF_TYPE, TfDeriver, namespace_of
from excavator_hil.errors import BagError
from excavator_hil.sim_clock_map import SimClockMap

# At a stop, what was sent before it is still written for this long at most [s], a topic until
# nothing came for DRAIN_QUIET_S [s] (BagRecorder.drain).
DRAIN_BOUND_S = 4.0
DRAIN_QUIET_S = 0.1
# A recorder held up longer than HELD_UP_S [s] (SIGSTOP, a starved host) may have lost messages
# in the transport, which a reliable writer resends at its next heartbeat: every 0.1 s for the
# package's nodes (config/fastdds_default.xml), every 3 s on Fast DDS's default timing (another
# program's writer). A stop soon after waits that long for a topic to give a message.
HELD_UP_S = 0.5
DRAIN_RESEND_S = 3.2
# The subscriptions are taken empty this often [s]: each take is a few us in C++, and a 100 Hz
# stream gives two messages a poll.
POLL_PERIOD_S = 0.02
DISCOVER_PERIOD_S = 0.1   # the graph is asked for new topics this often [s]
# Messages each subscription holds for a recorder that a busy host keeps from running: 10 s of
# a 100 Hz stream (the publishers keep RECORDED_STREAM_DEPTH for it, see docs/bags.md).
RECORD_QOS_DEPTH = 1000
TF_RATE_HZ = 30.0  # --tf: /tf per machine per second of bag time at most (viewers interpolate)
# A recorder that was stopped (SIGSTOP then SIGCONT: BagRecorder.note_continued), or whose
# polls stood this long [s], subscribes again through a new DDS participant
# (bags/reader_links.py): Fast DDS's shared-memory port watchdog takes a reader whose process
# stood longer than its healthy_check_timeout_ms (1 s) for a dead one, and a writer can then
# stay cut off from its port for good. Polls that stand are mostly a niced recorder on a busy
# host, its DDS threads running: only a long stand is taken for a stopped process. The old
# participant reads on for the overlap: until the new one has matched every writer the old one
# had and its samples join on to the old one's (OverlapJoin), REHOME_OVERLAP_S [s] (at least,
# at most).
REHOME_AFTER_HOLD_UP_S = 5.0
MOVED_TO_A_NEW_PARTICIPANT = "subscribed again through a new DDS participant"  # said in its log
REHOME_OVERLAP_S = (1.0, 15.0)
# What is written reaches the file at least this often [s] (BagWriter.flush): a killed
# recorder loses at most that much of what it had taken, not a 1 MiB chunk (seconds of the
# demo's topics: the chaos soak's recorder, SIGKILLed, lost 1.8 s from before its kill).
FLUSH_PERIOD_S = 0.5


def message_class(msgtype: str) -> type:
    """``"sensor_msgs/msg/JointState"`` -> the rclpy message class."""
    pkg, kind, name = msgtype.split("/")
    cls: type = getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    return cls


class BagRecorder(Node):
    """Writes every message of the chosen topics (or all topics) to ``output``.

    No executor: :meth:`poll` takes every message waiting on each subscription (rclpy's own
    take, in C++) and writes them in receive order, stamped with DDS's receive times
    (:mod:`excavator_hil.sim_clock_map`). An executor runs a callback per message, ~80 us of
    CPU each even with rclpy's EventsExecutor; a niced recorder beside a loaded simulation
    could not keep up with it, and its subscriptions' depth ran over (the chaos soak on a busy
    CI host lost 2208 joint_states)."""

    def __init__(self, output: str | Path, topics: Sequence[str] | None, storage: str = "mcap",
                 max_messages: int = 0, use_sim_time: bool = False,
                 tf_rate_hz: float = 0.0, context: Context | None = None) -> None:
        super().__init__("bag_recorder", context=context)
        self.use_sim_time = use_sim_time
        # --use-sim-time: /clock's samples map receive times to simulated time; the node's own
        # clock is not used (it would need an executor for its /clock)
        self.sim_clock = SimClockMap() if use_sim_time else None
        # the participants the recorder reads through: the node itself, then one more after
        # each hold-up (REHOME_AFTER_HOLD_UP_S); a sample taken through two is written once
        self._links: list[ReaderLink] = [ReaderLink(self)]
        self._seen = SeenSamples()
        # of the present overlap (the new reader, the old ones; DRAIN_RESEND_S: a resend)
        self._join = OverlapJoin(DRAIN_RESEND_S)
        self._rehomed_at = -float("inf")   # [s monotonic]
        self.rehomes = 0
        self._name = self.get_name()
        self._node_destroyed = False
        self._continued = False            # SIGCONT came: the process had been stopped
        if use_sim_time:
            self._links[0].subscribe_clock(Clock, RECORD_QOS_DEPTH)
        # (received [ns wall], topic, CDR bytes) taken but not yet written: received after the
        # current poll began (the next poll orders them among what it takes), or, with
        # --use-sim-time, before any /clock came
        self._held: list[tuple[int, str, bytes]] = []
        # per topic, the receive time given to its latest message: a message DDS held back for
        # an earlier one being resent (reliable topics come in order) is given no earlier time,
        # so the bag keeps each topic in the order it was sent
        self._latest_received: dict[str, int] = {}
        self._polled_at = time.monotonic()
        self._held_up_at = -float("inf")   # when a poll last came HELD_UP_S late [s monotonic]
        self.writer = BagWriter(output, storage)
        self._flushed_at = time.monotonic()
        self.topics = None if topics is None else [self._absolute(t) for t in topics]
        self.max_messages = max_messages
        self.total = 0
        self.done = False
        self._subscribed: set[str] = set()
        # each recorded topic's message class and reader QoS; the transient-local ones
        self._recorded: dict[str, tuple[type, QoSProfile]] = {}
        self._latched: set[str] = set()
        # --tf: /tf derived from each recorded robot_description + joint_states (bags/tf.py)
        self.tf = TfDeriver(round(1e9 / tf_rate_hz)) if tf_rate_hz > 0 else None
        self._tf_error_said = False
        self.discover()

    def _absolute(self, topic: str) -> str:
        return topic if topic.startswith("/") else f"/{topic}"

    def discover(self) -> None:
        """Subscribe to the topics that gained a publisher (called every DISCOVER_PERIOD_S)."""
        graph = self._links[-1].node    # the newest participant's view
        for topic, types in graph.get_topic_names_and_types():
            if topic in self._subscribed or (self.topics is not None and topic not in self.topics):
                continue
            if self.topics is None and topic in ("/rosout", "/parameter_events"):
                continue
            publishers = graph.get_publishers_info_by_topic(topic)
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
                depth=RECORD_QOS_DEPTH,
                reliability=(ReliabilityPolicy.RELIABLE if qos.reliable
                             else ReliabilityPolicy.BEST_EFFORT),
                durability=(DurabilityPolicy.TRANSIENT_LOCAL if qos.transient_local
                            else DurabilityPolicy.VOLATILE),
            )
            for link in self._links:
                link.subscribe(topic, cls, profile)
            self._recorded[topic] = (cls, profile)
            if qos.transient_local:
                self._latched.add(topic)
            self._subscribed.add(topic)
            self.get_logger().info(f"recording {topic} [{types[0]}]")

    def poll(self, stop_ns: int | None = None) -> tuple[set[str], set[str]]:
        """Take every message waiting and write, in receive order, those received before this
        call began (later ones wait for the next call, which may take earlier ones of other
        topics). With ``stop_ns`` [ns wall], a message its publisher sent after it is dropped.
        Returns the topics that gave messages, and those that gave one sent after ``stop_ns``."""
        watermark = time.time_ns()   # taken before any take: all received by then is taken
        held_s = self._note_hold_up()
        if stop_ns is None and len(self._links) == 1 and (
                self._continued or held_s > REHOME_AFTER_HOLD_UP_S):
            self._rehome("was stopped" if self._continued else f"stood {held_s:.1f} s")
        self._continued = False
        overlap = len(self._links) > 1   # a sample may come through two participants
        if self.sim_clock is not None:
            for link in self._links:
                for msg, info in link.take_clock():
                    if self._first_time("/clock", info, overlap):
                        self.sim_clock.add(info["received_timestamp"],
                                           msg.clock.sec * 1_000_000_000 + msg.clock.nanosec)
        gave: set[str] = set()
        after_stop: set[str] = set()
        taken_at = time.monotonic()   # (one reading per poll: the takes are microseconds)
        for link in self._links:
            for topic, data, info in link.take():
                if overlap:
                    self._join.note(topic, info, link is self._links[-1], taken_at)
                if not self._first_time(topic, info, overlap):
                    continue
                gave.add(topic)
                if stop_ns is not None and info["source_timestamp"] > stop_ns:
                    after_stop.add(topic)
                    continue
                received = max(info["received_timestamp"], self._latest_received.get(topic, 0))
                self._latest_received[topic] = received
                self._held.append((received, topic, data))
        self._write_held(watermark)
        # after the take: what only the old readers had received is taken before they go
        self._retire_links()
        return gave, after_stop

    def _first_time(self, topic: str, info: dict[str, Any], overlap: bool) -> bool:
        """Whether a sample taken is not one taken before through another reader: looked up
        only where one can come twice (an overlap, a reader left settling, a latched topic)."""
        if overlap or topic in self._latched or self._seen.watches(topic):
            return self._seen.first_time(topic, info)
        return True

    def note_continued(self) -> None:
        """The process goes on after a stop (call it from a SIGCONT handler): the next poll
        subscribes again through a new participant."""
        self._continued = True

    def _note_hold_up(self) -> float:
        """Note a poll that came HELD_UP_S late; returns the time since the last one [s]."""
        now = time.monotonic()
        held_s = now - self._polled_at
        if held_s > HELD_UP_S:
            self._held_up_at = now
        self._polled_at = now
        return held_s

    def _rehome(self, why: str) -> None:
        """Subscribe to every recorded topic again through a new participant (its own rclpy
        context), beside the present one (bags/reader_links.py says why)."""
        from excavator_common.node_thread import NodeThread

        self.rehomes += 1
        fresh = NodeThread(f"{self._name}_{self.rehomes}")
        link = ReaderLink(fresh.node, close=fresh.close)
        for topic, (cls, profile) in self._recorded.items():
            link.subscribe(topic, cls, profile)
        if self.sim_clock is not None:
            link.subscribe_clock(Clock, RECORD_QOS_DEPTH)
        self._links.append(link)
        self._join = OverlapJoin(DRAIN_RESEND_S)
        self._rehomed_at = time.monotonic()
        self.get_logger().warning(
            f"{why}: {MOVED_TO_A_NEW_PARTICIPANT} "
            f"('{fresh.node.get_name()}'), the old one reading on until it has matched every "
            "writer (Fast DDS's shared-memory ports of a reader that stood, docs/bags.md)")

    def _retire_links(self) -> None:
        """End the older participant's reading once the newest has matched every writer it
        had and its samples join on to the older one's (at least REHOME_OVERLAP_S[0] after the
        move, at most REHOME_OVERLAP_S[1])."""
        if len(self._links) < 2:
            return
        now = time.monotonic()
        since = now - self._rehomed_at
        old, new = self._links[0], self._links[-1]
        if since < REHOME_OVERLAP_S[0] or (
                since < REHOME_OVERLAP_S[1] and not (new.matched_as_many_as(old)
                                                     and self._join.joined(now))):
            return
        lost = self._join.lost(now)
        if lost:
            self.get_logger().warning(
                f"the old participant stopped hearing a writer before the new one heard it: "
                f"{'; '.join(lost)} not recorded (docs/bags.md)")
        for link in self._links[:-1]:
            link.release()
            if link.node is self:
                # the recorder's own node goes with its reading: its participant (threads,
                # sockets, shared memory) goes with the context's last node, and the object
                # keeps the bag and its state (its logger is by name)
                self._destroy_own_node()
        self._links = self._links[-1:]
        self._seen.settle(keep=self._latched)
        release_free_pages()   # the old participant's memory back to the system, not kept

    def _destroy_own_node(self) -> None:
        if not self._node_destroyed:
            self._node_destroyed = True
            super().destroy_node()

    def destroy_node(self) -> None:
        """The participants opened after stops go too (a NodeThread's close)."""
        for link in self._links:
            if link.close is not None:
                link.release()
        self._links = [link for link in self._links if link.close is None]
        self._destroy_own_node()

    def _write_held(self, until_ns: int | None) -> None:
        """Write the held messages received up to ``until_ns`` (all with None), oldest first."""
        if self.sim_clock is not None and not self.sim_clock.started:
            return   # stamped with the first /clock, once there is one
        if until_ns is None:
            ready, self._held = self._held, []
        else:
            ready = [h for h in self._held if h[0] <= until_ns]
            self._held = [h for h in self._held if h[0] > until_ns]
        ready.sort(key=lambda h: h[0])
        for received_ns, topic, data in ready:
            stamp_ns = (self.sim_clock.at(received_ns) if self.sim_clock is not None
                        else received_ns)
            self._write(topic, data, stamp_ns)
        if self.sim_clock is not None and until_ns is not None:
            self.sim_clock.forget_before(min([until_ns, *(h[0] for h in self._held)]))
        if time.monotonic() - self._flushed_at >= FLUSH_PERIOD_S:
            self.writer.flush()
            self._flushed_at = time.monotonic()

    def drain(self, stop_ns: int, bound_s: float = DRAIN_BOUND_S) -> int:
        """At a stop: write what was published before it (source timestamp <= ``stop_ns``,
        wall clock [ns]) and is still on its way to, or queued in, the subscriptions. A recorder
        that fell behind on a busy host holds a second or two there, and a Ctrl-C must not lose
        what it had been sent. A topic is complete at its first message sent after the stop, or
        when nothing came for ``DRAIN_QUIET_S`` (``DRAIN_RESEND_S`` when the recorder was held
        up within that time: the writers may be about to resend); the whole drain takes at most
        ``bound_s``. Returns how many messages it wrote."""
        before = self.total
        self._note_hold_up()
        quiet_s = (DRAIN_RESEND_S if time.monotonic() - self._held_up_at < DRAIN_RESEND_S
                   else DRAIN_QUIET_S)
        deadline = time.monotonic() + bound_s
        last = {topic: time.monotonic() for topic in self._recorded}
        pending = set(last)
        while pending and not self.done and time.monotonic() < deadline:
            gave, after_stop = self.poll(stop_ns)
            now = time.monotonic()
            for topic in list(pending):
                if topic in after_stop or (topic not in gave and now - last[topic] >= quiet_s):
                    pending.discard(topic)
                elif topic in gave:
                    last[topic] = now
            time.sleep(0.01)
        self._write_held(None)
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
        self._write_held(None)
        if self._held:
            self.get_logger().error(
                f"{len(self._held)} messages not written: --use-sim-time, but no /clock "
                "was published (start the simulation with use_sim_time:=true, or record "
                "without --use-sim-time)")
        self.writer.close()
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(self.writer.counts.items()))
        self.get_logger().info(f"bag {self.writer.path} closed ({counts or 'no messages'})")


def _rihs(type_hash: object) -> str | None:
    """rclpy's TypeHash -> ``RIHS01_<hex>`` (None when the publisher announced none)."""
    version, value = getattr(type_hash, "version", -1), getattr(type_hash, "value", b"")
    return f"RIHS{version:02d}_{value.hex()}" if version == 1 else None


def run_recording(node: BagRecorder, stop_requested: Callable[[], int | None],
                  deadline: float = float("inf"), ok: Callable[[], bool] = lambda: True,
                  on_stopping: Callable[[], None] = lambda: None) -> None:
    """The recorder's loop: poll every ``POLL_PERIOD_S``, discover every ``DISCOVER_PERIOD_S``,
    until ``stop_requested()`` gives the stop's wall time [ns] (or ``ok()`` turns false, the
    bag is full, ``deadline`` [s monotonic] passed); then ``on_stopping()`` (ignore a second
    Ctrl-C, say) and the drain of what was sent before the stop. Shared by ``bag record`` and
    the demo's recorder thread (:class:`RecorderThread`)."""
    next_discovery = time.monotonic() + DISCOVER_PERIOD_S
    while (stop_requested() is None and ok() and not node.done
           and time.monotonic() < deadline):
        node.poll()
        if time.monotonic() >= next_discovery:
            node.discover()
            next_discovery = time.monotonic() + DISCOVER_PERIOD_S
        time.sleep(POLL_PERIOD_S)
    on_stopping()
    if ok():
        stop_ns = stop_requested()
        drained = node.drain(stop_ns if stop_ns is not None else time.time_ns())
        if drained:
            node.get_logger().info(f"{drained} messages that had arrived written at the stop")


class RecorderThread:
    """A recorder as a thread of a process that already runs rclpy (the demo's: a Python
    process with rclpy fewer, ~35-55 MiB PSS, issue 32). The node is created in the caller's
    context and never added to an executor (it polls, :class:`BagRecorder`); the thread lowers
    its own priority by ``nice`` (Linux keeps one per thread), as the recorder's process was
    niced. :meth:`stop` drains what was sent before it and closes the bag."""

    def __init__(self, output: str | Path, topics: Sequence[str] | None,
                 use_sim_time: bool = False, tf_rate_hz: float = TF_RATE_HZ, nice: int = 0,
                 context: Context | None = None) -> None:
        self.node = BagRecorder(output, topics, "mcap", 0, use_sim_time, tf_rate_hz, context)
        self.nice = nice
        self._stop_ns: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bag_recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from excavator_common import realtime

        try:
            if self.nice:
                realtime.thread_nice_at_least(self.nice)
            run_recording(self.node, lambda: self._stop_ns)
        except BaseException as exc:  # noqa: BLE001 - kept for stop() to raise in the caller
            self.error = exc

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop at this moment: write what was sent before it, close the bag; raises what
        the thread failed with, or BagError when it wrote nothing for ``timeout_s``. Waited
        for as long as it writes: a niced recorder on a loaded host writes what it had taken
        at the stop slowly (a fleet demo's 6,967 messages took more than 15 s once), and a
        bag cut short at a fixed time is a lost run. ``timeout_s`` must exceed the drain's own
        waits for quiet topics (``DRAIN_BOUND_S``)."""
        self._stop_ns = time.time_ns()
        written, since = -1, time.monotonic()
        while self._thread.is_alive():
            self._thread.join(0.2)
            if self.node.total != written:
                written, since = self.node.total, time.monotonic()
            elif self._thread.is_alive() and time.monotonic() - since >= timeout_s:
                raise BagError(f"the recorder did not finish its bag: nothing written for "
                               f"{timeout_s:g} s ({written} messages in it)")
        try:
            self.node.close()
        finally:
            self.node.destroy_node()
        if self.error is not None:
            raise self.error


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
    from excavator_common.errors import ConfigurationError

    try:
        background_nice = realtime.background_nice_from_environment()
    except ConfigurationError as exc:
        print(f"error: {exc}")
        return 2
    # Ctrl-C and SIGTERM end the loop below, not rclpy: its own handler shuts the context down
    # at once, destroying the subscriptions with the messages still queued in them.
    use_project_profile()   # before the first participant: Fast DDS reads it then
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    stopping: list[int] = []   # wall time [ns] of the stop request

    def on_signal(_signum: int, _frame: object) -> None:
        stopping.append(time.time_ns())

    def ignore_signals() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # ros2 launch's second Ctrl-C
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        node = BagRecorder(output, topics, storage, max_messages, use_sim_time, tf_rate_hz)
    except BagError as exc:
        print(f"error: {exc}")
        rclpy.try_shutdown()
        return 2
    # a Ctrl-Z and fg, a SIGSTOP and SIGCONT: the shared-memory ports may be lost (REHOME_*)
    signal.signal(signal.SIGCONT, lambda _signum, _frame: node.note_continued())
    deadline = time.monotonic() + duration_s if duration_s > 0 else float("inf")
    realtime.quiet_gc()   # start-up objects frozen: no full collection over them while recording
    realtime.apply_background_nice(background_nice)   # its participant exists: DDS spared
    try:
        run_recording(node, lambda: stopping[0] if stopping else None, deadline, rclpy.ok,
                      ignore_signals)
    except (KeyboardInterrupt, ExternalShutdownException):  # a stop from outside rclpy's
        pass
    finally:
        shutdown_quietly(node, node.close)
    return 0
