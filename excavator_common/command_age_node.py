"""The age rule of :mod:`excavator_common.command_age` on an rclpy node: the clocks read, the
refusals logged (a rate-limited warning) and their counters for ``/diagnostics``.

rclpy only; the rule itself is the pure :class:`~excavator_common.command_age.CommandAge`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rclpy.clock import ROSClock
from rclpy.node import Node

from excavator_common.command_age import UNSTAMPED, CommandAge, Verdict


class CommandAgeCheck:
    """``admit(topic, header.stamp)`` on arrival of each stamped command: True = let it act.

    ``max_age_s`` / ``max_ahead_s``: see :class:`CommandAge`. The node's clock is its ROS
    clock (simulated time with ``use_sim_time``; the wall clock is then read too, for stamps
    from senders on wall time). :meth:`admit_in_transit` judges the time since the message
    was sent instead (the DDS source timestamp)."""

    def __init__(self, node: Node, max_age_s: float, max_ahead_s: float | None = None) -> None:
        self._node = node
        self.rule = CommandAge(max_age_s, max_ahead_s)
        self.last: Verdict | None = None  # the verdict of the latest command judged
        self._seen_refusals = 0  # refusals at the last status (see refused_since_status)

    def admit(self, topic: str, stamp: Any) -> bool:
        """Judge a command on ``topic`` by its header stamp (builtin_interfaces/Time) on the
        node's ROS clock, or on the wall clock when the node runs on simulated time and the
        stamp lies nearer the wall clock."""
        clock = self._node.get_clock()
        now_s = clock.now().nanoseconds * 1e-9
        sim = isinstance(clock, ROSClock) and clock.ros_time_is_active
        return self._judge(topic, stamp.sec + 1e-9 * stamp.nanosec, now_s,
                           time.time() if sim else None)

    def admit_in_transit(self, topic: str, info: Mapping[str, Any]) -> bool:
        """Judge a command on ``topic`` by the time since its publisher sent it: its DDS source
        timestamp (the sender's wall clock when it published, ns in ``MessageInfo``) on this
        host's wall clock now, whether it was held up on the link or waited while this node
        was stopped or busy. A source timestamp of 0 (a middleware that gives none) is not
        judged. For a node whose header stamps mean something else (sim_node: when to apply a
        command). The reception timestamp is no measure of the link: a process stopped just
        after its middleware took a message in waits as long, and it varies with the
        transport (shared memory or UDP)."""
        sent_ns = int(info.get("source_timestamp") or 0)
        return self._judge(topic, sent_ns * 1e-9, time.time(), None, "sent at")

    def _judge(self, topic: str, stamp_s: float, now_s: float, wall_s: float | None,
               what: str = "stamped") -> bool:
        verdict = self.rule.judge(topic, stamp_s, now_s, wall_s, what)
        self.last = verdict
        if verdict.status == UNSTAMPED and self.rule.first_unstamped(topic):
            self._node.get_logger().info(
                f"{topic}: a message without a stamp (0) acts unjudged: its age is unknown "
                "(counted as commands_unstamped; said once per topic)")
        if not verdict.act:
            warning = self.rule.warning(time.monotonic())
            if warning:
                self._node.get_logger().warning(warning)
        return verdict.act

    def set_max_age(self, max_age_s: float) -> None:
        CommandAge.check_limits(max_age_s)
        self.rule.max_age_s = max_age_s

    def refused_since_status(self) -> int:
        """Commands dropped since the previous call (a status period)."""
        total = self.rule.expired + self.rule.ahead
        n, self._seen_refusals = total - self._seen_refusals, total
        return n

    def counters(self) -> dict[str, str | int]:
        return self.rule.counters()


def take_waiting(subscription: Any) -> list[tuple[Any, Any]]:
    """Every ``(message, info)`` waiting on ``subscription``, oldest first (rclpy's own take,
    as its executor does it); [] when none.

    rclpy's executor takes one message per subscription per round of its wait set, after the
    ready timers: a node whose timer works longer than the commands' period (a simulation
    stepping a burst to catch up on a loaded host) takes them slower than they come, and the
    backlog, up to the subscription's depth, ages them past ``max_command_age_s`` in its own
    queue although the link delivered them at once. Taking all that waits before the work
    judges each by the link's delay alone."""
    taken = []
    handle = subscription.handle
    with handle:
        while (info := handle.take_message(subscription.msg_type, subscription.raw)) is not None:
            taken.append((info[0], info[1]))
    return taken
