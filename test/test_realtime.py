"""The real-time set-up of the stack's processes (issue 12): gc frozen after start-up, short GIL
slices, niced background processes, CPU pinning, named threads, and the stall probe that
measures them. Real processes; no assertion on how fast anything runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, NodeProcess, thread_slices, thread_stats

from excavator_common import realtime
from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.run import process_layout
from excavator_hil.local_services import LocalRedisServer, ManagedProcess, wait_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def _python(code: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_quiet_gc_freezes_start_up_objects_and_raises_the_full_collection_threshold() -> None:
    code = """
        import gc, json, sys
        from excavator_common import realtime
        frozen = realtime.quiet_gc()
        realtime.short_gil_slices()
        print(json.dumps({"frozen": frozen, "count": gc.get_freeze_count(),
                          "threshold": gc.get_threshold(), "switch": sys.getswitchinterval()}))
    """
    new = _python(code)
    assert new["frozen"] == new["count"] > 1000   # every module object, at least
    assert tuple(new["threshold"]) == realtime.GC_THRESHOLDS
    assert new["switch"] == pytest.approx(realtime.GIL_SWITCH_INTERVAL_S)
    old = _python(code, {realtime.ENV: "off"})   # the set-up before issue 12, for the bench
    assert old["count"] == 0
    assert tuple(old["threshold"]) == (700, 10, 10)
    assert old["switch"] == pytest.approx(0.005)


def test_name_thread_sets_the_os_thread_name() -> None:
    out = _python("""
        import json, threading
        from pathlib import Path
        from excavator_common import realtime
        box = {}
        def run():
            realtime.name_thread("plc-bridge-loop-and-more")   # 15 bytes kept
            box["comm"] = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text()
        t = threading.Thread(target=run); t.start(); t.join()
        print(json.dumps(box))
    """)
    assert out["comm"].strip() == "plc-bridge-loop"


def test_pin_to_cpus_keeps_only_cpus_the_host_has() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    out = _python(f"""
        import json
        from excavator_common import realtime
        print(json.dumps({{"pinned": realtime.pin_to_cpus([{cpus[0]}, 4096]),
                          "none": realtime.pin_to_cpus([4096])}}))
    """)
    assert out["pinned"] == [cpus[0]]
    assert out["none"] == [cpus[0]]   # nothing left to pin to: unchanged


def _thread_nice(pid: int) -> set[int]:
    """The nice value of every thread of ``pid`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    return {int(fields[16]) for fields in thread_stats(pid).values()}


def test_a_prefixed_process_runs_every_thread_at_the_lower_priority(tmp_path: Path) -> None:
    proc = ManagedProcess("plc_bridge.virtual_plc.cli",
                          ["--port", "0", "--control-port", "-1", "--model", "skid_steer"],
                          log_dir=tmp_path, cwd=REPO, prefix=["nice", "-n", "10"])
    try:
        wait_for(lambda: "VIRTUAL_PLC READY" in proc.log(), EVENT_WAIT_S, proc.log)
        threads = list(Path(f"/proc/{proc.proc.pid}/task").glob("*"))
        assert len(threads) > 1   # the S7 server's threads too
        own = os.nice(0)
        assert _thread_nice(proc.proc.pid) == {min(own + 10, 19)}
    finally:
        proc.stop()


def _needs_fair_slices() -> None:
    """Skip where the kernel has no settable fair-scheduler slice (Linux < 6.12, not Linux)."""
    probe = subprocess.run([sys.executable, "-c", "from excavator_common import realtime; "
                            "print(realtime.fair_slice(0.0002))"],
                           capture_output=True, text=True, check=True, cwd=REPO)
    if probe.stdout.strip() != "0.0002":
        pytest.skip(f"this kernel ({os.uname().release}) keeps its own fair-scheduler slice")


def test_the_demo_runs_the_redis_to_plc_path_with_a_short_fair_slice(tmp_path: Path) -> None:
    """process_layout's prefix (``python -m excavator_common.realtime --fair-slice-ms 0.1``)
    reaches every thread of the virtual PLC (the S7 server's too) and redis-server, under
    normal scheduling; the simulation and the background keep the kernel's default."""
    _needs_fair_slices()
    layout = process_layout(DemoOptions(bridge_slice_ms=0.1, background_nice=10))
    assert layout["sim"] == [] and layout["background"] == ["env", "EXCAVATOR_HIL_NICE=10"]
    default = realtime.current_fair_slice()
    assert default is not None and default > 0.0001
    plc = ManagedProcess("plc_bridge.virtual_plc.cli",
                         ["--port", "0", "--control-port", "-1", "--model", "skid_steer"],
                         log_dir=tmp_path, cwd=REPO, prefix=layout["bridge"])
    redis_server = LocalRedisServer(tmp_path / "redis", prefix=layout["redis"])
    try:
        wait_for(lambda: "VIRTUAL_PLC READY" in plc.log(), EVENT_WAIT_S, plc.log)
        redis_server.start()
        assert len(list(Path(f"/proc/{plc.proc.pid}/task").glob("*"))) > 1
        assert thread_slices(plc.proc.pid) == {0.0001}
        assert redis_server.proc is not None
        assert thread_slices(redis_server.proc.pid) == {0.0001}
        assert os.sched_getscheduler(plc.proc.pid) == os.SCHED_OTHER   # still normal
    finally:
        plc.stop()
        redis_server.stop()


def test_bad_fair_slice_is_one_message_and_exit_2() -> None:
    for args in (["excavator_hil.cli", "demo", "--bridge-slice-ms", "0.01"],
                 ["excavator_common.realtime", "--fair-slice-ms", "500", "--", "true"]):
        out = subprocess.run([sys.executable, "-m", *args], check=False, cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert "is outside 0.1..100 ms" in out.stderr
        assert "Traceback" not in out.stderr


def test_the_demo_layout_nices_the_background_and_pins_on_request() -> None:
    plain = process_layout(DemoOptions(background_nice=0, bridge_slice_ms=0))
    assert plain == {"bridge": [], "redis": [], "sim": [], "background": []}
    layout = process_layout(DemoOptions(background_nice=10, rt_priority=20, pin_cpus=True,
                                        bridge_slice_ms=0))
    assert layout["background"] == ["env", "EXCAVATOR_HIL_NICE=10"]
    assert layout["redis"][-3:] == ["chrt", "-f", "20"]   # the path's third process
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        assert layout["bridge"] == ["taskset", "-c", str(cpus[-1])]
        assert layout["redis"][:3] == ["taskset", "-c", str(cpus[-1])]
        assert layout["sim"] == ["taskset", "-c", ",".join(map(str, cpus[:-1]))]
    else:   # one CPU: nothing to separate
        assert layout["bridge"] == layout["sim"] == []


def test_bad_background_nice_is_one_message_and_exit_2() -> None:
    out = subprocess.run([sys.executable, "-m", "excavator_hil.cli", "demo",
                          "--background-nice", "25"], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--background-nice 25 is outside 0..19" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("setup", ["on", "off"])
def test_a_node_under_the_probe_reports_its_set_up_gc_and_a_stall(tmp_path: Path,
                                                                  setup: str) -> None:
    """soil_node with the stall probe: once it spins (its diagnostics arrive) its start-up
    objects are frozen and its GIL slices short (not with the set-up off); a SIGSTOP from
    outside shows up as a probe stall at least as long; the report names its threads."""
    from diagnostic_msgs.msg import DiagnosticArray
    from helpers import RosTestNode

    probe_dir = tmp_path / "probe"
    node = NodeProcess("excavator_sim.soil.soil_node", [], log_dir=tmp_path,
                       env={"EXCAVATOR_HIL_PROBE": str(probe_dir), realtime.ENV: setup})
    ros = RosTestNode()
    try:
        diags = ros.collect(DiagnosticArray, "/diagnostics")
        wait_for(lambda: any(s.name.startswith("soil_node") for m in list(diags)
                             for s in m.status), EVENT_WAIT_S, node.log)
        os.kill(node.proc.pid, signal.SIGSTOP)
        time.sleep(0.3)
        os.kill(node.proc.pid, signal.SIGCONT)
        seen = len(diags)
        wait_for(lambda: len(diags) > seen,
                 EVENT_WAIT_S, "diagnostics after SIGCONT")  # running again
    finally:
        ros.close()
        node.stop(timeout=30)
    (report_path,) = probe_dir.glob("soil_node-*.json")
    report = json.loads(report_path.read_text())
    assert max(late for _, late in report["stalls"]) >= 250.0   # ms: the 0.3 s stop
    if setup == "on":
        assert report["gc_frozen"] > 1000
        assert report["switch_interval_s"] == pytest.approx(realtime.GIL_SWITCH_INTERVAL_S)
    else:
        assert report["gc_frozen"] == 0
        assert report["switch_interval_s"] == pytest.approx(0.005)
    names = {t["comm"] for t in report["threads"]}
    assert {"soil_heightmap", "stall_probe"} <= names


def test_the_probe_records_full_collections_with_their_caller(tmp_path: Path) -> None:
    code = """
        import gc, json
        from excavator_common import stall_probe
        probe = stall_probe.start_from_environment("unit")
        stall_probe.note("overrun", tick_s=1.0, start_s=1.0, end_s=1.02)
        def collect_all():
            gc.collect()
        collect_all()
        stall_probe.write_now()
        print(json.dumps({"ok": True}))
    """
    _python(code, {"EXCAVATOR_HIL_PROBE": str(tmp_path)})
    (path,) = tmp_path.glob("unit-*.json")
    report = json.loads(path.read_text())
    assert report["gc_summary"]["2"]["count"] >= 1
    assert any("collect_all" in caller for _, caller in report["full_gc_callers"])
    assert [e["kind"] for e in report["events"]].count("overrun") == 1
    # without the variable: nothing starts, note() does nothing
    out = _python("""
        import json
        from excavator_common import stall_probe
        print(json.dumps({"probe": stall_probe.start_from_environment("x") is not None}))
    """, {"EXCAVATOR_HIL_PROBE": ""})
    assert out == {"probe": False}


def test_overrun_attribution_sums_cpu_time_per_process_in_each_window(tmp_path: Path) -> None:
    """bench/stall_report on a hand-made trace: who ran on the CPUs while the bridge overran."""
    import stall_report

    probes = [
        {"name": "bridge_node", "pid": 100, "events": [
            {"kind": "thread", "thread": "plc-bridge-loop", "tid": 101, "t": 0.0},
            {"kind": "overrun", "tick_s": 10.000, "start_s": 10.004, "end_s": 10.015}]},
        {"name": "soil_node", "pid": 200, "events": []},
    ]
    header = ("           time    cpu  task name                       wait time  sch delay"
              "   run time\n")
    rows = [  # switch-out time, cpu, task[tid/pid], wait, sch delay, run [ms]
        "      10.010000 [0000]  python[200]                         0.000      0.000     12.000",
        "      10.016000 [0001]  python[101/100]                     4.000      3.000      2.000",
        "      10.022000 [0001]  cc1[300]                            0.000      0.000      5.000",
        "      11.000000 [0000]  python[200]                         0.000      0.000      1.000",
    ]
    timehist = tmp_path / "timehist.txt"
    timehist.write_text(header + "\n".join(rows) + "\n")
    att = stall_report.overrun_attribution(probes, timehist)
    assert att["overruns"] == 1
    held = att["cpu_ms_in_overrun_windows"]
    # window 9.998 .. 10.015: soil_node ran 9.998..10.010, the loop 10.014..10.015, cc1
    # 10.015..10.015 (nothing), soil_node's run at 11 s is outside
    assert held["soil_node"] == pytest.approx(12.0)
    assert held["bridge loop"] == pytest.approx(1.0)
    assert "other: cc1" not in held
    assert att["stack_ms"] == pytest.approx(13.0)


def test_soil_warm_up_runs_a_whole_cycle_whatever_the_users_grid() -> None:
    """The start-up warm-up of soil_node (and of the in-process soil) digs, carries and dumps on
    its own grid: a user's small grid far from the cycle does not fail the start-up."""
    import dataclasses

    from excavator_kinematics.geometry import default_geometry
    from excavator_sim.soil.bucket_prism import BucketPrism
    from excavator_sim.soil.config import load_soil_config
    from excavator_sim.soil.scenarios import warm_up

    config = load_soil_config()
    small = dataclasses.replace(config.terrain, size_x_m=8.0, size_y_m=6.0, centre_x_m=4.0,
                                centre_y_m=0.0)
    assert warm_up(small, config.dimaio, BucketPrism.from_geometry(default_geometry())) > 0.0


def _can_use_fifo() -> bool:
    """CAP_SYS_NICE here (root in CI): a child may switch itself to SCHED_FIFO."""
    code = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", code], check=False,
                          capture_output=True).returncode == 0


def _thread_scheduling(pid: int) -> dict[str, tuple[int, int]]:
    """OS name of each thread of ``pid`` (``tid`` for the main one) -> (policy, priority)."""
    out: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        tid = int(task.name)
        with contextlib.suppress(OSError):
            name = "main" if tid == pid else (task / "comm").read_text().strip()
            out.setdefault(name, (os.sched_getscheduler(tid),
                                  os.sched_getparam(tid).sched_priority))
    return out


@pytest.mark.skipif(not _can_use_fifo(), reason="needs CAP_SYS_NICE for SCHED_FIFO")
def test_bridge_rt_priority_covers_the_executor_thread(tmp_path: Path, node_processes) -> None:
    """rt_priority 20: the loop thread under SCHED_FIFO 20 and rclpy's executor (the main
    thread, which holds the GIL while it publishes) at 19, so no ordinary task pre-empts a GIL
    holder the loop waits for. Nothing needs to be reachable: the loop runs (and retries)
    without Redis and PLC."""
    from helpers import free_port

    bridge = NodeProcess("plc_bridge.bridge.node", [
        "--ros-args", "--params-file", "config/plc.yaml", "-p", "autostart:=true",
        "-p", f"redis_url:=redis://127.0.0.1:{free_port()}/0",
        "-p", f"plc_port:={free_port()}", "-p", "rt_priority:=20"], log_dir=tmp_path)
    node_processes.append(bridge)
    pid = bridge.proc.pid
    sched = wait_for(lambda: (s := _thread_scheduling(pid)).get("plc-bridge-loop") and s,
                     EVENT_WAIT_S,
                     "the bridge's loop thread")
    assert sched["plc-bridge-loop"] == (os.SCHED_FIFO, 20), sched
    wait_for(lambda: _thread_scheduling(pid)["main"] == (os.SCHED_FIFO, 19), EVENT_WAIT_S,
             lambda: f"the executor thread under SCHED_FIFO 19: {_thread_scheduling(pid)}")


# A program that, like the node executables (excavator_hil.node_entry), takes SIGINT over some
# time after it started: it says so, then unblocks SIGINT and waits for one.
_LATE_HANDLER = """
import os, signal, sys, time
time.sleep(1.0)                         # the start-up a Ctrl-C can land in
signal.signal(signal.SIGINT, lambda *_: (print("TAKEN", flush=True), os._exit(0)))
print("HANDLER", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
time.sleep(5.0)
print("NO SIGINT", flush=True)
"""


def _sigint_blocked(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


@pytest.mark.parametrize("hold", [True, False])
def test_a_ctrl_c_during_the_exec_is_held_for_a_node_that_takes_it_over(hold: bool) -> None:
    """``--hold-sigint``: a Ctrl-C landing while the fair-slice prefix execs the node (and
    while the node starts) stays pending until the node's handler is in place; without it,
    Python's default handling ends the program with a traceback or exit -2 (what ros2 launch
    called "process has died" when Ctrl-C came early)."""
    hold_arg = [realtime.HOLD_SIGINT] if hold else []
    proc = subprocess.Popen([sys.executable, "-m", "excavator_common.realtime", *hold_arg,
                             "--fair-slice-ms", "0.1", "--", sys.executable, "-c",
                             _LATE_HANDLER], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if hold:   # once the prefix holds it (before its exec): a Ctrl-C in the window
        wait_for(lambda: _sigint_blocked(proc.pid), EVENT_WAIT_S, "SIGINT blocked by the prefix")
    else:
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=EVENT_WAIT_S)
    if hold:
        assert proc.returncode == 0, err
        assert out.split() == ["HANDLER", "TAKEN"], (out, err)
    else:
        assert proc.returncode != 0 and "TAKEN" not in out, (out, err)


def test_only_the_launch_holds_sigint_for_the_bridge_group() -> None:
    """The demo starts its nodes as ``python -m module`` (no node_entry to unblock SIGINT) and
    redis-server never would: neither gets the hold; the launch's node executables do."""
    demo = process_layout(DemoOptions(bridge_slice_ms=0.1))
    assert realtime.HOLD_SIGINT not in demo["bridge"] + demo["redis"]
    held = realtime.command_prefixes(realtime.ProcessSetup(bridge_slice_ms=0.1,
                                                           hold_sigint=True))
    assert realtime.HOLD_SIGINT in held["bridge"]
    assert realtime.HOLD_SIGINT not in held["redis"]


def _child_printing_json(code: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A Python child running ``code``, and the JSON list it prints first (it then sleeps,
    to be looked at; the caller kills it)."""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        return proc, json.loads(proc.stdout.readline())
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def test_the_background_nice_spares_the_dds_threads_of_a_participant() -> None:
    """The demo's process nices its work, not its reception: Fast DDS's shared-memory port
    watchdog takes a listener that stood for 1 s for a dead one, and the regenerated port can
    leave it deaf (docs/deployment.md). After the call every thread of a real participant's
    process is at least at the value, except Fast DDS's "dds.*" threads, which stay where
    they were; a second call raises nothing more."""
    base = os.nice(0)        # what the child starts at (a niced test run: above 0)
    value = min(base + 7, 19)
    if value == base:
        pytest.skip(f"this test runs at nice {base}: no higher value to set")
    code = ("import json, os, time, rclpy\n"
            "from excavator_common import realtime\n"
            "rclpy.init()\n"
            "node = rclpy.create_node('niced')\n"
            f"first = realtime.nice_threads_at_least({value})\n"
            f"again = realtime.nice_threads_at_least({value})\n"
            "print(json.dumps([os.nice(0), first, again]), flush=True)\n"
            "time.sleep(30)\n")
    proc, (main, first, again) = _child_printing_json(code)
    try:
        assert main == value and first >= 1 and again == 0
        names = {t: Path(f"/proc/{proc.pid}/task/{t}/comm").read_text().strip()
                 for t in os.listdir(f"/proc/{proc.pid}/task")}
        nice = {t: os.getpriority(os.PRIO_PROCESS, int(t)) for t in names}
        dds = {t for t, n in names.items() if n.startswith(realtime.DDS_THREAD_PREFIX)}
        assert any(names[t].startswith("dds.shm.") for t in dds), names   # the listener
        assert {nice[t] for t in dds} == {base}, {names[t]: nice[t] for t in dds}
        assert all(nice[t] >= value for t in names if t not in dds), names
    finally:
        proc.kill()
        proc.wait()


def _nices_by_kind(pid: int) -> tuple[set[int], set[int], set[str]]:
    """(the nice values of Fast DDS's threads, of all others, the thread names) of ``pid``."""
    dds, work, names = set(), set(), set()
    for tid, fields in thread_stats(pid).items():
        with contextlib.suppress(OSError):   # ended meanwhile
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            names.add(name)
            (dds if name.startswith(realtime.DDS_THREAD_PREFIX) else work).add(int(fields[16]))
    return dds, work, names


@pytest.mark.parametrize("module,args", [
    ("excavator_kinematics.ik_node", []),
    ("excavator_hil.cli", ["bag", "record", "/nothing_here", "-o", "{tmp}/bag"]),
], ids=["node-executable", "bag-record"])
def test_a_process_of_the_background_nices_itself_once_its_participant_exists(
        tmp_path: Path, module: str, args: list[str]) -> None:
    """The background group's prefix (``env EXCAVATOR_HIL_NICE=N``, the demo's and the launch
    files' layout): a node executable (``run_nodes``) and the recorder nice every thread but
    Fast DDS's once their participant exists."""
    base = os.nice(0)
    value = min(base + 7, 19)
    if value == base:
        pytest.skip(f"this test runs at nice {base}: no higher value to set")
    layout = realtime.command_prefixes(realtime.ProcessSetup(background_nice=value,
                                                              bridge_slice_ms=0))
    proc = ManagedProcess(module, [a.replace("{tmp}", str(tmp_path)) for a in args],
                          log_dir=tmp_path, cwd=REPO, prefix=layout["background"])
    try:
        def niced() -> bool:
            assert proc.alive(), proc.log()
            dds, work, _ = _nices_by_kind(proc.pid)
            return bool(dds) and work == {value}
        wait_for(niced, EVENT_WAIT_S, lambda: f"{_nices_by_kind(proc.pid)}\n{proc.log()}")
        dds, _work, names = _nices_by_kind(proc.pid)
        assert dds == {base} and any(n.startswith("dds.shm.") for n in names), names
    finally:
        proc.stop(timeout=30.0)


@pytest.mark.parametrize("value", ["ten", "-1", "20", "1.5"])
def test_a_bad_background_nice_stops_a_node_at_start_naming_it(tmp_path: Path,
                                                                 value: str) -> None:
    for module, args in (("excavator_kinematics.ik_node", []),
                         ("excavator_hil.cli", ["bag", "record", "-o", str(tmp_path / "b")])):
        run = subprocess.run([sys.executable, "-m", module, *args], check=False, cwd=REPO,
                             timeout=120,
                             capture_output=True, text=True,
                             env={**os.environ, realtime.NICE_ENV: value})
        text = run.stdout + run.stderr
        assert run.returncode == 2, text
        assert f"EXCAVATOR_HIL_NICE='{value}'" in text and "0..19" in text, text
