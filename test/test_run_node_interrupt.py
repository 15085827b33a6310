"""run_node: a Ctrl-C that lands inside rclpy's C++ is an interrupt, not a crash.

pybind11 turns a KeyboardInterrupt raised while it converts a call argument into
``RuntimeError: Unable to convert call argument '0' to Python object`` (seen at Ctrl-C in a
fresh-clone CI run, from ``take_message``): run_node must end quietly with code 0 then, and
still report a real error that no SIGINT preceded. Real processes, real rclpy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NODE = textwrap.dedent("""
    import os, signal, sys, time
    import rclpy.node
    from excavator_common.ros_runtime import run_node

    SIGINT_FIRST = sys.argv[1] == "sigint"

    class Node(rclpy.node.Node):
        def __init__(self):
            super().__init__("interrupt_probe")
            self.create_timer(0.05, self.tick)

        def tick(self):
            try:
                if SIGINT_FIRST:
                    os.kill(os.getpid(), signal.SIGINT)
                    # the Python handler raises KeyboardInterrupt within a few bytecodes,
                    # before rclpy's signal thread has shut the context down
                    deadline = time.monotonic() + 2.0
                    while time.monotonic() < deadline:
                        pass
            except KeyboardInterrupt:
                pass
            # what pybind11 raises after swallowing the interrupt (or a real error)
            raise RuntimeError("Unable to convert call argument '0' to Python object")

    sys.exit(run_node(Node, ["interrupt_probe"]))   # its own argv[1] is no node option
""")


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NODE, mode], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=False)


def test_interrupt_inside_rclpy_ends_quietly() -> None:
    done = _run("sigint")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_same_error_without_an_interrupt_is_reported() -> None:
    done = _run("error")
    assert done.returncode != 0
    assert "Unable to convert call argument" in done.stderr


EXECUTOR_RACE = textwrap.dedent("""
    import os, signal, sys
    import rclpy.executors
    import rclpy.node
    from excavator_common.ros_runtime import run_node

    # the first SIGINT lands inside the executor's constructor, before it set _sigint_gc
    built = rclpy.executors.Executor.__init__
    def interrupted_init(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):   # bytecodes enough for the Python handler to run
            pass
        built(self, *args, **kwargs)
    rclpy.executors.Executor.__init__ = interrupted_init

    sys.exit(run_node(lambda: rclpy.node.Node("executor_race_probe")))
""")


def test_interrupt_while_the_executor_is_built_ends_quietly() -> None:
    """A Ctrl-C during the executor's construction (once in CI): rclpy shuts the context down,
    the constructor fails, and its half-built executor is collected without "Exception ignored
    in Executor.__del__"; exit code 0."""
    done = subprocess.run([sys.executable, "-c", EXECUTOR_RACE], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


START_UP_RACE = textwrap.dedent("""
    import os, signal, sys, threading
    import rclpy.node
    from excavator_common import parameter_files
    from excavator_common.ros_runtime import run_node

    WHERE = sys.argv[1]

    def interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(2_000_000):   # bytecodes enough for the Python handler to run
            pass

    if WHERE == "arguments":   # while the command line is checked, before rclpy.init
        checked = parameter_files.check_ros_arguments
        def check(argv):
            interrupt()
            checked(argv)
        import excavator_common.ros_runtime as rt
        rt.check_ros_arguments = check

    class Node(rclpy.node.Node):
        def __init__(self):
            if WHERE == "factory":   # rclpy's handler shuts the context down under it
                try:
                    interrupt()
                except KeyboardInterrupt:
                    pass   # swallowed by a library, as C++ bindings do
            if WHERE == "finalizer":   # in a weakref callback, as in an import's module lock
                import weakref

                class Thing:
                    pass
                thing = Thing()
                ref = weakref.ref(thing, lambda _: interrupt())
                del thing   # the callback runs now; Python cannot raise out of it
            super().__init__("start_up_race_probe")
            if WHERE in ("cleanup", "cleanup_no_interrupt"):
                self.create_timer(0.05, self.tick)

        def tick(self):
            if WHERE == "cleanup":
                interrupt()
            raise KeyboardInterrupt

    def cleanup(node):   # a thread object whose start() the Ctrl-C interrupted
        threading.Thread(target=lambda: None).join()

    sys.exit(run_node(Node, ["start_up_race_probe"], cleanup=cleanup))
""")


def _race(where: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", START_UP_RACE, where], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ),
                          check=False)


def test_a_ctrl_c_at_any_moment_of_start_up_ends_quietly_with_code_0() -> None:
    """Seen under ros2 launch with a Ctrl-C 1-4 s after start on a loaded host: a traceback
    from the parameter-file check, "[FATAL] start-up failed: ... context is not valid" from
    a node built while rclpy's handler shut the context down, "cannot join thread before
    it is started" from the bridge's cleanup, and "Exception ignored in ... KeyboardInterrupt"
    from a weakref callback of an import (sim_node, ci64). Each is an interrupted start: exit
    0, no traceback, no [FATAL]."""
    for where in ("arguments", "factory", "finalizer", "cleanup"):
        done = _race(where)
        assert done.returncode == 0, (where, done.stderr)
        assert "Traceback" not in done.stderr and "[FATAL]" not in done.stderr, (where,
                                                                                 done.stderr)
    assert "[WARN] cleanup after Ctrl-C: RuntimeError" in _race("cleanup").stderr


def test_a_failing_cleanup_without_a_ctrl_c_is_still_an_error() -> None:
    done = _race("cleanup_no_interrupt")
    assert done.returncode != 0
    assert "cannot join thread before it is started" in done.stderr


def test_a_task_half_built_by_a_ctrl_c_is_collected_without_a_message(monkeypatch) -> None:
    """A KeyboardInterrupt that lands while rclpy's executor builds a Task leaves it without the
    fields Future.__init__ sets; its __del__ printed "Exception ignored ... no attribute
    '_exception'" at exit (CI, ros2 launch's Ctrl-C). ros_runtime gives them class defaults."""
    import gc

    import rclpy.task

    import excavator_common.ros_runtime  # noqa: F401  (the defaults)

    raised: list[object] = []   # what Python would print as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    half = rclpy.task.Task.__new__(rclpy.task.Task)
    del half
    gc.collect()
    assert raised == []


ORDER = textwrap.dedent("""
    import os, signal, sys
    import rclpy.node
    from rclpy.signals import get_current_signal_handlers_options
    from excavator_common import ros_runtime

    shutdown = ros_runtime._Executor.shutdown

    def watched(self, *args, **kwargs):
        print("handlers at executor shutdown:", get_current_signal_handlers_options().name,
              flush=True)
        return shutdown(self, *args, **kwargs)

    ros_runtime._Executor.shutdown = watched

    class Node(rclpy.node.Node):
        def __init__(self):
            super().__init__("signal_thread_probe")
            self.create_timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT))

    sys.exit(ros_runtime.run_node(Node, ["signal_thread_probe"]))
""")


def test_rclpy_signal_thread_ends_before_the_executor_goes() -> None:
    """rclpy's signal thread triggers the executor's SIGINT guard condition; run late (a loaded
    host) after the executor destroyed it, it crashed the node with SIGSEGV at Ctrl-C (1 stop
    in ~100 under load, sim_node in CI). run_node uninstalls rclpy's handlers, which joins that
    thread first and then restores the other handlers: at the executor's shutdown rclpy's
    SIGTERM handler is gone (its SIGINT entry stays: run_node set SIGINT to ignored over it)."""
    done = subprocess.run([sys.executable, "-c", ORDER], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("handlers at")]
    assert said and said[0].split(": ")[1] in ("NO", "SIGINT"), (done.stdout, done.stderr)
