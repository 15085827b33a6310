"""docs/configuration.md's parameter tables, generated from the nodes' parameter specs.

Each table sits between ``<!-- parameters: NAME -->`` and ``<!-- /parameters -->`` in the
doc; ``NAME`` is a key of :data:`BLOCKS`. ``python -m excavator_hil.parameters_doc`` (or
``excavator-hil params-doc``) rewrites them; ``--check`` only compares and exits 1 when the
doc is out of date (``test/test_docs_config.py`` does the same), so the spec is the one source
of every name, unit, default, range and run-time flag.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from excavator_common.parameters import markdown_table, markdown_template_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _ik() -> str:
    from excavator_kinematics.ik_parameters import IK_PARAMETERS

    return markdown_table(IK_PARAMETERS.parameters)


def _sim_file() -> str:
    from excavator_sim.sim_config import CORE_PARAMETERS

    return markdown_table(CORE_PARAMETERS)


def _sim_soils() -> str:
    from excavator_sim.drivetrain.soil import SHIPPED_SOILS
    from excavator_sim.sim_config import TRACTION_SOILS

    return markdown_template_table(TRACTION_SOILS, SHIPPED_SOILS)


def _sim_node() -> str:
    from excavator_sim.sim_config import NODE_PARAMETERS

    return markdown_table(NODE_PARAMETERS, key_header="node parameter")


def _soil() -> str:
    from excavator_sim.soil.config import PARAMETERS

    return markdown_table(PARAMETERS)


def _soil_presets() -> str:
    from excavator_sim.soil.config import PRESETS, SHIPPED_PRESETS

    return markdown_template_table(PRESETS, SHIPPED_PRESETS)


def _teleop() -> str:
    from excavator_kinematics.teleop.config import PARAMETERS

    return markdown_table(PARAMETERS)


def _plc_bridge(section: str) -> Callable[[], str]:
    def table() -> str:
        from plc_bridge.parameters import markdown

        return markdown(section)
    return table


def _virtual_plc() -> str:
    from plc_bridge.parameters import markdown_virtual_plc

    return markdown_virtual_plc()


def _plant_link(node_only: bool) -> Callable[[], str]:
    def table() -> str:
        from plc_bridge.parameters import markdown_plant_link

        return markdown_plant_link(node_only)
    return table


def _foxglove_view() -> str:
    from excavator_common.parameters import markdown_table
    from excavator_hil.foxglove_view.parameters import FOXGLOVE_VIEW

    return markdown_table(FOXGLOVE_VIEW.parameters)


# block name -> its table (imports inside: each block needs only its own package)
BLOCKS: dict[str, Callable[[], str]] = {
    "ik_node": _ik,
    "sim_node": _sim_file,
    "sim_node traction soils": _sim_soils,
    "sim_node (node only)": _sim_node,
    "soil_node": _soil,
    "soil_node presets": _soil_presets,
    "teleop_node": _teleop,
    **{name: _plc_bridge(name) for name in ("plc_bridge connections", "plc_bridge transport",
                                            "plc_bridge loop",
                                            "plc_bridge data blocks", "plc_bridge vehicle",
                                            "plc_bridge (node only)")},
    "virtual_plc": _virtual_plc,
    "plant_link": _plant_link(False),
    "plant_link (node only)": _plant_link(True),
    "foxglove_view": _foxglove_view,
}

_BLOCK = re.compile(r"(<!-- parameters: (?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- /parameters -->)",
                    re.S)


def render(text: str) -> str:
    """``text`` with every marked block replaced by its generated table."""

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise KeyError(f"docs/configuration.md names parameter block {name!r}; known: "
                           f"{sorted(BLOCKS)}")
        return f"{m.group(1)}{BLOCKS[name]()}\n{m.group(4)}"

    return _BLOCK.sub(one, text)


def blocks_in(text: str) -> list[str]:
    return [m.group("name") for m in _BLOCK.finditer(text)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="excavator-hil params-doc", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="compare only; exit 1 when the doc differs from the specs")
    parser.add_argument("--doc", type=Path, default=DOC, help="the doc (default: %(default)s)")
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    new = render(text)
    missing = sorted(set(BLOCKS) - set(blocks_in(text)))
    if missing:
        print(f"{args.doc}: no '<!-- parameters: NAME -->' block for {missing}")
        return 1
    if args.check:
        if new != text:
            print(f"{args.doc} is out of date: run `excavator-hil params-doc`")
            return 1
        return 0
    if new != text:
        args.doc.write_text(new)
        print(f"updated {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
