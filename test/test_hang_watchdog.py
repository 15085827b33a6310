"""The hang watchdog (excavator_common.hang_watchdog) in real node processes run by run_node.

What it is for cannot be made on demand (Fast DDS 3.2's deadlock, docs/deployment.md), but
its shape can: the main thread blocked in native code *holding the GIL* (libc's ``sleep``
called through ``ctypes.PyDLL``, which keeps the GIL, as rclpy's destroy calls do), in a
callback and in the clean-up after Ctrl-C. Nothing is timed on this process's clock: the
node must end by itself with exit 1 and the stack that hung, or live on past twice its
timeout and end 0 on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import start_lone_nodes, wait_for

from excavator_common import hang_watchdog
from excavator_common.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 8.0

NODE = textwrap.dedent("""
    import ctypes, sys
    import rclpy.node
    from excavator_common.ros_runtime import run_node

    MODE = sys.argv[1]
    HOLDING_THE_GIL = ctypes.PyDLL(None)   # calls into libc without releasing the GIL

    def stuck_in_native_code():
        HOLDING_THE_GIL.sleep(3600)

    class Node(rclpy.node.Node):
        def __init__(self):
            super().__init__("hang_probe")
            self.ticks = 0
            self.create_timer(0.1, self.tick)

        def tick(self):
            self.ticks += 1
            if self.ticks == 1:
                print("spinning", flush=True)
            if MODE == "callback" and self.ticks == 5:
                stuck_in_native_code()

    def cleanup(node):
        if MODE == "cleanup":
            stuck_in_native_code()

    sys.exit(run_node(Node, ["hang_probe"], cleanup=cleanup))
""")


def start(mode: str, timeout: str = f"{TIMEOUT_S:g}") -> subprocess.Popen[str]:
    env = {**os.environ, hang_watchdog.ENV: timeout}
    return subprocess.Popen([sys.executable, "-c", NODE, mode], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_spinning(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()      # blocks until the node spins (or ends)
    assert line.strip() == "spinning", (line, proc.poll())


def ended(proc: subprocess.Popen[str], within_s: float) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the node did not end by itself within {within_s:g} s; stderr:\n{err}")
    return proc.returncode, err


def test_a_node_stuck_holding_the_gil_prints_where_and_exits_1() -> None:
    proc = start("callback")
    wait_spinning(proc)
    code, err = ended(proc, 120.0)
    assert code == 1, err
    # every thread's stack, the main thread's through the callback that hung
    assert "most recent call first" in err, err
    assert "stuck_in_native_code" in err and "tick" in err, err
    assert "hang watchdog on" in err, err


def test_a_clean_up_that_hangs_after_ctrl_c_ends_the_process() -> None:
    proc = start("cleanup")
    wait_spinning(proc)
    proc.send_signal(signal.SIGINT)
    code, err = ended(proc, 120.0)
    assert code == 1, err
    assert "stuck_in_native_code" in err and "cleanup" in err, err


# The nodes as they run in the stack (helpers.LONE_NODES), each re-arming from its own executor.
# plc_bridge with autostart once assigned rclpy's own list of the node's timers
# (``Node._timers``) on configure and dropped the watchdog's timer from its executor: the
# watchdog ended a healthy bridge 60 s after its start in a chaos soak.


def test_every_kind_of_node_lives_past_twice_its_timeout(tmp_path: Path) -> None:
    """The stack's nodes (timeout 10 s) and the bare probe node (``TIMEOUT_S``, re-armed every
    ``TIMEOUT_S / 4`` by its executor) live past 2.5 times their timeout side by side, and end
    0 on Ctrl-C without a stack dump (one wait for all: each is only a wait)."""
    timeout_s = 10.0     # pets every 2.5 s: a loaded host's stall of a few seconds is no hang
    assert timeout_s >= TIMEOUT_S   # the one wait covers the probe node's 2.5 timeouts too
    env = {hang_watchdog.ENV: f"{timeout_s:g}"}
    healthy = start("healthy")
    procs = start_lone_nodes(tmp_path, env)
    try:
        wait_spinning(healthy)
        for name, proc in procs.items():
            wait_for(lambda p=proc: "hang watchdog on" in p.log() or not p.alive(), 120.0,
                     lambda p=proc, n=name: f"{n} arming its watchdog; log:\n{p.log()}")
        time.sleep(2.5 * timeout_s)
        assert healthy.poll() is None, healthy.communicate()[1]
        for name, proc in procs.items():
            assert proc.alive(), f"{name} ended (exit {proc.proc.returncode}):\n{proc.log()}"
    finally:
        codes = {name: proc.stop(30.0) for name, proc in procs.items()}
        if healthy.poll() is None:
            healthy.send_signal(signal.SIGINT)
        code, err = ended(healthy, 60.0)
    assert code == 0, err
    assert "most recent call first" not in err, err
    assert codes == dict.fromkeys(procs, 0), {n: (c, procs[n].log()[-1500:])
                                              for n, c in codes.items() if c != 0}


def test_without_the_variable_nothing_is_armed() -> None:
    env = {k: v for k, v in os.environ.items() if k != hang_watchdog.ENV}
    proc = subprocess.Popen([sys.executable, "-c", NODE, "healthy"], cwd=REPO, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_spinning(proc)
    proc.send_signal(signal.SIGINT)
    code, err = ended(proc, 60.0)
    assert code == 0 and "hang watchdog" not in err, err


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "-5", "1", "4.9"])
def test_a_timeout_it_cannot_take_stops_the_node_at_start_naming_it(value: str) -> None:
    proc = start("healthy", value)
    code, err = ended(proc, 60.0)
    assert code == 2, err
    assert f"{hang_watchdog.ENV}={value!r}" in err and ">= 5" in err and "0 to turn" in err, err


@pytest.mark.parametrize(("text", "expected"), [
    (None, None), ("", None), ("0", None), (" 0.0 ", None), ("5", 5.0), ("60", 60.0),
    ("1e3", 1000.0)])
def test_timeout_from_environment(text: str | None, expected: float | None) -> None:
    environ = {} if text is None else {hang_watchdog.ENV: text}
    assert hang_watchdog.timeout_from_environment(environ) == expected


@pytest.mark.parametrize("text", ["x", "nan", "-inf", "-1", "4.99", "0x10"])
def test_timeout_from_environment_refuses(text: str) -> None:
    with pytest.raises(ConfigurationError, match=hang_watchdog.ENV):
        hang_watchdog.timeout_from_environment({hang_watchdog.ENV: text})


def test_the_watchdog_refuses_a_timeout_of_no_use() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s"):
            hang_watchdog.HangWatchdog(bad)
