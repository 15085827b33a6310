"""A process the demo (or the soak, a bench, a test) starts ends with it, however it ended:
``excavator_common.supervisor_watch`` in each of the project's entry points, the pid
``ManagedProcess`` puts in its environment; ``setpriv --pdeathsig`` for redis-server.

The supervisor here is killed with SIGKILL, as a test's timeout or the out-of-memory killer
kills: it runs no cleanup of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import EVENT_WAIT_S, REPO, wait_for

from excavator_common import supervisor_watch

WATCH = ("from excavator_common import supervisor_watch\n"
         "print('watching', supervisor_watch.end_with_supervisor(), flush=True)\n")


def _child(code: str, supervisor: int | str | None, tmp_path: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != supervisor_watch.ENV}
    if supervisor is not None:
        env[supervisor_watch.ENV] = str(supervisor)
    return subprocess.Popen([sys.executable, "-c", WATCH + textwrap.dedent(code)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "600"])


def test_a_child_ends_when_its_supervisor_is_killed_and_says_why(tmp_path: Path) -> None:
    supervisor = _sleeper()
    child = _child("import time\ntime.sleep(600)\n", supervisor.pid, tmp_path)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "watching True\n"
        assert child.poll() is None
        supervisor.kill()
        supervisor.wait()
        _out, err = child.communicate(timeout=EVENT_WAIT_S)
        assert child.returncode == -signal.SIGTERM, (child.returncode, err)
        assert f"supervisor (pid {supervisor.pid}) ended" in err
    finally:
        for p in (supervisor, child):
            if p.poll() is None:
                p.kill()


def test_a_child_whose_supervisor_is_gone_before_it_watches_ends_at_once(tmp_path: Path
                                                                         ) -> None:
    gone = _sleeper()
    gone.kill()
    gone.wait()
    child = _child("import time\ntime.sleep(600)\n", gone.pid, tmp_path)
    _out, err = child.communicate(timeout=EVENT_WAIT_S)
    assert child.returncode == -signal.SIGTERM
    assert f"supervisor (pid {gone.pid}) ended" in err


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    supervisor = _sleeper()
    child = _child("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                   "print('ignoring', flush=True)\ntime.sleep(600)\n", supervisor.pid, tmp_path)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "watching True\n"
        assert child.stdout.readline() == "ignoring\n"
        supervisor.kill()
        supervisor.wait()
        child.communicate(timeout=supervisor_watch.GRACE_S + 60)
        assert child.returncode == -signal.SIGKILL
    finally:
        for p in (supervisor, child):
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize(("value", "watching", "said"), [
    (None, False, ""),
    ("nonsense", False, "is not a process id"),
    ("1", False, "is not a process id"),     # init: every orphan's parent, never a supervisor
])
def test_without_a_supervisor_the_child_runs_on(tmp_path: Path, value: str | None,
                                                watching: bool, said: str) -> None:
    child = _child("print('done', flush=True)\n", value, tmp_path)
    out, err = child.communicate(timeout=EVENT_WAIT_S)
    assert child.returncode == 0, err
    assert out == f"watching {watching}\ndone\n"
    assert said in err


def test_the_childs_own_children_do_not_inherit_the_supervisor(tmp_path: Path) -> None:
    """The variable names the supervisor of one process: a process it starts (a launch's nodes,
    a browser) is its own to supervise."""
    supervisor = _sleeper()
    inner = f"import os; print(os.environ.get({supervisor_watch.ENV!r}))"
    child = _child("import subprocess, sys\n"
                   f"print(subprocess.run([sys.executable, '-c', {inner!r}], check=True,\n"
                   "      capture_output=True, text=True).stdout.strip(), flush=True)\n",
                   supervisor.pid, tmp_path)
    try:
        out, err = child.communicate(timeout=EVENT_WAIT_S)
        assert out.splitlines() == ["watching True", "None"], err
    finally:
        supervisor.kill()
        supervisor.wait()


SUPERVISOR = """
import json, sys, time
from pathlib import Path
from excavator_hil.local_services import LocalRedisServer, ManagedProcess, free_port

work = Path(sys.argv[1])
redis = LocalRedisServer(work / "redis")
redis.start()
plc = ManagedProcess("plc_bridge.virtual_plc.cli", ["--port", str(free_port()),
                     "--control-port", "-1"], log_dir=work)
ik = ManagedProcess("excavator_kinematics.ik_node", ["--ros-args", "-r", "__ns:=/orphans"],
                    log_dir=work)
print(json.dumps({"redis": redis.proc.pid, "virtual_plc": plc.pid, "ik_node": ik.pid,
                  "logs": {"virtual_plc": str(plc.log_path), "ik_node": str(ik.log_path)}}),
      flush=True)
time.sleep(600)
"""


def test_a_killed_supervisors_nodes_plc_and_redis_all_end(tmp_path: Path) -> None:
    """The demo's kinds of process: a ROS node (run_node), the virtual PLC (its own main),
    redis-server (not Python: pdeathsig). Its supervisor is SIGKILLed once they run."""
    script = tmp_path / "supervisor.py"
    script.write_text(SUPERVISOR)
    supervisor = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=REPO,
                                  stdout=subprocess.PIPE, text=True)
    children: dict[str, int] = {}
    try:
        assert supervisor.stdout is not None
        started = json.loads(supervisor.stdout.readline())
        children = {k: v for k, v in started.items() if k != "logs"}
        logs = {k: Path(v) for k, v in started["logs"].items()}
        # the node built (it spins), the PLC serving
        wait_for(lambda: "ready:" in logs["ik_node"].read_text(), 120, "ik_node to start")
        wait_for(lambda: "VIRTUAL_PLC READY" in logs["virtual_plc"].read_text(), 120,
                 lambda: f"the virtual PLC to serve: {logs['virtual_plc'].read_text()}")
        supervisor.kill()
        supervisor.wait()

        def alive() -> dict[str, int]:
            return {k: pid for k, pid in children.items()
                    if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE}

        wait_for(lambda: not alive(), supervisor_watch.GRACE_S + 60,
                 lambda: f"the supervisor's processes to end; alive: {alive()}")
        for name in ("virtual_plc", "ik_node"):
            text = logs[name].read_text()
            assert f"supervisor (pid {supervisor.pid}) ended" in text, (name, text[-2000:])
            assert "Traceback" not in text, (name, text[-2000:])
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
