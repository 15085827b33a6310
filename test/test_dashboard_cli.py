"""``excavator-hil dashboard``: start-up checks (one message, exit 2, no traceback) and the token
gate of a dashboard bound with ``--token`` (a real server process, real HTTP)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import (
    EVENT_WAIT_S,
    REPO,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    free_port,
    thread_stats,
    wait_for,
)

TOKEN = "0123456789abcdef0123"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "excavator_hil.cli", "dashboard", *args],
                          check=False, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                          cwd=REPO)


@pytest.mark.parametrize(("args", "message"), [
    (("--host", "0.0.0.0"), "not a loopback address: set --token"),
    (("--token", "short"), "fewer than 16"),
    (("--refresh-hz", "1e300"), "--refresh-hz 1e+300 outside 1..30 Hz"),
    (("--redis-period", "0"), "--redis-period 0 outside 0.05..5 s"),
    (("--port", "70000"), "--port 70000 outside 1..65535"),
    (("--nice", "25"), "--nice 25 outside 0..19"),
    (("--plc-config", "/nonexistent/plc.yaml"), "/nonexistent/plc.yaml"),
])
def test_bad_options_exit_2_with_one_message(args, message):
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_port_in_use_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = _run("--port", str(port))
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr


def test_help_lists_the_sub_command():
    out = subprocess.run([sys.executable, "-m", "excavator_hil.cli", "--help"],
                         check=False, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                         cwd=REPO).stdout
    assert "dashboard" in out


def _thread_name(pid: int, tid: object) -> str:
    with contextlib.suppress(OSError):   # ended meanwhile
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    return ""


def test_token_gate(tmp_path):
    port = free_port()
    proc = NodeProcess("excavator_hil.cli", ["dashboard", "--port", str(port), "--token", TOKEN,
                                             "--redis-url", f"redis://127.0.0.1:{free_port()}/0"],
                       log_dir=tmp_path)
    try:
        wait_for(lambda: "DASHBOARD READY" in proc.log() or not proc.alive(), 120.0, proc.log)
        assert f"http://127.0.0.1:{port}/?token={TOKEN}" in proc.log()
        # below the control path: every thread (ROS, Redis, web) at nice 10, all but Fast
        # DDS's, which keep the process's start value (a shared-memory listener that stands
        # 1 s is taken for dead: excavator_common.realtime.nice_threads_at_least)
        tasks = thread_stats(proc.proc.pid)
        nices = [(_thread_name(proc.proc.pid, tid), int(fields[16]))
                 for tid, fields in tasks.items()]
        dds = [(n, v) for n, v in nices if n.startswith("dds.")]
        work = [(n, v) for n, v in nices if not n.startswith("dds.")]
        assert any(n.startswith("dds.shm.") for n, _ in dds), nices
        assert {v for _, v in dds} == {os.nice(0)}, dds
        # at least 10 (a test run niced above 10 keeps its own: nicer threads stay)
        assert len(work) > 3 and {v for _, v in work} == {max(10, os.nice(0))}, work
        base = f"http://127.0.0.1:{port}/"
        for url in (base, base + "?token=wrong" + TOKEN[6:], base + "_nicegui/3.18.0/static/"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(url, timeout=STARTUP_TIMEOUT_S)
            assert err.value.code == 401, url
        with urllib.request.urlopen(base + f"?token={TOKEN}", timeout=STARTUP_TIMEOUT_S) as ok:
            assert ok.status == 200
            cookie = ok.headers["set-cookie"].split(";")[0]
            assert "excavator_hil" in ok.read().decode()
        req = urllib.request.Request(base, headers={"Cookie": cookie})
        with urllib.request.urlopen(req, timeout=STARTUP_TIMEOUT_S) as again:
            assert again.status == 200
    finally:
        # nice 10 on a host whose every core is busy: the graceful stop took 1.3-2.1 s here
        assert proc.stop(timeout=60.0) == 0, proc.log()


def test_double_sigint_exits_cleanly(tmp_path):
    """``ros2 launch`` sends SIGINT twice on Ctrl-C: exit 0, no traceback."""
    proc = NodeProcess("excavator_hil.dashboard.app", [
        "--port", str(free_port()), "--redis-url", f"redis://127.0.0.1:{free_port()}/0"],
        log_dir=tmp_path)
    wait_for(lambda: "DASHBOARD READY" in proc.log() or not proc.alive(),
             STARTUP_TIMEOUT_S, proc.log)
    proc.interrupt(count=2, gap=0.01)
    assert proc.proc.wait(EVENT_WAIT_S) == 0, proc.log()
    assert "Traceback" not in proc.log()


# 0.05 s lands in the imports, 1 s and 3 s in the links' start or the server's, on any host
@pytest.mark.parametrize("delay_s", [0.05, 1.0, 3.0])
def test_the_dashboard_executable_ends_quietly_on_a_double_sigint_while_starting(
        delay_s: float, tmp_path: Path) -> None:
    """The ``dashboard`` executable (its console-script target, as the ament prefix and
    ``ros2 launch`` run it) interrupted by launch's Ctrl-C (two SIGINTs) wherever its start-up
    is: exit 0, no traceback (a KeyboardInterrupt raised inside an import was printed before it
    started through ``excavator_hil.node_entry``, as the nodes do)."""
    from helpers import double_sigint_while_starting

    from excavator_hil.ament_register import console_scripts

    module, func = console_scripts()["dashboard"].split(":")
    code, text = double_sigint_while_starting(
        module, func, ["--port", str(free_port()), "--redis-url",
                       f"redis://127.0.0.1:{free_port()}/0"], delay_s, tmp_path)
    assert code == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


def test_a_start_up_cut_short_by_ctrl_c_is_not_logged_as_an_error() -> None:
    """uvicorn's "Exception in 'lifespan' protocol" for a lifespan cancelled by the Ctrl-C is
    dropped (the traceback a loaded CI host printed at 3 s into the start-up); any other
    exception of the lifespan, and every record without one, is still logged."""
    import asyncio
    import logging
    import sys

    from excavator_hil.dashboard.app import InterruptedStartUp

    def record(exc: BaseException | None) -> logging.LogRecord:
        info = None
        if exc is not None:
            try:
                raise exc
            except BaseException:   # noqa: BLE001 - the record's exc_info, as logging makes it
                info = sys.exc_info()
        return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1,
                                 "Exception in 'lifespan' protocol\n", None, info)

    gate = InterruptedStartUp()
    assert not gate.filter(record(asyncio.CancelledError()))
    assert not gate.filter(record(KeyboardInterrupt()))
    assert gate.filter(record(RuntimeError("the page failed")))
    assert gate.filter(record(None))

    # the same cancel as Starlette reports it: the traceback as the text of the lifespan's
    # failure message, which uvicorn logs without an exception (fresh9, calm, 3 s in)
    def text(last_line: str) -> logging.LogRecord:
        body = ("Traceback (most recent call last):\n  File \"starlette/routing.py\", line 668, "
                f"in lifespan\n    await receive()\n{last_line}\n")
        return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, body, None, None)

    assert not gate.filter(text("asyncio.exceptions.CancelledError"))
    assert not gate.filter(text("KeyboardInterrupt"))
    assert gate.filter(text("RuntimeError: the page failed"))
    assert gate.filter(logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1,
                                         "Application startup failed. Exiting.", None, None))
