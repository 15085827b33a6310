"""The dashboard's thin adapters: ROS 2 (topics) and Redis (the PLC bridge's keys).

Both keep only the latest value of everything and run in their own threads, so the web layer
reads plain attributes and never blocks on the network:

- ``RosLink``: an rclpy node in a private context. Subscriptions are keep-last depth 1,
  best effort (a slow dashboard never makes a publisher resend or queue: the control path does
  not wait for it) and raw: a message is decoded only when it is kept (at most ``rate_hz``
  joint states and 10 soil samples a second; sim_node publishes 100 Hz). Publishes
  ``target_pose`` (geometry_msgs/PoseStamped in the machine's ``<prefix>base_link``) like any
  user would. Serves one machine of a fleet at a time (``select``): the machines are the
  namespaces with ``joint_states`` on the graph (excavator_common.machines), read every second;
  a machine's topics are subscribed when it is first chosen and kept (only the chosen one's
  messages are decoded), its frame prefix read from its ``robot_description``.
- ``RedisLink``: one MGET of the bridge's keys every ``period_s``; the operational layer's
  writes (the three velocity keys in one MSET, the heartbeat toggle every 0.5 s while driving,
  a PUBLISH on the bridge's notify channel after each write) and the stop.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import redis

from excavator_common.machines import (
    MachineChoice,
    frame_prefix_from_urdf,
    machine_topic,
    machines_on_graph,
)
from excavator_common.node_thread import NodeThread
from excavator_common.ros_runtime import steady_timer
from excavator_hil.dashboard.core import (
    BridgeView,
    BridgeWatch,
    DriveLimits,
    JointReadout,
    RollingSeries,
    TargetChecker,
    TerrainGrid,
    WheelLayout,
    joint_readout,
    zero_command,
)
from plc_bridge import redis_keys as keys

# how long a Send waits for the chosen machine's ik_node to be matched on target_pose [s]
# (discovery of a publisher created when the machine was chosen: ~0.1 s calm, seconds loaded)
MATCH_WAIT_S = 5.0


class RosLink(NodeThread):
    """Subscribes what the dashboard shows of the chosen machine, publishes its
    ``target_pose``.

    Args:
        machine: the machine served at start (a namespace, e.g. ``exc2``); empty: the node's
            own namespace (the single machine's topics, relative names).
    """

    def __init__(self, checker: TargetChecker, terrain: TerrainGrid | None = None,
                 ros_args: Sequence[str] | None = None, rate_hz: float = 20.0,
                 node_name: str = "dashboard", machine: str = ""):
        from geometry_msgs.msg import PoseStamped, WrenchStamped
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from rclpy.serialization import deserialize_message
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64, Float64MultiArray, String

        self.checker = checker
        self.period_s = 1.0 / rate_hz
        self.joints: JointReadout | None = None
        self.joints_received_s: float | None = None   # monotonic time of the last kept message
        self.joint_messages = 0
        self.load = RollingSeries(60.0, 10.0)         # soil/bucket_load [m^3]
        self.force = RollingSeries(60.0, 10.0)        # |soil/wrench force| [N]
        # the soil grid, written by soil/terrain_patch (None: no grid configured)
        self._grid = terrain
        self.terrain: TerrainGrid | None = None   # set once the first whole grid arrived
        self.terrain_version = 0
        self.terrain_error = ""
        self._last_joint_s = 0.0
        self.received = {"joint_states": 0, "soil/bucket_load": 0, "soil/wrench": 0,
                         "soil/terrain_patch": 0}   # messages in (decoded or not)
        self.decoded = dict.fromkeys(self.received, 0)  # messages deserialized
        self._decode = deserialize_message
        self._JointState, self._Float64, self._Wrench = JointState, Float64, WrenchStamped
        self._String = String

        super().__init__(node_name, ros_args)
        self._PoseStamped = PoseStamped
        self._latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        # the machine served: the user's choice among the machines on the graph
        self._lock = threading.Lock()
        self.own = self.node.get_namespace()
        self.choice = MachineChoice(own=self.own, chosen=machine)
        self.machines_version = 0     # +1 whenever the list of machines on the graph changed
        self.prefixes: dict[str, str] = {}      # machine -> TF frame prefix (robot_description)
        # machine -> its wheels from robot_description (a wheeled machine, issue 28)
        self.wheel_layouts: dict[str, WheelLayout] = {}
        self.description_errors: dict[str, str] = {}
        self._subscribed: set[str] = set()
        self._target_pubs: dict[str, Any] = {}
        self._subscribe(self.choice.chosen)
        # The data topic, not the soil/heightmap mesh: a 96 x 96 mesh costs ~0.6 s of Python
        # per message to deserialize, a whole 320 x 320 grid here ~1 ms. soil_node sends the
        # whole grid at start and at heightmap_rate_hz while it changes, patches in between
        # (a lost patch is repaired by the next whole grid). Best effort too: a reliable
        # reader that falls behind (the dashboard runs at niceness 10) makes soil_node, which
        # is in the control loop, keep and resend samples for it.
        if terrain is not None:
            self.node.create_subscription(
                Float64MultiArray, "soil/terrain_patch", self._on_patch,
                QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))
        steady_timer(self.node, 1.0, self._discover)
        # rclpy's EventsExecutor (C++ event queue) where there is one: ~1/3 of the CPU of the
        # SingleThreadedExecutor for the ~400 messages a second of the stack (bench/dashboard.py)
        self.start(events=True, thread_name="dashboard-ros")

    # --- the machine served ------------------------------------------------------------------
    @property
    def machine(self) -> str:
        """The machine served now (absolute namespace)."""
        return self.choice.chosen

    def topic(self, name: str, machine: str | None = None) -> str:
        """Topic ``name`` of ``machine`` (default: the one served), as this node names it."""
        return machine_topic(self.machine if machine is None else machine, name, self.own)

    def _subscribe(self, machine: str) -> None:
        """The machine's topics, subscribed once (kept when another machine is chosen: the
        callbacks drop what is not the chosen machine's before decoding it)."""
        if machine in self._subscribed:
            return
        self._subscribed.add(machine)
        node, latest = self.node, self._latest
        # raw: the bytes arrive, and only the messages kept are deserialized (a JointState
        # costs ~30 us of Python to decode, x 100 Hz for nothing)
        node.create_subscription(self._JointState, self.topic("joint_states", machine),
                                 functools.partial(self._on_joints, machine), latest, raw=True)
        node.create_subscription(self._Float64, self.topic("soil/bucket_load", machine),
                                 functools.partial(self._on_load, machine), latest, raw=True)
        node.create_subscription(self._Wrench, self.topic("soil/wrench", machine),
                                 functools.partial(self._on_wrench, machine), latest, raw=True)
        node.create_subscription(self._String, self.topic("robot_description", machine),
                                 functools.partial(self._on_description, machine),
                                 self._latched, raw=True)
        self._target_pubs[machine] = node.create_publisher(
            self._PoseStamped, self.topic("target_pose", machine), 10)

    def select(self, machine: object) -> str:
        """Serve ``machine`` (what a client sent): one of the machines on the graph, or the
        node's own namespace. ValueError naming the value and the choices; the machine served
        is then unchanged. The readouts start empty for a newly chosen machine."""
        with self._lock:
            before = self.choice.chosen
            name = self.choice.choose(machine)
            if name != before:
                self.joints = self.joints_received_s = None
                self.load = RollingSeries(60.0, 10.0)
                self.force = RollingSeries(60.0, 10.0)
                self._subscribe(name)
        return name

    def _discover(self) -> None:
        """The machines on the graph now (timer, 1 Hz)."""
        listed = machines_on_graph(self.node.get_topic_names_and_types())
        with self._lock:
            if self.choice.update(listed):
                self.machines_version += 1

    def frame_prefix(self, machine: str) -> str | None:
        """The machine's TF frame prefix; None while its robot_description has not arrived
        (the own namespace's machine: '' then, a single machine's frames)."""
        prefix = self.prefixes.get(machine)
        if prefix is None and machine == self.own:
            return ""
        return prefix

    # --- callbacks (executor thread) ---------------------------------------------------------
    def _on_description(self, machine: str, raw: bytes) -> None:
        try:
            text = self._decode(raw, self._String).data
            self.prefixes[machine] = frame_prefix_from_urdf(text)
            layout = WheelLayout.from_urdf(text)
            if layout is not None:
                self.wheel_layouts[machine] = layout
            else:
                self.wheel_layouts.pop(machine, None)
            self.description_errors.pop(machine, None)
        except ValueError as exc:
            self.description_errors[machine] = str(exc)

    def _on_joints(self, machine: str, raw: bytes) -> None:
        self.received["joint_states"] += 1
        if machine != self.choice.chosen:
            return
        now = time.monotonic()
        if now - self._last_joint_s < self.period_s:
            return
        self._last_joint_s = now
        msg = self._decode(raw, self._JointState)
        self.decoded["joint_states"] += 1
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        r = joint_readout(self.checker, msg.name, msg.position, stamp, msg.velocity)
        if r is not None and machine == self.choice.chosen:   # (a choice made meanwhile)
            self.joints, self.joints_received_s = r, now
            self.joint_messages += 1

    def _on_load(self, machine: str, raw: bytes) -> None:
        self.received["soil/bucket_load"] += 1
        if machine != self.choice.chosen:
            return
        now = time.monotonic()
        if self.load.accepts(now):
            self.decoded["soil/bucket_load"] += 1
            self.load.add(now, float(self._decode(raw, self._Float64).data))

    def _on_wrench(self, machine: str, raw: bytes) -> None:
        self.received["soil/wrench"] += 1
        if machine != self.choice.chosen:
            return
        now = time.monotonic()
        if self.force.accepts(now):
            self.decoded["soil/wrench"] += 1
            f = self._decode(raw, self._Wrench).wrench.force
            self.force.add(now, math.sqrt(f.x * f.x + f.y * f.y + f.z * f.z))

    def _on_patch(self, msg: Any) -> None:
        self.received["soil/terrain_patch"] += 1
        self.decoded["soil/terrain_patch"] += 1   # every patch counts (each changes the grid)
        if self._grid is None or len(msg.layout.dim) != 2:
            return
        ni, nj = msg.layout.dim[0].size, msg.layout.dim[1].size
        try:
            self._grid.apply_patch(ni, nj, np.frombuffer(msg.data, dtype=float)
                                   if hasattr(msg.data, "tobytes") else msg.data)
        except ValueError as exc:
            self.terrain_error = str(exc)
            return
        if self.terrain is None and (ni, nj) == self._grid.z.shape:
            self.terrain = self._grid
        self.terrain_version += 1

    # --- commands (any thread) ---------------------------------------------------------------
    def send_target(self, x: float, y: float, z: float, pitch: float,
                    machine: str | None = None) -> str:
        """Publish the served machine's ``target_pose``: tip (x, y, z) [m] in its
        ``<prefix>base_link``, bucket pitch [rad]; returns the machine. A target the IK refuses
        (NaN, inf, out of reach) raises ValueError with its reason and nothing is published:
        the page checks first, this is the last gate before the topic. ``machine``: the one
        the sender was shown; when another is served now (chosen meanwhile, from another tab),
        ValueError and nothing is published."""
        verdict = self.checker.check(x, y, z, pitch)
        if not verdict.ok:
            raise ValueError(verdict.message)
        with self._lock:
            served = self.choice.chosen
            if machine is not None and machine != served:
                raise ValueError(f"the dashboard serves {served} now, not {machine}: "
                                 "nothing sent; check the target and send again")
            prefix = self.frame_prefix(served)
            if prefix is None:
                raise ValueError(f"waiting for {self.topic('robot_description', served)} "
                                 "(the machine's TF frame prefix): nothing sent")
            pub = self._target_pubs[served]
        # A machine chosen a moment ago has a new publisher that discovery may not have matched
        # yet: published then, the target was lost without a word (a loaded CI run). A Send
        # waits for every subscriber the graph shows to be matched (its ik_node; a recorder,
        # another viewer), for MATCH_WAIT_S at most, then needs one match: a subscriber with
        # incompatible QoS never matches. Counting from the publisher's creation instead, a
        # Send more than MATCH_WAIT_S later went out on one match, a viewer's, while the
        # machine's ik_node was not matched yet on a loaded host (solved=0: it never moved).
        # The machine's own reader (its ik_node, in its namespace) must be among them: a
        # dashboard that has not discovered it yet counts only the others (the probe, a
        # viewer), and a target sent then passes it by (a fleet CI run: ik_node solved=0).
        topic = self.topic("target_pose", served)
        deadline = time.monotonic() + MATCH_WAIT_S

        def matched() -> bool:
            n = pub.get_subscription_count()
            return n > 0 and ((n >= self.node.count_subscribers(topic)
                               and any(i.node_namespace == served for i in
                                       self.node.get_subscriptions_info_by_topic(topic)))
                              or time.monotonic() > deadline)

        while not matched():
            if pub.get_subscription_count() == 0 and time.monotonic() > deadline:
                raise ValueError(f"nobody subscribes to {topic} "
                                 f"after {MATCH_WAIT_S:g} s (is its ik_node running?): "
                                 "nothing sent; send again once it is")
            time.sleep(0.02)
        (px, py, pz), (qx, qy, qz, qw) = self.checker.pose(x, y, z, pitch)
        msg = self._PoseStamped()
        msg.header.frame_id = prefix + "base_link"
        msg.header.stamp = self.node.get_clock().now().to_msg()
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = float(px), float(py), float(pz)
        o.x, o.y, o.z, o.w = float(qx), float(qy), float(qz), float(qw)
        pub.publish(msg)
        # who it went to, in the log: a target that moves nothing is traced from here
        infos = self.node.get_subscriptions_info_by_topic(topic)
        readers = ", ".join(sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name}"
                                   for i in infos)) or "none"
        own = any(i.node_namespace == served for i in infos)
        log = self.node.get_logger()
        (log.info if own else log.warning)(
            f"target ({x:.3f}, {y:.3f}, {z:.3f}) m, pitch {pitch:.3f} rad sent on {topic} to "
            f"{pub.get_subscription_count()} matched subscriber(s); the graph shows: {readers}"
            + ("" if own else f" (none in {served}: is its ik_node running?)"))
        return served


class RedisLink:
    """Reads the bridge's keys; plays the operational layer (velocity keys + heartbeat)."""

    def __init__(self, url: str, watch: BridgeWatch, limits: DriveLimits,
                 notify_channel: str = "plc.control.changed", period_s: float = 0.2,
                 heartbeat_period_s: float = 0.5, timeout_s: float = 0.5):
        self.url = url
        self.watch = watch
        self.limits = limits
        self.notify_channel = notify_channel
        self.period_s = period_s
        self.heartbeat_period_s = heartbeat_period_s
        self.timeout_s = timeout_s
        self.view: BridgeView = watch.update(None, time.monotonic())
        self.driving = False            # heartbeat toggling and commands forwarded
        self.command = (0.0, 0.0, 0.0)  # longitudinal [m/s], lateral [m/s], angular [rad/s]
        self.last_error = ""
        self._pending: dict[str, str] | None = None
        self._level = False
        self._last_toggle_s = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._client: redis.Redis | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="dashboard-redis")
        self._thread.start()

    # --- the operator's actions (web layer) --------------------------------------------------
    def set_command(self, longitudinal: float, lateral: float, angular: float) -> None:
        """New twist from the sliders; written at once while driving. ValueError names a value
        outside the bridge's envelope."""
        values = self.limits.redis_values(longitudinal, lateral, angular)
        with self._lock:
            self.command = (longitudinal, lateral, angular)
            if self.driving:
                self._pending = values
        self._wake.set()

    def start_driving(self) -> None:
        """Toggle the heartbeat from now on and write the current twist (the bridge re-arms on
        the next heartbeat edge)."""
        with self._lock:
            self.driving = True
            self._pending = self.limits.redis_values(*self.command)
            self._last_toggle_s = 0.0
        self._wake.set()

    def stop(self) -> None:
        """The operational layer's stop: every velocity key 0 at once (one MSET + notify), and
        the heartbeat stops toggling, so the bridge also goes to ``stopped:heartbeat_stale``
        within its ``heartbeat_timeout`` (stop bit set, enable cleared in the control DB)."""
        with self._lock:
            self.driving = False
            self.command = (0.0, 0.0, 0.0)
            self._pending = zero_command()
        self._wake.set()

    # --- the loop ----------------------------------------------------------------------------
    def _connect(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.url, socket_timeout=self.timeout_s,
                                                socket_connect_timeout=self.timeout_s)
        return self._client

    def _loop(self) -> None:
        next_poll = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                client = self._connect()
                with self._lock:
                    pending, self._pending = self._pending, None
                    toggle = self.driving and now - self._last_toggle_s >= self.heartbeat_period_s
                if pending or toggle:
                    pipe = client.pipeline(transaction=False)
                    if pending:
                        pipe.mset(pending)
                    if toggle:
                        self._level = not self._level
                        pipe.set(keys.HEARTBEAT, "true" if self._level else "false")
                        self._last_toggle_s = now
                    pipe.publish(self.notify_channel, "1")
                    pipe.execute()
                if now >= next_poll:
                    t0 = time.perf_counter()
                    values = client.mget(self.watch.keys)
                    rtt_ms = (time.perf_counter() - t0) * 1e3
                    self.view = self.watch.update(values, time.monotonic(), rtt_ms)
                    next_poll = now + self.period_s
                self.last_error = ""
            except (redis.RedisError, OSError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._client = None
                self.view = self.watch.update(None, time.monotonic())
                with self._lock:
                    if pending and self._pending is None and not self.driving:
                        self._pending = pending   # a stop is retried until Redis takes it
                next_poll = now + self.period_s
            timeout = max(0.0, min(next_poll, self._last_toggle_s + self.heartbeat_period_s
                                   if self.driving else next_poll) - time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()

    def close(self, stop: bool = True) -> None:
        """End the loop; with ``stop`` the last act is a stop (velocities 0, no heartbeat)."""
        if stop and self.driving:
            self.stop()
            deadline = time.monotonic() + 1.0
            while self._pending is not None and time.monotonic() < deadline:
                time.sleep(0.01)
        self._stop.set()
        self._wake.set()
        self._thread.join(2.0)
