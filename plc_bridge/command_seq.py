"""The control DB's command sequence number ``seq`` and the PLC's refusals: pure, clock passed in.

The rule (the PLC side: docs/plc_setup.md section 4, ``plant.CommandGuard``, the generated
``PlcBridge_Guard``): the PLC takes a drive command only when its ``seq`` is newer than the last
one it accepted, in serial-number order on 32 bits (RFC 1982: ahead by 1 .. 2^31 - 1 modulo
2^32); an older or repeated write is refused, a stop is obeyed but an old one neither moves the
PLC's last accepted ``seq`` nor clears a latch. The PLC reports that last accepted value in the
monitor DB (``seq_accepted``, 0 = none since the PLC started), and beside its count of refused
writes (``refused``) the cause of the last refusal (``refused_reason``, ``REFUSAL_REASONS``).

How the bridge numbers its writes (``CommandSequence``), with no wall clock anywhere:

- every connect to the PLC starts a *session* whose first ``seq`` is newer than the PLC's
  ``seq_accepted`` by ``SEQ_MARGIN`` (so the writes of an earlier bridge process still in
  flight, which lie at most a few cycles beyond what the PLC accepted, are older) and newer than
  every ``seq`` this process sent before (its own writes in flight are older): a bridge
  restarted with its host's clock stepped back drives at once;
- within a session ``seq`` advances by the milliseconds of the bridge's monotonic clock, at
  least 1 per write, so of two bridges on one PLC the one that connected last stays ahead;
- 0 is never sent (it is the PLC's "none").

How the bridge reads the PLC's verdicts (``RefusalWatch``), from each monitor-DB read:

- the ``refused`` count went up, or the PLC accepted a ``seq`` newer than any this bridge sent
  (another writer on the control DB): the PLC is refusing; the bridge stops, reports
  ``stopped:plc_refused`` and the cause, until the PLC took one of this session's writes since
  the last refusal and, unless the cause was its watchdog (a stall of this bridge or its link,
  cleared by the bridge's own stop), has refused nothing for ``QUIET_S``; then, as after every
  stop, a fresh heartbeat edge re-arms it. Refusals of someone else's writes count too: two
  writers on one control DB stop the bridge;
- refused as stale while the PLC's ``seq_accepted`` is not this bridge's and has not moved for
  ``QUIET_S`` (the other writer went quiet): a new session (``resync_due``), whose first write
  is a stop. While another writer keeps being obeyed, its ``seq_accepted`` keeps moving and the
  bridge stays stopped: one bridge per PLC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SEQ_MODULUS = 1 << 32
HALF = SEQ_MODULUS // 2
SEQ_MARGIN = 1 << 16     # [ms of seq] a session starts this far beyond the PLC's seq_accepted
MAX_STEP = 1 << 30       # [ms of seq] the most one write advances (a clock that leapt ahead)
# [s] a refusal ends after this long without one; another writer's seq_accepted unchanged this
# long: it has quit
QUIET_S = 1.0
# refused_reason codes in the monitor DB: 0 none, then these, in this order (1, 2, 3, 4)
REFUSAL_REASONS: tuple[str, ...] = ("stale_seq", "watchdog_tripped", "setpoint_fault",
                                    "bad_setpoint")


def seq_newer(seq: int, last: int | None) -> bool:
    """Serial-number order on 32 bits (RFC 1982): ``seq`` is newer than ``last`` when it is
    ahead by 1 .. 2^31 - 1 modulo 2^32 (so the 32-bit wrap is harmless). Anything is newer than
    no value at all."""
    if last is None:
        return True
    return 0 < (int(seq) - int(last)) % SEQ_MODULUS < HALF


def to_dint(value: int) -> int:
    """The 32-bit pattern of ``value`` as the DINT (two's complement) the DB holds."""
    v = int(value) % SEQ_MODULUS
    return v - SEQ_MODULUS if v >= HALF else v


def from_dint(value: int) -> int:
    """A DINT read from a DB as its unsigned 32-bit pattern."""
    return int(value) % SEQ_MODULUS


def refusal_code(reason: str) -> int:
    """``refused_reason`` code of a refusal reason (0: none)."""
    return REFUSAL_REASONS.index(reason) + 1 if reason else 0


def refusal_name(code: int) -> str:
    """The name of a ``refused_reason`` code: ``none``, ``stale_seq``... or ``code_<n>``."""
    if code == 0:
        return "none"
    if 1 <= code <= len(REFUSAL_REASONS):
        return REFUSAL_REASONS[code - 1]
    return f"code_{code}"


class CommandSequence:
    """The ``seq`` of each control-DB write.

    ``start_session(accepted)`` at every connect (and re-synchronisation), with the PLC's
    ``seq_accepted`` (unsigned; 0 or None: none); ``next()`` for each write, as an unbounded
    integer that only grows in this process (the wire value is it modulo 2^32,
    ``to_dint``). ``clock`` is the bridge's monotonic time [s]; only its differences count."""

    def __init__(self, clock: Callable[[], float], margin: int = SEQ_MARGIN) -> None:
        if not 0 < margin < HALF:
            raise ValueError(f"margin = {margin} must be within 1 .. 2^31 - 1")
        self._clock = clock
        self.margin = int(margin)
        self.last: int | None = None            # the last seq handed out (unbounded)
        self.session_first: int | None = None   # the first seq of the current session
        self._base = 0
        self._t0 = 0.0
        self.sessions = 0

    def start_session(self, accepted: int | None) -> int:
        """Begin a session; returns its first ``seq`` (unbounded): newer than ``accepted`` by
        ``margin`` and newer than every seq handed out before, both in the PLC's serial order
        (the two can only conflict when they lie 2^31 apart, ~25 days of seq)."""
        acc = from_dint(accepted) if accepted else None
        if self.last is None:
            first = (acc if acc is not None else 0) + self.margin
        else:
            first = self.last + 1
            if acc is not None:
                ahead = (acc + self.margin - first) % SEQ_MODULUS
                if ahead < HALF:          # the PLC's value + margin is the newer one
                    first += ahead
        if first % SEQ_MODULUS == 0:
            first += 1
        self._base, self._t0 = first, self._clock()
        self.session_first = first
        self.sessions += 1
        return first

    def next(self) -> int:
        """The next write's ``seq`` (unbounded; never 0 modulo 2^32)."""
        if self.session_first is None:
            self.start_session(None)
        elapsed_ms = int((self._clock() - self._t0) * 1000.0)
        seq = self._base + max(0, elapsed_ms)
        if self.last is not None:
            # strictly increasing, and never so far ahead that the PLC would take it as older
            seq = min(max(seq, self.last + 1), self.last + MAX_STEP)
        if seq % SEQ_MODULUS == 0:
            seq += 1
        self.last = seq
        return seq

    def foreign(self, accepted: int) -> bool:
        """The PLC accepted ``accepted`` (unsigned), newer than anything this process sent:
        another writer's."""
        return self.last is not None and seq_newer(accepted, self.last % SEQ_MODULUS)

    def ours(self, accepted: int) -> bool:
        """``accepted`` (unsigned) lies within this session's seqs (first .. last)."""
        if self.last is None or self.session_first is None or self.last < self.session_first:
            return False
        offset = (accepted - self.session_first) % SEQ_MODULUS
        return offset <= min(self.last - self.session_first, HALF - 1)


@dataclass(frozen=True)
class Refusal:
    """The PLC refuses writes: ``reason`` (a ``REFUSAL_REASONS`` name or ``unknown``) and the
    cause in words; ``stale``: the PLC's seq is ahead of this bridge's (a new session helps).
    ``hold``: another writer may be behind it, so it ends only after ``QUIET_S`` without one."""

    reason: str
    detail: str
    stale: bool
    hold: bool = True


class RefusalWatch:
    """The PLC's verdicts on the control-DB writes, judged from each monitor-DB read.

    ``new_session()`` at a connect (the next read sets the baseline of the PLC's count),
    ``update(...)`` with every read; ``refusal`` is set while the PLC refuses (None: it takes
    this bridge's writes), ``seen`` counts the refusals seen since start, ``resync_due(now)``
    says when a new session should start. Times [s] on the bridge's monotonic clock."""

    def __init__(self, control_db: int, quiet_s: float = QUIET_S) -> None:
        self.control_db = control_db
        self.quiet_s = quiet_s
        self.refusal: Refusal | None = None
        self.seen = 0
        self._count: int | None = None
        self._accepted: int | None = None
        self._accepted_since = 0.0
        self._accepted_at_refusal: int | None = None
        self._refused_at_s = 0.0
        self._foreign = False

    def new_session(self) -> None:
        self.refusal = None
        self._count = None
        self._foreign = False

    def update(self, now_s: float, accepted: int | None, refused: int | None,
               reason_code: int | None, seq: CommandSequence) -> None:
        """One monitor read: the PLC's ``seq_accepted`` (unsigned; 0/None: none), its
        ``refused`` count and ``refused_reason`` code (None: the monitor DB lacks them)."""
        new = 0
        if refused is not None:
            if self._count is not None and refused > self._count:
                new = refused - self._count
            self._count = refused   # a smaller count is a restarted PLC: a new baseline
        self.seen += new
        acc = accepted or None
        if acc != self._accepted:
            self._accepted, self._accepted_since = acc, now_s
        self._foreign = acc is not None and seq.foreign(acc)
        ours = acc is not None and seq.ours(acc)
        if new or self._foreign:
            self.refusal = self._describe(reason_code, ours)
            self._accepted_at_refusal, self._refused_at_s = acc, now_s
        elif self.refusal is not None and ours and acc != self._accepted_at_refusal \
                and (not self.refusal.hold or now_s - self._refused_at_s >= self.quiet_s):
            self.refusal = None    # it took a write of this session since, refused none for a while

    def resync_due(self, now_s: float, seq: CommandSequence) -> bool:
        """Refused as stale, the PLC's ``seq_accepted`` is not this session's and has not moved
        for ``quiet_s``: whoever wrote it has stopped; start a new session."""
        acc = self._accepted
        if self.refusal is None or not self.refusal.stale or acc is None or seq.ours(acc) \
                or now_s - self._accepted_since < self.quiet_s:
            return False
        self._accepted_since = now_s   # at most one new session per quiet_s
        return True

    def _describe(self, reason_code: int | None, ours: bool) -> Refusal:
        db = f"DB{self.control_db}"
        if self._foreign:
            return Refusal("stale_seq", (
                f"the PLC refuses this bridge's writes as stale (stale_seq): it accepted a seq "
                f"this bridge never sent, so another writer is on {db}; run one bridge per PLC "
                f"(this one re-synchronises {self.quiet_s:g} s after that writer stops)"),
                stale=True)
        reason = refusal_name(reason_code) if reason_code is not None else "unknown"
        if reason == "stale_seq":
            if ours:
                return Refusal(reason, (
                    f"the PLC refused writes as stale (stale_seq) that are not this bridge's "
                    f"current ones: another writer on {db}, or a write held in the network and "
                    f"delivered late; run one bridge per PLC"), stale=False)
            return Refusal(reason, (
                f"the PLC refuses this bridge's writes as stale (stale_seq): its last accepted "
                f"seq is not one of this bridge's (plc.monitor.state.seq_accepted, "
                f"plc.bridge.seq): another writer on {db}, or one that paused and goes on; "
                f"run one bridge per PLC (this one re-synchronises {self.quiet_s:g} s after "
                f"the PLC's seq_accepted last moved)"), stale=True)
        texts = {
            "watchdog_tripped": "its watchdog on the bridge's alive counter is tripped (the "
                                "bridge or its link stalled longer than the PLC's watchdog "
                                "time); the bridge's stop clears it",
            "setpoint_fault": "a refused setpoint is latched; the bridge's stop clears it",
            "bad_setpoint": f"a setpoint was NaN/inf/out of range (not the bridge's: it never "
                            f"sends one; another writer on {db}?); the bridge's stop clears it",
            "unknown": "cause not reported: add 'refused_reason | INT' to the monitor DB "
                       "(docs/plc_setup.md)",
        }
        text = texts.get(reason, f"refused_reason code {reason_code} is not one of the "
                                 f"documented codes 0-{len(REFUSAL_REASONS)}")
        return Refusal(reason, f"the PLC refuses writes: {reason} ({text})", stale=False,
                       hold=reason != "watchdog_tripped")
