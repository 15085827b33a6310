"""excavator_common.dds_stuck: a Fast DDS thread waiting for a held mutex is told from one at
rest (on its condition or its socket), and a NodeThread on a stuck Fast DDS is left alone, not
destroyed (which would hang the process for good). Fast DDS's deadlock cannot be made on
demand: the stuck thread here is a thread of ours under a Fast DDS thread's name, blocked in
``pthread_mutex_lock`` on a mutex another thread holds, which is what the kernel shows of the
real one (the event thread in the PDP mutex's lock)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S

from excavator_common.dds_stuck import FUTEX_SYSCALL, stuck_dds_threads
from excavator_hil.local_services import STARTUP_TIMEOUT_S

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(FUTEX_SYSCALL is None or not Path("/proc/self/task").is_dir(),
                                reason="needs Linux's /proc on x86_64 or aarch64")
LIBC = ctypes.CDLL("libc.so.6")   # its calls release the GIL: a blocked one stops one thread


def _name_this_thread(name: str) -> None:
    Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)


@pytest.fixture
def dds_like_threads() -> Iterator[dict[str, int]]:
    """Threads under Fast DDS names: "dds.ev.65001" blocked on a held mutex (stuck),
    "dds.udp.65002" on a UDP socket and "dds.shm.65003" on a condition (at rest). Yields
    their thread ids by name."""
    mutex = ctypes.create_string_buffer(64)       # PTHREAD_MUTEX_INITIALIZER: all zero
    assert LIBC.pthread_mutex_lock(mutex) == 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    rest = threading.Condition()
    done = threading.Event()
    tids: dict[str, int] = {}
    ready = threading.Barrier(4)

    def stuck() -> None:
        _name_this_thread("dds.ev.65001")
        tids["dds.ev.65001"] = threading.get_native_id()
        ready.wait()
        LIBC.pthread_mutex_lock(mutex)
        LIBC.pthread_mutex_unlock(mutex)

    def listening() -> None:
        _name_this_thread("dds.udp.65002")
        tids["dds.udp.65002"] = threading.get_native_id()
        ready.wait()
        with contextlib.suppress(OSError):   # the socket closed under it
            sock.recv(16)

    def resting() -> None:
        _name_this_thread("dds.shm.65003")
        tids["dds.shm.65003"] = threading.get_native_id()
        ready.wait()
        with rest:
            rest.wait_for(done.is_set)

    threads = [threading.Thread(target=f, daemon=True) for f in (stuck, listening, resting)]
    for t in threads:
        t.start()
    ready.wait(EVENT_WAIT_S)
    try:
        yield tids
    finally:
        LIBC.pthread_mutex_unlock(mutex)
        sock.sendto(b"x", sock.getsockname())
        with rest:
            done.set()
            rest.notify_all()
        for t in threads:
            t.join(5.0)
        sock.close()


def test_a_thread_on_a_held_mutex_is_stuck_one_on_its_socket_or_condition_is_not(
        dds_like_threads: dict[str, int]) -> None:
    tid = dds_like_threads["dds.ev.65001"]
    # the looks: the blocked thread reaches its futex a moment after the barrier
    found: list[str] = []
    for _ in range(100):
        found = stuck_dds_threads()
        if found:
            break
    assert found == [f"dds.ev.65001 ({tid})"]


def test_a_healthy_process_is_told_at_the_first_look() -> None:
    assert stuck_dds_threads(samples=50, interval_s=1.0) == []   # would take 49 s otherwise


def test_bad_sampling_is_refused_with_the_limits() -> None:
    for samples, interval in ((0, 0.05), (3, float("nan")), (3, -1.0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            stuck_dds_threads(samples, interval)


CHILD = textwrap.dedent("""
    import ctypes, json, threading, time
    from pathlib import Path
    from excavator_common.node_thread import NodeThread, abandoned
    from excavator_common.process_exit import exit_without_teardown

    healthy = NodeThread("stuck_test_healthy")
    healthy.start()
    time.sleep(0.5)
    first = healthy.close()          # a live Fast DDS, its own threads at rest: destroyed

    libc = ctypes.CDLL("libc.so.6")
    mutex = ctypes.create_string_buffer(64)
    libc.pthread_mutex_lock(mutex)
    def stuck():
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("dds.ev.65004")
        libc.pthread_mutex_lock(mutex)
    threading.Thread(target=stuck, daemon=True).start()
    time.sleep(0.3)
    left = NodeThread("stuck_test_left")
    left.start()
    second = left.close()
    print(json.dumps({"healthy": first, "left": second, "again": left.close(),
                      "abandoned": abandoned()}), flush=True)
    exit_without_teardown(0)
""")


def test_a_node_on_a_stuck_fast_dds_is_left_and_said_so_a_healthy_one_destroyed() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "healthy": True, "left": False, "again": False, "abandoned": 1}
    assert "node 'stuck_test_left' left undestroyed" in out.stderr, out.stderr
    assert "dds.ev.65004" in out.stderr and "stuck_test_healthy" not in out.stderr


NODE_CHILD = textwrap.dedent("""
    import ctypes, sys, threading
    from pathlib import Path
    from rclpy.node import Node
    from excavator_common.process_exit import exit_without_teardown
    from excavator_common.ros_runtime import run_node

    libc = ctypes.CDLL("libc.so.6")
    mutex = ctypes.create_string_buffer(64)

    def stuck():
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("dds.ev.65005")
        libc.pthread_mutex_lock(mutex)

    def build():
        node = Node("stuck_test_node")
        node.create_timer(0.1, lambda: print("SPINNING", flush=True))
        return node

    def cleanup(node):
        libc.pthread_mutex_lock(mutex)       # held by this thread: the other one waits
        threading.Thread(target=stuck, daemon=True).start()
        import time; time.sleep(0.3)
        print("CLEANED UP", flush=True)

    exit_without_teardown(run_node(build, [sys.argv[0]], cleanup))
""")


def test_a_node_process_on_a_stuck_fast_dds_ends_at_its_ctrl_c_without_destroying() -> None:
    """run_node's clean-up (every node executable): its own clean-up runs, the destroy that
    would block for good is skipped and said, and the process exits 0 (no hang watchdog is
    armed here: without the skip it would be the watchdog's deadline, not an exit)."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", NODE_CHILD], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "SPINNING"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=STARTUP_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert "CLEANED UP" in out
        assert "node 'stuck_test_node' left undestroyed" in err and "dds.ev.65005" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
