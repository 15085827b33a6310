"""IK throughput: closed-form batched and scalar, next to a numeric baseline in the same run.

Baseline: scipy.optimize.least_squares on the forward kinematics (tip position + pitch residual,
bounded by the joint limits, started from mid-range), as a generic numeric IK would do.
Goal (issue 2): >= 1,000,000 targets/s batched on one core and >= 100x the numeric baseline.
Last stdout line: one JSON object with the figures.

    .venv/bin/python bench/ik.py [--batch 1000000] [--baseline 300]
"""

from __future__ import annotations

# One core: numpy's elementwise ufuncs (all the closed form uses) run single-threaded.
import argparse
import json
import time

import numpy as np
from scipy.optimize import least_squares

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics


def workspace_targets(ik: InverseKinematics, n: int, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reachable targets: FK of random joint angles inside the limits."""
    rng = np.random.default_rng(seed)
    lim = ik.linkage.joint_limits
    q = np.column_stack([rng.uniform(-3.0, 3.0, n)]
                        + [rng.uniform(*lim[k], n) for k in ("boom", "arm", "bucket")])
    return q, ik.fk.tip(q), ik.fk.bucket_pitch(q)


def numeric_ik(ik: InverseKinematics, target: np.ndarray, pitch: float) -> np.ndarray:
    lim = ik.linkage.joint_limits
    lo = np.array([-np.pi, lim["boom"][0], lim["arm"][0], lim["bucket"][0]])
    hi = np.array([np.pi, lim["boom"][1], lim["arm"][1], lim["bucket"][1]])

    def residual(q: np.ndarray) -> np.ndarray:
        return np.append(ik.fk.tip(q) - target, float(ik.fk.bucket_pitch(q)) - pitch)

    start = np.append(np.arctan2(target[1], target[0]), (lo[1:] + hi[1:]) / 2)
    return least_squares(residual, start, bounds=(lo, hi), xtol=1e-12, ftol=1e-12).x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1_000_000, help="targets per batch")
    parser.add_argument("--repeats", type=int, default=5, help="batched runs (best is kept)")
    parser.add_argument("--scalar", type=int, default=20_000, help="scalar solves timed")
    parser.add_argument("--baseline", type=int, default=300, help="numeric solves timed")
    args = parser.parse_args()

    ik = InverseKinematics(default_geometry())
    q, tips, pitch = workspace_targets(ik, args.batch)

    best = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        batch = ik.solve_batch(tips, pitch)
        best = min(best, time.perf_counter() - t0)
    ok = batch.ok
    batch_rate = args.batch / best
    batch_err = float(np.nanmax(np.abs(batch.q[ok] - q[ok])))

    n = min(args.scalar, args.batch)
    t0 = time.perf_counter()
    for i in range(n):
        ik.solve(tips[i], float(pitch[i]))
    scalar_us = (time.perf_counter() - t0) / n * 1e6

    m = args.baseline
    errors = []
    t0 = time.perf_counter()
    for i in range(m):
        sol = numeric_ik(ik, tips[i], float(pitch[i]))
        errors.append(float(np.linalg.norm(ik.fk.tip(sol) - tips[i])))
    baseline_us = (time.perf_counter() - t0) / m * 1e6
    baseline_rate = 1e6 / baseline_us

    figures = {
        "bench": "ik",
        "batch_targets": args.batch,
        "batch_targets_per_s": round(batch_rate),
        "batch_solved_fraction": float(ok.mean()),
        "batch_max_joint_error_rad": batch_err,
        "scalar_latency_us": round(scalar_us, 2),
        "baseline_least_squares_latency_us": round(baseline_us, 1),
        "baseline_median_tip_error_m": float(np.median(errors)),
        "batch_speedup_vs_baseline": round(batch_rate / baseline_rate),
        "scalar_speedup_vs_baseline": round(baseline_us / scalar_us, 1),
        "goal_batch_targets_per_s": 1_000_000,
        "goal_speedup": 100,
        "goals_met": bool(batch_rate >= 1e6 and batch_rate / baseline_rate >= 100),
    }
    print(f"batched : {batch_rate:,.0f} targets/s ({args.batch:,} targets, best of "
          f"{args.repeats}), max joint error {batch_err:.1e} rad")
    print(f"scalar  : {scalar_us:.1f} us per solve")
    print(f"baseline: {baseline_us:.0f} us per solve (scipy least_squares on the FK), median tip "
          f"error {np.median(errors):.1e} m")
    print(f"speed-up: batched {batch_rate / baseline_rate:,.0f}x, scalar "
          f"{baseline_us / scalar_us:.1f}x the baseline")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
