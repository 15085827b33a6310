"""Test utilities: real processes only (redis-server, ROS nodes, the virtual PLC)."""

from __future__ import annotations

import bisect
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from excavator_hil.local_services import (
    LocalRedisServer,
    ManagedProcess,
    free_port,
    redis_server_binary,
)
from excavator_hil.local_services import wait_for as _wait_for

REPO = Path(__file__).resolve().parents[1]

# One implementation of process management, shared with the demo (excavator_hil.local_services).
__all__ = ["REPO", "NodeProcess", "RedisServer", "RogueWriter", "RosTestNode", "free_port",
           "not_shown", "private_domain_id", "reach_in_turn", "redis_server_binary", "stamp_ns",
           "wait_for"]


def private_domain_id() -> int:
    """A ROS domain id for this test run: 1..200, from the pid, so parallel runs differ."""
    return 1 + os.getpid() % 200


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
             period: float = 0.01) -> Any:
    """``local_services.wait_for`` that fails the test (AssertionError) on timeout."""
    try:
        return _wait_for(predicate, timeout, what, period)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def not_shown(stamps: Iterable[int], shown: Iterable[int], period: int) -> list[int]:
    """The ``stamps`` [ns] a stream passed over: not among ``shown`` (the stamps of a stream,
    one every ``period`` [ns], as one subscriber received it) although it has no gap there.

    A subscriber that a loaded host holds back misses messages (a KEEP_LAST writer drops what
    it has not acknowledged), so "every stamp is one the clock showed" cannot ask for each stamp
    in ``shown``. A stamp in a gap of ``shown`` (a missed message), before its first or after
    its last (not there yet) proves nothing; one between two received stamps a period apart
    is a time the stream never showed."""
    ref = sorted(set(shown))
    out = []
    for s in stamps:
        i = bisect.bisect_left(ref, s)
        if i < len(ref) and ref[i] == s:
            continue
        if 0 < i < len(ref) and ref[i] - ref[i - 1] < 1.5 * period:
            out.append(s)
    return out


class RedisServer(LocalRedisServer):
    """A real redis-server on 127.0.0.1, restartable on the same port (for outage tests).

    With ``record_writes`` set before ``start()``, the server keeps an append-only file: every
    write it applied, in its order, read back by ``values_written``. A poll of a key misses a
    value overwritten before the next poll; the file does not."""

    record_writes = False
    AOF = "appendonly.aof"

    def server_args(self) -> list[str]:
        args = super().server_args()
        if self.record_writes:
            # a fresh, empty database every start: the old file would be loaded otherwise
            (self.workdir / self.AOF).unlink(missing_ok=True)                  # Redis 6
            shutil.rmtree(self.workdir / "appendonlydir", ignore_errors=True)  # Redis >= 7
            args[args.index("--appendonly") + 1] = "yes"
            args += ["--appendfilename", self.AOF]
        return args

    def commands_written(self) -> list[list[bytes]]:
        """Every write command the server applied since ``start()``, in order (RESP arrays)."""
        files = sorted((self.workdir / "appendonlydir").glob("*.incr.aof")) or \
            [self.workdir / self.AOF]
        out: list[list[bytes]] = []
        for f in files:
            out += _resp_arrays(f.read_bytes() if f.exists() else b"")
        return out

    def values_written(self, key: str) -> list[str]:
        """Every value SET or MSET to ``key`` since ``start()``, in the order written."""
        name, values = key.encode(), []
        for cmd in self.commands_written():
            verb = cmd[0].upper()
            if verb == b"SET" and cmd[1] == name:
                values.append(cmd[2].decode())
            elif verb == b"MSET":
                pairs = zip(cmd[1::2], cmd[2::2], strict=True)
                values += [v.decode() for k, v in pairs if k == name]
        return values


def _resp_arrays(data: bytes) -> list[list[bytes]]:
    """The complete ``*<n>`` arrays of bulk strings in ``data`` (the AOF format); a command the
    server is still writing at the end is left out."""
    out: list[list[bytes]] = []
    i = 0
    try:
        while i < len(data):
            j = data.index(b"\r\n", i)
            count, i = int(data[i + 1:j]), j + 2        # "*<count>"
            cmd = []
            for _ in range(count):
                j = data.index(b"\r\n", i)
                size, i = int(data[i + 1:j]), j + 2     # "$<size>"
                if i + size + 2 > len(data):
                    return out
                cmd.append(data[i:i + size])
                i += size + 2
            out.append(cmd)
    except ValueError:                                   # cut inside a header
        pass
    return out


class NodeProcess(ManagedProcess):
    """A node or tool in its own process (``python -m module args``) run from the repo root."""

    def __init__(self, module: str, args: list[str] | None = None, log_dir: Path | None = None,
                 env: dict[str, str] | None = None):
        super().__init__(module, args or [], log_dir=log_dir, env=env, cwd=REPO)


class RosTestNode:
    """An rclpy node in a private context with an executor thread, for talking to nodes."""

    def __init__(self, name: str = "test_probe"):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and self.context.ok():
            self.executor.spin_once(timeout_sec=0.02)

    def collect(self, msg_type: Any, topic: str, qos: Any = 10) -> list[Any]:
        """Subscribe and return the (live) list the messages are appended to."""
        box: list[Any] = []
        self.node.create_subscription(msg_type, topic, box.append, qos)
        return box

    def endpoints(self, kind: str, topic: str) -> list[tuple[str, str]]:
        """(namespace, node name) of every ``kind`` ("publishers" or "subscriptions") of
        ``topic``, sorted."""
        get = (self.node.get_publishers_info_by_topic if kind == "publishers"
               else self.node.get_subscriptions_info_by_topic)
        return sorted((i.node_namespace, i.node_name) for i in get(topic))

    def wait_endpoints(self, kind: str, topic: str, expected: list[tuple[str, str]],
                       timeout: float = 30.0) -> list[tuple[str, str]]:
        """Wait until ``topic``'s ``kind`` are exactly ``expected`` (any order). An endpoint can
        show up in the graph before the node that owns it does (DDS learns the two from
        different messages): it reads _NODE_NAME_UNKNOWN_ until then."""
        want = sorted(expected)
        seen: list[list[tuple[str, str]]] = [[]]

        def settled() -> bool:
            seen[0] = self.endpoints(kind, topic)
            return seen[0] == want

        wait_for(settled, timeout, lambda: f"{kind} of {topic}: {want}, seen {seen[0]}", 0.05)
        return seen[0]

    def parameter(self, node: str, name: str, timeout: float = 30.0) -> Any:
        """The value of parameter ``name`` of the node ``node`` (its full name, e.g.
        ``/exc2/plc_bridge``), asked through its get_parameters service; None where unset."""
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        client = self.node.create_client(GetParameters, f"{node}/get_parameters")
        try:
            wait_for(client.service_is_ready, timeout, f"{node}/get_parameters", 0.05)
            future = client.call_async(GetParameters.Request(names=[name]))
            wait_for(future.done, timeout, f"{node}'s answer for {name}", 0.02)
            (value,) = future.result().values
            return parameter_value_to_python(value)
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


def send_bucket_state(pose_pub: Any, twist_pub: Any, pose: Any, vel: Any, t: float,
                      frame: str = "world") -> None:
    """Publish what sim_node sends soil_node: ``bucket_twist`` (linear velocity ``vel`` [m/s],
    frame ``world``) and ``bucket_pose`` (a ``BucketPose`` in ``frame``), both stamped ``t`` [s]."""
    from geometry_msgs.msg import PoseStamped, TwistStamped

    sec = math.floor(t)
    tw = TwistStamped()
    tw.header.frame_id = "world"
    tw.header.stamp.sec, tw.header.stamp.nanosec = sec, round((t - sec) * 1e9)
    tw.twist.linear.x, tw.twist.linear.y, tw.twist.linear.z = map(float, vel)
    twist_pub.publish(tw)
    msg = PoseStamped()
    msg.header.frame_id = frame
    msg.header.stamp = tw.header.stamp
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = pose.x, pose.y, pose.z
    o = msg.pose.orientation
    o.x, o.y, o.z, o.w = pose.quaternion()
    pose_pub.publish(msg)


def stamp_ns(msg: Any) -> int:
    """A stamped message's ``header.stamp`` [ns]."""
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def reach_in_turn(publish: Callable[[list[float]], None], states: list[Any], names: list[str],
                  targets: list[list[float]], tol: float, timeout: float,
                  what: Callable[[int], str]) -> list[tuple[int, int]]:
    """Command each joint target (``publish``) once the machine is at the one before, as its
    ``joint_states`` (the live list of a ``collect``) show; per target (sent, reached): the
    stamp [ns] of the newest state when it was sent and of the first state at it (all of
    ``names`` within ``tol``). The windows are the machine's own time: a test thread that a
    loaded host lets notice an arrival late neither stretches nor shifts them."""
    windows = []
    for k, q in enumerate(targets):
        def at(s: Any, q: list[float] = q) -> bool:
            order = list(s.name)
            return all(abs(s.position[order.index(n)] - v) < tol
                       for n, v in zip(names, q, strict=True))
        n = len(states)
        sent = stamp_ns(states[-1]) if states else 0
        publish(q)
        wait_for(lambda at=at: bool(states) and at(states[-1]), timeout, lambda k=k: what(k))
        reached = next(stamp_ns(s) for s in list(states)[max(n - 1, 0):] if at(s))
        windows.append((sent, reached))
    return windows


def call_service(probe: RosTestNode, srv_type: Any, name: str, request: Any,
                 timeout: float = 30.0, resend_s: float = 3.0) -> Any:
    """One *idempotent* service call over DDS; its response. ``wait_for_service`` only says the
    server was discovered: a request that reaches it before it has matched this client's reply
    reader is answered into the void (seen in CI on a loaded host: 30 s without an answer), so
    the request is sent again every ``resend_s`` until ``timeout``. Not for calls that must
    act once (lifecycle transitions: ``change_state``)."""
    client = probe.node.create_client(srv_type, name)
    try:
        assert client.wait_for_service(timeout_sec=timeout), f"service {name} not found"
        deadline = time.monotonic() + timeout
        sent = 0
        while True:
            future = client.call_async(request)
            sent += 1
            if _answered(future, min(time.monotonic() + resend_s, deadline)):
                return future.result()
            client.remove_pending_request(future)
            if time.monotonic() >= deadline:
                raise AssertionError(f"no answer from {name} in {timeout:g} s ({sent} requests)")
    finally:
        probe.node.destroy_client(client)


def change_state(probe: RosTestNode, client: Any, transition_id: int, goal_id: int,
                 what: str | Callable[[], str], timeout: float = 30.0,
                 ask_s: float = 3.0) -> None:
    """One lifecycle transition through ``client`` (a ChangeState client), sent once (it is not
    idempotent), that must end in state ``goal_id``. Its answer can go missing as
    ``call_service``'s can, so without one for ``ask_s`` the node's state is asked (GetState,
    idempotent): the goal state is the transition done. An answer must say success."""
    from lifecycle_msgs.srv import ChangeState, GetState

    get_state = client.srv_name.removesuffix("change_state") + "get_state"
    request = ChangeState.Request()
    request.transition.id = transition_id
    future = client.call_async(request)
    deadline = time.monotonic() + timeout
    while True:
        if _answered(future, min(time.monotonic() + ask_s, deadline)):
            assert future.result().success, what() if callable(what) else what
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what() if callable(what) else what}")
        state = call_service(probe, GetState, get_state, GetState.Request(),
                             max(1.0, deadline - time.monotonic()))
        if state.current_state.id == goal_id:
            client.remove_pending_request(future)
            return


def _answered(future: Any, until: float) -> bool:
    """Wait for a service ``future`` until the monotonic time ``until``; True once done."""
    while time.monotonic() < until:
        if future.done():
            return True
        time.sleep(0.01)
    return bool(future.done())


def ros_parameters_file(path: Path, values: dict[str, Any]) -> Path:
    """A parameter file at ``path`` giving every node (``/**``) ``values``."""
    import yaml

    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    return path


def set_parameters(probe: RosTestNode, node: str, values: dict[str, Any],
                   timeout: float = 30.0) -> list[tuple[bool, str]]:
    """``ros2 param set`` over DDS: one SetParameters call to ``node`` (its full name, e.g.
    ``/sim_node``); (successful, reason) per parameter."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    request = SetParameters.Request(parameters=[
        Parameter(name, value=value).to_parameter_msg() for name, value in values.items()])
    result = call_service(probe, SetParameters, f"{node}/set_parameters", request, timeout)
    return [(r.successful, r.reason) for r in result.results]


def describe_parameters(probe: RosTestNode, node: str, names: list[str],
                        timeout: float = 30.0) -> dict[str, Any]:
    """``ros2 param describe`` over DDS: name -> rcl_interfaces/ParameterDescriptor."""
    from rcl_interfaces.srv import DescribeParameters

    result = call_service(probe, DescribeParameters, f"{node}/describe_parameters",
                          DescribeParameters.Request(names=names), timeout)
    return {d.name: d for d in result.descriptors}


def get_parameters(probe: RosTestNode, node: str, names: list[str],
                   timeout: float = 30.0) -> dict[str, Any]:
    """``ros2 param get`` over DDS: name -> Python value."""
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python

    result = call_service(probe, GetParameters, f"{node}/get_parameters",
                          GetParameters.Request(names=names), timeout)
    return {n: parameter_value_to_python(v) for n, v in zip(names, result.values, strict=True)}


class RogueWriter:
    """Another writer on a PLC's control DB (a snap7 client in this process), for the bridge's
    one-writer rule: explicit stops with a live alive counter and a ``seq`` counting up from
    ``seq``, one every ``period_s``, from ``with`` to its end. ``seqs``: every seq it wrote
    (unsigned 32 bit), to tell its writes from the bridge's in the PLC's log."""

    def __init__(self, config: Any, port: int, seq: int, period_s: float = 0.01) -> None:
        import snap7

        self.config, self.seq, self.period_s = config, seq, period_s
        self.client = snap7.Client()
        self.client.connect("127.0.0.1", 0, 1, port)
        self.seqs: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        cfg = self.config
        alive = 0
        while not self._stop.is_set():
            alive = (alive + 7) & 0xFFFF
            self.seq += 1
            self.seqs.add(self.seq % 2**32)
            values = {**cfg.control.zero_values(), "alive": alive, "stop": True,
                      "seq": (self.seq + 2**31) % 2**32 - 2**31}   # the DINT
            self.client.db_write(cfg.control_db, 0, bytearray(cfg.control.encode(values)))
            self._stop.wait(self.period_s)

    def __enter__(self) -> RogueWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.client.disconnect()
