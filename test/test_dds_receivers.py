"""excavator_common.dds_receivers: a Fast DDS reception thread stuck on a lock is told from one
waiting for datagrams, and a NodeThread on a stuck Fast DDS is left alone, not destroyed (which
would hang the process for good). Fast DDS's deadlock cannot be made on demand: the stuck
thread here is a thread of ours under a reception thread's name, waiting on a held lock, which
is what the kernel shows of the real one (its wait channel)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from excavator_common.dds_receivers import stalled_receivers

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")


def _named(name: str, wait: threading.Event) -> None:
    Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
    wait.set()


@pytest.fixture
def receivers() -> Iterator[tuple[int, int]]:
    """Two threads under Fast DDS reception names: one waits on a held lock (stuck), one on a
    UDP socket (healthy). Yields their thread ids."""
    held = threading.Lock()
    held.acquire()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    tids: dict[str, int] = {}
    named = [threading.Event(), threading.Event()]

    def stuck() -> None:
        tids["stuck"] = threading.get_native_id()
        _named("dds.udp.65001", named[0])
        held.acquire()

    def listening() -> None:
        tids["listening"] = threading.get_native_id()
        _named("dds.udp.65002", named[1])
        with contextlib.suppress(OSError):   # the socket closed under it
            sock.recv(16)

    threads = [threading.Thread(target=stuck, daemon=True),
               threading.Thread(target=listening, daemon=True)]
    for t in threads:
        t.start()
    for e in named:
        assert e.wait(10.0)
    try:
        yield tids["stuck"], tids["listening"]
    finally:
        held.release()
        sock.sendto(b"x", sock.getsockname())
        for t in threads:
            t.join(5.0)
        sock.close()


def test_a_reception_thread_on_a_lock_is_stalled_one_on_its_socket_is_not(receivers) -> None:
    stuck_tid, _ = receivers
    assert stalled_receivers() == [f"dds.udp.65001 ({stuck_tid})"]


def test_a_healthy_process_is_told_at_the_first_look() -> None:
    assert stalled_receivers(samples=50, interval_s=1.0) == []   # would take 49 s otherwise


def test_bad_sampling_is_refused_with_the_limits() -> None:
    for samples, interval in ((0, 0.05), (3, float("nan")), (3, -1.0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            stalled_receivers(samples, interval)


CHILD = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    from excavator_common.node_thread import NodeThread, abandoned
    from excavator_common.process_exit import exit_without_teardown

    healthy = NodeThread("receivers_healthy")
    healthy.start()
    time.sleep(0.5)
    first = healthy.close()          # a live Fast DDS, its own reception threads: destroyed

    held = threading.Lock(); held.acquire()
    def stuck():
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("dds.udp.65003")
        held.acquire()
    threading.Thread(target=stuck, daemon=True).start()
    time.sleep(0.3)
    left = NodeThread("receivers_left")
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
    assert "node 'receivers_left' left undestroyed" in out.stderr, out.stderr
    assert "dds.udp.65003" in out.stderr and "receivers_healthy" not in out.stderr
