"""The Foxglove layout shipped with the project (``layouts/excavator_foxglove.json``), written with
foxglove-sdk's own layout model so that its format is the app's.

Left: the 3D panel in ``world``, following the machine's ``base_link``: the URDF (fetched from
the view's server as an asset), its frames from ``/tf``, the terrain and the soil force arrow.
Right, top to bottom: the PLC's command against its measured velocities, the bridge's latency,
the soil (bucket load, force magnitude), and the diagnostics of every node.

    python -m excavator_hil.foxglove_view.layout > layouts/excavator_foxglove.json
    python -m excavator_hil.foxglove_view.layout --machines exc1,exc2 > fleet_layout.json

test/test_foxglove_view.py checks that the shipped file is what this writes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence

from .node import urdf_asset


def build_layout(machines: Sequence[str] = ()) -> str:
    """The layout as JSON (indented, stable): for the view's one machine, or for a fleet's
    ``machines`` (namespaces, as the view's ``machines`` parameter): a URDF layer each, the
    camera on the first, each one's soil and PLC plotted (``/<ns>/plc/*``: the view's
    ``redis_db_base``)."""
    import foxglove.layouts as fl

    names = list(machines) or [""]
    prefix = f"{names[0]}/" if names[0] else ""

    def ch(m: str, name: str) -> str:
        return f"/{m}/{name}" if m else f"/{name}"

    def plot(title: str, *series: tuple[str, str]) -> fl.PlotPanel:
        return fl.PlotPanel(title=title, config=fl.PlotConfig(
            paths=[fl.PlotSeries(value=path, label=label) for path, label in series],
            show_legend=True, legend_display="top", time_window_mode="sliding",
            following_view_width=30.0))

    three_d = fl.ThreeDeePanel(title="Excavator", config=fl.ThreeDeeConfig(
        fixed_frame="world",
        follow_tf=f"{prefix}base_link", follow_mode="follow-position",
        scene=fl.BaseRendererSceneSettings(background_color="#87a7c4"),
        layers={f"excavator-urdf{'-' + m if m else ''}": fl.BaseRendererUrdfLayerSettings(
            instance_id=f"excavator-urdf{'-' + m if m else ''}",
            label=f"Excavator {m} (URDF)" if m else "Excavator (URDF)", source_type="url",
            url=urdf_asset(m), frame_prefix="", display_mode="visual",
            fallback_color="#f2b134") for m in names},
        topics={"/terrain": fl.BaseRendererSceneUpdateTopicSettings(visible=True),
                "/soil/wrench_arrow": fl.BaseRendererSceneUpdateTopicSettings(visible=True)}))
    # the PLC channels: /plc/* of the one bridge, or each machine's /<ns>/plc/* (a fleet's
    # view with redis_db_base)
    def who(m: str) -> str:
        return m + " " if m else ""

    right = fl.SplitContainer(direction="column", items=[
        fl.SplitItem(content=plot(
            "PLC: command vs measured", *[series for m in names for series in (
                (f"{ch(m, 'plc/command')}.longitudinal", f"{who(m)}command longitudinal [m/s]"),
                (f"{ch(m, 'plc/measured')}.longitudinal",
                 f"{who(m)}measured longitudinal [m/s]"),
                (f"{ch(m, 'plc/command')}.angular", f"{who(m)}command angular [rad/s]"),
                (f"{ch(m, 'plc/measured')}.angular", f"{who(m)}measured angular [rad/s]"))])),
        fl.SplitItem(content=plot(
            "PLC bridge latency", *[series for m in names for series in (
                (f"{ch(m, 'plc/latency')}.redis_rtt_ms", f"{who(m)}Redis round trip [ms]"),
                (f"{ch(m, 'plc/latency')}.plc_unacknowledged_writes",
                 f"{who(m)}writes not yet acknowledged"))])),
        fl.SplitItem(content=plot(
            "Soil", *[series for m in names for series in (
                (f"{ch(m, 'soil/bucket_load')}.volume_m3", f"{m + ' ' if m else ''}bucket load "
                 "[m^3]"),
                (f"{ch(m, 'soil/force')}.magnitude_n", f"{m + ' ' if m else ''}soil force [N]"))]
        )),
        fl.SplitItem(content=fl.DiagnosticsSummaryPanel(
            title="Diagnostics", config=fl.DiagnosticsSummaryConfig(
                topic_to_render="/diagnostics", sort_by_level=True))),
    ])
    layout = fl.Layout(content=fl.SplitContainer(direction="row", items=[
        fl.SplitItem(proportion=2, content=three_d), fl.SplitItem(proportion=1, content=right)]))
    return json.dumps(json.loads(layout.to_json()), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m excavator_hil.foxglove_view.layout",
        description="Write the Foxglove layout of the live view (docs/foxglove.md) to stdout.")
    parser.add_argument("--machines", default="", help="a fleet's namespaces, comma-separated "
                        "(e.g. exc1,exc2: the view's machines parameter); default: one machine")
    args = parser.parse_args(argv)
    names = [m.strip().strip("/") for m in args.machines.split(",") if m.strip()]
    bad = [m for m in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", m)]
    if bad:
        parser.error(f"--machines: {', '.join(bad)} is not a namespace (letters, digits, _)")
    sys.stdout.write(build_layout(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
