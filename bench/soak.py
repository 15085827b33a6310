"""Chaos soak of the whole rig: the demo's stack digging and driving in a loop for ``--minutes``
while faults from a seeded schedule hit it; an observer of its own checks that nothing stale
acts, that every fault is recovered from within the stack's own timeouts, that the bag and the
soil stay whole and that no process leaks. Stops by itself; the last stdout line is one JSON
object (``violations``: zero is the goal).

Faults (one at a time, each after the stack recovered from the previous one): SIGKILL of any
one process (restarted by the soak's supervisor after ``--respawn-delay``), SIGSTOP/SIGCONT of
any one, redis-server restarted, the bridge <-> PLC link cut through a store-and-forward proxy,
the PLC paused, a ROS node frozen, a dashboard client opening the page and vanishing.
docs/benchmarks.md, "Chaos soak", says what each check compares with which bound.

    .venv/bin/python bench/soak.py [--minutes 20] [--seed N] [--output output/soak]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from excavator_hil.soak.runner import SoakOptions, run_soak

    ap = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0,
                    help="duration of the fault phase [min] (default 20; start-up and the "
                         "checks come on top)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the fault schedule (default: a random one, printed)")
    ap.add_argument("--output", type=Path, default=Path("output/soak"),
                    help="folder for the logs, the bags, the records and the report")
    ap.add_argument("--respawn-delay", type=float, default=SoakOptions.respawn_delay_s,
                    metavar="S", help="the supervisor restarts an ended process after this "
                    f"[s] (default {SoakOptions.respawn_delay_s:g})")
    ap.add_argument("--mean-gap", type=float, default=SoakOptions.mean_gap_s, metavar="S",
                    help="mean time between faults [s] (default "
                         f"{SoakOptions.mean_gap_s:g}; every kind comes at least once)")
    ap.add_argument("--time-scale", type=float, default=1.0, metavar="F",
                    help="stretches every leg of the dig cycle, as the demo's (default 1; "
                         "0.6 is the quick demo's: a cycle of 15 s instead of 25 s)")
    args = ap.parse_args(argv)
    if not 0.5 <= args.minutes <= 24 * 60:
        ap.error(f"--minutes {args.minutes:g} is outside 0.5..1440: the seven kinds of fault "
                 "need at least half a minute")
    if not 0.0 <= args.respawn_delay <= 60.0:
        ap.error(f"--respawn-delay {args.respawn_delay:g} s is outside 0..60 s")
    if not 5.0 <= args.mean_gap <= 3600.0:
        ap.error(f"--mean-gap {args.mean_gap:g} s is outside 5..3600 s: a fault needs time "
                 "to be recovered from")
    if not 0.3 <= args.time_scale <= 5.0:
        ap.error(f"--time-scale {args.time_scale:g} is outside 0.3..5: faster, the legs "
                 "exceed the cylinders' speeds; slower, a cycle outlasts a fault's window")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    options = SoakOptions(output_dir=args.output, minutes=args.minutes, seed=seed,
                          respawn_delay_s=args.respawn_delay, mean_gap_s=args.mean_gap)
    options.demo.time_scale = args.time_scale
    report = run_soak(options, log=lambda line: print(line, flush=True))
    print(report.text, flush=True)
    print(json.dumps(report.summary, default=str), flush=True)
    return 0   # as every bench: the figures (and the violations) are in the JSON line


if __name__ == "__main__":
    raise SystemExit(main())
