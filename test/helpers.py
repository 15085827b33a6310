"""Test utilities: real processes only (redis-server, ROS nodes, the virtual PLC)."""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from excavator_common.node_thread import NodeThread
from excavator_hil.local_services import (
    STARTUP_TIMEOUT_S,
    LocalRedisServer,
    ManagedProcess,
    free_port,
    redis_server_binary,
)
from excavator_hil.local_services import wait_for as _wait_for
from plc_bridge import redis_keys as _keys
from plc_bridge.command_crc import CRC_FIELD, seal

REPO = Path(__file__).resolve().parents[1]

# How long a test waits for an event it expects (a message, a status, a process's answer) [s].
# A bound on a wait, never a measurement: the wait ends as soon as the event comes, and only a
# test that is failing anyway waits it out. On a 2-core host with a core busy, beside a stack
# running with the demo's real-time set-up, the test's own process and the nodes it waits on
# were starved for tens of seconds (fresh-clone runs: 20-60 s waits failed one by one), so every
# such wait is this one bound, not a literal chosen per call.
EVENT_WAIT_S = 120.0

# One implementation of process management, shared with the demo (excavator_hil.local_services).
__all__ = ["EVENT_WAIT_S", "REPO", "STARTUP_TIMEOUT_S", "HilLoop", "NodeProcess", "PlantRecord",
           "RedisServer", "RogueWriter", "RosTestNode", "free_port", "held_window", "not_shown",
           "private_domain_id", "reach_in_turn", "redis_server_binary", "stamp_ns", "wait_for"]


def private_domain_id() -> int:
    """A ROS domain id for this test run: 1..200, from the pid, so parallel runs differ. Under
    pytest-xdist (``make test`` runs two workers) each worker of a run gets its own: the run's
    controller pid picks a pair, the worker's number the member (gw0, gw1...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        slots = 200 // count
        return 1 + (os.getppid() % slots) * count + int(worker[2:]) % count
    return 1 + os.getpid() % 200


def latest_values(arrays: Iterable[Any], prefix: str = "") -> dict[str, dict[str, str]]:
    """The key-values of the latest /diagnostics status of each node whose status name starts
    with ``prefix``, by status name (the message under the key ``""``)."""
    latest: dict[str, dict[str, str]] = {}
    for array in list(arrays):
        for status in array.status:
            if status.name.startswith(prefix):
                latest[status.name] = {"": status.message,
                                       **{kv.key: kv.value for kv in status.values}}
    return latest


def latest_statuses(arrays: Iterable[Any], prefix: str = "") -> str:
    """The latest /diagnostics status of each node whose status name starts with ``prefix``,
    a line each: ``name: message key=value, ...`` (what a failing test prints)."""
    return "\n".join(
        f"{name}: {values['']} " + ", ".join(f"{k}={v}" for k, v in values.items() if k)
        for name, values in sorted(latest_values(arrays, prefix).items()))


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
             period: float = 0.01) -> Any:
    """``local_services.wait_for`` that fails the test (AssertionError) on timeout."""
    try:
        return _wait_for(predicate, timeout, what, period)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def thread_stats(pid: int) -> dict[int, list[str]]:
    """The fields of ``/proc/<pid>/task/<tid>/stat`` after the thread's name, per thread id
    (``[0]`` the state, ``[16]`` the nice value). A thread that ends while it is read is left
    out: listing the tasks and reading each one races with the process."""
    out: dict[int, list[str]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):   # ended between the listing and the read
            out[int(task.name)] = (task / "stat").read_text().rsplit(")", 1)[1].split()
    return out


def thread_slices(pid: int) -> set[float]:
    """The fair-scheduler slices of the threads of ``pid`` [s]. A thread under a real-time
    policy, and one that ends while it is read, give none (``thread_policies`` sees the
    first)."""
    from excavator_common import realtime

    slices = {realtime.current_fair_slice(int(task.name))
              for task in Path(f"/proc/{pid}/task").glob("*")}
    return {s for s in slices if s is not None}


def thread_policies(pid: int) -> set[int]:
    """The scheduling policies (``os.SCHED_*``) of the threads of ``pid``."""
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):   # ended between the listing and the read
            out.add(os.sched_getscheduler(int(task.name)))
    return out


def publish_until(pub: Any, msg: Any, answered: Callable[[], Any], timeout: float,
                  what: str | Callable[[], str], period: float = 0.5) -> Any:
    """Publish ``msg`` on ``pub`` every ``period`` s until ``answered()`` is truthy (returned).

    For a request whose answer comes on another topic that only carries answers: a request
    sent as soon as the node's subscription matched can be answered before the node's writer
    of the answer matched this probe's reader, and with volatile durability that answer is
    lost (ci71: ik_node's joint_command). ``answered`` must know the answer by its content,
    not by a count: the answer to an earlier copy may still come."""
    def ask() -> Any:
        done = answered()
        if not done:
            pub.publish(msg)
        return done
    return wait_for(ask, timeout, what, period)


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


def run_stack(command: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    """Run a whole stack's command (the demo, the soak) as a user would, in a session of its
    own, and make sure nothing it started outlives it.

    - Past ``timeout`` s it gets a Ctrl-C (SIGINT to its session: the demo stops its stack and
      says where it was), SIGKILL 30 s later, and the test fails with its output so far.
    - Whatever ends the test meanwhile (pytest-timeout, a KeyboardInterrupt) kills the whole
      session: a killed demo's children, had they lived on, would publish on this run's ROS
      domain into every later test (a run of the suite lost 35 tests to one such sim_node).
    - A process of the session still running after the command ended is the product's leak:
      the test fails naming it (and it is killed).
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    session = proc.pid
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=EVENT_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(session, signal.SIGKILL)
                out, err = proc.communicate()
            raise AssertionError(f"{what} still running after {timeout} s (interrupted); its "
                                 f"output:\n{out[-6000:]}\n{err[-6000:]}") from None
        left = _kill_session(session)
        assert not left, (f"{what} ended (exit {proc.returncode}) and left running: {left}; "
                          f"its output:\n{out[-6000:]}\n{err[-6000:]}")
        return subprocess.CompletedProcess(command, proc.returncode, out, err)
    finally:
        _kill_session(session)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kill_session(session: int) -> list[str]:
    """SIGKILL every live process of ``session``; returns them (pid and command)."""
    import psutil

    killed = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(p.pid) == session and p.status() != psutil.STATUS_ZOMBIE:
                killed.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
                p.kill()
    return killed


class NodeProcess(ManagedProcess):
    """A node or tool in its own process (``python -m module args``) run from the repo root."""

    def __init__(self, module: str, args: list[str] | None = None, log_dir: Path | None = None,
                 env: dict[str, str] | None = None):
        super().__init__(module, args or [], log_dir=log_dir, env=env, cwd=REPO)


class Spawner:
    """Starts node processes (``module``, ``args``) logging under ``log_dir`` and stops them all
    at the end: the ``spawn`` of a module-scoped rig (conftest's ``spawn`` is per test)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[NodeProcess] = []

    def __call__(self, module: str, args: list[str]) -> NodeProcess:
        proc = NodeProcess(module, args, log_dir=self.log_dir)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for p in self.procs:
            p.stop()


@contextlib.contextmanager
def module_redis(base: Path) -> Iterator[tuple[RedisServer, Spawner]]:
    """A redis-server and a :class:`Spawner` for a module's rig, both under ``base``; at the
    end the spawned processes stop, then the server."""
    server = RedisServer(base / "redis")
    server.start()
    spawner = Spawner(base)
    try:
        yield server, spawner
    finally:
        try:
            spawner.stop_all()
        finally:
            server.stop()


def opcua_rig(lab: Any, redis_url: str, spawn: Callable[[str, list[str]], Any], port: int,
              model: str = "skid_steer") -> Any:
    """A HilRig whose bridge talks OPC UA (SignAndEncrypt, user ``bridge`` with the lab's
    password file) to a virtual PLC on ``port`` that serves the lab's PKI and users file;
    ``lab``: test_opcua_transport's ``Lab``. Not started."""
    from excavator_hil.hil_harness import HilRig

    return HilRig(model, redis_url, spawn, {
        "plc_transport": "opcua", "opcua_port": port, "opcua_pki_dir": str(lab.client.root),
        "opcua_user": "bridge", "opcua_password_file": str(lab.password_file),
        "plc_timeout_s": 0.5}, plc_args=[
        "--opcua-port", str(port), "--opcua-pki", str(lab.server.root),
        "--opcua-users", str(lab.users_file)])


class RosTestNode(NodeThread):
    """An rclpy node in a private context with an executor thread, for talking to nodes
    (excavator_common.node_thread, spun every 20 ms)."""

    def __init__(self, name: str = "test_probe"):
        super().__init__(name)
        self.start(spin_timeout_s=0.02)

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
                       timeout: float = EVENT_WAIT_S) -> list[tuple[str, str]]:
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

    def parameter(self, node: str, name: str, timeout: float = EVENT_WAIT_S) -> Any:
        """The value of parameter ``name`` of the node ``node`` (its full name, e.g.
        ``/exc2/plc_bridge``), asked through its get_parameters service; None where unset."""
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        client = self.node.create_client(GetParameters, f"{node}/get_parameters")
        try:
            wait_for(client.service_is_ready, timeout, f"{node}/get_parameters", 0.05)
            # "ready" says the request reaches the server; its answer can still pass this
            # client by while the server's response writer has not matched our reader (DDS
            # matches each side on its own: no answer in 30 s once, a loaded fleet launch):
            # ask again every 5 s until the timeout
            deadline = time.monotonic() + timeout
            while True:
                future = client.call_async(GetParameters.Request(names=[name]))
                try:
                    wait_for(future.done, min(5.0, max(0.1, deadline - time.monotonic())),
                             f"{node}'s answer for {name}", 0.02)
                    break
                except AssertionError:
                    client.remove_pending_request(future)
                    if time.monotonic() >= deadline:
                        raise
            (value,) = future.result().values
            return parameter_value_to_python(value)
        finally:
            self.node.destroy_client(client)


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
                 timeout: float = EVENT_WAIT_S, resend_s: float = 3.0) -> Any:
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
                 what: str | Callable[[], str], timeout: float = EVENT_WAIT_S,
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


def ros_param_args(values: dict[str, Any]) -> list[str]:
    """``values`` as a node's command-line parameters: ``-p name:=value`` each."""
    return [a for name, value in values.items() for a in ("-p", f"{name}:={value}")]


def ros_parameters_file(path: Path, values: dict[str, Any]) -> Path:
    """A parameter file at ``path`` giving every node (``/**``) ``values``."""
    import yaml

    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    return path


# The bridge's Redis and heartbeat deadlines for tests of what a stack does (drive, dig, switch
# machines), not of how fast it does it: with the defaults (0.25 s for a Redis reply, 0.75 s
# for the heartbeat) a fleet of twelve processes on a starved 2-core host was seen stopping its
# bridges as redis_lost 158 times in three minutes (MGET replies later than 0.25 s, cycles of
# 160 ms), and a machine never drove. The deadlines themselves are tested in
# test_bridge_failsafe.py and test_bridge_faults.py. The PLC's alive counter too: a fresh-clone run
# (one core busy, test_fleet_operated) saw cycles of 1.1-1.4 s and the virtual PLC's scan
# with them, so the counter stood past 0.5 s, each stop waited for a new heartbeat edge, and
# machine 2 never drove in 120 s; plc_alive_timeout_s is tested in test_bridge_faults.py.
# Each deadline is the parameter's top (plc_bridge/parameters.py): with 3 s, the dashboard
# (nice 10 under the launch) left its heartbeat standing past 3 s again and again beside a
# fleet, a busy core and another test's nodes, and machine 2 never drove 0.2 m in 120 s
# (fresh17; the bridge rightly stopped each time). The PLC's replies too: a bridge node's S7
# reads timed out at 0.1 s again and again on a host stalling its cycles ~1 s (fresh20).
LOADED_HOST_BRIDGE = {"redis_timeout_s": 5.0, "heartbeat_timeout_s": 10.0,
                      "plc_alive_timeout_s": 10.0, "plc_timeout_s": 2.0}


# teleop_node's deadlines for the same kind of test: on a starved host Joys arrived 0.3-1.0 s
# after their stamps and 0.5 s apart, so teleop_node dropped them (max_command_age_s 0.25 s) or
# held the machine (joy_timeout_s 0.5 s), and a held stick never moved the boom in 120 s (ci60).
# The deadlines themselves are tested in test_teleop_node.py and test_command_age.py.
LOADED_HOST_TELEOP = {"joy_timeout_s": 3.0, "max_command_age_s": 3.0, "state_timeout_s": 3.0}


def loaded_host_params(config: str, values: dict[str, Any], path: Path) -> Path:
    """``config/<config>`` with ``values`` over its own, written to ``path`` (a launch's
    ``<node>_params:=``)."""
    import yaml

    doc = yaml.safe_load((REPO / "config" / config).read_text())
    doc["/**"]["ros__parameters"].update(values)
    path.write_text(yaml.safe_dump(doc))
    return path


def loaded_host_plc_params(path: Path) -> Path:
    """config/plc.yaml with ``LOADED_HOST_BRIDGE``'s deadlines, written to ``path`` (a launch's
    ``plc_params:=``)."""
    return loaded_host_params("plc.yaml", LOADED_HOST_BRIDGE, path)


# The virtual PLCs' watchdogs for a whole fleet on a loaded test host: a fresh-clone run with
# one core busy saw a fleet's bridge cycles take up to 0.43 s (each a write and a read to a
# virtual PLC waiting its turn for a core), so the PLC's 0.25 s watchdog on the bridge's alive
# counter tripped again and again and machine 2 never drove in 120 s (the product doing its
# job: a link that slow must not drive). The watchdogs themselves are tested in
# test_virtual_plc*.py and test_hil_faults.py.
LOADED_HOST_VIRTUAL_PLC = {"watchdog_timeout_s": 2.0, "plant_watchdog_timeout_s": 2.0}


def loaded_host_virtual_plc_params(path: Path) -> Path:
    """config/virtual_plc.yaml with ``LOADED_HOST_VIRTUAL_PLC``'s watchdogs, written to
    ``path`` (a launch's ``virtual_plc_params:=``)."""
    return loaded_host_params("virtual_plc.yaml", LOADED_HOST_VIRTUAL_PLC, path)


def set_parameters(probe: RosTestNode, node: str, values: dict[str, Any],
                   timeout: float = EVENT_WAIT_S) -> list[tuple[bool, str]]:
    """``ros2 param set`` over DDS: one SetParameters call to ``node`` (its full name, e.g.
    ``/sim_node``); (successful, reason) per parameter."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    request = SetParameters.Request(parameters=[
        Parameter(name, value=value).to_parameter_msg() for name, value in values.items()])
    result = call_service(probe, SetParameters, f"{node}/set_parameters", request, timeout)
    return [(r.successful, r.reason) for r in result.results]


def describe_parameters(probe: RosTestNode, node: str, names: list[str],
                        timeout: float = EVENT_WAIT_S) -> dict[str, Any]:
    """``ros2 param describe`` over DDS: name -> rcl_interfaces/ParameterDescriptor."""
    from rcl_interfaces.srv import DescribeParameters

    result = call_service(probe, DescribeParameters, f"{node}/describe_parameters",
                          DescribeParameters.Request(names=names), timeout)
    return {d.name: d for d in result.descriptors}


def get_parameters(probe: RosTestNode, node: str, names: list[str],
                   timeout: float = EVENT_WAIT_S) -> dict[str, Any]:
    """``ros2 param get`` over DDS: name -> Python value."""
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python

    result = call_service(probe, GetParameters, f"{node}/get_parameters",
                          GetParameters.Request(names=names), timeout)
    return {n: parameter_value_to_python(v) for n, v in zip(names, result.values, strict=True)}


class PlcWriteLog:
    """The virtual PLC's control-DB write log from ``since`` [s, monotonic], read as it grows:
    each :meth:`poll` asks only for the writes after the newest one it has (the whole log since
    ``since``, ~200 writes a second with two writers, serialised at every poll, kept the PLC busy
    answering the test instead of the bridge)."""

    def __init__(self, plc: Any, since: float) -> None:
        self.plc, self.since = plc, since
        self.writes: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        """Every write so far, oldest first."""
        newest = self.writes[-1]["t"] if self.writes else None
        new = self.plc.writes(self.since if newest is None else newest)
        # the reply starts at the newest write held (t >= since): its repeats are left out
        held = sum(1 for w in self.writes if w["t"] == newest)
        self.writes += new[held:] if newest is not None else new
        return self.writes


class RogueWriter:
    """Another writer on a PLC's data block (a snap7 client in this process).

    By default on the control DB, for the bridge's one-writer rule: explicit stops with a live
    alive counter and a ``seq`` counting up from ``seq``, one every ``period_s``, from ``with``
    to its end. With ``values`` (``seq -> field values``) and ``db`` / ``block`` it writes
    another block the same way: e.g. ``plant_out`` as a buggy PLC program would (NaN, inf, a
    torque out of range). ``seqs``: every seq it wrote (unsigned 32 bit), to tell its writes
    from the owner's in the PLC's log."""

    def __init__(self, config: Any, port: int, seq: int, period_s: float = 0.01,
                 db: int | None = None, block: Any = None,
                 values: Callable[[int], dict[str, Any]] | None = None) -> None:
        import snap7

        self.config, self.seq, self.period_s = config, seq, period_s
        self.db = config.control_db if db is None else db
        self.block = config.control if block is None else block
        self.values = values or self._stop_values
        self.client = snap7.Client()
        self.client.connect("127.0.0.1", 0, 1, port)
        self.seqs: set[int] = set()
        self.writes = 0
        self._alive = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _stop_values(self, seq: int) -> dict[str, Any]:
        self._alive = (self._alive + 7) & 0xFFFF
        return {**self.config.control.zero_values(), "alive": self._alive, "stop": True,
                "seq": seq}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seq += 1
            self.seqs.add(self.seq % 2**32)
            values = self.values((self.seq + 2**31) % 2**32 - 2**31)   # the DINT
            data = self.block.encode(values, nonfinite_ok=True)
            if self.block.has(CRC_FIELD):   # a second bridge seals its commands as one does
                data = seal(self.block, data)
            self.client.db_write(self.db, 0, bytearray(data))
            self.writes += 1
            self._stop.wait(self.period_s)

    def __enter__(self) -> RogueWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.client.disconnect()


# --- the closed loop of issue 27 (test_hil_loop.py, test_hil_faults.py, test_hil_slope.py) -----
PATIENT_S = 10.0   # PLC watchdogs a stalled test process (the bridge runs in it) cannot trip
# sim_node's parameters for the loop: a 48 m x 48 m terrain at 0.4 m (the machine can drive
# for a while without leaving it), no markers, wall-clock pacing without /clock
# sim_node on a small, coarse terrain (41 x 41 nodes 0.4 m apart) without markers: a node test
# that needs no ground detail starts and steps cheaply
# headless chromium for the dashboard's browser tests: no network, a window the page's cards fit in
# The stack's nodes, each as it runs in the stack but alone: its PLC and Redis are closed ports
# (the bridge, autostarted, and the plant link report that once a second). Keyed by the name
# their /diagnostics status starts with.
LONE_NODES = {
    "plc_bridge": ("plc_bridge.bridge.node", [
        "--params-file", "config/plc.yaml", "-p", "autostart:=true",
        "-p", "redis_url:=redis://127.0.0.1:{port}/0", "-p", "plc_port:={port}"]),
    "plant_link": ("plc_bridge.plant_link.node", ["-p", "plc_port:={port}"]),
    "ik_node": ("excavator_kinematics.ik_node", []),
    "teleop_node": ("excavator_kinematics.teleop_node", []),
    "soil_node": ("excavator_sim.soil.soil_node", []),
}


def start_lone_nodes(log_dir: Path, env: dict[str, str]) -> dict[str, NodeProcess]:
    """Every node of :data:`LONE_NODES` in its own process with ``env``."""
    return {name: NodeProcess(module, ["--ros-args", *(
        a.replace("{port}", str(free_port())) for a in args)], log_dir=log_dir, env=env)
        for name, (module, args) in LONE_NODES.items()}


# libfaketime (``make faketime``): a process's CLOCK_REALTIME stepped while its monotonic clock
# runs on, as an NTP step, a wrong RTC or a VM resumed from a snapshot do
_FAKETIME_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime",
                  "/usr/lib/faketime", "/usr/local/lib/faketime")
FAKETIME_LIB = next((p for d in _FAKETIME_DIRS for p in (Path(d) / "libfaketimeMT.so.1",)
                     if p.exists()), None)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage", "--window-size=1600,1500")


def chromium_driver(profile_dir: Path) -> Any:
    """A Selenium driver of the host's chromium (``CHROMIUM``, ``CHROMEDRIVER``), headless and
    offline, its profile in ``profile_dir``; 60 s to load a page."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"   # never let Selenium Manager download anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    return driver
SMALL_SIM_ARGS = ["-p", "marker_rate_hz:=0.0", "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                  "-p", "terrain.cell_size_m:=0.4"]
SIM_LOOP_ARGS = ["-p", "drive_mode:=plant", "-p", "use_sim_time:=false",
                 "-p", "marker_rate_hz:=0.0", "-p", "terrain.nx:=121", "-p", "terrain.ny:=121",
                 "-p", "terrain.cell_size_m:=0.4", "-p", "terrain.x0_m:=-24.0",
                 "-p", "terrain.y0_m:=-24.0"]
# plant/sensors as PlantRecord keeps it: one row per message
SENSOR_COLUMNS = ("t", "left", "right", "ground", "brake", "drive_fault", "torque_left",
                  "torque_right", "travel_left")


def held_window(rows: Any, target_m_s: float, rel_tol: float, window_s: float) -> list[Any]:
    """``[rows]`` of the first ``window_s`` of simulated time in ``rows`` (``PlantRecord.since``)
    in which every sample of both tracks is within ``rel_tol`` of ``target_m_s``: the PLC
    holds the speed; ``[]`` when there is none yet. Searched for, not taken at a fixed time: a
    host loaded far past CI's can make the bridge in the test process lose the PLC for a
    moment, which stops the machine, and the loop must then settle again."""
    import numpy as np

    ok = np.all(np.abs(rows[:, 1:3] - target_m_s) <= rel_tol * abs(target_m_s), axis=1)
    run_start = None
    for k in range(len(rows)):
        if not ok[k]:
            run_start = None
            continue
        run_start = k if run_start is None else run_start
        if rows[k, 0] - rows[run_start, 0] >= window_s:
            return [rows[run_start:k + 1]]
    return []


class PlantRecord:
    """What the simulation published, as this process received it: ``plant/sensors`` rows
    (``SENSOR_COLUMNS``: simulated time [s], track speeds, ground speed [m/s], the brake and
    drive_fault flags, measured torques [N m], travelled distance [m]), the IMU's pitch [rad]
    by stamp, and /diagnostics of sim_node and plant_link as ``(level, message, values)``.
    A record, not a poll: a figure is judged on stamped rows, not on when this process looked."""

    def __init__(self, probe: RosTestNode) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Imu, JointState

        self.rows: list[tuple[float, ...]] = []
        self.pitch: dict[float, float] = {}
        self.diagnostics: dict[str, list[tuple[int, str, dict[str, str]]]] = {
            "sim_node": [], "plant_link": []}
        node = probe.node
        node.create_subscription(JointState, "plant/sensors", self._on_sensors,
                                 qos_profile_sensor_data)
        node.create_subscription(Imu, "imu", self._on_imu, qos_profile_sensor_data)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)

    @staticmethod
    def _t(msg: Any) -> float:
        return float(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)

    def _on_sensors(self, msg: Any) -> None:
        i = {n: k for k, n in enumerate(msg.name)}
        p, v, e = msg.position, msg.velocity, msg.effort
        self.rows.append((self._t(msg), v[i["track_left"]], v[i["track_right"]],
                          v[i["ground_speed"]], p[i["brake"]], p[i["drive_fault"]],
                          e[i["track_left"]], e[i["track_right"]], p[i["track_left"]]))

    def _on_imu(self, msg: Any) -> None:
        q = msg.orientation
        self.pitch[self._t(msg)] = math.asin(max(-1.0, min(1.0, 2.0 * (q.w * q.y - q.z * q.x))))

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            for who, box in self.diagnostics.items():
                if st.name.startswith(who) or st.name.endswith(f": {who}"):
                    box.append((int(st.level[0]), st.message,
                                {kv.key: kv.value for kv in st.values}))

    def since(self, t0: float) -> Any:
        """The rows with simulated time >= ``t0`` [s], as an array (``SENSOR_COLUMNS``)."""
        import numpy as np

        return np.array([r for r in list(self.rows) if r[0] >= t0]).reshape(
            -1, len(SENSOR_COLUMNS))

    def last_t(self) -> float:
        return self.rows[-1][0] if self.rows else -math.inf

    def last(self, who: str) -> tuple[int, str, dict[str, str]]:
        box = self.diagnostics[who]
        return box[-1] if box else (-1, "", {})

    def sim_status(self) -> tuple[int, str, dict[str, str]]:
        """sim_node's last full status (the 1 Hz one with its figures)."""
        for item in reversed(self.diagnostics["sim_node"]):
            if "sim_time_s" in item[2]:
                return item
        return (-1, "", {})


class HilLoop:
    """The closed loop of issue 27, every part real and in its own process but the bridge:

        Redis -> bridge (``HilRig``: BridgeCore in this process) -> control DB -> virtual PLC
        (plant_mode external) -> plant_out -> plant link -> plant/actuation -> sim_node
        (drive_mode plant) -> plant/sensors + imu -> plant link -> plant_in -> PLC -> monitor
        DB -> bridge -> Redis.

    ``plant_watchdog_s``: the PLC's watchdog on the simulation's alive counter (patient by
    default: the loop's own tests are not about it); ``plc_params``: more of the virtual PLC's
    parameters; ``sim_args``: more sim_node arguments; ``via_proxy``: the plant link reaches
    the PLC through a ``TcpProxy`` (a cable to cut)."""

    def __init__(self, redis_url: str, spawn: Callable[[str, list[str]], Any], tmp_path: Path,
                 probe: RosTestNode, plant_watchdog_s: float = PATIENT_S,
                 actuation_timeout_s: float = 0.5, plc_params: dict[str, Any] | None = None,
                 sim_args: list[str] | None = None, via_proxy: bool = False) -> None:
        from excavator_hil.faults.tcp_proxy import TcpProxy
        from excavator_hil.hil_harness import HilRig

        plant = ros_parameters_file(tmp_path / "virtual_plc_external.yaml", {
            "plant_mode": "external", "plant_watchdog_timeout_s": plant_watchdog_s,
            "watchdog_timeout_s": PATIENT_S, **(plc_params or {})})
        self.spawn = spawn
        self.actuation_timeout_s = actuation_timeout_s
        self.rig = HilRig("skid_steer", redis_url, spawn, plc_args=["--plant-config",
                                                                      str(plant)])
        self.record = PlantRecord(probe)
        self.proxy = TcpProxy(self.rig.plc_port) if via_proxy else None
        self.sim_args = ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                         *SIM_LOOP_ARGS, "-p",
                         f"plant_actuation_timeout_s:={actuation_timeout_s}", *(sim_args or [])]
        self.sim = spawn("excavator_sim.sim_node", self.sim_args)
        self.link = self.start_link()
        try:
            wait_for(lambda: len(self.record.rows) > 10, 120.0,
                     lambda: f"plant/sensors from sim_node\n{self.sim.log()[-3000:]}")
        except BaseException:
            self.close()
            raise

    def start_link(self) -> Any:
        """The plant link node (again, after a kill)."""
        port = self.proxy.port if self.proxy else self.rig.plc_port
        self.link = self.spawn("plc_bridge.plant_link.node",
                               ["--ros-args", "-p", f"plc_port:={port}"])
        return self.link

    def start_sim(self) -> Any:
        """sim_node (again, after a kill): a new run, its simulated time from 0."""
        self.sim = self.spawn("excavator_sim.sim_node", self.sim_args)
        return self.sim

    def logs(self) -> str:
        return (f"sim_node:\n{self.sim.log()[-2000:]}\nplant_link:\n{self.link.log()[-2000:]}"
                f"\nbridge {self.rig.get(_keys.BRIDGE_STATUS)}: "
                f"{self.rig.get(_keys.BRIDGE_DETAIL)}")

    def drive(self, speed_m_s: float, start: bool = True) -> float:
        """Command ``speed_m_s`` forward; wait for the bridge running and the tracks moving.
        Returns the simulated time [s] of the first row with both tracks past 10 % of it."""
        if start:
            self.rig.start()
        self.rig.command(speed_m_s, 0.0, 0.0)
        self.wait_status("running", EVENT_WAIT_S)
        t0 = self.record.last_t()

        def moving() -> float | None:
            rec = self.record.since(t0)
            hit = rec[(rec[:, 1] > 0.1 * speed_m_s) & (rec[:, 2] > 0.1 * speed_m_s)]
            return float(hit[0, 0]) if len(hit) else None

        result: float = wait_for(moving, EVENT_WAIT_S, lambda: f"the tracks moving\n{self.logs()}")
        return result

    def wait_status(self, status: str, timeout: float = EVENT_WAIT_S) -> None:
        wait_for(lambda: self.rig.get(_keys.BRIDGE_STATUS) == status, timeout,
                 lambda: f"bridge {status}\n{self.logs()}")

    def close(self) -> None:
        self.rig.close()
        if self.proxy:
            self.proxy.close()


class OpcUaHilLoop(HilLoop):
    """``HilLoop`` with the plant link on OPC UA (Basic256Sha256 SignAndEncrypt, a user login,
    its own certificate): the virtual PLC serves OPC UA beside S7 (the bridge stays on S7);
    ``via_proxy``: the plant link reaches the PLC's OPC UA port through a ``TcpProxy``.

    ``HilLoop`` starts its PLC without OPC UA; this one then restarts it with OPC UA on
    (``rig.plc_args``, so a test's ``rig.start_plc()`` after a kill serves it too) before the
    bridge starts, the plant link connecting when it is up."""

    PASSWORD = "plant link secret"

    def __init__(self, redis_url: str, spawn: Callable[[str, list[str]], Any], tmp_path: Path,
                 probe: RosTestNode, via_proxy: bool = False, **kw: Any) -> None:
        import yaml

        from excavator_hil.faults.tcp_proxy import TcpProxy
        from excavator_hil.hil_harness import free_port
        from plc_bridge.config import default_config_path
        from plc_bridge.opcua_pki import generate
        from plc_bridge.virtual_plc.users import hash_password

        root = tmp_path / "opcua"
        server = generate(root / "virtual_plc", "virtual_plc", server=True)
        client = generate(root / "plant_link", "plant_link")
        shutil.copy(server.cert, client.trusted / "virtual_plc.der")
        shutil.copy(client.cert, server.trusted / "plant_link.der")
        password = _private(root / "password", self.PASSWORD + "\n")
        users = _private(root / "users", f"plant:{hash_password(self.PASSWORD)}\n")
        doc = yaml.safe_load(default_config_path().read_text())
        doc["/**"]["ros__parameters"].update(   # a secure handshake on a loaded host: 0.5 s
            opcua_user="plant", opcua_password_file=str(password), plc_timeout_s=0.5)
        plc_yaml = root / "plc.yaml"
        plc_yaml.write_text(yaml.safe_dump(doc))
        self.opcua_port = free_port()
        self.ua_proxy = TcpProxy(self.opcua_port) if via_proxy else None
        self._link_params = [
            "-p", "plc_transport:=opcua", "-p", f"plc_config_file:={plc_yaml}",
            "-p", f"opcua_pki_dir:={client.root}"]
        self._opcua_args = ["--opcua-port", str(self.opcua_port), "--opcua-pki",
                            str(server.root), "--opcua-users", str(users)]
        super().__init__(redis_url, spawn, tmp_path, probe, **kw)
        self.proxy = self.ua_proxy
        self.rig.plc_args += self._opcua_args
        self.rig.kill_plc()
        self.rig.start_plc()

    def start_link(self) -> Any:
        port = self.ua_proxy.port if self.ua_proxy else self.opcua_port
        self.link = self.spawn("plc_bridge.plant_link.node", [
            "--ros-args", "-p", f"plc_port:={self.rig.plc_port}", "-p", f"opcua_port:={port}",
            *self._link_params])
        return self.link


def _private(path: Path, text: str) -> Path:
    """A secret file only its owner can read (what the OPC UA code asks of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def double_sigint_while_starting(module: str, func: str, args: list[str], delay_s: float,
                                 cwd: Path) -> tuple[int, str]:
    """``ros2 launch``'s Ctrl-C (two SIGINTs 0.03 s apart to the process group) ``delay_s``
    after the console-script target ``module:func`` was imported in a fresh interpreter (a
    script as the entry point's, printing a line once imported): its exit code and output."""
    import sys

    script = cwd / func
    script.write_text(f"import sys\nfrom {module} import {func}\n"
                      "print('entry point imported', flush=True)\n"
                      f"sys.exit({func}())\n")
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first == b"entry point imported\n", first
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.03)
    with contextlib.suppress(ProcessLookupError):  # already gone after the first
        os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=EVENT_WAIT_S)
    return proc.returncode, (first + out).decode(errors="replace")
