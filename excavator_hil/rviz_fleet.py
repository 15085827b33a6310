"""RViz for a fleet: every machine in one scene, each under its frame prefix
(``rviz/fleet.rviz``, and what ``fleet.launch.py rviz:=true`` opens for its namespaces).

Built from the single machine's ``rviz/excavator.rviz`` (its panels, tools, view, grid and fixed
frame ``world``), with per machine ``<ns>``: a RobotModel from ``/<ns>/robot_description``
(whose links already carry the prefix ``<ns>/``, so the display's own TF Prefix stays empty:
setting it too would look for ``<ns>/<ns>/base_link``), its MarkerArray ``/<ns>/markers`` (off:
the RobotModel shows the machine; on, they need no TF) and its bucket soil; the terrain once
(``/soil/heightmap``, the one soil_node of ``shared_terrain:=true``) or per machine. TF is shared
(``/tf``: robot_state_publisher per machine, ``world`` the common root).

    python -m excavator_hil.rviz_fleet exc1,exc2 > rviz/fleet.rviz

test/test_rviz_fleet.py checks that the shipped file is what this writes, and parses it.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from excavator_common.machines import machine_namespace

ROBOT_MODEL = "rviz_default_plugins/RobotModel"
MARKER_ARRAY = "rviz_default_plugins/MarkerArray"
POINT_CLOUD = "rviz_default_plugins/PointCloud2"
MARKER = "rviz_default_plugins/Marker"


def _single() -> dict[str, Any]:
    from excavator_common.paths import share_dir

    data: dict[str, Any] = yaml.safe_load((share_dir() / "rviz" / "excavator.rviz").read_text())
    return data


def fleet_rviz(machines: Sequence[str], shared_terrain: bool = True,
               spacing_m: float = 20.0) -> str:
    """The RViz config (YAML text) showing ``machines`` (namespaces, as fleet.launch.py names
    them, ``spacing_m`` apart along world y: the camera on the middle of them) in one scene.
    ValueError naming a bad namespace or an empty list."""
    names = [machine_namespace(m) for m in machines]
    if not names:
        raise ValueError("no machines: give the fleet's namespaces, e.g. exc1,exc2")
    if len(set(names)) != len(names):
        raise ValueError(f"machines {names}: a namespace is named twice")
    config = _single()
    single = {d["Class"]: d for d in config["Visualization Manager"]["Displays"]}
    displays: list[dict[str, Any]] = [single["rviz_default_plugins/Grid"]]

    def topic(display: dict[str, Any], key: str, value: str) -> None:
        display[key] = {**display[key], "Value": value}

    for ns in names:
        label = ns.strip("/") or "root"
        robot = copy.deepcopy(single[ROBOT_MODEL])
        robot["Name"] = f"{label}: RobotModel ({ns.rstrip('/')}/robot_description)"
        topic(robot, "Description Topic", f"{ns.rstrip('/')}/robot_description")
        robot["TF Prefix"] = ""   # the URDF's links carry <ns>/ already
        markers = copy.deepcopy(single[MARKER_ARRAY])
        markers["Name"] = f"{label}: markers (no TF needed)"
        markers["Enabled"] = markers["Value"] = False
        topic(markers, "Topic", f"{ns.rstrip('/')}/markers")
        displays += [robot, markers]
        if not shared_terrain:
            displays += _terrain(single, f"{ns.rstrip('/')}/soil", f"{label}: ")
    if shared_terrain:
        displays += _terrain(single, "/soil", "")
    tf = copy.deepcopy(single["rviz_default_plugins/TF"])
    tf["Name"] = "TF (every machine's prefixed frames)"
    displays.append(tf)
    config["Visualization Manager"]["Displays"] = displays
    view = config["Visualization Manager"]["Views"]["Current"]
    span = spacing_m * (len(names) - 1)   # the camera on the middle of the fleet, all in sight
    view["Distance"] = float(view["Distance"]) + abs(span)
    view["Focal Point"] = {**view["Focal Point"], "Y": span / 2}
    header = ("# RViz for a fleet of " + ", ".join(names) + " (terrain "
              + ("shared" if shared_terrain else "per machine")
              + "): python -m excavator_hil.rviz_fleet; docs/rviz.md\n")
    return header + yaml.safe_dump(config, sort_keys=False, width=100)


def _terrain(single: dict[str, dict[str, Any]], base: str, label: str) -> list[dict[str, Any]]:
    cloud = copy.deepcopy(single[POINT_CLOUD])
    cloud["Name"] = f"{label}Terrain ({base}/heightmap)"
    cloud["Topic"] = {**cloud["Topic"], "Value": f"{base}/heightmap"}
    soil = copy.deepcopy(single[MARKER])
    soil["Name"] = f"{label}Bucket soil ({base}/bucket_soil)"
    soil["Topic"] = {**soil["Topic"], "Value": f"{base}/bucket_soil"}
    return [cloud, soil]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m excavator_hil.rviz_fleet",
        description="Write an RViz config showing a fleet's machines in one scene to stdout.")
    parser.add_argument("machines", help="the fleet's namespaces, comma-separated (exc1,exc2)")
    parser.add_argument("--spacing", type=float, default=20.0,
                        help="distance between machines along world y [m] (fleet.launch.py's "
                             "spacing, default 20)")
    parser.add_argument("--terrain-per-machine", action="store_true",
                        help="a terrain per machine (fleet.launch.py shared_terrain:=false)")
    args = parser.parse_args(argv)
    try:
        text = fleet_rviz([m for m in args.machines.split(",") if m.strip()],
                          shared_terrain=not args.terrain_per_machine,
                          spacing_m=args.spacing)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
