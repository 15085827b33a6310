"""The control DB's ``crc``: a command is taken whole or not at all, whatever carries it.

A write of several variables is not one snapshot on a PLC: over OPC UA the CPU keeps only each
elementary variable consistent and may scan between any two of them (the S7-1500 system
manual, "Consistency"; OPC UA Part 4 5.10.4 does not even order the operations of one Write),
and a PUT of part of a block is the same. So the bridge seals each command with a CRC over the
block's bytes, and the PLC takes a command only when its CRC matches what it finds: a scan
that lands while a command is half written finds the CRC of one command over the values of
another, and takes nothing (not a refusal: the next scan finds it whole). One Write request per
command then suffices, over OPC UA as over S7. This is how PROFIsafe guards its messages on a
channel it does not trust (a consecutive number, a watchdog and a CRC, IEC 61784-3's "black
channel"): ``seq`` and the PLC's watchdog were already here, the CRC completes them.

The CRC is CRC-32/ISO-HDLC (the CRC of IEEE 802.3, zlib and PKZIP: polynomial 0x04C11DB7
reflected, initial value and final XOR 0xFFFFFFFF; check value 0xCBF43926 over the ASCII
"123456789", the CRC catalogue of R. Williams / G. Ewing, "CRC-32/ISO-HDLC"), computed over the
block's bytes in its S7 layout (big-endian, BOOLs packed, padding bytes 0) with the 4 bytes of
the ``crc`` field itself left out, and stored in that DINT as the same 32 bits
(two's complement). The generated ``PlcBridge_Guard`` computes it the same way, a byte at a
time, most significant byte of each field first (``crc_feed``, plc_bridge.scl_export); a
residual risk of 2^-32 per torn scan that a half-written block passes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from plc_bridge.db_layout import DbLayout

CRC_FIELD = "crc"
CRC_POLY_REFLECTED = 0xEDB88320   # 0x04C11DB7 bit-reversed: the PLC's bitwise loop uses it


def block_crc(layout: DbLayout, data: bytes | bytearray) -> int:
    """The CRC-32 of ``data`` (the block's ``layout.size`` bytes) without its ``crc`` field, as
    the unsigned 32-bit value."""
    at = layout.field(CRC_FIELD).byte_offset
    return zlib.crc32(bytes(data[at + 4:]), zlib.crc32(bytes(data[:at]))) & 0xFFFFFFFF


def seal(layout: DbLayout, data: bytes | bytearray) -> bytes:
    """``data`` with its ``crc`` field set to the CRC of the rest: a whole command."""
    at = layout.field(CRC_FIELD).byte_offset
    return bytes(data[:at]) + block_crc(layout, data).to_bytes(4, "big") + bytes(data[at + 4:])


def is_whole(layout: DbLayout, data: bytes | bytearray) -> bool:
    """True when the block's ``crc`` matches its other bytes: no command half written."""
    at = layout.field(CRC_FIELD).byte_offset
    return int.from_bytes(data[at:at + 4], "big") == block_crc(layout, data)


@dataclass(frozen=True)
class FeedStep:
    """One step of the PLC's CRC loop: the low ``nbytes`` bytes of a 32-bit value, most
    significant first. ``fields``: the field whose value it is, or the BOOLs packed in one byte
    (bit ``Field.bit``), or () for padding (zeros)."""

    fields: tuple[str, ...]
    nbytes: int


def crc_feed(layout: DbLayout) -> list[FeedStep]:
    """The block's bytes without the ``crc`` field, as the PLC feeds them to its CRC loop: field
    by field in layout order, BOOL bytes packed, padding as zeros. The generated SCL renders
    these steps, and ``feed_crc`` runs them here, so a test holds the two against zlib."""
    steps: list[FeedStep] = []
    pos = 0
    crc_at = layout.field(CRC_FIELD).byte_offset
    for f in layout.fields:
        if f.s7_type == "BOOL" and f.bit != 0:
            last = steps[-1]
            steps[-1] = FeedStep((*last.fields, f.name), 1)
            continue
        if f.byte_offset > pos:
            steps.append(FeedStep((), f.byte_offset - pos))
        pos = f.byte_offset + f.size
        if f.byte_offset != crc_at:
            steps.append(FeedStep((f.name,), f.size))
    if layout.size > pos:
        steps.append(FeedStep((), layout.size - pos))
    return steps


def feed_crc(layout: DbLayout, values: dict[str, float | int | bool]) -> int:
    """The CRC as the PLC computes it: ``crc_feed``'s steps through the bitwise loop of the
    generated SCL (shift right, XOR the reflected polynomial when the bit shifted out is 1),
    one byte at a time; the unsigned value."""
    import struct

    crc = 0xFFFFFFFF
    for step in crc_feed(layout):
        if not step.fields:
            word = 0
        elif layout.field(step.fields[0]).s7_type == "BOOL":
            word = sum(1 << (layout.field(n).bit or 0) for n in step.fields if values[n])
        else:
            f = layout.field(step.fields[0])
            code = {"INT": ">h", "UINT": ">H", "WORD": ">H", "DINT": ">i", "REAL": ">f"}
            word = int.from_bytes(struct.pack(code[f.s7_type], values[f.name]), "big")
        crc = crc32_feed(crc, word, step.nbytes)
    return crc ^ 0xFFFFFFFF


def crc32_feed(crc: int, word: int, nbytes: int) -> int:
    """``PlcBridge_Crc32``: the low ``nbytes`` bytes of ``word``, most significant first, into
    the running (not yet final-XORed) CRC ``crc``, one bit at a time."""
    for k in range(nbytes - 1, -1, -1):
        crc ^= (word >> (8 * k)) & 0xFF
        for _ in range(8):
            crc = (crc >> 1) ^ CRC_POLY_REFLECTED if crc & 1 else crc >> 1
    return crc
