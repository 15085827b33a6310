"""What the browser dashboard costs the host: the dashboard server's and headless Chromium's CPU
[cores] and the page's websocket payload [bytes/s], with the page closed, open (the default
page: side view, charts, PLC panel; the 3D view off) and open with the 3D view shown
(``/?view3d=1``), all in the same run.

The traffic is the full stack's, made by this script so that nothing else loads the machine:
``joint_states`` at 100 Hz (a dig-like motion of swing, boom, arm, bucket and the base),
``soil/wrench`` and ``soil/bucket_load`` at 100 Hz, ``soil/terrain_patch`` as soil_node sends
it (the whole 320 x 320 grid at 2 Hz, a 12 x 24 patch at 100 Hz in between) and, in a real
redis-server, the PLC bridge's keys (status, counters at 100 Hz, monitor values).

CPU is read from ``/proc/<pid>/stat`` (the dashboard process; Chromium with every child
process); the payload from the kernel's per-socket ``bytes_acked`` (``ss -ti``) of the
dashboard's port, i.e. what the server sent to the browser. The dashboard's own counters (DDS
messages received and decoded) are printed at its exit.

``--baseline-repo DIR`` runs the same phases first with the dashboard of another checkout (e.g.
the session-3 page on main: ``--baseline-repo /work/main``). Both dashboards and Chromium run at
niceness 0 here (``--nice``; Chromium without CAP_SYS_NICE, so it cannot raise its own threads),
so the figures are the page's cost, not the scheduler's share.

    .venv/bin/python bench/dashboard.py [--seconds 20] [--baseline-repo /work/main]
                                        [--dashboard-args '--refresh-hz 1']

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TICK = os.sysconf("SC_CLK_TCK")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage", "--window-size=1600,1500")


# --- CPU and bytes -------------------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant (bench/system.py's /proc walk)."""
    from system import _children  # bench/ is this script's sys.path[0]

    return [pid, *_children(pid)]


def _cpu_s(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(f[11]) + int(f[12])) / TICK
    return out


def _sent_bytes(port: int) -> dict[str, int]:
    """Bytes the server acknowledged as received by its peers, per connection of ``port``."""
    try:
        text = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                              capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, int] = {}
    conn = None
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            parts = line.split()
            conn = " ".join(parts[-2:]) if len(parts) >= 2 else line
        m = re.search(r"bytes_acked:(\d+)", line)
        if m and conn:
            out[conn] = int(m.group(1))
    return out


def low_priority(nice: int) -> list[str]:
    """The command prefix that runs a browser at niceness ``nice`` for good: as root Chromium
    would set its compositor and IO threads to -8 and most others to 0 (it holds CAP_SYS_NICE),
    so the capability is dropped first (``setpriv``, util-linux)."""
    prefix = ["nice", "-n", str(nice)]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        prefix = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", *prefix]
    return prefix


class Meter:
    """CPU [s] of process trees and bytes sent on a port between ``start`` and ``stop``."""

    def __init__(self, port: int, trees: dict[str, int]) -> None:
        self.port, self.trees = port, trees

    def _snapshot(self) -> tuple[float, dict[str, dict[int, float]], dict[str, int]]:
        return (time.monotonic(), {k: _cpu_s(_tree(p)) for k, p in self.trees.items()},
                _sent_bytes(self.port))

    def start(self) -> None:
        self._a = self._snapshot()

    def stop(self) -> dict[str, float]:
        t0, cpu0, bytes0 = self._a
        t1, cpu1, bytes1 = self._snapshot()
        dt = t1 - t0
        out: dict[str, float] = {}
        for name in self.trees:
            used = sum(v - cpu0[name].get(pid, 0.0) for pid, v in cpu1[name].items())
            out[f"{name}_cores"] = round(used / dt, 3)
        sent = sum(v - bytes0.get(c, 0) for c, v in bytes1.items())
        out["payload_kB_s"] = round(sent / dt / 1e3, 2)
        return out


# --- the traffic -----------------------------------------------------------------------------
class Traffic:
    """The stack's topics (as sim_node and soil_node send them) and the bridge's Redis keys."""

    def __init__(self, redis_url: str) -> None:
        import rclpy
        from geometry_msgs.msg import WrenchStamped
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64, Float64MultiArray, MultiArrayDimension

        from excavator_sim.soil.config import load_soil_config

        self.t = load_soil_config(None).terrain
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("bench_dashboard_traffic", context=self.context)
        self.msgs = (JointState, WrenchStamped, Float64, Float64MultiArray, MultiArrayDimension)
        self.js = self.node.create_publisher(JointState, "joint_states", 10)
        self.wrench = self.node.create_publisher(WrenchStamped, "soil/wrench", 10)
        self.load = self.node.create_publisher(Float64, "soil/bucket_load", 10)
        self.patch = self.node.create_publisher(Float64MultiArray, "soil/terrain_patch", 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.redis_url = redis_url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _array(self, i0: int, j0: int, z: np.ndarray) -> object:
        _, _, _, Float64MultiArray, Dim = self.msgs
        msg = Float64MultiArray()
        msg.layout.dim = [Dim(label="i", size=z.shape[0], stride=z.size),
                          Dim(label="j", size=z.shape[1], stride=z.shape[1])]
        msg.layout.data_offset = 2
        msg.data = np.concatenate([[float(i0), float(j0)], z.ravel()]).tolist()
        return msg

    def _run(self) -> None:
        import redis

        from plc_bridge import redis_keys as keys

        JointState, WrenchStamped, Float64, _, _ = self.msgs
        r = redis.Redis.from_url(self.redis_url)
        nx, ny = self.t.nx, self.t.ny
        xs = self.t.x0 + (np.arange(nx) + 0.5) * self.t.cell_xy_m
        ys = self.t.y0 + (np.arange(ny) + 0.5) * self.t.cell_xy_m
        z = (0.15 * np.sin(xs[:, None] / 1.7) * np.cos(ys[None, :] / 2.3))
        names = ["base_x", "base_y", "base_yaw", "swing", "boom", "arm",
                 "bucket", "boom_cylinder", "arm_cylinder", "bucket_cylinder"]
        period, k, t0 = 0.01, 0, time.monotonic()
        next_grid = t0
        while not self._stop.is_set():
            now = time.monotonic()
            t = now - t0
            js = JointState()
            js.header.stamp = self.node.get_clock().now().to_msg()
            js.name = names
            js.position = [0.02 * t, 0.0, 0.05 * math.sin(0.1 * t),
                           0.6 * math.sin(0.2 * t), -0.3 + 0.3 * math.sin(0.3 * t),
                           -1.2 + 0.4 * math.sin(0.25 * t), 0.5 + 0.5 * math.sin(0.4 * t),
                           1.6, 1.8, 1.5]
            self.js.publish(js)
            w = WrenchStamped()
            w.header.stamp = js.header.stamp
            w.wrench.force.x, w.wrench.force.z = 8e3 * abs(math.sin(0.3 * t)), -3e3
            self.wrench.publish(w)
            self.load.publish(Float64(data=0.3 * abs(math.sin(0.05 * t))))
            # the digging: a 12 x 24 patch every period, the whole grid at 2 Hz
            i0 = int(nx / 2 + 40 * math.sin(0.2 * t))
            j0 = int(ny / 2 + 20 * math.sin(0.13 * t))
            z[i0:i0 + 12, j0:j0 + 24] -= 0.001
            if now >= next_grid:
                self.patch.publish(self._array(0, 0, z))
                next_grid = now + 0.5
            else:
                self.patch.publish(self._array(i0, j0, z[i0:i0 + 12, j0:j0 + 24]))
            if k % 10 == 0:   # the bridge's keys (it writes them every cycle; 10 Hz here)
                r.mset({keys.BRIDGE_STATUS: "running", keys.BRIDGE_DETAIL: "",
                        keys.STATE_VALID: "true", keys.STATE_PLC_ALIVE: str(k // 10 % 256),
                        keys.counter_key("cycles"): str(k), keys.state_key("ready"): "true",
                        keys.state_key("auto"): "true", keys.state_key("fault"): "false",
                        keys.MON_LONGITUDINAL: f"{0.2 * math.sin(t):.6f}"})
            k += 1
            self.sent += 1
            self.executor.spin_once(timeout_sec=0.0)
            self._stop.wait(max(0.0, t0 + k * period - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.node.destroy_node()
        self.context.try_shutdown()


# --- the dashboard and the browser ---------------------------------------------------------------
class Page:
    def __init__(self, repo: Path, redis_url: str, nice: int, workdir: Path, tag: str,
                 extra: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = workdir / f"dashboard_{tag}.log"
        self._log = self.log.open("w")
        args = [sys.executable, "-m", "excavator_hil.dashboard.app", "--port", str(self.port),
                "--redis-url", redis_url]
        if "--nice" in (repo / "excavator_hil" / "dashboard" / "app.py").read_text():
            args += ["--nice", str(nice)]
        args += extra
        env = {**os.environ, "PYTHONPATH": str(repo)}   # that checkout's dashboard
        self.app = subprocess.Popen(args, cwd=repo, env=env, stdout=self._log,
                                    stderr=subprocess.STDOUT, text=True)
        self.workdir, self.browser, self.nice = workdir, None, nice
        self._wait_for("DASHBOARD READY", 120.0)

    def _wait_for(self, text: str, timeout_s: float, count: int = 1) -> None:
        deadline = time.monotonic() + timeout_s
        while self.log.read_text(errors="replace").count(text) < count:
            if self.app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dashboard: no {text!r}; log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def open(self, query: str = "") -> None:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise SystemExit("bench/dashboard.py needs Debian's chromium (make browser)")
        opened = self.log.read_text(errors="replace").count("page opened")
        profile = tempfile.mkdtemp(prefix="chromium_", dir=self.workdir)
        self.browser = subprocess.Popen(
            [*low_priority(self.nice), chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"http://127.0.0.1:{self.port}/{query}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_for("page opened", 120.0, opened + 1)

    def close_browser(self) -> None:
        if self.browser is not None:
            self.browser.terminate()
            try:
                self.browser.wait(20)
            except subprocess.TimeoutExpired:
                self.browser.kill()
            self.browser = None

    def close(self) -> str:
        self.close_browser()
        self.app.terminate()
        try:
            self.app.wait(20)
        except subprocess.TimeoutExpired:
            self.app.kill()
        self._log.close()
        m = re.search(r"messages received (\{.*?\}), decoded (\{.*?\})", self.log.read_text())
        return m.group(0) if m else ""


def phases(repo: Path, redis_url: str, args: argparse.Namespace, workdir: Path, tag: str
           ) -> dict[str, object]:
    page = Page(repo, redis_url, args.nice, workdir, tag,
                args.dashboard_args.split() if tag == "new" else [])
    out: dict[str, object] = {}
    try:
        for name, query in (("closed", None), ("page", ""), ("page_3d", "?view3d=1")):
            if query is not None:
                page.open(query)
            time.sleep(args.settle)
            trees = {"server": page.app.pid}
            if page.browser is not None:
                trees["chromium"] = page.browser.pid
            meter = Meter(page.port, trees)
            meter.start()
            time.sleep(args.seconds)
            out[name] = meter.stop()
            print(f"  {tag} {name}: {out[name]}", flush=True)
            page.close_browser()
    finally:
        out["messages"] = page.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="measured time per phase [s]")
    p.add_argument("--settle", type=float, default=5.0,
                   help="time after the page opened before measuring [s]")
    p.add_argument("--baseline-repo", type=Path, default=None,
                   help="another checkout whose dashboard is measured first (e.g. /work/main)")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness of this checkout's dashboard and of Chromium (default 0: "
                        "the intrinsic cost)")
    p.add_argument("--dashboard-args", default="",
                   help="more options for this checkout's dashboard, e.g. '--refresh-hz 1' "
                        "(what the side view's rate costs)")
    args = p.parse_args()

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    from excavator_hil.local_services import LocalRedisServer

    workdir = Path(tempfile.mkdtemp(prefix="bench_dashboard_"))
    redis = LocalRedisServer(workdir / "redis")
    redis.start()
    traffic = Traffic(redis.url)
    result: dict[str, object] = {"seconds": args.seconds,
                                 "load_avg_start": round(os.getloadavg()[0], 2)}
    try:
        if args.baseline_repo is not None:
            print(f"baseline: the dashboard of {args.baseline_repo}", flush=True)
            result["baseline"] = phases(args.baseline_repo.resolve(), redis.url, args, workdir,
                                        "baseline")
        print("this checkout's dashboard", flush=True)
        result["new"] = phases(REPO, redis.url, args, workdir, "new")
    finally:
        traffic.close()
        redis.stop()
    result["load_avg_end"] = round(os.getloadavg()[0], 2)
    new = result["new"]
    assert isinstance(new, dict)
    if "baseline" in result:
        base = result["baseline"]
        assert isinstance(base, dict)
        result["page_cores_new_over_baseline"] = round(
            (new["page"]["server_cores"] + new["page"]["chromium_cores"])
            / max(1e-3, base["page"]["server_cores"] + base["page"]["chromium_cores"]), 3)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
