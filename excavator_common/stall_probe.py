"""Stall probe: where a process of the real-time stack loses its time (issue 12 diagnosis).

Opt-in, for diagnosis only: with the environment variable ``EXCAVATOR_HIL_PROBE`` set to a
directory, every process of the stack that calls :func:`start_from_environment` (each node
through ``run_node``, the virtual PLC, the demo's operator, the bag recorder) records

- every garbage collection (``gc.callbacks``): its monotonic start, duration and generation;
- the stalls of an empty probe thread that sleeps to absolute deadlines every ``period_s``
  (2 ms) and notes each wake-up later than ``stall_s`` (3 ms): the time a Python thread of this
  process waits for the CPU *or for the GIL* (a probe stall with no collection and no machine
  stall beside it is another thread of the process holding the GIL);
- events the process notes itself (:func:`note`), e.g. the bridge's overruns and the native id
  of its loop thread;
- per thread (``/proc/self/task/*``, sampled every second and at exit, so threads that ended
  are kept): its name, CPU time and time spent runnable but waiting for a CPU
  (``schedstat``), so "starved by the scheduler" and "busy" tell apart;

and writes them to ``<dir>/<name>-<pid>.json``. Times are ``time.monotonic()`` (CLOCK_MONOTONIC),
the clock ``perf sched record -k CLOCK_MONOTONIC`` stamps with, so a trace of the whole machine
lines up with them. Without the variable nothing is started and :func:`note` does nothing.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from excavator_common import realtime

ENV = "EXCAVATOR_HIL_PROBE"

_active: StallProbe | None = None


class StallProbe:
    """Records collections, probe-thread stalls and noted events of this process."""

    def __init__(self, name: str, period_s: float = 0.002, stall_s: float = 0.003) -> None:
        self.name = name
        self.period_s = period_s
        self.stall_s = stall_s
        self.gcs: list[tuple[float, float, int]] = []   # (start [s], duration [s], generation)
        self.full_gc_callers: list[tuple[float, str]] = []   # where each full collection began
        self.stalls: list[tuple[float, float]] = []      # (deadline [s], late by [s])
        self.events: list[dict[str, Any]] = []
        self.wakeups = 0
        self._threads: dict[int, dict[str, Any]] = {}   # tid -> last thread_times() entry
        self._gc_start = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall_probe", daemon=True)

    def start(self) -> StallProbe:
        gc.callbacks.append(self._on_gc)
        self._thread.start()
        return self

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
            if info.get("generation") == 2:   # rare: where it came from is worth a stack walk
                frames = traceback.extract_stack(limit=6)[:-1]
                self.full_gc_callers.append((self._gc_start, " <- ".join(
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))))
        else:
            self.gcs.append((self._gc_start, time.monotonic() - self._gc_start,
                             int(info.get("generation", -1))))

    def _run(self) -> None:
        realtime.name_thread("stall_probe")
        note("thread", thread="stall_probe", tid=threading.get_native_id())
        due = time.monotonic() + self.period_s
        next_sample = due
        while not self._stop.is_set():
            if due >= next_sample:   # threads that end before exit keep their last figures
                self._sample_threads()
                next_sample = due + 1.0
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            late = time.monotonic() - due
            self.wakeups += 1
            if late > self.stall_s:
                self.stalls.append((due, late))
            due += self.period_s
            if late > self.period_s:   # skip the missed deadlines: one stall, one record
                due += self.period_s * int(late // self.period_s)

    def _sample_threads(self) -> None:
        for t in thread_times():
            self._threads[t["tid"]] = t

    def note(self, kind: str, **fields: Any) -> None:
        self.events.append({"kind": kind, "t": time.monotonic(), **fields})

    def report(self) -> dict[str, Any]:
        by_gen: dict[int, list[float]] = {}
        for _, d, g in self.gcs:
            by_gen.setdefault(g, []).append(d)
        return {
            "name": self.name, "pid": os.getpid(), "period_s": self.period_s,
            "stall_s": self.stall_s, "wakeups": self.wakeups,
            "gc_summary": {str(g): {"count": len(ds), "total_ms": 1e3 * sum(ds),
                                    "max_ms": 1e3 * max(ds)} for g, ds in by_gen.items()},
            "full_gc_callers": self.full_gc_callers,
            "gc_over_1ms": [(t, 1e3 * d, g) for t, d, g in self.gcs if d > 0.001],
            "stalls": [(t, 1e3 * late) for t, late in self.stalls],
            "events": self.events,
            "threads": list(self._threads.values()),
            "gc_threshold": gc.get_threshold(), "gc_frozen": gc.get_freeze_count(),
            "switch_interval_s": _switch_interval(),
            "nice": os.nice(0), "affinity": sorted(os.sched_getaffinity(0)),
        }

    def write(self, directory: Path) -> Path:
        self._stop.set()
        self._sample_threads()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}-{os.getpid()}.json"
        path.write_text(json.dumps(self.report()))
        return path


def _switch_interval() -> float:
    import sys

    return sys.getswitchinterval()


def thread_times() -> list[dict[str, Any]]:
    """Each thread of this process: native id, name, CPU time and run-queue wait [ms]."""
    out = []
    for task in sorted(Path("/proc/self/task").glob("*")):
        try:
            comm = (task / "comm").read_text().strip()
            run_ns, wait_ns, slices = (int(v) for v in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out.append({"tid": int(task.name), "comm": comm, "cpu_ms": run_ns / 1e6,
                    "runqueue_wait_ms": wait_ns / 1e6, "timeslices": slices})
    return out


def start_from_environment(name: str) -> StallProbe | None:
    """Start the probe of this process when ``EXCAVATOR_HIL_PROBE`` names a directory; the
    report is written at exit. Returns the probe (None when not enabled)."""
    global _active
    directory = os.environ.get(ENV)
    if not directory or _active is not None:
        return _active
    _active = StallProbe(name).start()
    probe = _active
    atexit.register(lambda: probe.write(Path(directory)))
    return probe


def write_now() -> None:
    """Write the report at once (a process that ends by ``os._exit`` skips atexit)."""
    directory = os.environ.get(ENV)
    if _active is not None and directory:
        _active.write(Path(directory))


def note(kind: str, **fields: Any) -> None:
    """Record an event (nothing when the probe is off)."""
    if _active is not None:
        _active.note(kind, **fields)
