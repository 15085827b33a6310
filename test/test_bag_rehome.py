"""The recorder after a stop of its process: it subscribes again through a new DDS participant
and writes every message once (excavator_hil/bags/reader_links.py says why: Fast DDS's
shared-memory port of a reader that stood can leave a writer cut off from it for good, which
the chaos soak's recorder met once). The cut itself is a race of Fast DDS's that cannot be made
on demand: the tests stop the recorder for real (its process: SIGSTOP, SIGCONT), and make an
old participant deaf by hand to show that the new one alone records. And after a SIGKILL:
what the recorder had written is in the file (a chunk at least every FLUSH_PERIOD_S)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import EVENT_WAIT_S, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, wait_for
from sensor_msgs.msg import JointState

from excavator_hil.bags.io import TYPESTORE, BagError, read_bag, salvage_bag
from excavator_hil.bags.reader_links import OverlapJoin, SeenSamples

TOPIC = "/rehome_test/joints"


def _joint_state(i: int) -> JointState:
    msg = JointState()
    msg.name = ["swing"]
    msg.position = [float(i)]
    return msg


def _positions(bag: Path) -> list[float]:
    return [TYPESTORE.deserialize_cdr(m.data, m.msgtype).position[0]
            for m in read_bag(bag).messages]


def _salvaged_positions(bag: Path) -> list[float] | None:
    """The positions in the bag of a recorder that runs or was killed (None: no file yet)."""
    try:
        messages = salvage_bag(bag).messages
    except BagError:
        return None
    return [TYPESTORE.deserialize_cdr(m.data, m.msgtype).position[0] for m in messages]


@contextlib.contextmanager
def _bag_record_process(probe: RosTestNode, bag: Path) -> Iterator[tuple[NodeProcess, _Sender]]:
    """``excavator-hil bag record TOPIC -o bag`` in its own process, subscribed, and the sender
    started; both stopped at the end."""
    rec = NodeProcess("excavator_hil.cli", ["bag", "record", TOPIC, "-o", str(bag)],
                      log_dir=bag.parent)
    sender = _Sender(probe)
    try:
        wait_for(lambda: sender.pub.get_subscription_count() > 0, STARTUP_TIMEOUT_S,
                 lambda: f"the recorder to subscribe; its log:\n{rec.log()}")
        time.sleep(0.5)
        sender.start()
        yield rec, sender
    finally:
        sender.stop()
        rec.stop()


def _footprint(pid: int) -> tuple[int, int]:
    """(threads, open descriptors) of process ``pid``."""
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def probe() -> Iterator[RosTestNode]:
    node = RosTestNode("rehome_probe")
    yield node
    node.close()


def _info(gid: bytes, seq: int) -> dict[str, object]:
    return {"publisher_gid": {"implementation_identifier": "rmw_fastrtps_cpp", "data": gid},
            "publication_sequence_number": seq}


def test_a_sample_is_new_once_per_writer_and_sequence_number() -> None:
    seen = SeenSamples(per_topic=3)
    assert seen.first_time("/a", _info(b"w1", 1))
    assert not seen.first_time("/a", _info(b"w1", 1))       # the same sample, another reader
    assert seen.first_time("/a", _info(b"w2", 1))           # another writer's first
    assert seen.first_time("/b", _info(b"w1", 1))           # another topic
    assert seen.repeated == 1
    for seq in (2, 3, 4):                                   # the oldest of /a forgotten
        assert seen.first_time("/a", _info(b"w1", seq))
    assert seen.first_time("/a", _info(b"w1", 1))
    assert seen.first_time("/a", {"publication_sequence_number": None})   # nothing names it
    assert seen.first_time("/a", {"publication_sequence_number": None})
    with pytest.raises(ValueError, match="per_topic 0 must be >= 1"):
        SeenSamples(0)


def test_the_reader_left_after_an_overlap_is_watched_until_it_passes_the_retired_one() -> None:
    """The official CI of 20c86c8 recorded sample 285 twice: the retired reader took it, and the
    new one, a poll behind, brought it again after the overlap ended."""
    seen = SeenSamples()
    for seq in (284, 285):                                  # the overlap: the old reader's
        assert seen.first_time("/a", _info(b"w1", seq))
    assert seen.first_time("/a", _info(b"w2", 7)) and seen.first_time("/b", _info(b"w1", 1))
    assert seen.first_time("/c", _info(b"w1", 9))
    seen.settle(keep={"/b"})                                # /b is latched
    assert seen.watches("/a") and seen.watches("/b") and seen.watches("/c")
    assert not seen.first_time("/a", _info(b"w1", 285))     # the new reader lagged: dropped
    assert seen.first_time("/a", _info(b"w1", 286))         # w1 passed; w2 not yet
    assert seen.watches("/a") and seen.repeated == 1
    assert not seen.first_time("/a", _info(b"w2", 7))
    assert seen.first_time("/a", _info(b"w2", 8))           # every writer passed: not watched
    assert not seen.watches("/a")
    assert seen.first_time("/c", _info(b"w9", 1)) and seen.watches("/c")   # w1 has not passed
    assert not seen.first_time("/b", _info(b"w1", 1)) and seen.watches("/b")
    seen.settle(keep={"/b"})                                # a second overlap over
    assert seen.watches("/c") and not seen.first_time("/c", _info(b"w9", 1))


def test_the_new_reader_joins_on_once_it_brings_the_next_sample_of_every_writer() -> None:
    join = OverlapJoin(repair_s=3.0)
    assert join.joined(0.0)                                 # nothing of the old: no condition
    join.note("/a", _info(b"w1", 10), False, 0.0)
    join.note("/a", _info(b"w1", 11), False, 0.1)
    assert join.gaps(0.1) == ["/a: old reader at 11, new one at nothing yet"]
    join.note("/a", _info(b"w1", 14), True, 0.2)            # the writer matched it late
    assert join.gaps(0.2) == ["/a: old reader at 11, new one from 14"] and not join.lost(0.2)
    join.note("/a", _info(b"w1", 12), False, 0.3)
    assert not join.joined(0.3)
    join.note("/a", _info(b"w1", 13), False, 0.4)           # the old one reached 13: no gap
    assert join.joined(0.4)
    join.note("/b", _info(b"w2", 5), False, 0.5)            # another topic, another writer
    join.note("/b", _info(b"w3", 1), True, 0.5)
    assert join.gaps(0.5) == ["/b: old reader at 5, new one at nothing yet"]
    join.note("/b", _info(b"w2", 5), True, 0.6)             # the same sample through both
    assert join.joined(0.6)
    join.note("/c", {"publication_sequence_number": None}, False, 0.7)   # nothing names it
    assert join.joined(0.7)


def test_a_gap_the_old_reader_leaves_open_past_a_resend_is_lost_not_waited_for() -> None:
    """The old reader went deaf (the cut a move is for): what it missed before the new reader's
    first sample will not come; the overlap does not wait for it, and it is named."""
    join = OverlapJoin(repair_s=3.0)
    join.note("/a", _info(b"w1", 7), False, 0.0)
    join.note("/a", _info(b"w1", 20), True, 1.0)
    assert not join.joined(3.9) and not join.lost(3.9)
    assert join.joined(4.0) and join.lost(4.0) == ["/a: samples 8..19"]


class _Sender:
    """Publishes JointState i = 0, 1, ... on TOPIC every 10 ms from the probe."""

    def __init__(self, probe: RosTestNode) -> None:
        self.pub = probe.node.create_publisher(JointState, TOPIC, 1000)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.pub.publish(_joint_state(self.sent))
            self.sent += 1
            time.sleep(0.01)

    def start(self) -> _Sender:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5.0)
        return self.sent


def _poll_for(rec: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rec.poll()
        time.sleep(0.02)


def _moved(rec: Any, record_s: float) -> Any:
    """Record for ``record_s``, then as after a SIGCONT: the next poll subscribes again
    through a new participant beside the old one. Returns the new one's link."""
    _poll_for(rec, record_s)
    rec.note_continued()
    rec.poll()
    assert rec.rehomes == 1 and len(rec._links) == 2
    return rec._links[-1]


@contextlib.contextmanager
def _recording(probe: RosTestNode, bag: Path) -> Iterator[tuple[Any, _Sender]]:
    """An in-process recorder of TOPIC (the probe's context) subscribed, and the sender
    started; the bag closed at the end."""
    from excavator_hil.bags.recorder import BagRecorder

    rec = BagRecorder(bag, [TOPIC], context=probe.context)
    sender = _Sender(probe)
    try:
        wait_for(lambda: rec.discover() or sender.pub.get_subscription_count() > 0, EVENT_WAIT_S,
                 "the recorder to subscribe")
        time.sleep(0.3)       # matched on the recorder's side too
        sender.start()
        yield rec, sender
    finally:
        sender.stop()
        rec.close()
        rec.destroy_node()


def test_after_a_stop_each_message_is_written_once_through_both_participants(
        probe: RosTestNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old participant reads on while the new one matches: both take the same messages
    for a while (the overlap held open here until the new one has taken some), and each is
    written once, none missing; then the old one's reading ends."""
    from excavator_hil.bags import recorder

    monkeypatch.setattr(recorder, "REHOME_OVERLAP_S", (60.0, 120.0))
    bag = tmp_path / "both"
    with _recording(probe, bag) as (rec, sender):
        new = _moved(rec, 0.5)
        wait_for(lambda: rec.poll() and rec._seen.repeated > 10, EVENT_WAIT_S,
                 lambda: f"messages through both participants (new one matched "
                 f"{new.subscriptions[TOPIC].get_publisher_count()} writers)", 0.02)
        monkeypatch.setattr(recorder, "REHOME_OVERLAP_S", (0.0, 120.0))
        rec.poll()
        assert rec._links == [new]
        _poll_for(rec, 0.3)
        sent = sender.stop()
        time.sleep(0.3)
        rec.poll()
    assert _positions(bag) == [float(i) for i in range(sent)]


def test_a_deaf_old_participant_loses_nothing_once_the_new_one_has_matched(
        probe: RosTestNode, tmp_path: Path) -> None:
    """The cut, made by hand: right after the move the old participant hears nothing more.
    Every message sent once the new participant has matched the writer is written, once and in
    order, and the old participant's reading ends, at the latest a resend's time
    (DRAIN_RESEND_S) after the new one's first message."""
    from excavator_hil.bags import recorder

    bag = tmp_path / "deaf"
    with _recording(probe, bag) as (rec, sender):
        new = _moved(rec, 0.3)
        old = rec._links[0]
        for sub in old.subscriptions.values():      # deaf: its subscriptions gone
            old.node.destroy_subscription(sub)
        old.subscriptions.clear()
        wait_for(lambda: new.subscriptions[TOPIC].get_publisher_count() > 0, EVENT_WAIT_S,
                 "the new participant to match the writer")
        time.sleep(0.3)       # matched on the writer's side too
        first_after = sender.sent
        wait_for(lambda: rec.poll() is not None and rec._links == [new],
                 recorder.DRAIN_RESEND_S + 10.0, "the old participant's reading to end", 0.02)
        sent = sender.stop()
        time.sleep(0.3)
        rec.poll()
    positions = _positions(bag)
    assert positions == sorted(set(positions)), "a message twice or out of order"
    assert positions[-(sent - first_after):] == [float(i) for i in range(first_after, sent)]


def test_the_old_participant_reads_on_until_the_writer_has_matched_the_new_one(
        probe: RosTestNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new participant matched the writer on its side, but the writer sends to it only
    later (its side of discovery lagging: the new reader's takes hide what was sent before
    the test lets it through): the old participant reads on until the new one's samples join
    on to its own, and no message is lost in between. Released when the new one had matched,
    the old one took what only it had received with it (the official CI of 6f995a8 lost two
    so)."""
    from excavator_hil.bags import reader_links, recorder

    join_ns = [2**63]   # what was sent before this reaches a new reader: nothing yet

    class LateLink(reader_links.ReaderLink):
        def take(self) -> list[tuple[str, Any, dict[str, Any]]]:
            taken = super().take()
            if self.close is None:   # the recorder's own participant: the old one
                return taken
            return [t for t in taken if t[2]["source_timestamp"] >= join_ns[0]]

    monkeypatch.setattr(recorder, "ReaderLink", LateLink)
    monkeypatch.setattr(recorder, "REHOME_OVERLAP_S", (0.0, 120.0))
    bag = tmp_path / "late"
    with _recording(probe, bag) as (rec, sender):
        new = _moved(rec, 0.3)
        wait_for(lambda: new.subscriptions[TOPIC].get_publisher_count() > 0, EVENT_WAIT_S,
                 "the new participant to match the writer")
        _poll_for(rec, 0.5)
        assert len(rec._links) == 2, "the old participant went before the new one joined on"
        join_ns[0] = time.time_ns()   # the writer's side matches the new reader now
        wait_for(lambda: rec.poll() is not None and rec._links == [new], EVENT_WAIT_S,
                 "the old participant's reading to end once the new one joined on", 0.02)
        _poll_for(rec, 0.3)
        sent = sender.stop()
        time.sleep(0.3)
        rec.poll()
    assert _positions(bag) == [float(i) for i in range(sent)]


def test_bag_record_stopped_and_continued_subscribes_again_and_loses_nothing(
        probe: RosTestNode, tmp_path: Path) -> None:
    """``excavator-hil bag record`` stopped for 1.5 s (longer than Fast DDS's shared-memory
    watchdog's 1 s) while messages come, then continued: it says it subscribed through a new
    participant, and the bag holds every message sent, once, in order."""
    bag = tmp_path / "stopped"
    with _bag_record_process(probe, bag) as (rec, sender):
        time.sleep(0.5)
        before = _footprint(rec.pid)
        os.kill(rec.pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)
        finally:
            os.kill(rec.pid, signal.SIGCONT)
        wait_for(lambda: "subscribed again through a new DDS participant" in rec.log(),
                 EVENT_WAIT_S,
                 lambda: f"the recorder's move; its log:\n{rec.log()}")
        time.sleep(2.0)   # the new participant takes over (the old reads on until then)
        # ... and the old one is gone: a participant's threads and descriptors, not two
        wait_for(lambda: all(a <= b + 2 for a, b in zip(_footprint(rec.pid), before,
                                                         strict=True)), EVENT_WAIT_S,
                 lambda: f"the old participant gone: threads, descriptors {before} before the "
                 f"stop, {_footprint(rec.pid)} now; its log:\n{rec.log()}")
        sent = sender.stop()
        time.sleep(0.5)
        os.kill(rec.pid, signal.SIGINT)
        assert rec.proc.wait(EVENT_WAIT_S) == 0, rec.log()
    assert "was stopped: subscribed again" in rec.log()
    assert _positions(bag) == [float(i) for i in range(sent)], rec.log()


def test_a_killed_recorder_has_written_what_it_took(probe: RosTestNode, tmp_path: Path) -> None:
    """Every message taken reaches the file while ``bag record`` runs, not only at its close:
    once the sender stops, the running recorder's file holds them all, and a SIGKILL loses
    none of them. rosbags held them in a pending chunk until 1 MiB (the chaos soak's killed
    recorder lost 1.8 s from before the kill)."""
    bag = tmp_path / "killed"
    with _bag_record_process(probe, bag) as (rec, sender):
        time.sleep(2.0)
        sent = sender.stop()
        expected = [float(i) for i in range(sent)]
        wait_for(lambda: _salvaged_positions(bag) == expected, EVENT_WAIT_S,
                 lambda: f"the {sent} messages sent in the running recorder's file (it holds "
                 f"{len(_salvaged_positions(bag) or [])}); its log:\n{rec.log()}")
        os.kill(rec.pid, signal.SIGKILL)
        rec.proc.wait(EVENT_WAIT_S)
    assert _salvaged_positions(bag) == expected
