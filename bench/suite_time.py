"""Benchmark: where the test suite's time and CPU go (the goal: CI under 20 minutes).

Two parts in one file:

- a pytest plugin (``-p suite_time``, with ``bench/`` on ``PYTHONPATH``) that writes, per test,
  its wall time, the CPU of the pytest worker itself and that of the child processes it waited
  for (``RUSAGE_CHILDREN``: the nodes, launches and demos a test started and stopped) to
  ``$SUITE_TIME_OUT/<worker>.jsonl``;
- a report over such a folder: the totals, the files by CPU, the tests by wall time, and one
  JSON line. The baseline is the same run's sum of the tests' wall time over the workers: the
  ``ratio`` is the run's wall time over it (1 / the workers kept busy; the CPU column says how
  much of that is the host's cores).

Usage::

    SUITE_TIME_OUT=/tmp/suite PYTHONPATH=bench PYTEST_ARGS="-p suite_time" make test
    .venv/bin/python bench/suite_time.py /tmp/suite --wall-s 1607 --ci-s 1772

A test's CPU is the host's work whatever its load; its wall time is not (a loaded host
stretches every real-time test), so compare runs on their CPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _cpu_s() -> tuple[float, float]:
    """(this process's CPU [s], its waited-for children's CPU [s])."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    out = os.environ.get("SUITE_TIME_OUT")
    t0, (own0, children0) = time.monotonic(), _cpu_s()
    yield
    if not out:
        return
    t1, (own1, children1) = time.monotonic(), _cpu_s()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(out).mkdir(parents=True, exist_ok=True)
    with open(Path(out) / f"{worker}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": item.nodeid, "wall_s": t1 - t0, "own_cpu_s": own1 - own0,
                            "children_cpu_s": children1 - children0}) + "\n")


CI_GOAL_S = 1200.0   # CI (its install and the suite) under 20 minutes


def report(folder: Path, wall_s: float | None, ci_s: float | None, top: int) -> dict[str, Any]:
    rows = [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"no test records in {folder}: run the suite with -p suite_time and "
                         "SUITE_TIME_OUT set to it")
    per_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        f = per_file[r["id"].split("::", 1)[0]]
        f[0] += r["wall_s"]
        f[1] += r["own_cpu_s"]
        f[2] += r["children_cpu_s"]
    test_wall = sum(r["wall_s"] for r in rows)
    own = sum(r["own_cpu_s"] for r in rows)
    children = sum(r["children_cpu_s"] for r in rows)
    print(f"{len(rows)} tests: {test_wall:.0f} s of test wall time over the workers, CPU "
          f"{own + children:.0f} s (pytest workers {own:.0f} s, processes they started "
          f"{children:.0f} s)")
    print(f"\nfiles by CPU (top {top}): wall s, workers' CPU s, children's CPU s")
    by_cpu = sorted(per_file.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    for name, (w, o, c) in by_cpu[:top]:
        print(f"{w:8.0f} {o:8.0f} {c:8.0f}  {name}")
    print(f"\ntests by wall time (top {top}): wall s, CPU s")
    for r in sorted(rows, key=lambda r: -r["wall_s"])[:top]:
        print(f"{r['wall_s']:8.1f} {r['own_cpu_s'] + r['children_cpu_s']:8.1f}  {r['id']}")
    figures: dict[str, Any] = {
        "tests": len(rows), "test_wall_s": round(test_wall), "cpu_s": round(own + children),
        "workers_cpu_s": round(own), "children_cpu_s": round(children),
        "top_files_by_cpu": [[n, round(o + c)] for n, (_, o, c) in by_cpu[:5]]}
    if wall_s:
        figures.update(wall_s=wall_s, ratio=round(wall_s / test_wall, 3),
                       cores_busy=round((own + children) / wall_s, 2))
    if ci_s:
        figures.update(ci_s=ci_s, goal_ci_s=CI_GOAL_S, met=ci_s <= CI_GOAL_S)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the SUITE_TIME_OUT folder of a run")
    p.add_argument("--wall-s", type=float, default=None,
                   help="the run's pytest wall time [s] (its last line), for the ratio")
    p.add_argument("--ci-s", type=float, default=None,
                   help="the whole CI run's time [s] (install and suite), for the goal")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    print(json.dumps(report(args.folder, args.wall_s, args.ci_s, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
