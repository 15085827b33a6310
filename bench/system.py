"""The whole stack in real time on this host: the full dig cycle (every process, as ``make demo``
runs it) with the parts' standalone figures measured in the same run as the baseline.

Phases, one after the other:

1. ``sim alone``: sim_node by itself at real-time factor 1 (as the demo starts it) for
   ``--sim-seconds``: lag behind the wall clock and CPU, from its own ``/diagnostics``.
2. ``bridge alone``: ``bench/bridge.py`` (redis-server, the virtual PLC and the bridge at 100 Hz)
   for ``--bridge-cycles`` cycles: Redis->PLC latency and overruns.
3. ``full stack``: ``excavator-hil demo`` (redis-server, virtual PLC, plc_bridge, sim_node with
   the soil model and ik_node inside its process (``--soil-node``: soil_node in its own
   process), the plant link, and the operator with the bag's recorder as a thread of it) and,
   beside it,
   ``bench/bridge.py`` again with the same cycles, started ``--warmup`` s after the demo (when
   the stack is up): the bridge's deadline next to the full stack (the demo's own bridge counts
   its cycles and overruns too; both are reported). The side bridge adds a redis-server, a
   virtual PLC and a bridge to the load: its figures are a slightly pessimistic bound.

Figures of the full run:
- real-time factor held and lag behind the wall clock (sim_node's diagnostics, via the demo's
  summary);
- soil wrench age: at sim_node (its diagnostics: sim time at arrival minus the pose's stamp;
  sim time advances in publish periods, so the figure is quantised to 10 ms) and at the
  recorder (each ``soil/wrench`` stamp against the stamp of the last ``joint_states`` recorded
  before it, the method of issue 12);
- bridge Redis->PLC latency p50/p99 and overruns (the demo bridge's counters; the side bridge);
- CPU per process and in total [cores], from ``/proc/<pid>/stat`` over the steady part of the
  run (after ``--warmup`` s, so imports and model builds are left out);
- memory: PSS of every process every 0.25 s over the whole run, start-up and the demo's own
  end (its pictures) included (``/proc/<pid>/smaps_rollup``; PSS shares library pages among
  the processes that map them, so the sum is the stack's own): the summed peak and when, each
  process's share then and its own peak, against issue 32's 400 MiB (``memory_pss`` in the
  JSON line; the series in the run's folder, ``memory_pss.json``).

Goals (issue 12, on a calm 2-core machine): sim never > 50 ms behind after start-up, RTF 1.0;
wrench age p99 <= 20 ms, max <= 50 ms; bridge p99 <= 3 ms, overruns <= 0.1 %; whole stack
<= 1.5 cores. Run it on a quiet machine; the last stdout line is one JSON object.

With ``--dashboard`` the full stack runs twice, the second time with the browser dashboard
(``excavator-hil dashboard``, its ROS node in the same graph) open in headless Chromium at its
default 10 Hz refresh: the two runs' lag, wrench age and bridge overruns side by side (issue 17:
the page must not raise the bridge's overruns or the sim's lag). The dashboard watches the
graph only (no Redis: the demo's Redis is private to it); its process and Chromium's are in
the CPU figures. Both run at niceness 10, as docs/dashboard.md says to run them on the HIL host
(bench/dashboard.py measures the page's own cost).

With ``--foxglove`` (issue 33) the same second run is made with the Foxglove live view instead
(``foxglove_view`` at niceness 10, its ROS node in the same graph, no Redis) and a client of
the Foxglove protocol subscribed to every channel (test/peers/foxglove's reference client, the
app's stand-in; ``make foxglove-peer``): the view must not raise the bridge's overruns or the
sim's lag either.

Process set-up (issue 12, docs/plc_bridge.md "HIL host set-up"): ``--setup new`` (default:
start-up objects frozen out of the garbage collector, 0.5 ms GIL slices, recorder and operator
at nice 10) or ``old`` (none of it); ``--compare`` runs the full stack with both, in this run.
``--compare-dds`` runs the full stack a second time with Fast DDS's own writer timing (a profile
that sets nothing) instead of the project's ``config/fastdds_default.xml`` (a HEARTBEAT every
0.1 s, not 3 s): what the faster repair of lost samples costs in CPU, as a ratio.
``--probe``: each process's collections, stalls and CPU waits (``EXCAVATOR_HIL_PROBE``);
``--trace-sched``: a ``perf sched`` trace and the CPU time each process held while the demo's
bridge overran (``bench/stall_report.py``).

    .venv/bin/python bench/system.py [--quick] [--sim-seconds 15] [--bridge-cycles 3000]
                                     [--dashboard] [--foxglove] [--compare] [--compare-dds]
                                     [--setup new|old] [--probe]
                                     [--trace-sched] [--pin-cpus] [--background-nice N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))   # stall_report
TICK = os.sysconf("SC_CLK_TCK")
PSS_GOAL_MIB = 400.0   # issue 32: the demo's processes together, at every moment of the run


# --- processes and CPU ---------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _cpu_s(pid: int) -> float | None:
    """User + system CPU time of ``pid`` [s] (None when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def _pss_kib(pid: int) -> tuple[int, int] | None:
    """PSS and its anonymous part [KiB] of ``pid`` (``/proc/<pid>/smaps_rollup``; None when
    gone). PSS shares each library page among the processes mapping it, so the sum over the
    stack's processes is the stack's own memory, whatever else runs on the host."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Pss_Anon"):
                    fields[key] = int(rest.split()[0])
    except (OSError, ValueError):
        return None
    return (fields["Pss"], fields.get("Pss_Anon", 0)) if "Pss" in fields else None


def _name(pid: int) -> str:
    """A short name: the module after ``-m`` (its last two parts where the last is generic:
    ``bridge.node``), the script, or the executable."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    args = [a.decode(errors="replace") for a in argv if a]
    if "-m" in args and args.index("-m") + 1 < len(args):
        module = args[args.index("-m") + 1]
        if module == "excavator_hil.cli" and len(args) > args.index("-m") + 2:
            return "excavator-hil " + args[args.index("-m") + 2]  # e.g. the recorder
        if module == "excavator_hil.node_container":  # its nodes: sim_node+ik_node
            from excavator_hil.node_container import COMPONENTS

            return "+".join(a for a in args[args.index("-m") + 2:] if a in COMPONENTS)
        # the last two parts where the last is generic (plc_bridge.bridge.node: bridge.node,
        # plc_bridge.virtual_plc.cli: virtual_plc.cli), else the last (sim_node)
        parts = module.split(".")
        return ".".join(parts[-2:]) if parts[-1] in ("node", "cli", "app", "main") else parts[-1]
    for a in args[:3]:
        if a.endswith(".py"):
            return Path(a).stem
    # Chromium rewrites its argv into one string with spaces: name it by its first word.
    return Path(args[0].split()[0]).name if args and args[0].split() else f"pid {pid}"


class CpuSampler:
    """Samples the CPU time and the PSS of a process tree every ``period`` s, in a thread."""

    def __init__(self, root: int, period: float = 0.25, extra: list[int] | None = None) -> None:
        self.root = root
        self.extra = extra or []  # other process trees to count (the dashboard, its browser)
        self.period = period
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.memory: list[tuple[float, dict[int, tuple[int, int]]]] = []  # PSS, anon [KiB]
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            cpu, mem = {}, {}
            roots = [self.root, *self.extra]
            for pid in [p for r in roots for p in (r, *_children(r))]:
                value = _cpu_s(pid)
                if value is not None:
                    cpu[pid] = value
                    # the name once the process runs its program (a wrapper, e.g.
                    # ``python -m excavator_common.realtime ... --``, execs it)
                    if self.names.get(pid, "realtime") == "realtime":
                        self.names[pid] = _name(pid)
                pss = _pss_kib(pid)
                if pss is not None:
                    mem[pid] = pss
            self.samples.append((now, cpu))
            self.memory.append((now, mem))
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def cores(self, warmup_s: float) -> tuple[dict[str, float], float, float]:
        """CPU per process name and in total [cores] over the samples after ``warmup_s``,
        until the last sample in which the stack was still whole; and that window [s]."""
        if len(self.samples) < 3:
            return {}, math.nan, 0.0
        t_start = self.samples[0][0] + warmup_s
        after = [s for s in self.samples if s[0] >= t_start] or self.samples
        # the stack whole: the processes of the sample after the warm-up with the most of them
        # (a loaded host may still be starting it when the warm-up ends; a short-lived process
        # at start-up must not move the window), from the first sample that has them all to
        # the last
        whole = set(max(after, key=lambda s: len(s[1]))[1])
        first = next(s for s in after if whole <= set(s[1]))
        last = [s for s in after if whole <= set(s[1])][-1]
        window = last[0] - first[0]
        if window <= 0:
            return {}, math.nan, 0.0
        per: dict[str, float] = {}
        for pid, end in last[1].items():
            begin = first[1].get(pid, 0.0)
            name = self.names.get(pid, str(pid))
            per[name] = per.get(name, 0.0) + (end - begin) / window
        return dict(sorted(per.items(), key=lambda kv: -kv[1])), sum(per.values()), window

    def pss_series(self) -> list[dict[str, float]]:
        """PSS per process name at every sample [MiB], ``t`` [s from the first sample]."""
        if not self.memory:
            return []
        t0 = self.memory[0][0]
        out = []
        for t, mem in self.memory:
            row: dict[str, float] = {"t": round(t - t0, 2)}
            for pid, (pss, _) in mem.items():
                name = f"{self.names.get(pid, pid)}"
                row[name] = round(row.get(name, 0.0) + pss / 1024, 1)
            out.append(row)
        return out

    def pss(self) -> dict[str, object]:
        """PSS over the whole run, start-up and the demo's end included [MiB]: the peak of the
        sum over the processes alive at one sample, when it fell [s from the first sample] and
        each process's share then; each process's own peak (and its anonymous part then);
        the goal of issue 32 (<= 400 MiB summed at every moment)."""
        if not self.memory:
            return {}
        t0 = self.memory[0][0]
        sums = [(sum(p for p, _ in mem.values()), t, mem) for t, mem in self.memory]
        peak_kib, peak_t, peak_mem = max(sums, key=lambda s: s[0])
        own: dict[str, tuple[int, int]] = {}
        for _, mem in self.memory:
            for pid, (pss, anon) in mem.items():
                name = f"{self.names.get(pid, pid)}"
                if pss > own.get(name, (0, 0))[0]:
                    own[name] = (pss, anon)
        at_peak: dict[str, float] = {}
        for pid, (pss, _) in peak_mem.items():
            name = f"{self.names.get(pid, pid)}"
            at_peak[name] = at_peak.get(name, 0.0) + pss / 1024
        last_mem = self.memory[-1][1]
        return {
            "sum_peak_mib": round(peak_kib / 1024, 1), "sum_peak_at_s": round(peak_t - t0, 2),
            "sum_at_end_mib": round(sum(p for p, _ in last_mem.values()) / 1024, 1),
            "at_sum_peak_mib": {k: round(v, 1) for k, v in
                                sorted(at_peak.items(), key=lambda kv: -kv[1])},
            "peak_per_process_mib": {k: round(v[0] / 1024, 1) for k, v in
                                     sorted(own.items(), key=lambda kv: -kv[1][0])},
            "anon_at_own_peak_mib": {k: round(v[1] / 1024, 1) for k, v in own.items()},
            "samples": len(self.memory), "period_s": self.period,
            "goal_sum_mib": PSS_GOAL_MIB, "met": peak_kib / 1024 <= PSS_GOAL_MIB}


# --- phases --------------------------------------------------------------------------------
def _ros_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 200))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def sim_alone(seconds: float) -> dict[str, float]:
    """sim_node by itself as the demo starts it; its last diagnostics and its CPU."""
    os.environ.update(_ros_env())
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray

    proc = subprocess.Popen([sys.executable, "-m", "excavator_sim.sim_node", "--ros-args",
                             "-p", "real_time_factor:=1.0", "-p", "terrain.contact:=false",
                             "-p", "use_sim_time:=true"], cwd=REPO, env=_ros_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rclpy.init()
    node = rclpy.create_node("bench_system_probe")
    status: dict[str, str] = {}

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name.startswith("sim_node") and st.message.startswith("running"):
                status.clear()
                status.update({kv.key: kv.value for kv in st.values})
                status["_message"] = st.message

    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    try:
        t_up = time.monotonic() + 60.0
        while not status and time.monotonic() < t_up:
            rclpy.spin_once(node, timeout_sec=0.1)
        cpu0, t0 = _cpu_s(proc.pid) or 0.0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            rclpy.spin_once(node, timeout_sec=0.1)
        cpu = ((_cpu_s(proc.pid) or 0.0) - cpu0) / (time.monotonic() - t0)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        proc.terminate()
        proc.wait(15)
    return {"rtf": _f(status.get("achieved_real_time_factor")),
            "lag_ms_p50": _f(status.get("lag_ms_p50")),
            "lag_ms_p99": _f(status.get("lag_ms_p99")),
            "lag_ms_max": _f(status.get("lag_ms_max_since_start")),
            "slipped_s": _f(status.get("slipped_s")), "cpu_cores": cpu}


def bridge(cycles: int, rt_priority: int) -> subprocess.Popen[str]:
    """bench/bridge.py with ``cycles`` commands (its own redis-server and virtual PLC)."""
    args = [sys.executable, str(REPO / "bench" / "bridge.py"), "--cycles", str(cycles),
            "--naive-cycles", "100"]  # the naive baseline is not what is measured here
    if rt_priority:
        args += ["--rt-priority", str(rt_priority)]
    return subprocess.Popen(args, cwd=REPO, env=_ros_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def bridge_result(proc: subprocess.Popen[str]) -> dict[str, float]:
    out, _ = proc.communicate(timeout=1800)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": out[-500:]}  # type: ignore[dict-item]
    data = json.loads(lines[-1])
    return _bridge_figures(data)


def _bridge_figures(data: dict) -> dict[str, float]:
    """The figures of bench/bridge.py's JSON that matter here (its keys, flattened)."""
    flat: dict[str, float] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[prefix] = float(value)

    walk("", data)
    keep = {k: v for k, v in flat.items()
            if "naive" not in k and any(s in k for s in ("redis_to_plc", "overrun", "cycles"))}
    return keep


def wrench_age_at_recorder(bag: Path) -> dict[str, float]:
    """Each soil/wrench stamp against the stamp of the last joint_states recorded before it
    [ms of sim time], from the operator's first command on (the bag's first /target_pose or
    /joint_command: the dig cycle). Before it the stack is idle and the recorder, at nice 10,
    may still drain what reached it while its subscriptions were made: the messages that arrive
    before its first /clock are written in arrival order with that clock's time (seen: one run
    in ~20 recorded a burst of wrenches 60-330 ms "old" in its first 10 ms, sim_node's own
    ages in that run at most 20 ms). ``max_ms_whole_bag`` keeps the figure with the start-up."""
    from excavator_hil.bags.io import TYPESTORE, read_bag

    contents = read_bag(bag, ["/joint_states", "/soil/wrench", "/target_pose", "/joint_command"])
    js_t, ages, whole, started = None, [], [], False
    for m in contents.messages:
        if m.topic in ("/target_pose", "/joint_command"):
            started = True
            continue
        msg = TYPESTORE.deserialize_cdr(m.data, m.msgtype)
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if m.topic == "/joint_states":
            js_t = t
        elif js_t is not None:
            whole.append(1e3 * (js_t - t))
            if started:
                ages.append(whole[-1])
    if not ages:
        return {"n": 0}
    a = np.array(ages)
    return {"n": len(a), "p50_ms": float(np.percentile(a, 50)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()),
            "max_ms_whole_bag": float(max(whole))}


class _Viewer:
    """A viewer's server process (``app``, its output in ``log``) and the client that shows it
    (``client``), started for one full run and stopped after it."""

    app: subprocess.Popen[str]
    client: subprocess.Popen[bytes]

    def _start_app(self, name: str, args: list[str], env: dict[str, str], ready: str) -> None:
        self.name = name
        self.log = Path(tempfile.mkdtemp(prefix=f"bench_{name}_")) / f"{name}.log"
        self._log = self.log.open("w")
        self.app = subprocess.Popen(args, cwd=REPO, env=env, stdout=self._log,
                                    stderr=subprocess.STDOUT, text=True)
        self._wait_for(ready, 120.0)

    def _wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log.read_text(errors="replace"):
            if self.app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{self.name}: no {text!r}; log:\n"
                                 f"{self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def pids(self) -> list[int]:
        return [self.app.pid, self.client.pid]

    def close(self) -> None:
        for proc in (self.client, self.app):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class OpenDashboard(_Viewer):
    """The dashboard process and a headless Chromium showing its page, for one full run."""

    CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                      "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run")

    def __init__(self, env: dict[str, str]) -> None:
        import shutil

        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is None:
            raise SystemExit("--dashboard needs Debian's chromium (make browser)")
        port = _free_port()
        self._start_app("dashboard", [sys.executable, "-m", "excavator_hil.dashboard.app",
                                      "--port", str(port), "--redis-url",
                                      "redis://127.0.0.1:1/0"], env, "DASHBOARD READY")
        profile = tempfile.mkdtemp(prefix="bench_chromium_")
        # at niceness 10 as docs/dashboard.md says to run a browser on the HIL host (the
        # dashboard server puts itself at 10); as root without CAP_SYS_NICE, else Chromium
        # sets its compositor and IO threads to -8 and most others to 0, above the bridge
        low = ["nice", "-n", "10"]
        if os.geteuid() == 0 and shutil.which("setpriv"):
            low = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", *low]
        self.client = subprocess.Popen(
            [*low, browser, *self.CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"http://127.0.0.1:{port}/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_for("page opened", 120.0)


class OpenFoxglove(_Viewer):
    """The Foxglove live view and a protocol client subscribed to all its channels, for one
    full run (both at niceness 10, as docs/foxglove.md says to run them on the HIL host)."""

    def __init__(self, env: dict[str, str]) -> None:
        import shutil

        node = shutil.which("node")
        peer = REPO / "test" / "peers" / "foxglove"
        if node is None or not (peer / "node_modules").is_dir():
            raise SystemExit("--foxglove needs node and the protocol client (make foxglove-peer)")
        port = _free_port()
        low = ["nice", "-n", "10"]
        # the view nices itself once its participant exists, Fast DDS's threads spared, as
        # the launch files start it (excavator_common.realtime.NICE_ENV)
        self._start_app("foxglove_view", [
            "env", "EXCAVATOR_HIL_NICE=10", sys.executable, "-m",
            "excavator_hil.foxglove_view.node", "--ros-args", "-p",
            f"port:={port}", "-p", "use_sim_time:=true"], env, "Foxglove WebSocket server on")
        self.client = subprocess.Popen(
            [*low, node, str(peer / "client.js"), f"ws://127.0.0.1:{port}", "3600"], cwd=peer,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --- the process set-up: the old one (before issue 12's fixes) and the new ----------------
SETUPS = ("new", "old")


def setup_env(env: dict[str, str], setup: str) -> dict[str, str]:
    """``old``: no gc freezing / short GIL slices in the nodes (``EXCAVATOR_HIL_RT_SETUP=off``;
    the bridge loop and the virtual PLC freeze theirs in both); ``new``: as shipped."""
    env = dict(env)
    if setup == "old":
        env["EXCAVATOR_HIL_RT_SETUP"] = "off"
    else:
        env.pop("EXCAVATOR_HIL_RT_SETUP", None)
    return env


# --- the Fast DDS profile: the project's (config/fastdds_default.xml) or Fast DDS's timing -----
def fastdds_timing_env(env: dict[str, str], directory: Path) -> dict[str, str]:
    """``env`` with a Fast DDS profile that sets nothing (Fast DDS's own 3 s heartbeat) in
    place of the project's, which every process of the package loads when none is chosen."""
    empty = directory / "fastdds_own_timing.xml"
    empty.write_text('<?xml version="1.0" encoding="UTF-8" ?>\n<dds xmlns='
                     '"http://www.eprosima.com"><profiles><data_writer profile_name='
                     '"not_the_default"/></profiles></dds>\n')
    return {**env, "FASTDDS_DEFAULT_PROFILES_FILE": str(empty)}


class SchedTrace:
    """``perf sched record`` of the whole machine on CLOCK_MONOTONIC (the bridge's and the
    probes' clock) while the full stack runs; turned into ``perf sched timehist`` text."""

    def __init__(self, directory: Path) -> None:
        import shutil

        if shutil.which("perf") is None:
            raise SystemExit("--trace-sched needs perf (linux-perf) and root or "
                             "kernel.perf_event_paranoid <= 1")
        self.data = directory / "perf.data"
        self.timehist = directory / "timehist.txt"
        self.proc = subprocess.Popen(["perf", "sched", "record", "-a", "-k", "CLOCK_MONOTONIC",
                                      "-o", str(self.data)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def stop(self) -> Path:
        import signal

        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        with self.timehist.open("w") as out:
            subprocess.run(["perf", "sched", "timehist", "-i", str(self.data), "-w"],
                           stdout=out, stderr=subprocess.DEVNULL, check=False)
        self.data.unlink(missing_ok=True)   # ~5 MB/s of trace: keep only the text
        return self.timehist


def full_stack(quick: bool, warmup: float, side_bridge_cycles: int, rt_priority: int,
               dashboard: bool = False, foxglove: bool = False, setup: str = "new",
               background_nice: int | None = None,
               pin_cpus: bool = False, probe: bool = False, trace_sched: bool = False,
               soil_node: bool = False, fastdds_timing: bool = False) -> dict[str, object]:
    env = setup_env(_ros_env(), setup)
    out = Path(tempfile.mkdtemp(prefix="bench_system_"))
    if fastdds_timing:
        env = fastdds_timing_env(env, out)
    if probe or trace_sched:
        env["EXCAVATOR_HIL_PROBE"] = str(out / "probe")
    page: OpenDashboard | OpenFoxglove | None = (
        OpenDashboard(env) if dashboard else OpenFoxglove(env) if foxglove else None)
    args = [sys.executable, "-m", "excavator_hil.cli", "demo", "--output", str(out)]
    if quick:
        args.append("--quick")
    if rt_priority:
        args += ["--rt-priority", str(rt_priority)]
    if background_nice is None:   # old: everything at one priority; new: the demo's default
        background_nice = 0 if setup == "old" else -1
    if background_nice >= 0:
        args += ["--background-nice", str(background_nice)]
    if setup == "old":   # nor the short fair-scheduler slice of the Redis -> PLC path
        args += ["--bridge-slice-ms", "0"]
    if pin_cpus:
        args.append("--pin-cpus")
    if soil_node:   # the soil over DDS instead of inside sim_node (the demo's default)
        args.append("--soil-node")
    trace = SchedTrace(out) if trace_sched else None
    t0 = time.monotonic()
    demo = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sampler = CpuSampler(demo.pid, extra=page.pids() if page else []).start()
    side = None
    if side_bridge_cycles:
        time.sleep(warmup)  # the stack is up and digging when the side bridge runs
        side = bridge(side_bridge_cycles, rt_priority)
    log, _ = demo.communicate(timeout=1800)
    wall = time.monotonic() - t0
    sampler.stop()
    timehist = trace.stop() if trace else None
    if page is not None:
        page.close()
    if demo.returncode != 0:
        raise SystemExit(f"the demo failed:\n{log[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    (out / "memory_pss.json").write_text(json.dumps(sampler.pss_series()))
    per, total, window = sampler.cores(warmup)
    result: dict[str, object] = {
        "summary": summary, "wall_s": wall, "cpu_cores": per, "cpu_total_cores": total,
        "cpu_window_s": window, "memory": sampler.pss(),
        "recorder": wrench_age_at_recorder(out / "dig_bag"),
        "side_bridge": bridge_result(side) if side else {}, "output": str(out)}
    if probe or trace_sched:
        import stall_report

        probes = stall_report.load_probes(out / "probe")
        result["probe"] = stall_report.probe_summary(probes)
        if timehist is not None:
            att = stall_report.overrun_attribution(probes, timehist)
            result["overrun_cpu_ms"] = {k: v for k, v in att.items() if k != "each"}
    return result


def _print_full(label: str, full: dict[str, object]) -> None:
    s = full["summary"]
    rec = full["recorder"]
    print(f"    [{label}] real-time factor {s['real_time_factor']:.2f}; held: "
          f"{s.get('real_time_held')}; lag p99 {s.get('lag_ms_p99', math.nan):.2f} ms, max "
          f"{s.get('lag_ms_max', math.nan):.2f} ms, slipped {s.get('slipped_s', 0.0):.2f} s")
    print(f"    [{label}] wrench age at sim_node p50 {s.get('wrench_age_ms_p50', math.nan):.1f}"
          f" / p99 {s.get('wrench_age_ms_p99', math.nan):.1f} / max "
          f"{s.get('wrench_age_ms_max', math.nan):.1f} ms; at the recorder p50 "
          f"{rec.get('p50_ms', math.nan):.1f} / p99 {rec.get('p99_ms', math.nan):.1f} / max "
          f"{rec.get('max_ms', math.nan):.1f} ms (whole bag max "
          f"{rec.get('max_ms_whole_bag', math.nan):.1f}); stale periods "
          f"{s.get('wrench_stale_periods')}, poses superseded {s.get('poses_superseded')}")
    cycles = s.get("bridge_cycles", 0) or 0
    print(f"    [{label}] demo bridge: Redis->PLC p50 {s['bridge_latency_p50_ms']:.2f} p99 "
          f"{s['bridge_latency_p99_ms']:.2f} max {s.get('bridge_latency_max_ms', math.nan):.2f} "
          f"ms ({len(s.get('bridge_latencies', []))} commands of the drive phase), "
          f"{s['bridge_overruns']} overruns "
          f"of {cycles} cycles; side bridge: {full['side_bridge']}")
    missed = s.get("bridge_not_carried", [])
    if missed:
        print(f"    [{label}] demo bridge: {len(missed)} commands never carried (s after the "
              "drive's first: why): " + ", ".join(f"{t:.2f}: {why}" for t, why in missed[:20]))
    print(f"    [{label}] soil moved {s['soil_moved_m3']:.3f} m^3 (peak load "
          f"{s['peak_bucket_load_m3']:.3f} m^3)")
    mem = full.get("memory") or {}
    if mem:
        print(f"    [{label}] PSS summed over the processes: peak {mem['sum_peak_mib']:.0f} MiB "
              f"at {mem['sum_peak_at_s']:.1f} s (goal <= {PSS_GOAL_MIB:.0f}: "
              f"{'met' if mem['met'] else 'MISSED'}; at the end {mem['sum_at_end_mib']:.0f}); "
              "then: " + ", ".join(f"{k} {v:.0f}" for k, v in mem["at_sum_peak_mib"].items()))
        print(f"    [{label}] PSS peak per process [MiB]: "
              + ", ".join(f"{k} {v:.0f}" for k, v in mem["peak_per_process_mib"].items()))
    print(f"    [{label}] CPU over {full['cpu_window_s']:.0f} s: total "
          f"{full['cpu_total_cores']:.2f} cores; "
          + ", ".join(f"{k} {v:.2f}" for k, v in full["cpu_cores"].items()))
    for name, p in (full.get("probe") or {}).items():  # type: ignore[union-attr]
        print(f"    [{label}] probe {name:13s} gc max {p['gc_max_ms']:6.1f} ms (full "
              f"{p['gc_full_count']:.0f}, max {p['gc_full_max_ms']:6.1f} ms); stalls > 3 ms "
              f"{p['stalls_over_3ms']:.0f}, max {p['stall_max_ms']:.1f} ms; waited for a CPU "
              f"{p['runqueue_wait_s']:.1f} s of {p['cpu_s']:.1f} s run; nice {p['nice']}")
    att = full.get("overrun_cpu_ms")
    if att:
        print(f"    [{label}] CPU held during the demo bridge's {att['overruns']} overruns [ms]: "
              + ", ".join(f"{k} {v:.0f}" for k, v in att["cpu_ms_in_overrun_windows"].items()))


def _not_carried_by_reason(s: dict[str, Any]) -> dict[str, int]:
    """How many of the drive's commands no control-DB write carried, by why."""
    return dict(Counter(why for _, why in s.get("bridge_not_carried", [])))


def _figures(full: dict[str, object]) -> dict[str, object]:
    s = full["summary"]
    cycles = s.get("bridge_cycles", 0) or 0
    return {
        "rtf": s["real_time_factor"], "real_time_held": s.get("real_time_held"),
        "lag_ms_p99": s.get("lag_ms_p99"), "lag_ms_max": s.get("lag_ms_max"),
        "slipped_s": s.get("slipped_s"),
        "wrench_age_sim_ms": {"p50": s.get("wrench_age_ms_p50"),
                              "p99": s.get("wrench_age_ms_p99"),
                              "max": s.get("wrench_age_ms_max")},
        "wrench_age_recorder_ms": full["recorder"],
        "wrench_stale_periods": s.get("wrench_stale_periods"),
        "wrench_applied_periods": s.get("wrench_applied_periods"),
        "poses_superseded": s.get("poses_superseded"),
        "bridge_latency_ms": {"p50": s["bridge_latency_p50_ms"],
                              "p99": s["bridge_latency_p99_ms"],
                              "max": s.get("bridge_latency_max_ms"),
                              "n": len(s.get("bridge_latencies", [])),
                              "not_carried": _not_carried_by_reason(s)},
        "bridge_cycles": cycles, "bridge_overruns": s["bridge_overruns"],
        "bridge_overrun_pct": 100.0 * s["bridge_overruns"] / cycles if cycles else None,
        "side_bridge": full["side_bridge"],
        "cpu_total_cores": full["cpu_total_cores"], "cpu_cores": full["cpu_cores"],
        "memory_pss": full.get("memory"),
        "soil_moved_m3": s["soil_moved_m3"], "peak_bucket_load_m3": s["peak_bucket_load_m3"],
        "wall_s": full["wall_s"], "probe": full.get("probe"),
        "overrun_cpu_ms": full.get("overrun_cpu_ms"),
    }


def _f(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the demo's --quick cycle")
    parser.add_argument("--sim-seconds", type=float, default=15.0,
                        help="sim_node alone [s] (0: skip)")
    parser.add_argument("--bridge-cycles", type=int, default=3000,
                        help="bench/bridge.py cycles alone and beside the stack (0: skip)")
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="SCHED_FIFO priority for the demo's bridge and virtual PLC and "
                             "the bench bridges (needs CAP_SYS_NICE)")
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="CPU is measured from this long after the demo's start [s]")
    parser.add_argument("--dashboard", action="store_true",
                        help="a second full run with the dashboard open in headless Chromium")
    parser.add_argument("--foxglove", action="store_true",
                        help="a second full run with the Foxglove live view and a protocol "
                             "client subscribed to every channel")
    parser.add_argument("--setup", choices=SETUPS, default="new",
                        help="process set-up of the full stack: new (gc frozen after start-up, "
                             "0.5 ms GIL slices, recorder and operator at nice 10) or old "
                             "(before issue 12: none of it)")
    parser.add_argument("--compare", action="store_true",
                        help="the full stack twice, new set-up then old, in the same run")
    parser.add_argument("--background-nice", type=int, default=None, metavar="N",
                        help="the demo's --background-nice (default: 10 new, 0 old)")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="the demo's --pin-cpus (bridge, PLC, redis on the last CPU)")
    parser.add_argument("--soil-node", action="store_true",
                        help="the demo's --soil-node (soil_node over DDS instead of the soil "
                             "inside sim_node, the default)")
    parser.add_argument("--compare-dds", action="store_true",
                        help="the full stack again with Fast DDS's own writer timing (3 s "
                             "heartbeat) in place of config/fastdds_default.xml: the CPU ratio")
    parser.add_argument("--probe", action="store_true",
                        help="stall probes in every process (EXCAVATOR_HIL_PROBE): gc pauses, "
                             "stalls, run-queue wait per process")
    parser.add_argument("--trace-sched", action="store_true",
                        help="perf sched trace of the machine (root): which processes held the "
                             "CPUs while the demo bridge overran (implies --probe)")
    args = parser.parse_args()

    sim: dict[str, float] = {}
    if args.sim_seconds > 0:
        print("1: sim_node alone ...", flush=True)
        sim = sim_alone(args.sim_seconds)
        print(f"    RTF {sim['rtf']:.2f}, lag p50 {sim['lag_ms_p50']:.2f} p99 "
              f"{sim['lag_ms_p99']:.2f} max {sim['lag_ms_max']:.2f} ms, "
              f"{sim['cpu_cores']:.2f} cores", flush=True)
    alone: dict[str, float] = {}
    if args.bridge_cycles:
        print("2: bridge alone (bench/bridge.py) ...", flush=True)
        alone = bridge_result(bridge(args.bridge_cycles, args.rt_priority))
        print(f"    {alone}", flush=True)
    setups = list(SETUPS) if args.compare else [args.setup]
    fulls: dict[str, dict[str, object]] = {}
    for k, setup in enumerate(setups):
        print(f"3{'ab'[k] if args.compare else ''}: full stack (excavator-hil demo, {setup} "
              "set-up) with bench/bridge.py beside it ...", flush=True)
        fulls[setup] = full_stack(args.quick, args.warmup, args.bridge_cycles, args.rt_priority,
                                  setup=setup, background_nice=args.background_nice,
                                  pin_cpus=args.pin_cpus, probe=args.probe,
                                  trace_sched=args.trace_sched,
                                  soil_node=args.soil_node)
        _print_full(setup, fulls[setup])
    full = fulls[setups[0]]
    own_timing: dict[str, object] = {}
    if args.compare_dds:
        print("3c: full stack again, Fast DDS's own writer timing (no project profile) ...",
              flush=True)
        own = full_stack(args.quick, args.warmup, args.bridge_cycles, args.rt_priority,
                         setup=setups[0], background_nice=args.background_nice,
                         pin_cpus=args.pin_cpus, soil_node=args.soil_node,
                         fastdds_timing=True)
        _print_full("Fast DDS timing", own)
        own_timing = _figures(own)
        ratio = _f(full["cpu_total_cores"]) / _f(own["cpu_total_cores"])
        own_timing["cpu_ratio_project_profile"] = ratio
        print(f"    CPU with the project's profile / with Fast DDS's timing: {ratio:.3f}",
              flush=True)
    s = full["summary"]
    cycles = s.get("bridge_cycles", 0) or 0
    watched: dict[str, dict[str, object]] = {}
    for step, name, what in (("4", "dashboard", "the dashboard open in headless Chromium"),
                             ("5", "foxglove", "the Foxglove live view and a client")):
        if not getattr(args, name):
            continue
        print(f"{step}: full stack again, {what} ...", flush=True)
        page = full_stack(args.quick, args.warmup, args.bridge_cycles, args.rt_priority,
                          dashboard=name == "dashboard", foxglove=name == "foxglove",
                          setup=setups[0], background_nice=args.background_nice,
                          pin_cpus=args.pin_cpus)
        ps = page["summary"]
        page_cycles = ps.get("bridge_cycles", 0) or 0
        watched[name] = {
            "rtf": ps["real_time_factor"], "lag_ms_p99": ps.get("lag_ms_p99"),
            "lag_ms_max": ps.get("lag_ms_max"), "slipped_s": ps.get("slipped_s"),
            "wrench_age_sim_ms_p99": ps.get("wrench_age_ms_p99"),
            "bridge_latency_ms_p99": ps["bridge_latency_p99_ms"],
            "bridge_overruns": ps["bridge_overruns"], "bridge_cycles": page_cycles,
            "bridge_overrun_pct": (100.0 * ps["bridge_overruns"] / page_cycles
                                   if page_cycles else None),
            "side_bridge": page["side_bridge"],
            "cpu_total_cores": page["cpu_total_cores"], "cpu_cores": page["cpu_cores"],
        }
        print(f"    with the {name}: lag p99 {_f(ps.get('lag_ms_p99')):.2f} ms (without "
              f"{_f(s.get('lag_ms_p99')):.2f}), bridge overruns {ps['bridge_overruns']} of "
              f"{page_cycles} (without {s['bridge_overruns']} of {cycles}), CPU "
              f"{_f(page['cpu_total_cores']):.2f} cores (without "
              f"{_f(full['cpu_total_cores']):.2f})", flush=True)
    result = {
        "bench": "system", "quick": args.quick, "loadavg": os.getloadavg()[0],
        "rt_priority": args.rt_priority, "pin_cpus": args.pin_cpus,
        "soil_in_process": not args.soil_node,
        "sim_alone": sim, "bridge_alone": alone,
        "full": _figures(full), "setup": setups[0],
        "full_old_setup": _figures(fulls["old"]) if args.compare else {},
        "full_fastdds_timing": own_timing,
        "with_dashboard": watched.get("dashboard", {}),
        "with_foxglove": watched.get("foxglove", {}),
    }
    print(json.dumps(result, default=lambda v: None if isinstance(v, float) and math.isnan(v)
                     else v))


if __name__ == "__main__":
    main()
