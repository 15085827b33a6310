"""Across hosts, on one machine: two Linux network namespaces joined by a veth pair.

- ``sim`` host (192.0.2.1): redis-server (the shared server, with a password), sim_node with
  ``track_command`` remapped to ``plc/wheel_states`` and, with the discovery server, the Fast DDS
  discovery server.
- ``plc`` host (192.0.2.2): the virtual PLC and the plc_bridge node, Redis at 192.0.2.1.

Processes run as ``ip netns exec <ns> <venv python> -m ...``, the DDS observers too (a
``monitor`` on the sim host, ``listen`` on the PLC host: this file run as a module). The test's
plain-socket clients (Redis, the heartbeat of the operational layer, the virtual PLC's control
channel) run in threads that entered a namespace with setns(2), so their sockets are in it. (An
rclpy node in the test process is not used: Fast DDS keeps per-process state, and a second
participant in another namespace of the same process discovers nothing.)
DDS uses UDPv4 only, through the shipped profiles: ``config/fastdds_udp.xml`` with the
discovery server, ``config/fastdds_interface.xml`` (the veth only, loopback excluded) with
multicast; with the default shared-memory transport, processes on one kernel would exchange data
through /dev/shm and a link cut would not cut DDS. Each namespace gets its own machine id
(``/etc/netns/<ns>/machine-id``, removed with the namespace), as separate hosts have. Addresses
are TEST-NET-1 (RFC 5737); both veth ends are inside the test's namespaces: nothing touches the
host's interfaces, nothing leaves the namespaces.

Checked, with the discovery server and with multicast discovery: the bridge's
``plc/wheel_states`` reach sim_node and the base drives; the sim's ``joint_states`` reach the
PLC host; the sim host's graph shows the bridge's node and topics. Link cut (``ip link set
down``): the bridge stops with ``stopped:redis_lost``, the PLC's drives stop, and nothing the
bridge publishes during the outage reaches the sim host. Link back: the bridge runs again
(Redis reconnect counted) and a new command (a turn) moves the simulated machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, STARTUP_TIMEOUT_S, wait_for

from excavator_hil.local_services import ManagedProcess, redis_server_binary

SIM_IP, PLC_IP = "192.0.2.1", "192.0.2.2"      # TEST-NET-1 (RFC 5737): documentation only
PREFIX = 24
REDIS_PORT, PLC_PORT, PLC_CONTROL_PORT, DISCOVERY_PORT = 6379, 1102, 1103, 11811
REDIS_PASSWORD = "multihost-test"
CLONE_NEWNET = 0x40000000
LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement


def _why_no_netns() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux-only"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], check=False, capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


_libc = ctypes.CDLL(None, use_errno=True)


def _enter_netns(name: str) -> None:
    """Move the calling thread (only it) into network namespace ``name``."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsProcess(ManagedProcess):
    """``ip netns exec <ns> argv``, output in a log file; ``stop()`` as ManagedProcess (SIGINT,
    then SIGKILL): ``ip netns exec`` execs the command, so the pid is the program's."""

    def __init__(self, netns: str, name: str, argv: list[str], env: dict[str, str],
                 log_dir: Path):
        self.module = name
        self.log_path = log_dir / f"{name}_{time.time_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(["ip", "netns", "exec", netns, *argv], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, cwd=REPO)


class Host:
    """One network namespace: a 'computer' of the deployment."""

    def __init__(self, netns: str, address: str, link: str):
        self.netns, self.address, self.link = netns, address, link
        self._worker: ThreadPoolExecutor | None = None
        self.procs: list[NetnsProcess] = []

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` in this host's probe thread (in the namespace; threads it starts too)."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix=self.netns,
                                              initializer=_enter_netns, initargs=(self.netns,))
        return self._worker.submit(fn, *args, **kwargs).result(LIMIT_S)

    def spawn(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path
              ) -> NetnsProcess:
        # the interface config/fastdds_interface.xml restricts DDS to on this host
        proc = NetnsProcess(self.netns, name, argv,
                            {**env, "EXCAVATOR_HIL_DDS_INTERFACE": self.link}, log_dir)
        self.procs.append(proc)
        return proc

    def python(self, name: str, module: str, args: list[str], env: dict[str, str],
               log_dir: Path) -> NetnsProcess:
        return self.spawn(name, [sys.executable, "-m", module, *args], env, log_dir)

    def set_link(self, up: bool) -> None:
        _ip("-n", self.netns, "link", "set", self.link, "up" if up else "down")
        if up:  # taking the link down removed the routes through it
            _ip("-n", self.netns, "route", "replace", "224.0.0.0/4", "dev", self.link)

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=10.0)
        if self._worker is not None:
            self._worker.shutdown(wait=True)


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host]]:
    """Two namespaces ``sim`` / ``plc`` joined by a veth pair, names unique to this run;
    removed (with their veth ends) at the end, also on failure."""
    why = _why_no_netns()
    if why:
        pytest.skip(f"multi-host test: {why}")
    tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
    sim = Host(f"exh{tag}sim", SIM_IP, f"ve{tag}s")
    plc = Host(f"exh{tag}plc", PLC_IP, f"ve{tag}p")
    made: list[Host] = []
    etc_netns = Path("/etc/netns")
    made_etc_netns = not etc_netns.exists()
    try:
        for h in (sim, plc):
            try:
                _ip("netns", "add", h.netns)
            except RuntimeError as exc:
                if not made:
                    pytest.skip(f"multi-host test: cannot create a network namespace ({exc})")
                raise
            made.append(h)
            # its own machine id (`ip netns exec` bind-mounts /etc/netns/<ns>/* over /etc):
            # Fast DDS takes participants with one machine id for one host and then does not
            # reach them through an interface allow-list; real hosts have their own
            (etc_netns / h.netns).mkdir(parents=True, exist_ok=True)
            (etc_netns / h.netns / "machine-id").write_text(secrets.token_hex(16) + "\n")
        # both ends are created directly inside the test's namespaces
        try:
            _ip("link", "add", sim.link, "netns", sim.netns, "type", "veth", "peer", "name",
                plc.link, "netns", plc.netns)
        except RuntimeError as exc:
            pytest.skip(f"multi-host test: cannot create a veth pair ({exc})")
        for h in (sim, plc):
            _ip("-n", h.netns, "link", "set", "lo", "up")
            _ip("-n", h.netns, "addr", "add", f"{h.address}/{PREFIX}", "dev", h.link)
            h.set_link(True)   # + the multicast route SPDP needs (there is no default route)
        yield sim, plc
    finally:
        for h in made:
            with contextlib.suppress(Exception):
                h.close()
        for h in made:
            subprocess.run(["ip", "netns", "del", h.netns], check=False, capture_output=True,
                           timeout=30)
            shutil.rmtree(etc_netns / h.netns, ignore_errors=True)
        if made_etc_netns:
            with contextlib.suppress(OSError):
                etc_netns.rmdir()


def _discovery_server_argv() -> tuple[list[str], dict[str, str]] | None:
    """The Fast DDS discovery server of the ros-kilted-fastdds wheel and its library path."""
    exe = Path(sys.executable).parent / "fast-discovery-server"
    if not exe.exists():
        return None
    purelib = Path(sysconfig.get_paths()["purelib"])
    libs = [str(Path(sys.prefix) / "lib"), str(purelib / "ros_fastdds.libs")]
    # "42" selects the server command (what `fastdds discovery` passes it)
    return ([str(exe), "42", "-l", SIM_IP, "-p", str(DISCOVERY_PORT)],
            {"LD_LIBRARY_PATH": os.pathsep.join(libs)})


def _ros_env(discovery: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"})
    for k in ("ROS_DISCOVERY_SERVER", "ROS_SUPER_CLIENT", "FASTDDS_BUILTIN_TRANSPORTS",
              "FASTDDS_DEFAULT_PROFILES_FILE", "ROS_STATIC_PEERS"):
        env.pop(k, None)
    # UDPv4 only, with the shipped profiles (docs/deployment.md); with multicast, DDS is also
    # restricted to the veth (loopback excluded) by config/fastdds_interface.xml
    if discovery == "server":
        env["ROS_DISCOVERY_SERVER"] = f"{SIM_IP}:{DISCOVERY_PORT}"
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(REPO / "config" / "fastdds_udp.xml")
    else:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(REPO / "config" / "fastdds_interface.xml")
    return env


class Monitor:
    """The records a ``monitor`` process prints (one JSON object a line), read from its log."""

    def __init__(self, proc: NetnsProcess):
        self.proc = proc

    def records(self, kind: str) -> list[dict[str, Any]]:
        out = []
        for line in self.proc.log().splitlines():
            if line.startswith("{") and line.endswith("}"):
                rec = json.loads(line)
                if rec["kind"] == kind:
                    out.append(rec)
        return out

    def last(self, kind: str, key: str) -> Any:
        recs = self.records(kind)
        return recs[-1][key] if recs else None


@pytest.mark.slow
@pytest.mark.parametrize("discovery", ["server", "multicast"])
def test_sim_and_bridge_on_two_hosts(hosts, discovery, tmp_path):
    import redis

    from excavator_hil.hil_harness import Heartbeat
    from plc_bridge import redis_keys as keys
    from plc_bridge.virtual_plc.control import ControlClient

    sim, plc = hosts
    env = _ros_env(discovery)
    if discovery == "server":
        found = _discovery_server_argv()
        if found is None:
            pytest.skip("no fast-discovery-server next to the venv's python (ros-kilted-fastdds "
                        "wheel)")
        argv, lib_env = found
        sim.spawn("fast_discovery_server", argv, {**env, **lib_env}, tmp_path)
    # --- sim host: Redis (shared server), sim_node ------------------------------------------
    sim.spawn("redis_server", [redis_server_binary(), "--port", str(REDIS_PORT), "--bind",
                               SIM_IP, "127.0.0.1", "--requirepass", REDIS_PASSWORD, "--save",
                               "", "--appendonly", "no", "--dir", str(tmp_path)], env, tmp_path)
    url_local = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{REDIS_PORT}/0"
    url_remote = f"redis://:{REDIS_PASSWORD}@{SIM_IP}:{REDIS_PORT}/0"
    r: redis.Redis = sim.call(redis.Redis.from_url, url_local, socket_timeout=2.0)

    def ping() -> bool:
        with contextlib.suppress(redis.RedisError, OSError):
            return bool(r.ping())
        return False
    wait_for(lambda: sim.call(ping), LIMIT_S, "redis-server on the sim host", 0.1)
    sim_node = sim.python("sim_node", "excavator_sim.sim_node", [
        "--ros-args", "-p", "real_time_factor:=1.0", "-p", "use_sim_time:=false",
        "-p", "marker_rate_hz:=0.0", "-r", "track_command:=plc/wheel_states"], env, tmp_path)

    # --- PLC host: virtual PLC, bridge ---------------------------------------------------------
    plc.python("virtual_plc", "plc_bridge.virtual_plc.cli", [
        "--port", str(PLC_PORT), "--control-port", str(PLC_CONTROL_PORT), "--model",
        "skid_steer"], env, tmp_path)
    bridge = plc.python("plc_bridge", "plc_bridge.bridge.node", [
        "--ros-args", "--params-file", str(REPO / "config" / "plc.yaml"),
        "-p", f"redis_url:={url_remote}", "-p", "plc_host:=127.0.0.1",
        "-p", f"plc_port:={PLC_PORT}", "-p", "autostart:=true",
        # a LAN Redis: a reply within 0.2 s (the default 20 ms suits the same host)
        "-p", "redis_timeout_s:=0.2"], env, tmp_path)

    def control() -> ControlClient | None:
        try:
            return ControlClient(PLC_CONTROL_PORT)
        except OSError:
            return None
    plc_ctl: ControlClient = wait_for(lambda: plc.call(control), LIMIT_S,
                                      "the virtual PLC's control channel", 0.1)

    heartbeat = Heartbeat(url_local, 0.25)
    try:
        # a monitor on the sim host: joint_states, plc/wheel_states (arrival time, stamp), graph
        monitor = Monitor(sim.python("monitor", "test_multihost", ["monitor"], {
            **env, "PYTHONPATH": str(REPO / "test"),
            # a discovery-server client only learns what it subscribes to; a super client
            # learns the whole graph (what `ros2 node list` needs)
            **({"ROS_SUPER_CLIENT": "TRUE"} if discovery == "server" else {})}, tmp_path))

        def logs() -> str:
            return "\n".join(f"--- {p.module}:\n{p.log()[-1500:]}" for p in
                             (*sim.procs, *plc.procs))

        def status() -> str | None:
            v = sim.call(r.get, keys.BRIDGE_STATUS)
            return None if v is None else v.decode()

        def listen(host: Host, topic: str, text: str) -> NetnsProcess:
            return host.python(f"listen_{topic.strip('/')}", "test_multihost",
                               ["listen", topic, text], {**env, "PYTHONPATH": str(REPO / "test")},
                               tmp_path)

        def command(longitudinal: float, angular: float) -> None:
            sim.call(r.mset, {keys.LONGITUDINAL: f"{longitudinal}", keys.LATERAL: "0",
                              keys.ANGULAR: f"{angular}"})

        # --- the operational layer on the sim host drives the machine on the PLC host -------
        command(0.5, 0.0)
        sim.call(heartbeat.start)          # its thread is in the sim namespace
        wait_for(lambda: status() == "running", LIMIT_S,
                 lambda: f"bridge running (status {status()!r})\n{logs()}", 0.1)
        x0 = wait_for(lambda: monitor.last("joints", "base_x"), LIMIT_S,
                      lambda: f"sim_node's joint_states at the monitor\n{logs()}", 0.1)

        def driven() -> bool:
            return monitor.last("joints", "base_x") > x0 + 0.3
        wait_for(driven, LIMIT_S, lambda: f"the simulated base to drive 0.3 m on the PLC's "
                 f"measured track speeds (base_x {monitor.last('joints', 'base_x')}, "
                 f"{len(monitor.records('wheels'))} wheel_states at the sim host)\n{logs()}", 0.1)
        # the monitor on the sim host receives what sim_node drives on
        def at_command() -> bool:     # the PLC's measured track speeds, settled
            v = monitor.last("wheels", "velocity")
            return v is not None and v == pytest.approx([0.5, 0.5], abs=0.05)
        wait_for(at_command, LIMIT_S, lambda: "plc/wheel_states at 0.5 m/s at the sim host's "
                 f"monitor (last {monitor.last('wheels', 'velocity')})", 0.1)
        assert abs(monitor.last("joints", "base_yaw")) < 0.05    # straight ahead

        # the sim host sees the bridge's node and topics in the graph
        def graph() -> bool:
            names = monitor.last("graph", "nodes") or []
            topics = monitor.last("graph", "topics") or []
            return "plc_bridge" in names and "/odom" in topics and "/plc/wheel_states" in topics
        wait_for(graph, LIMIT_S, "plc_bridge, /odom, /plc/wheel_states in the sim host's graph",
                 0.2)
        # ... and the sim's joint_states reach the PLC host (a listener process there)
        listener = listen(plc, "joint_states", "")
        assert listener.proc.wait(LIMIT_S + 10) == 0, listener.log()

        # --- cut the link -------------------------------------------------------------------
        # a listener on the PLC host, for the bridge's diagnostics while the link is down
        diagnostics = listen(plc, "/diagnostics", "stopped:redis_lost")
        wait_for(lambda: "receiving" in diagnostics.log(), LIMIT_S,
                 lambda: f"/diagnostics at the PLC host's listener\n{diagnostics.log()}", 0.1)
        plc.set_link(False)
        t_cut = time.time()                # the link is down from here on
        assert diagnostics.proc.wait(LIMIT_S + 10) == 0, \
            f"the bridge to report stopped:redis_lost\n{diagnostics.log()}\n{logs()}"

        def drives_stopped() -> bool:
            st = plc.call(plc_ctl.status)
            ctrl = st["control"]
            return (not ctrl.get("enable") or ctrl.get("stop")) and all(
                abs(v) < 1e-3 for v in st["speeds"])
        wait_for(drives_stopped, LIMIT_S, lambda: "the PLC to stop its drives (status "
                 f"{plc.call(plc_ctl.status)})", 0.1)
        assert bridge.alive()

        # ... and so does the simulated base: no plc/wheel_states reach sim_node, whose
        # track_command_timeout_s (0.2 s) stops the tracks
        def base_stopped() -> bool:
            recent = [j["base_x"] for j in monitor.records("joints") if j["t"] > time.time() - 1]
            return len(recent) >= 5 and max(recent) - min(recent) < 0.005
        wait_for(base_stopped, LIMIT_S, lambda: "the simulated base to stop while the link is "
                 f"down (base_x {monitor.last('joints', 'base_x')})\n{logs()}", 0.2)

        # --- the link returns ---------------------------------------------------------------
        t_back = time.time()
        plc.set_link(True)
        # nothing the bridge published while the link was down reached the sim host
        during = [w for w in monitor.records("wheels") if w["t"] < t_back and w["stamp"] > t_cut]
        assert not during, f"{len(during)} wheel_states crossed a cut link"

        def reconnected() -> bool:
            v = sim.call(r.get, keys.counter_key("redis_reconnects"))
            return status() == "running" and v is not None and int(v) >= 1
        wait_for(reconnected, LIMIT_S, lambda: f"the bridge running again after a Redis "
                 f"reconnect (status {status()!r})\n{logs()}", 0.1)

        # a new command crosses again: turn on the spot
        yaw0 = monitor.last("joints", "base_yaw")
        command(0.0, 0.4)

        def turned() -> bool:
            yaw = monitor.last("joints", "base_yaw")
            return abs(math.remainder(yaw - yaw0, math.tau)) > 0.2
        wait_for(turned, LIMIT_S, lambda: f"the simulated base to turn after the link returned "
                 f"(base_yaw {monitor.last('joints', 'base_yaw')} from {yaw0})\n{logs()}", 0.1)
        assert any(w["t"] > t_back for w in monitor.records("wheels"))
        assert sim_node.alive() and bridge.alive()
    finally:
        heartbeat.stop()
        with contextlib.suppress(Exception):
            plc.call(plc_ctl.close)
        with contextlib.suppress(Exception):
            sim.call(r.close)


def _listen(topic: str, text: str, count: int = 5, timeout_s: float = LIMIT_S) -> int:
    """``python -m test_multihost listen <topic> <text>``, a listener process on a host: exit 0
    once ``count`` messages on ``topic`` (``joint_states``: JointState, ``/diagnostics``:
    DiagnosticArray) contained ``text``, 1 on timeout."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("listener")
    got: list[Any] = []
    seen: list[bool] = []
    msg_type = DiagnosticArray if topic == "/diagnostics" else JointState

    def on_msg(msg: Any) -> None:
        if not seen:
            seen.append(True)
            print("receiving", flush=True)  # matched the publisher (discovery done)
        if text in str(msg):
            got.append(msg)
    node.create_subscription(msg_type, topic, on_msg, 10)
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.1)
    print(f"{len(got)} messages on {topic} with {text!r}", *got[-1:], flush=True)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0 if len(got) >= count else 1


def _monitor() -> int:
    """``python -m test_multihost monitor``: print JSON lines until SIGINT: ``joints`` (base
    pose, at most every 50 ms), every ``wheels`` message (arrival time ``t`` and header
    ``stamp``, wall clock [s]) and the ``graph`` (node and topic names) every second."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("monitor")
    last = [0.0]

    def emit(kind: str, **values: Any) -> None:
        print(json.dumps({"kind": kind, "t": time.time(), **values}), flush=True)

    def on_joints(m: Any) -> None:
        if time.monotonic() - last[0] >= 0.05:
            last[0] = time.monotonic()
            names = list(m.name)
            emit("joints", **{n: m.position[names.index(n)] for n in ("base_x", "base_yaw")})

    def on_wheels(m: Any) -> None:
        emit("wheels", stamp=m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec,
             velocity=list(m.velocity))

    def on_graph() -> None:
        emit("graph", nodes=node.get_node_names(),
             topics=[n for n, _ in node.get_topic_names_and_types()])
    node.create_subscription(JointState, "joint_states", on_joints, 10)
    node.create_subscription(JointState, "plc/wheel_states", on_wheels, 10)
    node.create_timer(1.0, on_graph)
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        rclpy.spin(node)
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["monitor"]:
    raise SystemExit(_monitor())
if __name__ == "__main__" and sys.argv[1:2] == ["listen"]:
    raise SystemExit(_listen(sys.argv[2], sys.argv[3], 2 if sys.argv[2] == "/diagnostics" else 5))
