"""rosbag2 files through the ``rosbags`` library: writing raw CDR messages, reading them back.

No rclpy here. Bags are real rosbag2 (metadata.yaml version 9, MCAP by default or sqlite3),
readable by ``ros2 bag play``, ``ros2 bag info`` and the ``mcap`` tools. Messages are kept as the
raw CDR bytes received from DDS: rclpy's ``serialize_message`` adds trailing bytes that rosbags
rejects, raw subscription bytes do not.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rosbags.highlevel import AnyReader, AnyReaderError
from rosbags.interfaces import (
    Connection,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.typesys import Stores, get_typestore

from excavator_hil.errors import BagError

STORAGES: dict[str, StoragePlugin] = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
TYPESTORE = get_typestore(Stores.ROS2_KILTED)
BAG_VERSION: Final = 9  # rosbag2's metadata version (Jazzy, Kilted: rosbag2_storage BagMetadata)
ROS_DISTRO = "kilted"  # the distro of the message types (TYPESTORE) and of the rclpy wheels


@dataclass(frozen=True)
class TopicQos:
    """The QoS a topic is offered with, as much as playback needs."""

    reliable: bool = True
    transient_local: bool = False
    depth: int = 10


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str  # e.g. "sensor_msgs/msg/JointState"
    timestamp_ns: int
    data: bytes  # CDR with its 4-byte encapsulation header


def _to_rosbags_qos(qos: TopicQos) -> Qos:
    zero = QosTime(sec=0, nsec=0)
    return Qos(
        history=QosHistory.KEEP_LAST, depth=qos.depth,
        reliability=QosReliability.RELIABLE if qos.reliable else QosReliability.BEST_EFFORT,
        durability=(QosDurability.TRANSIENT_LOCAL if qos.transient_local
                    else QosDurability.VOLATILE),
        deadline=zero, lifespan=zero, liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=zero, avoid_ros_namespace_conventions=False,
    )


def _from_connection(conn: Connection) -> TopicQos:
    profiles = getattr(conn.ext, "offered_qos_profiles", None) or []
    if not profiles or not isinstance(profiles[0], Qos):
        return TopicQos()
    return TopicQos(
        reliable=all(p.reliability != QosReliability.BEST_EFFORT for p in profiles),
        transient_local=any(p.durability == QosDurability.TRANSIENT_LOCAL for p in profiles),
        depth=max(1, *(p.depth for p in profiles)),
    )


class BagWriter:
    """Writes raw messages to a new rosbag2 directory; topics are added as they appear."""

    def __init__(self, path: str | Path, storage: str = "mcap"):
        if storage not in STORAGES:
            raise BagError(f"storage {storage!r} unknown: choose one of {sorted(STORAGES)}")
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"{self.path} exists already: rosbag2 writes a new directory; "
                           "choose another output path or remove it")
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=STORAGES[storage])
        try:
            self._writer.open()
        except WriterError as exc:   # rosbags' error, wrapped at this package's boundary
            raise BagError(f"{self.path}: cannot create the bag ({exc}); choose a writable "
                           "output path") from exc
        self._connections: dict[str, Connection] = {}
        self.counts: dict[str, int] = {}

    def add_topic(self, topic: str, msgtype: str, qos: TopicQos = TopicQos(),
                  type_hash: str | None = None) -> None:
        """``type_hash``: the RIHS01 type description hash the publishers announce (what
        ``ros2 bag record`` stores); by default the one of the Kilted type definition."""
        if topic in self._connections:
            return
        try:
            msgdef, _ = TYPESTORE.generate_msgdef(msgtype, ros_version=2)
            rihs01 = type_hash or TYPESTORE.hash_rihs01(msgtype)
        except KeyError:
            raise BagError(f"topic {topic}: message type {msgtype} is not a ROS 2 Kilted "
                           "standard type known to rosbags; custom types are not supported "
                           "yet") from None
        self._connections[topic] = self._writer.add_connection(
            topic, msgtype, msgdef=msgdef, rihs01=rihs01,
            offered_qos_profiles=[_to_rosbags_qos(qos)])
        self.counts[topic] = 0

    def write(self, topic: str, timestamp_ns: int, data: bytes) -> None:
        self._writer.write(self._connections[topic], timestamp_ns, data)
        self.counts[topic] += 1

    def flush(self) -> None:
        """Put the messages written so far into the file, where :func:`salvage_bag` finds them
        if the recorder is killed. rosbags' MCAP writer holds messages in a pending chunk until
        it passes 1 MiB (seconds of the demo's topics): that chunk is closed here and the file
        flushed to the OS. rosbags' sqlite3 writer commits only at its close: its transaction
        is committed here (the database then holds them; :func:`salvage_bag` reads MCAP)."""
        storage: Any = self._writer.storage
        chunk = getattr(storage, "chunk", None)
        if chunk is not None and any(chunk.msgs.values()):
            storage.close_chunk()
            storage.bio.flush()
        elif getattr(storage, "conn", None) is not None:
            storage.conn.commit()

    def close(self) -> None:
        """Finish the bag. The metadata (metadata.yaml, and the copy inside the MCAP file or the
        sqlite3 database) names the ROS distro as ``ros2 bag record`` does; rosbags writes
        ``rosbags`` there."""
        storage = self._writer.storage
        if storage is not None:
            close_storage = storage.close
            # rosbags has no hook for the metadata it writes: wrap its storage's close
            storage.close = lambda version, metadata: close_storage(  # type: ignore[method-assign]
                version, _with_distro(metadata))
        self._writer.close()
        meta = self.path / "metadata.yaml"
        meta.write_text(_with_distro(meta.read_text()))
        for db in self.path.glob("*.db3"):
            import sqlite3

            with contextlib.closing(sqlite3.connect(db)) as conn, conn:
                conn.execute("UPDATE schema SET ros_distro = ?", (ROS_DISTRO,))

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_distro(metadata_yaml: str) -> str:
    return re.sub(r"^(\s*)ros_distro: .*$", rf"\g<1>ros_distro: {ROS_DISTRO}", metadata_yaml,
                  flags=re.MULTILINE)


@dataclass(frozen=True)
class BagContents:
    """A bag's messages (time-ordered) and the QoS of each topic."""

    messages: list[BagMessage]
    topics: dict[str, tuple[str, TopicQos]]  # topic -> (msgtype, qos)

    @property
    def duration_ns(self) -> int:
        if not self.messages:
            return 0
        return self.messages[-1].timestamp_ns - self.messages[0].timestamp_ns


def read_bag(path: str | Path, topics: Sequence[str] | None = None) -> BagContents:
    """All messages of ``topics`` (all when None) from a rosbag2 directory (mcap or sqlite3,
    written by this tool or by ``ros2 bag record``)."""
    path = Path(path)
    if not (path / "metadata.yaml").is_file():
        raise BagError(f"{path} is not a rosbag2 directory (no metadata.yaml)")
    try:
        with AnyReader([path], default_typestore=TYPESTORE) as reader:
            conns = [c for c in reader.connections if topics is None or c.topic in topics]
            if topics is not None:
                missing = sorted(set(topics) - {c.topic for c in conns})
                if missing:
                    raise BagError(f"{path} has no topic {', '.join(missing)}; it has "
                                   f"{', '.join(sorted({c.topic for c in reader.connections}))}")
            info = {c.topic: (c.msgtype, _from_connection(c)) for c in conns}
            messages = [BagMessage(c.topic, c.msgtype, t, bytes(raw))
                        for c, t, raw in reader.messages(connections=conns)]
    except AnyReaderError as exc:   # rosbags' error, wrapped at this package's boundary
        raise BagError(f"{path} cannot be read as a rosbag2 directory: {exc}; check that "
                       "'ros2 bag info' reads it") from exc
    messages.sort(key=lambda m: m.timestamp_ns)
    return BagContents(messages=messages, topics=info)


def salvage_bag(path: str | Path, topics: Sequence[str] | None = None) -> BagContents:
    """The messages of a bag whose recorder was killed: no ``metadata.yaml`` and an MCAP file
    without its summary and footer, which ``read_bag`` (and ``ros2 bag info``) refuse. Every
    complete record of each ``*.mcap`` file in ``path`` is read, in file order, up to where the
    file breaks off; a chunk cut short by the kill is lost (the recorder writes a chunk at
    least every FLUSH_PERIOD_S, bags/recorder.py). Uncompressed MCAP only (what this package's
    recorder writes). QoS is not recovered (the defaults)."""
    messages = list(messages_in_file_order(path, topics))
    info = {m.topic: (m.msgtype, TopicQos()) for m in messages}
    messages.sort(key=lambda m: m.timestamp_ns)
    return BagContents(messages=messages, topics=info)


def messages_in_file_order(path: str | Path, topics: Sequence[str] | None = None
                           ) -> Iterator[BagMessage]:
    """The messages of the MCAP bag ``path`` as the recorder wrote them (its receive order),
    from every complete record, whether or not the recorder closed the bag: what a check of a
    stream's continuity reads when the receive stamps are not monotonic (simulated time that
    started again)."""
    path = Path(path)
    files = sorted(path.glob("*.mcap"))
    if not files:
        raise BagError(f"{path} holds no .mcap file")
    for file in files:
        for topic, msgtype, t, data in _mcap_records(file.read_bytes()):
            if topics is None or topic in topics:
                yield BagMessage(topic, msgtype, t, data)


_MCAP_MAGIC = b"\x89MCAP0\r\n"


def _mcap_records(raw: bytes) -> Iterator[tuple[str, str, int, bytes]]:
    """(topic, msgtype, log time [ns], CDR) of every complete message record in ``raw``,
    chunked or not; stops at the first incomplete record."""
    import struct

    if raw[:8] != _MCAP_MAGIC:
        raise BagError("not an MCAP file (bad magic)")
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}

    def records(buf: bytes, pos: int) -> Iterator[tuple[int, bytes]]:
        while pos + 9 <= len(buf):
            op, n = buf[pos], struct.unpack_from("<Q", buf, pos + 1)[0]
            if pos + 9 + n > len(buf):
                return   # cut short by the kill
            yield op, buf[pos + 9:pos + 9 + n]
            pos += 9 + n

    def text(body: bytes, pos: int) -> tuple[str, int]:
        n = struct.unpack_from("<I", body, pos)[0]
        return body[pos + 4:pos + 4 + n].decode(), pos + 4 + n

    def walk(buf: bytes, pos: int) -> Iterator[tuple[str, str, int, bytes]]:
        for op, body in records(buf, pos):
            if op == 0x03:                                  # schema
                sid = struct.unpack_from("<H", body, 0)[0]
                schemas[sid], _ = text(body, 2)
            elif op == 0x04:                                # channel
                cid, sid = struct.unpack_from("<HH", body, 0)
                topic, _ = text(body, 4)
                channels[cid] = (topic, schemas.get(sid, ""))
            elif op == 0x05:                                # message
                cid = struct.unpack_from("<H", body, 0)[0]
                log_time = struct.unpack_from("<Q", body, 6)[0]
                if cid in channels:
                    topic, msgtype = channels[cid]
                    yield topic, msgtype, log_time, bytes(body[22:])
            elif op == 0x06:                                # chunk
                compression, at = text(body, 28)
                if compression:
                    raise BagError(f"a chunk compressed with {compression!r}: only "
                                   "uncompressed MCAP can be salvaged")
                size = struct.unpack_from("<Q", body, at)[0]
                yield from walk(body[at + 8:at + 8 + size], 0)

    yield from walk(raw, 8)


def playback_offsets_s(stamps_ns: Iterable[int], rate: float) -> list[float]:
    """Seconds after the start at which each message is due, for a rate factor (2.0 = twice as
    fast). Raises ValueError for a non-positive or non-finite rate."""
    if not rate > 0.0 or rate == float("inf"):
        raise ValueError(f"rate {rate} must be a finite number > 0 (1.0 = original timing)")
    stamps = list(stamps_ns)
    if not stamps:
        return []
    first = stamps[0]
    return [(t - first) * 1e-9 / rate for t in stamps]


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.perf_counter() >= deadline``; the last 2 ms are spun for accuracy."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0.0:
            return
        if left > 0.002:
            time.sleep(left - 0.002)


def iter_schedule(contents: BagContents, rate: float, loop: bool
                  ) -> Iterator[tuple[float, BagMessage, int]]:
    """(due time in s from the start, message, bag time of that message) — forever with loop."""
    offsets = playback_offsets_s((m.timestamp_ns for m in contents.messages), rate)
    period = (contents.duration_ns * 1e-9 / rate) if contents.messages else 0.0
    # A loop restarts one mean message interval after the last message.
    gap = period / max(1, len(offsets) - 1)
    lap = 0
    while True:
        base = lap * (period + gap)
        for off, msg in zip(offsets, contents.messages, strict=True):
            yield base + off, msg, msg.timestamp_ns
        lap += 1
        if not loop or not contents.messages:
            return
