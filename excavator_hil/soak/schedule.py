"""The soak's fault schedule: which fault, on which process, when and for how long, from a seed.

Pure: no processes, no clocks. The same seed, duration and process names give the same
schedule on any host, so a failed soak is replayed with ``--seed``. Every fault kind comes at
least once, as early as possible (the first faults are a seeded permutation of the kinds), the
rest are drawn at random; the faults are spread evenly over the run with a seeded jitter. A time
in the schedule is the earliest the fault is injected: the soak injects one fault at a time and
waits for the stack to recover from the previous one first. A SIGKILL or SIGSTOP goes round
the processes in a seeded order (each is hit once before any is hit twice), as does a frozen
DDS peer; after the first round of kinds, the kill and the stop come twice per round.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# The kinds of fault, in the order the report lists them.
SIGKILL = "sigkill"                  # SIGKILL of one process; the soak's supervisor restarts it
SIGSTOP = "sigstop"                  # SIGSTOP of one process for hold_s, then SIGCONT
REDIS_RESTART = "redis_restart"      # redis-server stopped for hold_s, started again (empty)
PLC_LINK_CUT = "plc_link_cut"        # the bridge <-> PLC link cut for hold_s (a stalling hop)
PLC_PAUSED = "plc_paused"            # the PLC halted for hold_s: no scan, no answer
DDS_PEER_FROZEN = "dds_peer_frozen"  # one ROS node frozen (SIGSTOP) for hold_s: its DDS peers
DASHBOARD_CLIENT = "dashboard_client"  # a browser opens the dashboard, stays hold_s, vanishes
KINDS: tuple[str, ...] = (SIGKILL, SIGSTOP, REDIS_RESTART, PLC_LINK_CUT, PLC_PAUSED,
                          DDS_PEER_FROZEN, DASHBOARD_CLIENT)

# How long each kind holds [s]: (shortest, longest), drawn uniformly. A kill holds nothing: the
# supervisor's respawn delay is the outage.
HOLD_RANGE_S: dict[str, tuple[float, float]] = {
    SIGKILL: (0.0, 0.0),
    SIGSTOP: (1.0, 5.0),
    REDIS_RESTART: (0.5, 3.0),
    PLC_LINK_CUT: (1.0, 5.0),
    PLC_PAUSED: (1.0, 4.0),
    DDS_PEER_FROZEN: (2.0, 8.0),
    DASHBOARD_CLIENT: (1.0, 5.0),
}
FIRST_FAULT_S = 5.0   # the stack runs undisturbed this long first [s]


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``at_s`` after the soak's start at the earliest [s]."""

    index: int
    at_s: float
    kind: str
    target: str       # the process (kill, stop, freeze) or what the kind names (redis, ...)
    hold_s: float     # how long the fault holds [s] (0 for a kill)

    def describe(self) -> str:
        hold = f" for {self.hold_s:.1f} s" if self.hold_s > 0 else ""
        return f"#{self.index} {self.kind} {self.target}{hold}"


def make_schedule(seed: int, duration_s: float, processes: Sequence[str],
                  dds_nodes: Sequence[str], mean_gap_s: float = 30.0,
                  kinds: Sequence[str] = KINDS, quiet_head_s: float = FIRST_FAULT_S,
                  quiet_tail_s: float = 0.0) -> list[Fault]:
    """The faults of a soak of ``duration_s`` [s]: one every ``mean_gap_s`` [s] on average
    (at least one per kind of ``kinds``), SIGKILL and SIGSTOP on any of ``processes``, a frozen
    DDS peer on any of ``dds_nodes``. The first ``quiet_head_s`` (at least FIRST_FAULT_S) and
    the last ``quiet_tail_s`` [s] stay free of faults (the footprints at the start and at the
    end are judged there), and a third of a gap before the tail."""
    head = max(FIRST_FAULT_S, quiet_head_s)
    if not duration_s - quiet_tail_s > head:
        raise ValueError(f"a soak of {duration_s:g} s is too short: faults start after "
                         f"{head:g} s and end {quiet_tail_s:g} s before its end")
    if not mean_gap_s > 0:
        raise ValueError(f"mean_gap_s = {mean_gap_s:g} must be > 0")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"fault kinds {unknown or '(none)'} not among {', '.join(KINDS)}")
    for what, names in (("processes", processes), ("dds_nodes", dds_nodes)):
        if not names:
            raise ValueError(f"{what} is empty: name the processes the faults may hit")
    missing = sorted(set(dds_nodes) - set(processes))
    if missing:
        raise ValueError(f"dds_nodes {missing} are not among the processes {list(processes)}")
    rng = random.Random(seed)
    n = max(len(kinds), int(duration_s // mean_gap_s))
    # rounds: the kinds once each (the first round) and from then on the kill and the stop
    # twice (they have a process each to go round), each round in a seeded order
    order: list[str] = []
    extra = [k for k in (SIGKILL, SIGSTOP) if k in kinds]
    while len(order) < n:
        chunk = list(kinds) + (extra if order else [])
        rng.shuffle(chunk)
        order += chunk
    order = order[:n]
    # targets go round a seeded order of the processes, so a long soak hits each of them
    rounds: dict[str, list[str]] = {}

    def next_target(kind: str, names: Sequence[str]) -> str:
        if not rounds.get(kind):
            rounds[kind] = list(names)
            rng.shuffle(rounds[kind])
        return rounds[kind].pop()

    gap = (duration_s - quiet_tail_s - head) / (n + 1.0 / 3.0)
    faults = []
    for i, kind in enumerate(order):
        at = head + gap * (i + rng.uniform(0.0, 0.3))
        lo, hi = HOLD_RANGE_S[kind]
        hold = round(rng.uniform(lo, hi), 1)
        if kind in (SIGKILL, SIGSTOP):
            target = next_target(kind, processes)
        elif kind == DDS_PEER_FROZEN:
            target = next_target(kind, dds_nodes)
        else:
            target = {REDIS_RESTART: "redis-server", PLC_LINK_CUT: "plc link",
                      PLC_PAUSED: "virtual_plc", DASHBOARD_CLIENT: "dashboard"}[kind]
        faults.append(Fault(i, round(at, 2), kind, target, hold))
    return faults
