"""S7 data-block layouts: offsets from declared fields, one contiguous encode/decode per block.

Offsets follow the rules of a non-optimized ("standard access") S7 data block, as TIA Portal
assigns them: big-endian; BOOLs packed into bits 0..7 of consecutive bytes (bit 0 is the least
significant bit of the byte); any non-BOOL field starts on an even byte (INT/UINT/WORD 2 B,
DINT/REAL 4 B); the block length is a whole number of words. One ``struct.Struct`` covers the
whole block, so a block costs one ``pack``/``unpack`` per cycle.

PDU limits (S7 protocol, one item per request): a read response carries at most
``pdu - 18`` data bytes, a write request at most ``pdu - 35`` (S7-1200: PDU 240 -> 222 / 205 B;
S7-1500: usually 480 -> 462 / 445 B).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from plc_bridge.errors import LayoutError

# S7 type -> (size in bytes, struct code, min, max). BOOL is handled bit-wise.
_NUMERIC_TYPES: dict[str, tuple[int, str, float, float]] = {
    "INT": (2, "h", -32768, 32767),
    "UINT": (2, "H", 0, 65535),
    "WORD": (2, "H", 0, 65535),
    "DINT": (4, "i", -(2**31), 2**31 - 1),
    "REAL": (4, "f", -3.4028234663852886e38, 3.4028234663852886e38),
}
S7_TYPES: tuple[str, ...] = ("BOOL", *_NUMERIC_TYPES)

READ_OVERHEAD_B = 18   # S7 header 12 + parameter 2 + data item header 4
WRITE_OVERHEAD_B = 35  # S7 header 12 + parameter 14 + data item header 4 + 5 bytes reserve


@dataclass(frozen=True)
class Field:
    """One variable of a data block.

    ``byte_offset`` [B] from the start of the block; ``bit`` is 0..7 for BOOL, None otherwise.
    """

    name: str
    s7_type: str
    unit: str
    comment: str
    byte_offset: int
    bit: int | None = None

    @property
    def address(self) -> str:
        """TIA Portal style offset, e.g. ``2.0`` for a BOOL or ``4`` for a REAL."""
        return f"{self.byte_offset}.{self.bit}" if self.bit is not None else str(self.byte_offset)

    @property
    def size(self) -> int:
        return 1 if self.s7_type == "BOOL" else _NUMERIC_TYPES[self.s7_type][0]


@dataclass(frozen=True)
class FieldSpec:
    """A declared field before offsets are assigned."""

    name: str
    s7_type: str
    unit: str = ""
    comment: str = ""


def parse_field_spec(text: str, where: str) -> FieldSpec:
    """Parse ``"name | TYPE | unit | comment"`` (unit and comment optional)."""
    parts = [p.strip() for p in str(text).split("|")]
    if len(parts) < 2 or not parts[0]:
        raise LayoutError(f"{where}: field {text!r} is not 'name | TYPE | unit | comment'; "
                          f"write e.g. 'speed_sp_left | REAL | m/s | left track setpoint'")
    name, s7_type = parts[0], parts[1].upper()
    unit = parts[2] if len(parts) > 2 else ""
    comment = " | ".join(parts[3:]) if len(parts) > 3 else ""
    return FieldSpec(name, s7_type, unit, comment)


class DbLayout:
    """A data block: fields with S7 offsets, encode/decode of the whole block at once."""

    def __init__(self, name: str, db_number: int, specs: Iterable[FieldSpec]):
        self.name = name
        self.db_number = int(db_number)
        self.fields: tuple[Field, ...] = self._assign_offsets(list(specs))
        self._by_name = {f.name: f for f in self.fields}
        self._build_struct()

    # --- offsets -------------------------------------------------------------------------------
    def _assign_offsets(self, specs: list[FieldSpec]) -> tuple[Field, ...]:
        if not specs:
            raise LayoutError(f"data block {self.name!r} declares no fields; add at least one")
        fields: list[Field] = []
        seen: set[str] = set()
        byte = 0   # next free byte
        bool_byte = 0  # byte of the open BOOL group
        bit = 0    # next free bit in the current BOOL byte (0 = no open BOOL byte)
        for spec in specs:
            if not spec.name.isidentifier():
                raise LayoutError(f"data block {self.name!r}: field name {spec.name!r} is not an "
                                  f"identifier; use letters, digits and '_'")
            if spec.name in seen:
                raise LayoutError(f"data block {self.name!r}: field {spec.name!r} declared twice")
            seen.add(spec.name)
            if spec.s7_type not in S7_TYPES:
                raise LayoutError(f"data block {self.name!r}: field {spec.name!r} has type "
                                  f"{spec.s7_type!r}; supported: {', '.join(S7_TYPES)}")
            if spec.s7_type == "BOOL":
                if bit == 0:
                    bool_byte = byte
                    byte += 1
                fields.append(Field(spec.name, "BOOL", spec.unit, spec.comment, bool_byte, bit))
                bit = (bit + 1) % 8
                continue
            bit = 0
            byte += byte % 2   # a non-BOOL field starts on an even byte
            fields.append(Field(spec.name, spec.s7_type, spec.unit, spec.comment, byte))
            byte += _NUMERIC_TYPES[spec.s7_type][0]
        self.size = byte + byte % 2   # whole words
        return tuple(fields)

    def _build_struct(self) -> None:
        # Walk the bytes: one code per numeric field, 'B' per BOOL byte, 'x' per padding byte.
        fmt = [">"]
        self._slots: list[tuple[str, Field | list[Field]]] = []
        pos = 0
        for f in self.fields:
            if f.s7_type == "BOOL":
                if f.bit == 0:
                    fmt.append("x" * (f.byte_offset - pos) + "B")
                    pos = f.byte_offset + 1
                    self._slots.append(("bools", [f]))
                else:
                    group = self._slots[-1][1]
                    assert isinstance(group, list)
                    group.append(f)
                continue
            fmt.append("x" * (f.byte_offset - pos) + _NUMERIC_TYPES[f.s7_type][1])
            pos = f.byte_offset + f.size
            self._slots.append(("value", f))
        fmt.append("x" * (self.size - pos))
        self._struct = struct.Struct("".join(fmt))
        assert self._struct.size == self.size

    # --- access --------------------------------------------------------------------------------
    def field(self, name: str) -> Field:
        try:
            return self._by_name[name]
        except KeyError:
            raise LayoutError(f"data block {self.name!r} has no field {name!r}; fields: "
                              f"{', '.join(self._by_name)}") from None

    def has(self, name: str) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def zero_values(self) -> dict[str, float | int | bool]:
        return {f.name: (False if f.s7_type == "BOOL" else 0) for f in self.fields}

    def encode(self, values: Mapping[str, float | int | bool], *,
               nonfinite_ok: bool = False) -> bytes:
        """The whole block as big-endian bytes. Every field must be given; a value outside its
        type's range (or a non-finite REAL) raises ``LayoutError`` naming the field.
        ``nonfinite_ok``: NaN and +-inf REALs are packed as they are (a measurement passed on
        as the sensor gave it, for the reader to judge), finite ones are still range-checked."""
        args: list[float | int] = []
        for kind, item in self._slots:
            if kind == "bools":
                assert isinstance(item, list)
                byte = 0
                for f in item:
                    if self._get(values, f):
                        byte |= 1 << (f.bit or 0)
                args.append(byte)
                continue
            assert isinstance(item, Field)
            value = self._get(values, item)
            if nonfinite_ok and item.s7_type == "REAL" and not math.isfinite(float(value)):
                args.append(float(value))
                continue
            args.append(self._checked(item, value))
        return self._struct.pack(*args)

    def decode(self, data: bytes | bytearray) -> dict[str, float | int | bool]:
        """Field values from the block's bytes (exactly ``size`` bytes)."""
        if len(data) != self.size:
            raise LayoutError(f"data block {self.name!r}: got {len(data)} bytes, the layout is "
                              f"{self.size} bytes; check the DB in the PLC matches the config")
        out: dict[str, float | int | bool] = {}
        for (kind, item), raw in zip(self._slots, self._struct.unpack(data), strict=True):
            if kind == "bools":
                assert isinstance(item, list)
                for f in item:
                    out[f.name] = bool((raw >> (f.bit or 0)) & 1)
            else:
                assert isinstance(item, Field)
                out[item.name] = raw
        return out

    def _get(self, values: Mapping[str, float | int | bool], f: Field) -> float | int | bool:
        try:
            return values[f.name]
        except KeyError:
            raise LayoutError(f"data block {self.name!r}: no value for field {f.name!r} "
                              f"({f.s7_type} at {f.address})") from None

    def _checked(self, f: Field, value: float | int | bool) -> float | int:
        _, _, lo, hi = _NUMERIC_TYPES[f.s7_type]
        if f.s7_type == "REAL":
            v = float(value)
            if not math.isfinite(v) or not lo <= v <= hi:
                raise LayoutError(f"data block {self.name!r}: field {f.name!r} (REAL at "
                                  f"{f.address}) got {value!r}; a REAL must be finite and within "
                                  f"+-3.4e38")
            return v
        if isinstance(value, float) and not value.is_integer():
            raise LayoutError(f"data block {self.name!r}: field {f.name!r} ({f.s7_type}) got "
                              f"{value!r}; it takes whole numbers {int(lo)}..{int(hi)}")
        v = int(value)
        if not lo <= v <= hi:
            raise LayoutError(f"data block {self.name!r}: field {f.name!r} ({f.s7_type} at "
                              f"{f.address}) got {v}, outside {int(lo)}..{int(hi)}")
        return v

    # --- PDU -----------------------------------------------------------------------------------
    def check_pdu(self, pdu_size: int, direction: str) -> None:
        """Raise ``LayoutError`` when the block does not fit one request of a ``pdu_size`` PDU.

        ``direction``: "read" (PLC -> bridge) or "write" (bridge -> PLC)."""
        limit = max_payload(pdu_size, direction)
        if self.size > limit:
            raise LayoutError(
                f"data block {self.name!r} (DB{self.db_number}) is {self.size} B; one {direction} "
                f"with PDU {pdu_size} B carries at most {limit} B. Remove fields, or use a CPU "
                f"with PDU 480 (S7-1500) and set pdu_size_bytes: 480")

    def describe(self) -> list[tuple[str, str, str, str, str]]:
        """Rows (offset, name, type, unit, comment) for documentation."""
        return [(f.address, f.name, f.s7_type, f.unit, f.comment) for f in self.fields]


def max_payload(pdu_size: int, direction: str) -> int:
    """Data bytes of one read ("read") or write ("write") item in a PDU of ``pdu_size`` B."""
    if direction == "read":
        return pdu_size - READ_OVERHEAD_B
    if direction == "write":
        return pdu_size - WRITE_OVERHEAD_B
    raise ValueError(f"direction must be 'read' or 'write', got {direction!r}")
