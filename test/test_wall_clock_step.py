"""A step of the host's wall clock while the stack runs (NTP correcting a clock that ran ahead, a
wrong RTC set right, a VM resumed from a snapshot: CLOCK_REALTIME steps, CLOCK_MONOTONIC does
not). Each process here runs with ``test/tools/wall_step.c`` preloaded, which shifts its
CLOCK_REALTIME by an offset the test writes to a file mid-run; the test process's own clocks
are the host's. (libfaketime cannot do this for Python 3.11 processes: with the monotonic clock
left alone it fails their every ``time.sleep``, wolfcw/libfaketime#426.)

- The nodes' timers: on their ROS clock (the system clock outside simulated time) a step back
  of an hour stalled every one for the hour: no diagnostics, no bridge heartbeat, no teleop
  control tick. They are on the steady clock (``ros_runtime.steady_timer``/``pacing_timer``).
- The soak's records: a soak on a VM paused for snapshots failed with a thousand false
  ``joint_order``/``stale_joint`` violations (wall stamps put on the monotonic clock with an
  offset read at start landed 11 s off). The observer converts each stamp with the offset of
  its moment.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    EVENT_WAIT_S,
    LONE_NODES,
    REPO,
    NodeProcess,
    RosTestNode,
    free_port,
    start_lone_nodes,
    wait_for,
)

from excavator_common import hang_watchdog

HOUR_S = 3600.0
SHIM_SOURCE = REPO / "test" / "tools" / "wall_step.c"


@pytest.fixture(scope="module")
def wall_step_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The preload library, built here (a C compiler: ``cc``)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build test/tools/wall_step.c: apt-get install gcc")
    lib = tmp_path_factory.mktemp("wall_step") / "wall_step.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(SHIM_SOURCE), "-ldl"],
                   check=True, capture_output=True, text=True)
    return lib


class WallStep:
    """The offset file of the processes started with :meth:`env`."""

    def __init__(self, lib: Path, path: Path):
        self.lib, self.path = lib, path
        self.set(0.0)

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(self.lib), "WALL_STEP_FILE": str(self.path)}

    def set(self, offset_s: float) -> None:
        """Their wall clock ``offset_s`` from the host's, from their next clock read on."""
        data = struct.pack("<q", round(offset_s * 1e9))
        if self.path.exists():
            with self.path.open("r+b") as f:   # in place: the processes map this page
                f.write(data)
        else:
            self.path.write_bytes(data)


# --- the nodes' timers ---------------------------------------------------------------------------

AFTER_STEP = 3         # diagnostics of each node wanted after the step
HANG_TIMEOUT_S = 10.0  # the nodes' hang watchdog (pets every 2.5 s: a loaded host's stall of a
                       # few seconds is no hang)


def test_the_nodes_timers_run_on_through_a_step_of_the_wall_clock_back(
        tmp_path: Path, wall_step_lib: Path) -> None:
    """Every node's 1 Hz diagnostics go on after its wall clock stepped an hour back (an hour's
    silence on the ROS clock), and they are stamped an hour back: the step did reach it."""
    from diagnostic_msgs.msg import DiagnosticArray

    step = WallStep(wall_step_lib, tmp_path / "wall_offset")
    # a node that hangs in its clean-up prints its threads' stacks and ends (exit 1) 10 s
    # after it stood, within the stop's 30 s: fresh25's soil_node was SIGKILLed at 30 s on a
    # loaded host with the default 60 s, its hang unexplained for want of its stacks
    env = {**step.env(), hang_watchdog.ENV: f"{HANG_TIMEOUT_S:g}"}
    probe = RosTestNode()
    seen: dict[str, list[tuple[float, float]]] = {n: [] for n in LONE_NODES}  # (arrival, age)

    def on_diagnostics(msg: Any) -> None:
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        for status in msg.status:
            name = status.name.split(":", 1)[0].rsplit("/", 1)[-1]
            if name in seen:
                seen[name].append((time.monotonic(), time.time() - stamp))

    probe.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 100)
    procs = start_lone_nodes(tmp_path, env)
    try:
        for name, proc in procs.items():
            wait_for(lambda n=name: seen[n], EVENT_WAIT_S,
                     lambda p=proc, n=name: f"{n}'s first diagnostics; log:\n{p.log()[-1500:]}")
        step.set(-HOUR_S)
        stepped = time.monotonic()

        def after(name: str) -> list[tuple[float, float]]:
            return [s for s in list(seen[name]) if s[0] > stepped]

        for name, proc in procs.items():
            wait_for(lambda n=name: len(after(n)) >= AFTER_STEP, EVENT_WAIT_S,
                     lambda p=proc, n=name: f"{AFTER_STEP} diagnostics of {n} after its wall "
                     f"clock stepped back {HOUR_S:.0f} s (got {len(after(n))}); log:\n"
                     f"{p.log()[-1500:]}")
            behind = [round(b) for _t, b in after(name)]
            assert all(abs(b - HOUR_S) < 60.0 for b in behind), (
                f"{name}'s diagnostics after the step are not stamped an hour back: {behind}")
        for name, proc in procs.items():
            assert proc.alive(), f"{name} ended (exit {proc.proc.returncode}):\n{proc.log()}"
    finally:
        probe.close()
        codes = {name: proc.stop(30.0) for name, proc in procs.items()}
    assert codes == dict.fromkeys(procs, 0), {n: (c, procs[n].log()[-1500:])
                                              for n, c in codes.items() if c != 0}


# --- the soak's records ------------------------------------------------------------------------

STEP_S = -30.0         # the observer's wall clock step [s]: back (a timer on the node's clock, the
                       # observer's old offset refresh, waits it out)
PUBLISH_PERIOD_S = 0.05
PER_PHASE = 40         # commands published before the step and after it
OFF_S = abs(STEP_S) / 2.0  # a command's stamp on the monotonic clock this far from its arrival
                           # is the step's doing: no load delays a delivery by 15 s


def test_a_wall_clock_step_does_not_move_the_soak_observers_joint_command_times(
        tmp_path: Path, wall_step_lib: Path) -> None:
    from sensor_msgs.msg import JointState

    step = WallStep(wall_step_lib, tmp_path / "wall_offset")
    env = step.env()
    port = free_port()   # no PLC, no Redis: the observer records the rest
    out = tmp_path / "observed"
    observer = NodeProcess(
        "excavator_hil.soak.observer",
        ["--out", str(out), "--plc-port", str(port), "--plc-control-port", str(port),
         "--redis-url", f"redis://127.0.0.1:{port}/0"], log_dir=tmp_path, env=env)
    probe = RosTestNode()
    try:
        wait_for(lambda: "SOAK_OBSERVER READY" in observer.log(), EVENT_WAIT_S,
                 lambda: f"the observer's start: {observer.log()[-1500:]}")
        pub = probe.node.create_publisher(JointState, "joint_command", 50)
        probe.wait_endpoints("subscriptions", "/joint_command", [("/", "soak_observer")])
        names = ["swing", "boom", "arm", "bucket"]

        def publish(wall_ahead_s: float) -> None:
            """PER_PHASE commands stamped as a process on the stepped host would stamp them."""
            for _ in range(PER_PHASE):
                msg = JointState(name=names, position=[0.1, 0.2, 0.3, 0.4])
                ns = time.time_ns() + int(wall_ahead_s * 1e9)
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
                pub.publish(msg)
                time.sleep(PUBLISH_PERIOD_S)

        def recorded() -> int:
            path = out / "joint_commands.jsonl"   # written once a second
            return len(path.read_text().splitlines()) if path.exists() else 0

        publish(0.0)
        # every one taken (and put on the monotonic clock) before the step
        wait_for(lambda: recorded() >= PER_PHASE, EVENT_WAIT_S,
                 lambda: f"{PER_PHASE} commands recorded before the step (got {recorded()})")
        step.set(STEP_S)
        publish(STEP_S)
        wait_for(lambda: recorded() >= 2 * PER_PHASE, EVENT_WAIT_S,
                 lambda: f"{2 * PER_PHASE} commands recorded (got {recorded()})")
    finally:
        probe.close()
        observer.stop()
    rows = [json.loads(line) for line in (out / "joint_commands.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * PER_PHASE, f"{len(rows)} commands recorded of {2 * PER_PHASE}"
    off = [(round(t_stamp - t_recv, 3), round(t_recv, 3)) for t_stamp, t_recv, _q in rows
           if abs(t_stamp - t_recv) > OFF_S]
    assert not off, (f"{len(off)} of {len(rows)} commands' stamps landed off their arrival on "
                     f"the monotonic clock (stamp - arrival [s], arrival): {off[:5]}")
