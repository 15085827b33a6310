"""Shared fixtures: ROS isolation, a real redis-server, node processes, an rclpy test node.

The environment is set here, at import, before any test imports rclpy: DDS discovery stays on
loopback and each pytest run gets its own ROS domain.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from helpers import NodeProcess, RedisServer, private_domain_id

from excavator_common import hang_watchdog

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
# A discovery server from the user's shell takes effect even under LOCALHOST (Fast DDS 3.2):
# tests never use one they did not start themselves (test_multihost starts its own).
for _name in ("ROS_DISCOVERY_SERVER", "ROS_STATIC_PEERS", "FASTDDS_DEFAULT_PROFILES_FILE"):
    os.environ.pop(_name, None)
os.environ["ROS_DOMAIN_ID"] = os.environ.get("EXCAVATOR_HIL_TEST_DOMAIN_ID") or str(
    private_domain_id())
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
# A suite started in the background by a non-interactive shell (``make test &``, ``nohup``)
# inherits SIGINT ignored, and so would every process it starts: ``ros2 launch`` would never
# see the Ctrl-C a test sends (its nodes set their own handlers and end: "exited although
# nothing asked it to"), a program expected to die of SIGINT would live on. The tests run as a
# terminal's foreground job does.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
os.environ.setdefault("MUJOCO_GL", "egl")
# A node process that dies of a signal (SIGSEGV, SIGABRT) prints every thread's Python stack in
# its log: the one clue a crash on a CI host leaves.
os.environ["PYTHONFAULTHANDLER"] = "1"
# A node process that hangs (Fast DDS 3.2's deadlock, docs/deployment.md) prints its stacks and
# ends, also under ``ros2 launch`` (excavator_common.hang_watchdog)
os.environ.setdefault(hang_watchdog.ENV, f"{hang_watchdog.SUPERVISED_TIMEOUT_S:g}")

# No hypothesis deadline anywhere: its default (200 ms per example, timed on this process's
# clock) fails a pure test whose example a loaded host held back for a moment ("Unreliable test
# timings"). With it off, HealthCheck.too_slow also allows 30 s of generation instead of 1 s.
# A test's own @settings keeps this unless it names a deadline itself.
settings.register_profile("excavator_hil", deadline=None)
settings.load_profile("excavator_hil")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server process on a free loopback port, for one test."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def node_processes(tmp_path: Path) -> Iterator[list[NodeProcess]]:
    """Collects NodeProcess objects a test starts and stops them all afterwards."""
    procs: list[NodeProcess] = []
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
def spawn(node_processes: list[NodeProcess],
          tmp_path: Path) -> Callable[[str, list[str]], NodeProcess]:
    """Start a module as a process (``NodeProcess``), stopped after the test."""
    def _spawn(module: str, args: list[str]) -> NodeProcess:
        proc = NodeProcess(module, args, log_dir=tmp_path)
        node_processes.append(proc)
        return proc
    return _spawn


@pytest.fixture
def ros_node(node_processes: list[NodeProcess]) -> Iterator[object]:
    """An rclpy node in its own context, spun by a background executor thread.

    It depends on ``node_processes`` so that it is destroyed before the test's processes
    stop: a probe that outlives its peers removes their endpoints as they leave, the moment of
    Fast DDS 3.2's discovery deadlock (docs/deployment.md), which then hangs its destroy (a CI
    run: test_fleet_operated's probe, 17 minutes, until the worker's deadline ended it)."""
    from helpers import RosTestNode

    node = RosTestNode()
    try:
        yield node
    finally:
        node.close()


# Under pytest-xdist (``make test``: two workers, ``--dist loadgroup``) the tests of a file stay
# on one worker (module fixtures run once), and the files that run a whole stack (a demo, the
# soak, a recorded teleoperation session: a machine's worth of processes at RTF 1) run one at a
# time on one worker: two of them at once overloaded two cores (a joystick demo whose commands
# reached the simulation over a second old and were dropped, a soak whose recorder lost
# messages), which is no test of the product. The other worker runs the rest beside them.
# The two fleet files that run two machines' nodes besides (fleet.launch.py; two sims, two IKs,
# teleop and the dashboard) are in the group too: beside test_fleet_operated's fleet, on a
# host with a core busy, every process of both waited its turn for a core.
WHOLE_STACK_FILES = frozenset({
    "test_demo.py", "test_demo_fleet.py", "test_demo_wheeled.py", "test_soak.py",
    "test_teleop_demo.py",
    "test_teleop_dig.py", "test_teleop_replay.py", "test_teleop_impedance_replay.py",
    "test_fleet_operated.py", "test_fleet_launch.py", "test_fleet_machine_choice.py"})


def xdist_group(nodeid: str) -> str:
    """The worker group of a test: its file, or "whole_stack" for the files above."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return "whole_stack" if name in WHOLE_STACK_FILES else nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the marks, for whoever reads them (``-m``, reports); the grouping itself is the
    # scheduler's below
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item.nodeid)))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The whole-stack group is the run's longest unit of work (about half the suite's time):
        # first in the collection, it starts at once on one worker while the other works through
        # the rest (the Makefile keeps xdist from reordering by test count:
        # --no-loadscope-reorder), instead of starting late and leaving that worker alone at the
        # end. Stable: the files keep their order within each part.
        items.sort(key=lambda item: item.path.name not in WHOLE_STACK_FILES)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` grouped by :func:`xdist_group`. xdist 3.8 groups by an ``@group``
    suffix it writes into ``item._nodeid``, which pytest 9 no longer reads (the node id is
    ``item._id``): with the marks alone every test was a group of its own, a file's tests ran
    on both workers at once (each with its own module fixtures) and the whole-stack files side
    by side. The scheduler here groups by the node id itself."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            # (the file part: an ``@group`` suffix, should a later xdist write one, is after it)
            return xdist_group(nodeid)

    return FileGroupScheduling(config, log)


# A test process that hangs in native code holding the GIL (Fast DDS 3.2's deadlock in a probe's
# teardown hung one CI run for good) runs no Python: pytest-timeout's signal never acts. A
# faulthandler deadline (a C thread) a while after the test's own timeout writes every thread's
# stack to a file here and ends the worker (xdist reports it crashed and goes on); the
# controller prints the file in its summary.
HANG_DIR = Path(__file__).resolve().parents[1] / ".pytest_cache" / "hangs"
HANG_GRACE_S = 120.0    # after the test's timeout: pytest-timeout acts first where it can
_hang_file: Any = None


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):     # the controller, or a run without xdist
        for old in HANG_DIR.glob("*.txt"):
            old.unlink()
    HANG_DIR.mkdir(parents=True, exist_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _hang_file
    if _hang_file is None:
        _hang_file = open(HANG_DIR / f"{os.getpid()}.txt", "w")  # noqa: SIM115 - the process's
    marker = item.get_closest_marker("timeout")
    timeout_s = float(marker.args[0] if marker and marker.args
                      else item.config.getoption("timeout", None) or 300)
    faulthandler.dump_traceback_later(timeout_s + HANG_GRACE_S, exit=True, file=_hang_file)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


_exit_status = 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # A probe left undestroyed on a deadlocked Fast DDS (NodeThread.close) would hang the
    # interpreter's exit, where Fast DDS destroys its participants: end without it, with the
    # session's status (a worker has sent its results by now).
    from excavator_common.node_thread import abandoned

    if abandoned():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for path in sorted(HANG_DIR.glob("*.txt")):
        text = path.read_text(errors="replace")
        if text.strip():
            terminalreporter.section(f"a test process hung (stacks by faulthandler, {path.name})")
            terminalreporter.write(text)
