"""bench/transport_floor.py, the floor under the plant link's CPU: it runs, paces, and refuses
bad arguments (its figures are a bench's, judged in docs/benchmarks.md, never here)."""

from __future__ import annotations

import subprocess
import sys

from helpers import EVENT_WAIT_S, REPO

sys.path.insert(0, str(REPO / "bench"))
import transport_floor


def test_the_floor_paces_its_exchanges_and_counts_its_cpu() -> None:
    r = transport_floor.measure(0.5, hz=100.0)
    # paced at 100 Hz for 0.5 s: at most 51 exchanges, however fast the host (a starved one
    # makes fewer); each costs some CPU
    assert 1 <= r["exchanges"] <= 51, r
    assert r["cpu_us_per_exchange"] > 0.0, r


def test_out_of_range_arguments_are_refused_naming_the_range() -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "transport_floor.py"),
                          "--hz", "0"], capture_output=True, text=True, timeout=EVENT_WAIT_S,
                         check=False)
    assert out.returncode == 2 and "--hz 0 is outside 1..1000" in out.stderr, out.stderr
