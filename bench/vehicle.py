"""Vehicle model throughput: the bridge's per-cycle scalar path and the vectorized batch path, next
to a naive per-wheel Python loop of the same equations measured in the same run.

- scalar: ``inverse`` + ``direct`` of one twist, as the bridge calls them every cycle (with input
  validation, saturation and infeasibility checks). Goal: <= 50 us per cycle, i.e. <= 0.5 % of
  a 100 Hz cycle and <= 2.5 % of the bridge's 2 ms latency budget.
- batch: ``inverse_many`` + ``direct_many`` over N twists (log replay, odometry, envelope
  sweeps). Reported, no goal: the transcendental functions (hypot, atan2, sin, cos) cost about
  the same in numpy as in ``math``, so vectorizing only removes the interpreter overhead.
- baseline: per twist, per wheel: contact velocity, hypot/atan2 (4WD4WS), flip, common scale,
  then the direct model; no validation - what a straightforward port of the equations does.

    .venv/bin/python bench/vehicle.py [--batch 200000] [--baseline 20000] [--scalar 20000]

Last stdout line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np

from excavator_kinematics.vehicle import BodyTwist, make_vehicle_model

PARAMS = {
    "skid_steer": {"track_width_m": 1.5, "slip_factor": 1.2, "max_wheel_speed_m_s": 2.0},
    "ackermann": {"wheelbase_m": 2.0, "front_track_m": 1.5, "rear_track_m": 1.5,
                  "max_steer_angle_rad": 0.7, "max_wheel_speed_m_s": 2.0},
    "4wd4ws": {"wheelbase_m": 2.0, "track_m": 1.5, "max_wheel_speed_m_s": 2.0},
}


def naive_skid(p: dict, vx: float, vy: float, wz: float) -> tuple[float, float, float]:
    b, vmax = p["track_width_m"] * p["slip_factor"], p["max_wheel_speed_m_s"]
    speeds = [vx - wz * b / 2, vx + wz * b / 2]
    worst = max(abs(v) for v in speeds)
    s = 1.0 if worst <= vmax else vmax / worst
    speeds = [v * s for v in speeds]
    return (speeds[0] + speeds[1]) / 2, 0.0, (speeds[1] - speeds[0]) / b


def naive_ackermann(p: dict, vx: float, vy: float, wz: float) -> tuple[float, float, float]:
    wb, bf, br = p["wheelbase_m"], p["front_track_m"], p["rear_track_m"]
    vmax, lim = p["max_wheel_speed_m_s"], p["max_steer_angle_rad"]
    if vx == 0.0:
        return 0.0, 0.0, 0.0
    sgn = -1.0 if vx < 0 else 1.0
    angles = [math.atan2(sgn * wb * wz, sgn * (vx - wz * bf / 2)),
              math.atan2(sgn * wb * wz, sgn * (vx + wz * bf / 2))]
    if max(abs(a) for a in angles) > lim:
        return 0.0, 0.0, 0.0
    speeds = [vx - wz * br / 2, vx + wz * br / 2]
    worst = max(abs(v) for v in speeds)
    s = 1.0 if worst <= vmax else vmax / worst
    speeds = [v * s for v in speeds]
    v_mean = (speeds[0] + speeds[1]) / 2
    kappa = 0.0
    for a, side in zip(angles, (1.0, -1.0), strict=True):
        kappa += math.sin(a) / (wb * math.cos(a) + side * bf / 2 * math.sin(a)) / 2
    return v_mean, 0.0, v_mean * kappa


def naive_4ws(p: dict, vx: float, vy: float, wz: float) -> tuple[float, float, float]:
    wb, b, vmax = p["wheelbase_m"], p["track_m"], p["max_wheel_speed_m_s"]
    wheels = [(wb / 2, b / 2), (wb / 2, -b / 2), (-wb / 2, b / 2), (-wb / 2, -b / 2)]
    speeds, angles = [], []
    for x, y in wheels:
        vix, viy = vx - wz * y, vy + wz * x
        v, a = math.hypot(vix, viy), math.atan2(viy, vix)
        if a > math.pi / 2:
            a, v = a - math.pi, -v
        elif a < -math.pi / 2:
            a, v = a + math.pi, -v
        speeds.append(v)
        angles.append(a)
    worst = max(abs(v) for v in speeds)
    s = 1.0 if worst <= vmax else vmax / worst
    sx = sy = m = 0.0
    for (x, y), v, a in zip(wheels, speeds, angles, strict=True):
        vix, viy = s * v * math.cos(a), s * v * math.sin(a)
        sx, sy, m = sx + vix, sy + viy, m + x * viy - y * vix
    return sx / 4, sy / 4, m / sum(x * x + y * y for x, y in wheels)


NAIVE: dict[str, Callable[[dict, float, float, float], tuple[float, float, float]]] = {
    "skid_steer": naive_skid, "ackermann": naive_ackermann, "4wd4ws": naive_4ws}


def twists(name: str, n: int, seed: int = 0) -> np.ndarray:
    """(n, 3) commands: mostly inside the envelope, some saturating; no lateral on skid-steer
    and Ackermann (it would only be dropped)."""
    rng = np.random.default_rng(seed)
    t = np.column_stack([rng.uniform(-2.5, 2.5, n), rng.uniform(-1.0, 1.0, n),
                         rng.uniform(-1.0, 1.0, n)])
    if name != "4wd4ws":
        t[:, 1] = 0.0
    return t


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200_000, help="twists per batch")
    parser.add_argument("--baseline", type=int, default=20_000, help="twists in the naive loop")
    parser.add_argument("--scalar", type=int, default=20_000, help="scalar cycles timed")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (best kept)")
    args = parser.parse_args()

    figures: dict[str, object] = {"bench": "vehicle", "batch_twists": args.batch}
    goals_met = True
    for name, params in PARAMS.items():
        model = make_vehicle_model(name, params)
        t = twists(name, max(args.batch, args.baseline, args.scalar))
        naive = NAIVE[name]

        # Scalar path: one inverse + one direct per cycle, as in the bridge.
        rows = [BodyTwist(*map(float, r)) for r in t[:args.scalar]]

        def scalar_run(rows: list[BodyTwist] = rows, model=model) -> None:
            for tw in rows:
                cmd = model.inverse(tw)
                model.direct(cmd.speeds, cmd.angles)

        scalar_us = best_of(args.repeats, scalar_run) / args.scalar * 1e6
        plain = [tuple(map(float, r)) for r in t[:args.baseline]]

        def naive_run(plain: list = plain, naive=naive, params=params) -> None:
            for vx, vy, wz in plain:
                naive(params, vx, vy, wz)

        naive_us = best_of(args.repeats, naive_run) / args.baseline * 1e6

        vx, vy, wz = t[:args.batch, 0], t[:args.batch, 1], t[:args.batch, 2]

        def batch_run(model=model, vx=vx, vy=vy, wz=wz) -> np.ndarray:
            cmds = model.inverse_many(vx, vy, wz)
            return model.direct_many(cmds.speeds, cmds.angles)

        batch_s = best_of(args.repeats, batch_run)
        back = batch_run()
        # The three paths agree (checked on the baseline's twists).
        ref = np.array([naive(params, *r) for r in plain])
        max_diff = float(np.max(np.abs(back[:args.baseline] - ref)))
        batch_rate, naive_rate = args.batch / batch_s, 1e6 / naive_us
        ok = scalar_us <= 50.0 and max_diff < 1e-9
        goals_met &= ok
        figures[name] = {
            "scalar_inverse_direct_us": round(scalar_us, 2),
            "naive_loop_us": round(naive_us, 2),
            "scalar_vs_naive_ratio": round(scalar_us / naive_us, 2),
            "scalar_fraction_of_100hz_cycle": round(scalar_us / 1e4, 5),
            "batch_twists_per_s": round(batch_rate),
            "naive_twists_per_s": round(naive_rate),
            "batch_speedup_vs_naive": round(batch_rate / naive_rate, 1),
            "max_abs_diff_vs_naive": max_diff,
        }
        print(f"{name:10s} scalar inverse+direct {scalar_us:6.2f} us "
              f"(naive loop {naive_us:5.2f} us, {scalar_us / naive_us:.1f}x: validation, "
              f"notes, arrays) | batch {batch_rate:12,.0f} twists/s = "
              f"{batch_rate / naive_rate:6.1f}x naive | max diff {max_diff:.1e}")
    figures["goal_scalar_us"] = 50.0
    figures["goals_met"] = bool(goals_met)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
