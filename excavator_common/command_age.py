"""Commands judged by the age of their stamp on arrival (pure: every time is passed in).

A command delayed on its way (a congested link, a stalled publisher, a process that was
stopped with messages in its queue) must not act when it finally arrives: the operator has
moved on, and the machine would do what was wanted a while ago. Every node that takes a stamped
command (``teleop_node``: ``joy``, ``joy_travel``, ``hand_pose``; ``ik_node``: ``target``,
``target_pose``: by the header stamp; ``sim_node``: ``joint_command``, ``track_command``: by the
time the message was sent, its header stamp saying when to apply it) asks one
:class:`CommandAge` on arrival and drops what it refuses; the node shell
(:mod:`excavator_common.command_age_node`) logs and reports. docs/teleoperation.md, "Late
commands", says which topics and why.

The rule, for a command stamped ``stamp`` arriving when the clock its stamp is on reads ``now``:

- ``stamp`` 0 (``ros2 topic pub`` without a header, a script that never sets one): it carries
  no age, so it is not judged and acts, counted as ``commands_unstamped``. Such publishers are
  tools; an operator's devices (the joy driver, a haptic device's driver) stamp every message.
- ``now - stamp > max_age_s``: expired, dropped (``commands_expired``).
- ``stamp - now`` more than ``max_age_s`` (at least ``MIN_AHEAD_S``, 1 s: the lead a bag player
  may publish with): dropped (``commands_ahead``). A stamp from the future means the sender's
  clock is ahead of this host's, and then a delayed message looks fresh: its age cannot be
  judged. The clocks may disagree by as much as the age limit tolerates, either way. A node
  that schedules commands stamped ahead (teleop_node with ``command_delay_s``) leaves this
  check to its schedule (``max_ahead_s`` infinite).

Clock bases: a node on simulated time (``use_sim_time``) still gets commands stamped in wall
time from devices that are not (a joy driver on the operator station). The caller passes the
node's clock (``now_s``: simulated time for a node on sim time) and, when that is not the wall
clock, the wall clock too (``wall_now_s``); a stamp is judged on the clock it lies nearest to.
Simulated time starts at 0 and the wall clock counts from 1970, so the two are ~1.7e9 s apart
and cannot be confused. A node on wall time cannot read simulated time: a stamp in simulated
time is then 1.7e9 s old and expires, with the fix in the reason (run the node with
``use_sim_time:=true``). Across hosts the wall clocks must agree to well within ``max_age_s``
(chrony/NTP on a LAN: below a millisecond).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FRESH = "fresh"
UNSTAMPED = "unstamped"
EXPIRED = "expired"
AHEAD = "ahead"

MIN_AHEAD_S = 1.0  # stamps this far ahead are always taken (a player's --lead) [s]
# A stamp this far from the clock it was judged on is not a delayed message but a stamp on
# another clock (said in the reason) [s].
_OTHER_CLOCK_S = 86400.0


@dataclass(frozen=True)
class Verdict:
    """What to do with one command: ``act`` or drop it, and why.

    ``age_s`` = now - stamp on the stamp's clock [s] (negative: stamped ahead; NaN: unstamped),
    ``clock`` = ``"wall"`` or ``"simulated"`` (empty when unstamped)."""

    act: bool
    status: str
    age_s: float
    clock: str
    reason: str = ""


@dataclass
class CommandAge:
    """The age rule for the commands of one node, with its counters.

    ``max_age_s`` [s]: an older command is dropped. ``max_ahead_s`` [s]: a command stamped
    further ahead is dropped (None: ``max(max_age_s, MIN_AHEAD_S)``; infinite: not checked).
    ``warn_interval_s`` [s]: at most one warning per interval (:meth:`warning`)."""

    max_age_s: float
    max_ahead_s: float | None = None
    warn_interval_s: float = 5.0
    judged: int = 0
    unstamped: int = 0
    expired: int = 0
    ahead: int = 0
    last_refused: Verdict | None = None
    last_refused_topic: str = ""
    _unwarned: int = 0
    _last_warning_s: float = -math.inf
    _unstamped_topics: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.check_limits(self.max_age_s, self.max_ahead_s)

    @staticmethod
    def check_limits(max_age_s: float, max_ahead_s: float | None = None) -> None:
        if not (math.isfinite(max_age_s) and max_age_s > 0.0):
            raise ValueError(f"max_command_age_s = {max_age_s:.6g} must be a positive number "
                             "of seconds")
        if max_ahead_s is not None and not max_ahead_s >= 0.0:
            raise ValueError(f"the largest lead of a command's stamp {max_ahead_s:.6g} s must "
                             "be >= 0")

    @property
    def ahead_limit_s(self) -> float:
        """How far ahead a stamp may lie [s]."""
        if self.max_ahead_s is None:
            return max(self.max_age_s, MIN_AHEAD_S)
        return self.max_ahead_s

    def judge(self, topic: str, stamp_s: float, now_s: float,
              wall_now_s: float | None = None, what: str = "stamped") -> Verdict:
        """Judge a command on ``topic`` stamped ``stamp_s`` [s], arriving at ``now_s`` [s] of
        the node's clock (simulated time on sim time) and, when that is not the wall clock,
        ``wall_now_s`` [s] of the wall clock. ``what`` names the stamp in the reason."""
        self.judged += 1
        if stamp_s == 0.0:
            self.unstamped += 1
            return Verdict(True, UNSTAMPED, math.nan, "")
        clock, now = ("wall", now_s) if wall_now_s is None else ("simulated", now_s)
        if wall_now_s is not None and abs(stamp_s - wall_now_s) < abs(stamp_s - now_s):
            clock, now = "wall", wall_now_s
        age = now - stamp_s
        if age > self.max_age_s:
            self.expired += 1
            return self._refuse(topic, Verdict(False, EXPIRED, age, clock, (
                f"{topic} {what} {stamp_s:.3f} s arrived {age:.3f} s old on the {clock} clock, "
                f"older than max_command_age_s {self.max_age_s:g} s: dropped; "
                + (_OTHER_CLOCK_HINT if age > _OTHER_CLOCK_S else _LATE_HINT))))
        if -age > self.ahead_limit_s:
            self.ahead += 1
            return self._refuse(topic, Verdict(False, AHEAD, age, clock, (
                f"{topic} {what} {stamp_s:.3f} s is {-age:.3f} s ahead of this node's {clock} "
                f"clock (limit {self.ahead_limit_s:g} s): its age cannot be judged, dropped; "
                "the sender's clock is ahead of this host's: synchronise them (chrony/NTP)")))
        return Verdict(True, FRESH, age, clock)

    def first_unstamped(self, topic: str) -> bool:
        """True the first time an unstamped command on ``topic`` is seen (to say so once)."""
        if topic in self._unstamped_topics:
            return False
        self._unstamped_topics.add(topic)
        return True

    def _refuse(self, topic: str, verdict: Verdict) -> Verdict:
        self.last_refused, self.last_refused_topic = verdict, topic
        self._unwarned += 1
        return verdict

    def warning(self, now_s: float) -> str | None:
        """The warning to log now [s, any monotonic clock], or None: the first refusal at once,
        then at most one per ``warn_interval_s``, counting the refusals it stands for."""
        if not self._unwarned or now_s - self._last_warning_s < self.warn_interval_s:
            return None
        assert self.last_refused is not None
        n, self._unwarned, self._last_warning_s = self._unwarned, 0, now_s
        more = (f" ({n} commands dropped since the last warning; at most one warning per "
                f"{self.warn_interval_s:g} s)" if n > 1 else "")
        return self.last_refused.reason + more

    def counters(self) -> dict[str, str | int]:
        """For /diagnostics: the counts, the limit, and the last command dropped with its age."""
        last = self.last_refused
        return {"max_command_age_s": f"{self.max_age_s:g}", "commands_expired": self.expired,
                "commands_ahead": self.ahead, "commands_unstamped": self.unstamped,
                "last_dropped_topic": self.last_refused_topic,
                "last_dropped_age_s": f"{last.age_s:.3f}" if last else "",
                "last_dropped_clock": last.clock if last else ""}


_LATE_HINT = ("a message delayed on its way (link, a stalled publisher or node) or a sender's "
              "clock behind this host's (synchronise them: chrony/NTP); raise "
              "max_command_age_s only for a slower link")
_OTHER_CLOCK_HINT = ("a stamp this old is on another clock: simulated time into a node on wall "
                     "time (run the node with use_sim_time:=true) or a sender whose clock is "
                     "not set (synchronise it: chrony/NTP)")
