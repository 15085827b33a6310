"""The command sequence number and the PLC's refusals (``plc_bridge.command_seq``), pure, against
the PLC-side rules of ``plant.CommandGuard``: a bridge restarted with its clock stepped back
drives at once; no write of an earlier run or connection acts after a newer one; the 32-bit
wrap; 0 never sent; refusals and another writer read from the monitor DB's fields."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plc_bridge.command_seq import (
    REFUSAL_REASONS,
    SEQ_MARGIN,
    SEQ_MODULUS,
    CommandSequence,
    RefusalWatch,
    from_dint,
    refusal_code,
    refusal_name,
    seq_newer,
    to_dint,
)
from plc_bridge.virtual_plc.plant import CommandGuard

HOUR_S = 3600.0


class Clock:
    """A settable monotonic clock [s]."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _guard() -> CommandGuard:
    return CommandGuard(2, 0, watchdog_timeout_s=1e3, speed_limit_m_s=2.0, steer_limit_rad=0.7)


class Bridge:
    """A bridge's writes as the PLC sees them: alive counter, seq from ``CommandSequence`` on
    the bridge's own ``clock``; the PLC keeps its own time (``plc_t``, +10 ms a write)."""

    def __init__(self, guard: CommandGuard, clock: Clock, alive: int = 0,
                 plc_t: float = 0.0, step_s: float = 0.01) -> None:
        self.guard, self.clock, self.alive, self.plc_t = guard, clock, alive, plc_t
        self.step_s = step_s   # the bridge's clock between two writes
        self.seq = CommandSequence(clock)

    def connect(self) -> int:
        return self.seq.start_session(to_dint(self.guard.seq_accepted))

    def write(self, drive: bool) -> tuple[int, str | None]:
        """Send one write now; returns (its seq on the wire, the PLC's refusal or None)."""
        self.alive = (self.alive + 1) & 0xFFFF
        wire = from_dint(to_dint(self.seq.next()))
        why = self.guard.on_write(self.plc_t, self.alive, drive, not drive, wire,
                                  [0.5, 0.5] if drive else [0.0, 0.0], [])
        self.clock.t += self.step_s
        self.plc_t += 0.01
        return wire, why

    def deliver(self, wire: int, drive: bool = True) -> str | None:
        """A write made earlier (``wire`` seq) reaching the PLC now."""
        self.alive = (self.alive + 1) & 0xFFFF
        self.plc_t += 0.01
        return self.guard.on_write(self.plc_t, self.alive, drive, not drive, wire,
                                   [1.5, 1.5], [])


def test_a_restart_with_the_clock_stepped_back_an_hour_drives_at_once() -> None:
    """The same (still running) PLC, two bridge runs; the second one's clock reads an hour
    less: its first stop is taken and its commands drive, with no wait."""
    guard = _guard()
    first = Bridge(guard, Clock(5 * HOUR_S))
    first.connect()
    for _ in range(3):
        assert first.write(False)[1] is None
    for _ in range(50):
        assert first.write(True)[1] is None
    second = Bridge(guard, Clock(5 * HOUR_S - HOUR_S), alive=first.alive, plc_t=first.plc_t)
    second.connect()
    assert second.write(False)[1] is None         # the connect's stop, then driving at once
    for _ in range(50):
        assert second.write(True)[1] is None
    assert guard.command(second.plc_t)[0]


def test_the_old_wall_clock_rule_would_be_refused_for_the_hour() -> None:
    """Why: with seq = the clock in ms (the rule before), the second run is refused."""
    guard = _guard()
    t = 5 * HOUR_S
    for k, seq in enumerate((int(t * 1000), int(t * 1000) + 10)):
        guard.on_write(t, k + 1, False, True, seq % SEQ_MODULUS, [0, 0], [])
    t_back = t - HOUR_S + 1.0
    assert guard.on_write(t + 1, 9, False, True, int(t_back * 1000) % SEQ_MODULUS,
                          [0, 0], []) == "stale_seq"


def test_a_fresh_bridge_and_a_fresh_plc_start_at_the_margin_and_advance_with_the_clock() -> None:
    clock = Clock(100.0)
    seq = CommandSequence(clock)
    assert seq.start_session(0) == SEQ_MARGIN     # 0: the PLC accepted nothing yet
    assert seq.next() == SEQ_MARGIN
    assert seq.next() == SEQ_MARGIN + 1           # at least +1 per write
    clock.t += 0.25
    assert seq.next() == SEQ_MARGIN + 250         # +1 per ms of the monotonic clock
    clock.t -= 10.0                               # a clock that went back: still newer
    assert seq.next() == SEQ_MARGIN + 251
    clock.t += 40 * 86400.0                       # one that leapt 40 days (> 2^31 ms) ahead
    leap = seq.next()
    assert seq_newer(leap % SEQ_MODULUS, (SEQ_MARGIN + 251) % SEQ_MODULUS)


def test_a_session_starts_beyond_both_the_plc_and_this_process() -> None:
    clock = Clock()
    seq = CommandSequence(clock)
    seq.start_session(1000)
    assert seq.next() == 1000 + SEQ_MARGIN
    # the PLC is behind what this process sent (its last writes in flight): continue beyond
    # both
    clock.t += 5.0
    last = seq.next()
    assert seq.start_session(1000) == max(last + 1, 1000 + SEQ_MARGIN)
    # the PLC is ahead (another writer): beyond its value
    ahead = from_dint(to_dint(last + 10**6))
    assert seq.start_session(to_dint(ahead)) % SEQ_MODULUS == (ahead + SEQ_MARGIN) % SEQ_MODULUS
    assert seq.sessions == 3


def test_zero_is_never_sent_and_the_wrap_is_newer() -> None:
    """0 is the PLC's 'none'; across 2^32 every write is still newer than the one before."""
    guard = _guard()
    bridge = Bridge(guard, Clock())
    guard.on_write(0.0, 1, False, True, SEQ_MODULUS - SEQ_MARGIN, [0, 0], [])  # a former run
    assert bridge.connect() % SEQ_MODULUS == 1   # acc + margin = 2^32: 0 skipped
    seen = [bridge.write(False) for _ in range(5)]
    assert all(why is None for _, why in seen) and all(w != 0 for w, _ in seen)
    guard2 = _guard()
    bridge2 = Bridge(guard2, Clock(), step_s=0.0)   # +1 a write: every value is met
    guard2.on_write(0.0, 1, False, True, SEQ_MODULUS - SEQ_MARGIN - 3, [0, 0], [])
    bridge2.connect()
    wires = [bridge2.write(k > 1) for k in range(8)]
    assert [why for _, why in wires] == [None] * 8
    assert [w for w, _ in wires] == [SEQ_MODULUS - 3, SEQ_MODULUS - 2, SEQ_MODULUS - 1,
                                     1, 2, 3, 4, 5]       # wrapped, 0 skipped


@settings(max_examples=300, deadline=None)
@given(plc_seq=st.integers(1, SEQ_MODULUS - 1), run_s=st.floats(0.0, 50 * 86400.0),
       step_s=st.floats(-30 * 86400.0, 30 * 86400.0), in_flight=st.integers(1, 50),
       gap_writes=st.integers(1, 20))
def test_no_earlier_write_acts_after_a_restart_whatever_the_clocks(plc_seq, run_s, step_s,
                                                                   in_flight, gap_writes):
    """Run A (its clock anywhere) writes, its last ``in_flight`` writes are held in the network;
    run B starts with a clock stepped by ``step_s``. B's stop and commands are taken at once,
    and every held write of A delivered afterwards is refused."""
    guard = _guard()
    guard.on_write(0.0, 1, False, True, plc_seq, [0, 0], [])     # whatever went before
    a = Bridge(guard, Clock(run_s))
    a.connect()
    for _ in range(gap_writes):
        assert a.write(False)[1] is None
    held = [from_dint(to_dint(a.seq.next())) for _ in range(in_flight)]
    b = Bridge(guard, Clock(run_s + step_s), alive=a.alive, plc_t=a.plc_t)
    b.connect()
    assert b.write(False)[1] is None
    assert b.write(True)[1] is None
    for wire in held:
        assert b.deliver(wire) == "stale_seq"
        assert b.deliver(wire, drive=False) == "stale_seq"   # an old stop moves nothing
    assert guard.seq_accepted == b.seq.last % SEQ_MODULUS


@settings(max_examples=200, deadline=None)
@given(plc_seq=st.integers(0, SEQ_MODULUS - 1), sent=st.integers(0, 2**40),
       ms=st.lists(st.integers(0, 10**7), min_size=1, max_size=20))
def test_a_reconnect_continues_beyond_everything_sent_and_the_plc(plc_seq, sent, ms):
    """Within one process: a new session's seqs are larger than every earlier one (unbounded)
    and newer, in the PLC's order, than the PLC's value (when that is not ~2^31 away)."""
    clock = Clock()
    seq = CommandSequence(clock)
    seq.start_session(to_dint(sent % SEQ_MODULUS) or None)
    before = [seq.next()]
    for m in ms:
        clock.t += m / 1000.0
        before.append(seq.next())
    assert before == sorted(set(before))
    first = seq.start_session(to_dint(plc_seq))
    assert first > before[-1] and first % SEQ_MODULUS != 0
    assert seq_newer(first % SEQ_MODULUS, before[-1] % SEQ_MODULUS)
    apart = (plc_seq - before[-1] + SEQ_MODULUS // 2) % SEQ_MODULUS - SEQ_MODULUS // 2
    if plc_seq and abs(apart) < SEQ_MODULUS // 2 - SEQ_MARGIN - 1:
        assert seq_newer(first % SEQ_MODULUS, plc_seq)


def test_dint_round_trip_and_reason_codes() -> None:
    assert to_dint(2**31) == -(2**31) and from_dint(-1) == SEQ_MODULUS - 1
    assert [refusal_name(c) for c in range(6)] == ["none", *REFUSAL_REASONS, "code_5"]
    assert [refusal_code(r) for r in ("", *REFUSAL_REASONS)] == [0, 1, 2, 3, 4]


# --- RefusalWatch: the PLC's verdicts from the monitor DB -------------------------------------
def _watch() -> tuple[RefusalWatch, CommandSequence, Clock]:
    clock = Clock()
    seq = CommandSequence(clock)
    seq.start_session(5000)
    return RefusalWatch(100, quiet_s=1.0), seq, clock


def test_a_rising_refused_count_is_a_refusal_until_the_plc_takes_this_sessions_writes() -> None:
    watch, seq, clock = _watch()
    s1 = seq.next()
    watch.update(clock(), s1, 7, 0, seq)                     # baseline: 7 from before
    assert watch.refusal is None and watch.seen == 0
    s2 = seq.next()
    watch.update(clock(), s1, 8, refusal_code("watchdog_tripped"), seq)
    assert watch.refusal is not None and watch.refusal.reason == "watchdog_tripped"
    assert "watchdog" in watch.refusal.detail and watch.seen == 1
    watch.update(clock(), s1, 8, refusal_code("watchdog_tripped"), seq)
    assert watch.refusal is not None                          # no write taken since
    watch.update(clock(), s2, 8, refusal_code("watchdog_tripped"), seq)
    assert watch.refusal is None                              # its stop taken: cleared
    watch.update(clock(), s2, 2, 0, seq)                      # the PLC restarted its count
    assert watch.refusal is None and watch.seen == 1
    # a cause another writer may be behind ends only after quiet_s without a refusal
    s3 = seq.next()
    watch.update(clock(), s2, 3, refusal_code("bad_setpoint"), seq)
    assert watch.refusal is not None and watch.refusal.reason == "bad_setpoint"
    clock.t += 0.5
    watch.update(clock(), s3, 3, refusal_code("bad_setpoint"), seq)
    assert watch.refusal is not None                          # taken, but refused recently
    clock.t += 0.5
    watch.update(clock(), s3, 3, refusal_code("bad_setpoint"), seq)
    assert watch.refusal is None                              # none refused for 1 s


def test_another_writer_is_named_and_a_new_session_waits_until_it_is_quiet() -> None:
    watch, seq, clock = _watch()
    mine = seq.next()
    watch.update(clock(), mine, 0, 0, seq)
    other = (mine + 10**6) % SEQ_MODULUS
    for k in range(30):                                       # it keeps being obeyed
        clock.t += 0.1
        seq.next()
        watch.update(clock(), other + k, k + 1, refusal_code("stale_seq"), seq)
        assert watch.refusal is not None and watch.refusal.reason == "stale_seq"
        assert "another writer is on DB100" in watch.refusal.detail
        assert not watch.resync_due(clock(), seq)
    t_quiet = clock.t
    while clock.t + 0.1 < t_quiet + 0.95:                     # it stopped: our writes refused
        clock.t += 0.1
        seq.next()
        watch.update(clock(), other + 29, watch.seen + 1, refusal_code("stale_seq"), seq)
        assert not watch.resync_due(clock(), seq)
    clock.t += 0.1
    assert watch.resync_due(clock(), seq)
    assert not watch.resync_due(clock(), seq)                 # once per quiet_s
    first = seq.start_session(to_dint(other + 29))
    assert seq_newer(first % SEQ_MODULUS, other + 29)
    # the other writer goes on after its pause: the PLC refuses its old seqs, and the value it
    # last accepted is neither this session's nor newer than it; the cause is still named
    watch.new_session()
    watch.update(clock(), other + 29, 40, refusal_code("stale_seq"), seq)
    seq.next()
    watch.update(clock(), other + 29, 41, refusal_code("stale_seq"), seq)
    assert watch.refusal is not None and watch.refusal.stale
    assert "another writer on DB100" in watch.refusal.detail
    assert "1 s after the PLC's seq_accepted last moved" in watch.refusal.detail


def test_refusals_of_writes_not_ours_while_the_plc_takes_ours_say_so() -> None:
    watch, seq, clock = _watch()
    mine = seq.next()
    watch.update(clock(), mine, 0, 0, seq)
    mine = seq.next()
    watch.update(clock(), mine, 3, refusal_code("stale_seq"), seq)
    assert watch.refusal is not None and "not this bridge's current ones" in watch.refusal.detail
    assert not watch.refusal.stale and not watch.resync_due(clock() + 10.0, seq)


@pytest.mark.parametrize(("code", "text"), [(None, "add 'refused_reason | INT'"),
                                            (9, "code 9 is not one of the documented"),
                                            (4, "NaN/inf/out of range")])
def test_an_unknown_or_missing_cause_is_said(code, text) -> None:
    watch, seq, clock = _watch()
    mine = seq.next()
    watch.update(clock(), mine, 0, code, seq)
    watch.update(clock(), mine, 1, code, seq)
    assert watch.refusal is not None and text in watch.refusal.detail
