"""The recorder's DDS readers, and their move to a new participant after the recorder stood.

Fast DDS's shared-memory transport takes a reader process that stood still longer than its
port watchdog's ``healthy_check_timeout_ms`` (1 s by default; SIGSTOP, a debugger, a starved
host) for a dead one: its writers and then the reader regenerate the reader's port, and a
writer can be left sending into the old, unlinked segment for good (docs/deployment.md, "A
known limit on shared memory"). The chaos soak's recorder, stopped 3.9 s, recorded nothing more
from soil_node while it went on hearing sim_node. Under ``ROS_AUTOMATIC_DISCOVERY_RANGE=
LOCALHOST`` rmw_fastrtps always adds that transport with Fast DDS's defaults, so no profile can
take it out or lengthen the timeout.

A new participant has new ports, which every writer opens afresh. After a hold-up the recorder
therefore subscribes again through a new participant (:class:`ReaderLink`) while the old one
goes on reading for an overlap, and records each sample once (:class:`SeenSamples`: a writer's
GUID and the sample's sequence number name it on every reader). Samples are remembered only
where a second reader can bring them again: during an overlap, after it until the reader left
has passed what the retired one took (it may lag a poll behind), and always for a latched
(transient-local) topic, whose last sample every new reader is sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from excavator_common.command_age_node import take_waiting

# How many samples of a topic are remembered to be known again [samples]: they come again on a
# second reader only within an overlap (REHOME_OVERLAP_S), well under this at 100 Hz, and a
# latched topic's sample (robot_description) is all its writer sends.
SEEN_PER_TOPIC = 4096


class SeenSamples:
    """Which samples of each topic were taken already, by writer and sequence number."""

    def __init__(self, per_topic: int = SEEN_PER_TOPIC) -> None:
        if per_topic < 1:
            raise ValueError(f"per_topic {per_topic} must be >= 1")
        self.per_topic = per_topic
        self._order: dict[str, deque[tuple[bytes, int]]] = {}
        self._seen: dict[str, set[tuple[bytes, int]]] = {}
        self._settling: dict[str, dict[bytes, int]] = {}   # topic: writer: newest seq known
        self.repeated = 0   # samples taken a second time (through another reader) and dropped

    def first_time(self, topic: str, info: dict[str, Any]) -> bool:
        """True for a sample not taken before; remembers it. A sample whose info names no
        writer or sequence number (another rmw) is always new."""
        gid = info.get("publisher_gid")
        seq = info.get("publication_sequence_number")
        if not isinstance(gid, dict) or not isinstance(seq, int):
            return True
        key = (bytes(gid.get("data", b"")), seq)
        seen = self._seen.setdefault(topic, set())
        if key in seen:
            self.repeated += 1
            return False
        order = self._order.setdefault(topic, deque())
        if len(order) >= self.per_topic:
            seen.discard(order.popleft())
        order.append(key)
        seen.add(key)
        self._note_settled(topic, *key)
        return True

    def watches(self, topic: str) -> bool:
        """Whether ``topic``'s samples must go through :meth:`first_time`: those of an overlap,
        of a settling reader (:meth:`settle`) and of a latched topic."""
        return topic in self._seen

    def settle(self, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """The overlap is over, one reader is left; ``keep``'s (latched) topics stay known.

        The reader left may still bring a sample the retired one took first: it lagged by a
        poll. A writer's samples come in order on one reader, so its samples stay known until
        this reader brings one newer than any known, and then are forgotten (a topic whose
        writers have all done so is no longer watched)."""
        self._settling = {}
        for topic, keys in self._seen.items():
            if topic in keep:
                continue
            newest: dict[bytes, int] = {}
            for gid, seq in keys:
                newest[gid] = max(seq, newest.get(gid, seq))
            self._settling[topic] = newest

    def _note_settled(self, topic: str, gid: bytes, seq: int) -> None:
        settling = self._settling.get(topic)
        if settling is None or gid not in settling or seq <= settling[gid]:
            return
        del settling[gid]
        if not settling:
            del self._settling[topic], self._seen[topic], self._order[topic]


class OverlapJoin:
    """Whether the new reader's samples join on to the old readers', writer by writer: for each
    writer the old readers brought a sample of during the overlap, the new one has brought one
    no later than the next after the old ones' newest. A reliable reader has every later sample
    of that writer, in order, so the old readers may then go without leaving a gap.

    The new reader matching every writer (its side of discovery) is not enough: the writer's
    side can match it later, and until then sends to the old reader alone. The official CI of
    6f995a8 lost two samples so: its loaded host took 3.2 s for the move's discovery, the old
    participant was released as the new one matched, and the two samples only the old one had
    received went with it. A writer the old readers brought nothing of sets no condition.

    A gap the old readers have not closed ``repair_s`` after the new reader's first sample of
    that writer will not be closed: the writer sent those samples before that one, and a
    reliable writer resends a lost one within its heartbeat period. The old reader went deaf
    (the cut a move is for); that stretch is lost on every reader (:meth:`lost`)."""

    def __init__(self, repair_s: float) -> None:
        self.repair_s = repair_s
        self._old_newest: dict[tuple[str, bytes], int] = {}   # (topic, writer): newest seq
        # (topic, writer): (first seq, when it was taken [s monotonic])
        self._new_first: dict[tuple[str, bytes], tuple[int, float]] = {}

    def note(self, topic: str, info: dict[str, Any], new: bool, now_s: float) -> None:
        """A sample taken through the new reader (``new``) or an old one at ``now_s``."""
        gid = info.get("publisher_gid")
        seq = info.get("publication_sequence_number")
        if not isinstance(gid, dict) or not isinstance(seq, int):
            return   # another rmw names no writer: only the readers' matching is judged
        key = (topic, bytes(gid.get("data", b"")))
        if new:
            self._new_first.setdefault(key, (seq, now_s))   # a writer's samples come in order
        else:
            self._old_newest[key] = max(seq, self._old_newest.get(key, seq))

    def joined(self, now_s: float) -> bool:
        return not self.gaps(now_s)

    def gaps(self, now_s: float) -> list[str]:
        """The writers the new reader does not join on to yet and the old readers may still
        close, as ``topic: the old reader's newest, the new one's first``."""
        return [self._say(key, first) for key, first in self._open()
                if first is None or now_s - first[1] < self.repair_s]

    def lost(self, now_s: float) -> list[str]:
        """The gaps past ``repair_s``: samples no reader has."""
        return [f"{key[0]}: samples {self._old_newest[key] + 1}..{first[0] - 1}"
                for key, first in self._open()
                if first is not None and now_s - first[1] >= self.repair_s]

    def _open(self) -> list[tuple[tuple[str, bytes], tuple[int, float] | None]]:
        return [(key, first) for key, newest in self._old_newest.items()
                if (first := self._new_first.get(key)) is None or first[0] > newest + 1]

    def _say(self, key: tuple[str, bytes], first: tuple[int, float] | None) -> str:
        return (f"{key[0]}: old reader at {self._old_newest[key]}, new one "
                f"{'at nothing yet' if first is None else f'from {first[0]}'}")


@dataclass
class ReaderLink:
    """The recorder's subscriptions on one node (one DDS participant).

    ``subscribe(node, topic, cls, qos)`` creates one (``raw=True``, no callback run: the
    recorder takes), ``release()`` ends the link: its subscriptions, and the node and context
    where the link owns them (``close``)."""

    node: Any
    close: Callable[[], object] | None = None      # the owned node's end (NodeThread.close)
    subscriptions: dict[str, Any] = field(default_factory=dict)
    clock: Any = None                              # /clock, deserialized (--use-sim-time)

    def subscribe(self, topic: str, cls: type, qos: Any) -> None:
        if topic not in self.subscriptions:
            self.subscriptions[topic] = self.node.create_subscription(
                cls, topic, _unused, qos, raw=True)

    def subscribe_clock(self, cls: type, depth: int) -> None:
        self.clock = self.node.create_subscription(cls, "/clock", _unused, depth)

    def take(self) -> list[tuple[str, Any, dict[str, Any]]]:
        """Every ``(topic, CDR bytes, info)`` waiting, topic by topic."""
        return [(topic, data, info) for topic, sub in self.subscriptions.items()
                for data, info in take_waiting(sub)]

    def take_clock(self) -> list[tuple[Any, dict[str, Any]]]:
        return take_waiting(self.clock) if self.clock is not None else []

    def matched_as_many_as(self, other: ReaderLink) -> bool:
        """Whether each subscription here has matched as many writers as ``other``'s of the
        same topic (the new participant's discovery done)."""
        return all(topic in self.subscriptions
                   and self.subscriptions[topic].get_publisher_count() >= sub.get_publisher_count()
                   for topic, sub in other.subscriptions.items())

    def release(self) -> None:
        """End the link: its subscriptions, and its node where it owns it."""
        for sub in [*self.subscriptions.values(), *([self.clock] if self.clock else [])]:
            self.node.destroy_subscription(sub)
        self.subscriptions.clear()
        self.clock = None
        if self.close is not None:
            self.close()


def _unused(_msg: object) -> None:
    """The subscriptions' callback, never run: no executor spins them."""
