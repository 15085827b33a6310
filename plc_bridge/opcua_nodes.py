"""OPC UA addresses of the data-block variables, as Siemens CPUs name them; pure (no asyncua).

- S7-1500 (standard SIMATIC interface, firmware >= 2.0): every variable of a data block marked
  "Accessible from HMI/OPC UA" is a node with the string identifier ``"<DB name>"."<field>"`` in
  the namespace ``http://www.siemens.com/simatic-s7-opcua``. Siemens: "By default this namespace
  has the Index 3. The index may change", so the index is asked of the server at each connect.
  The DB names are the ones ``scl_export`` generates (``PlcBridge_<block>``).
- S7-1200 (firmware >= 4.4): no standard interface; a user "server interface" maps the
  variables to numeric identifiers in the interface's own namespace URI: given per field in
  ``opcua_node_ids`` (``"control.alive = 2"``). Known from third-party sources only
  (docs/plc_setup.md section 8, "What was checked").

Each field is written with an explicit variant type (a CPU answers BadTypeMismatch to a guessed
one): REAL -> Float, INT -> Int16, DINT -> Int32, BOOL -> Boolean, UINT and WORD -> UInt16, the
S7-1500 Communication Function Manual's mapping (A5E03735815, chapter 9).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout
from plc_bridge.errors import BridgeConfigError

SIEMENS_NAMESPACE_URI = "http://www.siemens.com/simatic-s7-opcua"
# S7 type -> OPC UA built-in type (the name of asyncua's ua.VariantType member)
VARIANT_TYPES: dict[str, str] = {"REAL": "Float", "INT": "Int16", "DINT": "Int32",
                                 "BOOL": "Boolean", "UINT": "UInt16", "WORD": "UInt16"}
BLOCKS = ("control", "monitor", "plant_in", "plant_out")


def db_name(layout: DbLayout) -> str:
    """The data block's name in TIA Portal, as ``scl_export`` generates it."""
    return f"PlcBridge_{layout.name}"


def block_role(config: BridgeConfig, layout: DbLayout) -> str:
    """``control``, ``monitor``, ``plant_in`` or ``plant_out``: the key in ``opcua_node_ids``."""
    for role in BLOCKS:
        if getattr(config, role) is layout:
            return role
    raise BridgeConfigError(f"data block {layout.name!r} is not one of {', '.join(BLOCKS)}")


@dataclass(frozen=True)
class FieldNode:
    """One variable: its field, the identifier (str for S7-1500, int for a server interface)
    in the namespace of ``namespace_uri``, and its variant type name."""

    field: str
    identifier: str | int
    variant: str

    def text(self, namespace_index: int | None = None) -> str:
        """``ns=3;s="DB"."field"`` (or ``nsu=<uri>;...`` when the index is not known yet)."""
        ns = "ns=?" if namespace_index is None else f"ns={namespace_index}"
        kind = "s" if isinstance(self.identifier, str) else "i"
        return f"{ns};{kind}={self.identifier}"


def parse_node_ids(entries: Iterable[str]) -> dict[tuple[str, str], int]:
    """``["control.alive = 2", ...]`` -> ``{("control", "alive"): 2}``; a bad entry is a
    ``BridgeConfigError`` naming it and the form."""
    out: dict[tuple[str, str], int] = {}
    for entry in entries:
        key, sep, value = str(entry).partition("=")
        block, dot, name = key.strip().partition(".")
        value = value.strip().removeprefix("i=")
        if not sep or not dot or block not in BLOCKS or not name or not value.isdigit():
            raise BridgeConfigError(
                f"parameter 'opcua_node_ids': entry {entry!r} is not '<block>.<field> = <id>' "
                f"with block in {', '.join(BLOCKS)} and a numeric id, e.g. 'control.alive = 2'")
        if (block, name) in out:
            raise BridgeConfigError(f"parameter 'opcua_node_ids': {block}.{name} given twice")
        out[(block, name)] = int(value)
    return out


def field_nodes(config: BridgeConfig, layout: DbLayout,
                numeric: Mapping[tuple[str, str], int] | None = None) -> tuple[FieldNode, ...]:
    """The nodes of every field of ``layout`` under ``config.opcua_addressing``, in the block's
    order."""
    role = block_role(config, layout)
    ids = numeric if numeric is not None else parse_node_ids(config.opcua_node_ids)
    out: list[FieldNode] = []
    missing: list[str] = []
    for f in layout.fields:
        variant = VARIANT_TYPES[f.s7_type]
        if config.opcua_addressing == "s7_1500":
            out.append(FieldNode(f.name, f'"{db_name(layout)}"."{f.name}"', variant))
        elif (role, f.name) in ids:
            out.append(FieldNode(f.name, ids[(role, f.name)], variant))
        else:
            missing.append(f"{role}.{f.name}")
    if missing:
        raise BridgeConfigError(
            f"parameter 'opcua_node_ids' lacks {', '.join(missing)}: give each variable of the "
            f"server interface as '<block>.<field> = <id>' (TIA Portal: the interface's NodeId)")
    unknown = sorted(f"{b}.{n}" for (b, n) in ids if b == role and not layout.has(n))
    if unknown:
        raise BridgeConfigError(f"parameter 'opcua_node_ids' names {', '.join(unknown)}, which "
                                f"block {role} does not have; its fields: "
                                f"{', '.join(layout.names)}")
    return tuple(out)


def markdown_nodes(config: BridgeConfig, layout: DbLayout, namespace_index: int = 3) -> str:
    """docs/plc_setup.md's table of a block's OPC UA variables (S7-1500 addressing): node id,
    S7 type, OPC UA type, in the order the bridge writes them (``seq`` last)."""
    rows = ["| node id (S7-1500, namespace index as the CPU reports it) | S7 type | OPC UA type |",
            "|---|---|---|"]
    s7 = {f.name: f.s7_type for f in layout.fields}
    for n in field_nodes(dataclasses.replace(config, opcua_addressing="s7_1500"), layout, {}):
        rows.append(f"| `{n.text(namespace_index)}` | {s7[n.field]} | {n.variant} |")
    return "\n".join(rows)
