"""The soak's invariants, checked over what was recorded (pure: lists in, findings out).

- :func:`stale_drive_commands`: every drive write the PLC took carries a command Redis held at
  most ``stale_command_s`` before (the PLC's watchdog time): nothing written before a fault
  (superseded, or lost with Redis) acts after it;
- :func:`drive_at_rest`: while a fault cuts the bridge's commands off a running PLC, the
  PLC's measured track speeds come to rest within ``drive_stop_s`` and stay there;
- :func:`joint_command_order`: no joint command for an older target reaches the simulation
  after one for a newer target, none after a fault for a target superseded before it (and how
  late each was stamped after its target was superseded);
- :func:`recoveries`: after each fault the stack drives and digs again within its bounds,
  counted from the affected process's first sign of life;
- :func:`bag_gaps`: the bag lacks no run of messages longer than ``bag_gap_s`` that the observer
  received, outside the fault windows of the stream's sources;
- :func:`soil_mass`: the soil node's mass drift stays 0 units;
- :func:`resource_growth`: after warm-up, no process grows its PSS by more than
  ``memory_growth`` and no process's descriptor or thread floor rises.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from excavator_hil.soak.bounds import SoakBounds
from excavator_hil.soak.records import (
    DIG_PATH,
    DRIVE_PATH,
    STREAM_SOURCES,
    Command,
    FaultRecord,
    JointCommand,
    PlcSample,
    PlcWrite,
    ResourceSample,
    StreamSample,
    Target,
)
from excavator_hil.soak.schedule import SIGKILL

SPEED_MATCH_M_S = 5e-6   # a setpoint is a command's value (REAL rounding: ~3e-8 at 0.3 m/s)
JOINT_MATCH_RAD = 1e-7   # a joint command is a target's IK solution (same IK, same input)


@dataclass(frozen=True)
class Violation:
    check: str
    t: float
    detail: str


@dataclass
class Recovery:
    """How one fault ended: ``ready`` - ``lifted`` is the affected process's start-up (0 when
    nothing restarted), then driving and digging resumed ``drive_s`` and ``dig_s`` after
    ``ready`` (None: not seen)."""

    fault: FaultRecord
    startup_s: float | None
    drive_s: float | None
    dig_s: float | None

    @property
    def total_s(self) -> float | None:
        if self.startup_s is None or self.drive_s is None or self.dig_s is None:
            return None
        return self.startup_s + max(self.drive_s, self.dig_s)


# --- drive commands at the PLC ----------------------------------------------------------------

def _next_change(times: Sequence[float], values: Sequence[object]) -> list[float]:
    """For each entry, the time of the first later entry with another value (inf: none)."""
    out = [math.inf] * len(times)
    for i in range(len(times) - 2, -1, -1):
        out[i] = times[i + 1] if values[i + 1] != values[i] else out[i + 1]
    return out


def _superseded_at(commands: Sequence[Command], redis_losses: Sequence[float]) -> list[float]:
    """For each command (sorted by time), when Redis stopped holding it: the next command of
    another value, or a Redis restart (its keys gone), whichever came first (inf: never)."""
    out = _next_change([c.t for c in commands], [c.value_m_s for c in commands])
    losses = sorted(redis_losses)
    for i, c in enumerate(commands):
        j = bisect.bisect_right(losses, c.t)
        if j < len(losses):
            out[i] = min(out[i], losses[j])
    return out


def match_command(commands: Sequence[Command], times: Sequence[float], speeds: Sequence[float],
                  before_t: float) -> int | None:
    """Index of the latest command set before ``before_t`` whose value every speed setpoint
    carries (skid steer, straight: both tracks at the commanded speed); None if none."""
    j = bisect.bisect_right(times, before_t) - 1
    while j >= 0:
        v = commands[j].value_m_s
        if all(abs(s - v) <= SPEED_MATCH_M_S for s in speeds):
            return j
        j -= 1
    return None


def stale_drive_commands(commands: Sequence[Command], redis_losses: Sequence[float],
                         writes: Iterable[PlcWrite], bounds: SoakBounds) -> list[Violation]:
    """Every drive write the PLC took carries a command Redis still held, or held at most
    ``stale_command_s`` (+ the clock margin) before the PLC took it."""
    commands = sorted(commands, key=lambda c: c.t)
    times = [c.t for c in commands]
    gone = _superseded_at(commands, redis_losses)
    found = []
    for w in writes:
        if not w.drives:
            continue
        j = match_command(commands, times, w.speeds, w.t + bounds.clock_margin_s)
        if j is None:
            found.append(Violation("stale_drive", w.t, f"the PLC took speeds {w.speeds} m/s "
                                   f"(seq {w.seq}) that no command in Redis carried"))
            continue
        late = w.t - gone[j]
        if late > bounds.stale_command_s + bounds.clock_margin_s:
            found.append(Violation(
                "stale_drive", w.t,
                f"the PLC took command #{commands[j].k} ({commands[j].value_m_s:.4f} m/s, seq "
                f"{w.seq}) {late:.3f} s after Redis stopped holding it (limit: the PLC's "
                f"watchdog time {bounds.stale_command_s:g} s)"))
    return found


def drive_at_rest(faults: Iterable[FaultRecord], samples: Sequence[PlcSample],
                  bounds: SoakBounds) -> list[Violation]:
    """While a fault cuts the drive path off a running PLC, every monitor read answered before
    the fault was lifted and showing at least ``drive_stop_scans`` PLC scans after the first
    scan that surely followed the fault's start shows the tracks at rest (|speed| <=
    ``stopped_m_s``). Counted in the PLC's own scans (its alive counter), so that a PLC
    process starved of CPU on a loaded host is judged on the time it lived through."""
    found = []
    ordered = sorted(samples, key=lambda s: s.t0)
    for f in faults:
        if not f.cuts_drive_with_plc_readable():
            continue
        inside = [s for s in ordered if s.t0 >= f.started and s.t1 <= f.lifted]
        if not inside:
            continue
        # the scan after the one the first read inside saw ran after the fault's start
        first_after = (inside[0].alive + 1) & 0xFFFF
        moving = [s for s in inside
                  if (s.alive - first_after) & 0xFFFF >= bounds.drive_stop_scans
                  and (s.alive - first_after) & 0xFFFF < 0x8000
                  and max(abs(v) for v in s.speeds) > bounds.stopped_m_s]
        if moving:
            s = moving[0]
            found.append(Violation(
                "drive_at_rest", s.t0,
                f"{f.fault.describe()}: the PLC's tracks still moved at "
                f"{max(abs(v) for v in s.speeds):.3f} m/s "
                f"{(s.alive - first_after) & 0xFFFF} PLC scans into the fault ({len(moving)} "
                f"reads; at rest within {bounds.drive_stop_scans} scans = "
                f"{bounds.drive_stop_s:.2f} s expected)"))
    return found


# --- joint commands at the simulation ---------------------------------------------------------

def match_target(targets: Sequence[Target], times: Sequence[float], q: Sequence[float],
                 before_t: float) -> int | None:
    """Index of the latest target published before ``before_t`` whose IK solution ``q`` is."""
    j = bisect.bisect_right(times, before_t) - 1
    while j >= 0:
        if all(abs(a - b) <= JOINT_MATCH_RAD for a, b in zip(targets[j].q, q, strict=True)):
            return j
        j -= 1
    return None


def joint_command_order(targets: Sequence[Target], commands: Iterable[JointCommand],
                        faults: Sequence[FaultRecord], margin_s: float
                        ) -> tuple[list[Violation], float]:
    """On the way to the simulation (the joint commands in arrival order): none for an older
    target follows one for a newer target, and none stamped after a fault was lifted carries a
    target that had been superseded before the fault began (written before the fault, acting
    after it). Also returns the longest a joint command was stamped after its target had been
    superseded [s] (0 when none was). ``margin_s``: between two processes' stamps."""
    targets = sorted(targets, key=lambda x: x.t)
    times = [x.t for x in targets]
    superseded = _next_change(times, [x.q for x in targets])
    found: list[Violation] = []
    newest = -1
    worst = 0.0
    for c in sorted(commands, key=lambda x: x.t_recv):
        j = match_target(targets, times, c.q, c.t_stamp + margin_s)
        if j is None:
            continue    # a target published before the soak recorded (start-up) or not ours
        if math.isfinite(superseded[j]):
            worst = max(worst, c.t_stamp - superseded[j])
        if j < newest and targets[j].q != targets[newest].q:
            found.append(Violation(
                "joint_order", c.t_recv,
                f"a joint command for target #{targets[j].k} reached the simulation after one "
                f"for the newer target #{targets[newest].k}"))
        newest = max(newest, j)
        for f in faults:
            if c.t_stamp > f.lifted + margin_s and superseded[j] < f.started - margin_s:
                found.append(Violation(
                    "stale_joint", c.t_stamp,
                    f"{f.fault.describe()}: a joint command stamped "
                    f"{c.t_stamp - f.lifted:.3f} s after the fault carried target "
                    f"#{targets[j].k}, superseded {f.started - superseded[j]:.3f} s before it "
                    "began"))
                break
    return found, worst


# --- recovery ---------------------------------------------------------------------------------

def recoveries(faults: Sequence[FaultRecord], commands: Sequence[Command],
               writes: Sequence[PlcWrite], joint_commands: Sequence[JointCommand],
               wrenches: Sequence[StreamSample], joint_states: Sequence[StreamSample],
               bounds: SoakBounds, end: float) -> tuple[list[Recovery], list[Violation]]:
    """Per fault: the start-up of what restarted, then how long after it driving (a command
    written after the lift taken by the PLC) and digging (a joint command stamped, and a soil
    wrench answering a pose simulated, after it) resumed. Judged against ``startup_s``,
    ``drive_rearm_s`` and ``dig_rearm_s``; evidence counts until the next fault (or ``end``)."""
    commands = sorted(commands, key=lambda c: c.t)
    ctimes = [c.t for c in commands]
    drive_writes = sorted((w for w in writes if w.drives), key=lambda w: w.t)
    dw_t = [w.t for w in drive_writes]
    jc = sorted(joint_commands, key=lambda c: c.t_stamp)
    jc_t = [c.t_stamp for c in jc]
    wr = sorted(wrenches, key=lambda s: s.t_recv)
    wr_t = [s.t_recv for s in wr]
    js = sorted(joint_states, key=lambda s: s.t_recv)
    js_t = [s.t_recv for s in js]
    out: list[Recovery] = []
    found: list[Violation] = []
    ordered = sorted(faults, key=lambda f: f.started)
    for n, f in enumerate(ordered):
        horizon = ordered[n + 1].started if n + 1 < len(ordered) else end
        name = f.fault.describe()
        if f.ready is None:
            out.append(Recovery(f, None, None, None))
            found.append(Violation("recovery", f.lifted, f"{name}: {f.fault.target} showed no "
                                   "sign of life after the restart"))
            continue
        startup = f.ready - f.lifted if f.restarted else 0.0
        t0 = f.ready
        drive_s = None
        for w in drive_writes[bisect.bisect_left(dw_t, t0):]:
            if w.t > horizon:
                break
            j = match_command(commands, ctimes, w.speeds, w.t + bounds.clock_margin_s)
            if j is not None and commands[j].t >= f.lifted:
                drive_s = w.t - t0
                break
        i = bisect.bisect_left(jc_t, t0)
        jc_at = jc[i].t_stamp if i < len(jc) and jc[i].t_stamp <= horizon else None
        k = bisect.bisect_right(js_t, t0) - 1
        sim_at_ready = js[k].stamp_s if k >= 0 else -math.inf
        if f.restarted and f.fault.target == "sim_node":
            sim_at_ready = -math.inf   # a new simulation: its clock starts again
        wr_at = next((s.t_recv for s in wr[bisect.bisect_left(wr_t, t0):]
                      if s.t_recv <= horizon and s.stamp_s > sim_at_ready), None)
        dig_s = None if jc_at is None or wr_at is None else max(jc_at, wr_at) - t0
        out.append(Recovery(f, startup, drive_s, dig_s))
        if f.restarted and startup > bounds.startup_s:
            found.append(Violation("recovery", f.ready, f"{name}: {f.fault.target} took "
                                   f"{startup:.1f} s to start (limit {bounds.startup_s:g} s)"))
        for what, value, limit in (("driving", drive_s, bounds.drive_rearm_s),
                                   ("digging", dig_s, bounds.dig_rearm_s)):
            if value is None:
                found.append(Violation("recovery", t0, f"{name}: {what} did not resume before "
                                       f"{'the next fault' if horizon < end else 'the end'} "
                                       f"({horizon - t0:.1f} s after the stack was back)"))
            elif value > limit:
                found.append(Violation("recovery", t0 + value, f"{name}: {what} resumed "
                                       f"{value:.2f} s after the stack was back (limit "
                                       f"{limit:.2f} s)"))
    return out, found


# --- the bag ----------------------------------------------------------------------------------

def _runs(stamps: Sequence[float], restart_drop_s: float = 1.0) -> list[list[float]]:
    """Stamps split where the simulated time starts again (a restarted simulation)."""
    runs: list[list[float]] = []
    for s in stamps:
        if not runs or s < runs[-1][-1] - restart_drop_s:
            runs.append([])
        runs[-1].append(s)
    return runs


def _runs_of_samples(samples: Sequence[StreamSample]) -> list[list[StreamSample]]:
    runs: list[list[StreamSample]] = []
    for s in sorted(samples, key=lambda x: x.t_recv):
        if not runs or s.stamp_s < runs[-1][-1].stamp_s - 1.0:
            runs.append([])
        runs[-1].append(s)
    return runs


def _key(stamp_s: float) -> int:
    return round(stamp_s * 1e6)


@dataclass(frozen=True)
class BagLoss:
    """Messages the observer received that the bag lacks, per stream."""

    topic: str
    lost: int
    seen: int
    longest_s: float


def bag_gaps(bag_stamps: dict[str, list[float]], observed: dict[str, list[StreamSample]],
             faults: Sequence[FaultRecord], bounds: SoakBounds, start: float, end: float
             ) -> tuple[list[Violation], list[str], list[BagLoss]]:
    """The bag against what was published: the messages of each stream the observer received
    between ``start`` and ``end`` that the bag lacks (matched by stamp, within the same life
    of the simulation). A run of them longer than ``bag_gap_s`` [s simulated] is a gap; a gap
    outside the windows of the faults on the stream's sources (from the fault to the next one)
    is a violation. A silence of the stream itself (its source behind, e.g. soil_node skipping
    poses on a loaded host) is not the bag's: nobody received those messages. Returns the
    violations, a line per excused gap and the losses per stream."""
    found: list[Violation] = []
    excused: list[str] = []
    losses: list[BagLoss] = []
    ordered = sorted(faults, key=lambda f: f.started)
    for topic, stamps in bag_stamps.items():
        if not stamps:
            found.append(Violation("bag_gap", end, f"{topic}: nothing recorded"))
            continue
        sources = STREAM_SOURCES.get(topic, ())
        windows = []
        for n, f in enumerate(ordered):
            if f.hits(sources):
                until = ordered[n + 1].started if n + 1 < len(ordered) else end
                killed_recorder = f.fault.kind == SIGKILL and f.fault.target == "bag_record"
                windows.append((f, f.started - (bounds.bag_unwritten_s if killed_recorder
                                                 else 0.0), until))
        bag_runs = [{_key(x) for x in run} for run in _runs(stamps)]
        seen_runs = _runs_of_samples(observed.get(topic, []))
        union = set().union(*bag_runs)
        lost, seen, longest = 0, 0, 0.0
        for i, run in enumerate(seen_runs):
            present = bag_runs[i] if len(bag_runs) == len(seen_runs) else union
            missing: list[StreamSample] = []
            prev_present: StreamSample | None = None
            for sample in [*run, None]:
                if sample is not None and not start <= sample.t_recv <= end:
                    continue
                if sample is not None:
                    seen += 1
                if sample is not None and _key(sample.stamp_s) not in present:
                    missing.append(sample)
                    continue
                if missing:   # a run of lost messages ends here
                    lost += len(missing)
                    a = prev_present.stamp_s if prev_present else missing[0].stamp_s
                    b = sample.stamp_s if sample is not None else missing[-1].stamp_s
                    longest = max(longest, b - a)
                    if b - a > bounds.bag_gap_s:
                        w0, w1 = missing[0].t_recv, missing[-1].t_recv
                        overlaps = [(min(w1, f1) - max(w0, f0), f) for f, f0, f1 in windows
                                    if w0 <= f1 and f0 <= w1]
                        hit = max(overlaps, key=lambda x: x[0])[1] if overlaps else None
                        text = (f"{topic}: {len(missing)} messages the observer received are "
                                f"missing, {b - a:.2f} s of simulated time ({a:.2f}..{b:.2f} s)")
                        # a window excuses only what it covers: a recorder that stopped in
                        # one and never recorded again has a gap outside it too
                        outside = _longest_outside(missing, windows, a, b)
                        if hit is not None and outside > bounds.bag_gap_s:
                            found.append(Violation(
                                "bag_gap", w0, f"{text}: {outside:.2f} s of it outside the "
                                f"window of {hit.fault.describe()}"))
                        elif hit is None:
                            found.append(Violation("bag_gap", w0, text))
                        else:
                            early = hit.started - w0   # a killed recorder's unwritten part
                            excused.append(f"{text}: in the window of {hit.fault.describe()}"
                                           + (f" (from {early:.1f} s before it)"
                                              if early > 0.05 else ""))
                    missing = []
                prev_present = sample
        losses.append(BagLoss(topic, lost, seen, longest))
    return found, excused, losses


def _longest_outside(missing: Sequence[StreamSample],
                     windows: Sequence[tuple[FaultRecord, float, float]], a: float,
                     b: float) -> float:
    """The longest stretch [s simulated] of a run of ``missing`` messages (between the stamps
    ``a`` and ``b`` present around it) received outside every fault window."""
    inside = [any(f0 <= m.t_recv <= f1 for _, f0, f1 in windows) for m in missing]
    longest = 0.0
    i = 0
    while i < len(missing):
        if inside[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(missing) and not inside[j + 1]:
            j += 1
        lo = missing[i - 1].stamp_s if i > 0 else a
        hi = missing[j + 1].stamp_s if j + 1 < len(missing) else b
        longest = max(longest, hi - lo)
        i = j + 1
    return longest


# --- soil, resources --------------------------------------------------------------------------

def soil_mass(samples: Iterable[tuple[float, int]]) -> list[Violation]:
    """The soil node's reported mass drift is 0 units in every report."""
    return [Violation("soil_mass", t, f"soil_node reported a mass drift of {d} units")
            for t, d in samples if d != 0]


@dataclass(frozen=True)
class Footprint:
    """One process life's footprint after warm-up: median PSS and its anonymous part [KiB],
    descriptors and threads at the start and at the end of the judged span."""

    process: str
    life: int
    pss_start_kib: float
    pss_end_kib: float
    fds_start: int
    fds_end: int
    threads_start: int
    threads_end: int
    judged_s: float
    anon_start_kib: float = 0.0
    anon_end_kib: float = 0.0
    phase: int = 0

    @property
    def tag(self) -> str:
        return f"{self.process} (life {self.life}{_moved(self.phase)})"

    @property
    def growth(self) -> float:
        """Of the anonymous PSS (the heap): what a leak grows [fraction]."""
        return self.anon_end_kib / self.anon_start_kib - 1.0 if self.anon_start_kib else 0.0


def _moved(phase: int) -> str:
    return f", after its move {phase} to a new participant" if phase else ""


def resource_growth(samples: Sequence[ResourceSample], warmup_s: float, window_s: float,
                    bounds: SoakBounds, first_life_warmup_s: float | None = None
                    ) -> tuple[list[Violation], list[Footprint], list[str]]:
    """For each process life: once ``warmup_s`` after its first sample have passed
    (``first_life_warmup_s`` for the lives started with the stack, when they warmed up
    before the sampling began), the median anonymous PSS, descriptors and threads over the
    first ``window_s`` of what remains against the same over the last ``window_s``. Growth
    of the anonymous PSS (the heap: the rest, the libraries' shared pages, moves with the
    other processes on the host) beyond ``memory_growth`` (and ``memory_growth_min_kib``) is
    a violation, and so is any
    rise of the median descriptors or threads (the soak keeps its first and last windows free
    of faults: a transient one during a fault comes and goes, a leak stays). A life with less
    than two windows after warm-up is listed as not judged."""
    lives: dict[tuple[str, int, int], list[ResourceSample]] = {}
    for s in sorted(samples, key=lambda x: x.t):
        lives.setdefault((s.process, s.life, s.phase), []).append(s)
    found: list[Violation] = []
    prints: list[Footprint] = []
    skipped: list[str] = []
    for (process, life, phase), rows in sorted(lives.items()):
        t_warm = rows[0].t + (first_life_warmup_s if life == 0 and phase == 0
                              and first_life_warmup_s is not None else warmup_s)
        judged = [r for r in rows if r.t >= t_warm]
        if not judged or judged[-1].t - judged[0].t < 2.0 * window_s:
            skipped.append(f"{process} (life {life}{_moved(phase)}): "
                           f"{max(0.0, rows[-1].t - rows[0].t):.0f} s sampled, less than "
                           f"warm-up {t_warm - rows[0].t:g} s + 2 x {window_s:g} s")
            continue
        first = [r for r in judged if r.t <= judged[0].t + window_s]
        last = [r for r in judged if r.t >= judged[-1].t - window_s]
        fp = Footprint(process, life, statistics.median(r.pss_kib for r in first),
                       statistics.median(r.pss_kib for r in last),
                       math.floor(statistics.median(r.fds for r in first)),
                       math.ceil(statistics.median(r.fds for r in last)),
                       math.floor(statistics.median(r.threads for r in first)),
                       math.ceil(statistics.median(r.threads for r in last)),
                       judged[-1].t - judged[0].t,
                       statistics.median(r.anon_kib for r in first),
                       statistics.median(r.anon_kib for r in last), phase)
        prints.append(fp)
        tag = fp.tag
        if (fp.growth > bounds.memory_growth
                and fp.anon_end_kib - fp.anon_start_kib > bounds.memory_growth_min_kib):
            found.append(Violation("memory", judged[-1].t, f"{tag}: anonymous PSS grew "
                                   f"{100 * fp.growth:.1f} % after warm-up "
                                   f"({fp.anon_start_kib / 1024:.1f} -> "
                                   f"{fp.anon_end_kib / 1024:.1f} MiB in {fp.judged_s:.0f} s; "
                                   f"limit {100 * bounds.memory_growth:g} % and "
                                   f"{bounds.memory_growth_min_kib / 1024:g} MiB)"))
        if fp.fds_end > fp.fds_start:
            found.append(Violation("fd_leak", judged[-1].t, f"{tag}: {fp.fds_end} open "
                                   f"descriptors at the end, {fp.fds_start} after warm-up "
                                   "(medians)"))
        if fp.threads_end > fp.threads_start:
            found.append(Violation("thread_leak", judged[-1].t, f"{tag}: {fp.threads_end} "
                                   f"threads at the end, {fp.threads_start} after warm-up "
                                   "(medians)"))
    return found, prints, skipped


def path_of(process: str) -> str:
    return "drive" if process in DRIVE_PATH else "dig" if process in DIG_PATH else "other"
