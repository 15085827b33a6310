"""An rclpy node in a private context, spun by a daemon thread: for the programs that talk to
the stack from inside another program (the web dashboard, the benches, the tests' probes)
without owning rclpy's global context, so several can live in one process and each shuts down
alone. The class does the plumbing only; its users create their subscriptions and publishers on
``node`` (before :meth:`NodeThread.start`, or after: the executor picks them up).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

from excavator_common.dds_profile import use_project_profile
from excavator_common.dds_stuck import left_undestroyed, stuck_dds_threads


class NodeThread:
    """A node ``name`` in its own context; :meth:`start` spins it on a daemon thread.

    Args:
        name: the node's name.
        ros_args: ROS arguments for the context (``--ros-args`` is prepended), e.g.
            ``["-r", "__ns:=/machine1"]``; None for none.
    """

    def __init__(self, name: str, ros_args: Sequence[str] | None = None) -> None:
        import rclpy  # here, not at import: a module that only names the class needs no ROS

        self.context = rclpy.Context()
        use_project_profile()   # before the first participant: Fast DDS reads it then
        rclpy.init(args=["--ros-args", *ros_args] if ros_args else None, context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spin_s = 0.05
        self._closed: bool | None = None

    def start(self, *, events: bool = False, spin_timeout_s: float = 0.05,
              thread_name: str | None = None) -> None:
        """Spin the node on a daemon thread.

        Args:
            events: use rclpy's EventsExecutor (its C++ event queue: about a third of the CPU
                of the SingleThreadedExecutor for a busy node) where this rclpy has one.
            spin_timeout_s: how long one spin waits for work [s] (the latency of ``close``).
            thread_name: the thread's name (shown by debuggers and ``py-spy``).
        """
        from rclpy.executors import SingleThreadedExecutor

        if events:
            try:
                from rclpy.experimental.events_executor import EventsExecutor

                self.executor = EventsExecutor(context=self.context)
            except ImportError:
                self.executor = SingleThreadedExecutor(context=self.context)
        else:
            self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spin_s = spin_timeout_s
        self._thread = threading.Thread(target=self._spin, daemon=True, name=thread_name)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.exceptions import InvalidHandle

        while not self._stop.is_set() and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=self._spin_s)
            except InvalidHandle:
                # A subscription destroyed by another thread (a probe's, the dashboard's on a
                # machine switch) while this spin built its wait set: rclpy's executor raises
                # from the subscription's QoS event handler. The next spin builds the set anew;
                # ending the thread here left the node deaf (a fresh-clone CI run: every later
                # wait of that test module timed out).
                if self._stop.is_set():
                    break
            except Exception:
                if self._stop.is_set():   # the context went down under a spin: closing
                    break
                raise

    def close(self) -> bool:
        """Stop the thread (2 s at most), then the executor, the node and the context.

        Returns False where the node was left as it is: this process's Fast DDS is stuck in
        its discovery deadlock (excavator_common.dds_stuck), where destroying the node
        would block the whole process for good. A left node stays referenced (never collected:
        that would destroy it too) and is told by :func:`abandoned`; a process with one must
        end by ``os._exit`` (excavator_common.process_exit), as Fast DDS's own exit destroys
        its participants. Closing twice does nothing the second time."""
        if self._closed is not None:
            return self._closed
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self.executor is not None:
            self.executor.shutdown()
        stuck = stuck_dds_threads()
        if stuck:
            _ABANDONED.append(self)
            print(left_undestroyed(self.node.get_name(), stuck), file=sys.stderr, flush=True)
            self._closed = False
            return False
        self.node.destroy_node()
        self.context.try_shutdown()
        self._closed = True
        return True


_ABANDONED: list[NodeThread] = []


def abandoned() -> int:
    """How many NodeThreads this process left undestroyed (see :meth:`NodeThread.close`)."""
    return len(_ABANDONED)
