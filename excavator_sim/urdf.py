"""URDF of the excavator, generated from the same model the simulation runs.

The URDF mirrors the MuJoCo body tree built by :mod:`excavator_sim.model_builder` from the
geometry: the same link frames, the same joint names and axes (``swing`` about z; ``boom``,
``arm``, ``bucket`` and the passive linkage joints about (0, -1, 0); the three ``*_cylinder``
joints prismatic along the cylinder = the piston extension [m]). ``joint_states`` from the sim
therefore drives every link with robot_state_publisher, closed loops included (the sim publishes
the passive joints), and RViz can show the machine in ``world`` without any other TF source.

The root is ``world`` (the terrain's frame). The caterpillar's three planar MuJoCo joints become
a chain through two massless links, in MuJoCo's order (a body's joints compose in order):
``world`` -(``base_x``, prismatic along x [m])-> ``base_x_slider`` -(``base_y``, prismatic along
y [m])-> ``base_xy_slider`` -(``base_yaw``, continuous about z [rad])-> ``base_link`` (the
caterpillar), then the machine as before. URDF requires limits on a prismatic joint; the base
ones are +-``BASE_TRAVEL_LIMIT_M`` (the simulation does not limit them). A wheeled machine
(a machine preset with ``undercarriage:``) has under ``base_link`` its ``knuckle_<w>`` links on
the revolute ``steer_<w>`` joints (about z, within the steering's end stops) and its
``wheel_<w>`` links on the continuous ``wheel_<w>`` joints (about y), the names
``joint_states`` and ``plant/actuation`` carry. ``bucket_tip`` is a
fixed child of ``bucket`` at the teeth. Primitives: capsules become cylinders (URDF has no
capsule in RViz).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from excavator_common.frames import check_frame_prefix
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.drivetrain.wheeled import WheeledParams
from excavator_sim.model_builder import ModelOptions, build_model

ROOT_BODY = "caterpillar"  # named base_link in the URDF
WORLD_LINK = "world"
# The massless link each planar base joint but the last moves (see the module docstring).
BASE_INTERMEDIATE_LINKS = {"base_x": "base_x_slider", "base_y": "base_xy_slider"}
BASE_TRAVEL_LIMIT_M = 1.0e4  # URDF needs prismatic limits; the base is not limited [m]


def _rpy(quat: np.ndarray) -> tuple[float, float, float]:
    """Quaternion (w, x, y, z) -> URDF roll, pitch, yaw (fixed-axis x-y-z) [rad]."""
    w, x, y, z = (float(v) for v in quat)
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return roll, pitch, yaw


def _fmt(values: tuple[float, ...] | np.ndarray) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def _link_name(model: mujoco.MjModel, body: int) -> str:
    name = model.body(body).name
    return "base_link" if name == ROOT_BODY else name


def _origin(parent: ET.Element, pos: np.ndarray, quat: np.ndarray) -> None:
    ET.SubElement(parent, "origin", xyz=_fmt(pos), rpy=_fmt(_rpy(quat)))


def _visuals(link: ET.Element, model: mujoco.MjModel, body: int) -> None:
    for gid in range(model.ngeom):
        if model.geom_bodyid[gid] != body:
            continue
        gtype = model.geom_type[gid]
        size = model.geom_size[gid]
        if gtype == mujoco.mjtGeom.mjGEOM_BOX:
            shape = ("box", {"size": _fmt(2 * size)})
        elif gtype in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
            shape = ("cylinder", {"radius": f"{size[0]:.6g}", "length": f"{2 * size[1]:.6g}"})
        else:
            continue
        visual = ET.SubElement(link, "visual", name=model.geom(gid).name or f"geom{gid}")
        _origin(visual, model.geom_pos[gid], model.geom_quat[gid])
        geometry = ET.SubElement(visual, "geometry")
        ET.SubElement(geometry, shape[0], shape[1])
        rgba = model.geom_rgba[gid]
        material = ET.SubElement(visual, "material", name=f"rgba_{_fmt(rgba).replace(' ', '_')}")
        ET.SubElement(material, "color", rgba=_fmt(rgba))


def _inertial(link: ET.Element, model: mujoco.MjModel, body: int) -> None:
    inertial = ET.SubElement(link, "inertial")
    _origin(inertial, model.body_ipos[body], model.body_iquat[body])
    ET.SubElement(inertial, "mass", value=f"{model.body_mass[body]:.6g}")
    ixx, iyy, izz = model.body_inertia[body]
    ET.SubElement(inertial, "inertia", ixx=f"{ixx:.6g}", iyy=f"{iyy:.6g}", izz=f"{izz:.6g}",
                  ixy="0", ixz="0", iyz="0")


def _joint(robot: ET.Element, model: mujoco.MjModel, jid: int, parent: str, child: str,
           pos: np.ndarray, quat: np.ndarray) -> None:
    """The URDF joint for MuJoCo joint ``jid`` (same name, axis and range) from parent to child,
    its origin at ``pos``/``quat`` in the parent (MuJoCo joints here sit at the body origin)."""
    limited = bool(model.jnt_limited[jid])
    if model.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE:
        kind = "prismatic"
    else:
        kind = "revolute" if limited else "continuous"
    joint = ET.SubElement(robot, "joint", name=model.joint(jid).name, type=kind)
    ET.SubElement(joint, "parent", link=parent)
    ET.SubElement(joint, "child", link=child)
    _origin(joint, pos, quat)
    ET.SubElement(joint, "axis", xyz=_fmt(model.jnt_axis[jid]))
    if limited:
        lo, hi = model.jnt_range[jid]
    elif kind == "prismatic":  # URDF requires limits on a prismatic joint
        lo, hi = -BASE_TRAVEL_LIMIT_M, BASE_TRAVEL_LIMIT_M
    else:
        return
    ET.SubElement(joint, "limit", lower=f"{lo:.6g}", upper=f"{hi:.6g}", effort="1e7",
                  velocity="10")


def _base_chain(robot: ET.Element, model: mujoco.MjModel, root: int) -> None:
    """``world`` -> massless intermediate links -> ``base_link`` through the root body's joints,
    in MuJoCo's order (the body's pose in its parent on the first joint)."""
    ET.SubElement(robot, "link", name=WORLD_LINK)
    first, count = int(model.body_jntadr[root]), int(model.body_jntnum[root])
    identity = np.array([1.0, 0.0, 0.0, 0.0])
    parent = WORLD_LINK
    if count == 0:
        joint = ET.SubElement(robot, "joint", name=f"{WORLD_LINK}_to_base_link", type="fixed")
        ET.SubElement(joint, "parent", link=parent)
        ET.SubElement(joint, "child", link="base_link")
        _origin(joint, model.body_pos[root], model.body_quat[root])
        return
    for jid in range(first, first + count):
        if np.any(model.jnt_pos[jid] != 0.0):
            raise ValueError(f"joint {model.joint(jid).name!r} is not at its body's origin: "
                             "the URDF chain assumes it is")
        last = jid == first + count - 1
        name = model.joint(jid).name
        child = "base_link" if last else BASE_INTERMEDIATE_LINKS.get(name, f"{name}_link")
        if not last:
            ET.SubElement(robot, "link", name=child)  # no inertial: massless
        on_first = jid == first
        _joint(robot, model, jid, parent, child,
               model.body_pos[root] if on_first else np.zeros(3),
               model.body_quat[root] if on_first else identity)
        parent = child


def _prefix_links(robot: ET.Element, prefix: str) -> None:
    """Prefix every link name (and the joints' parent/child references) but ``world``."""
    for link in robot.iter("link"):
        if link.get("name") != WORLD_LINK:
            link.set("name", prefix + link.get("name", ""))
    for tag in ("parent", "child"):
        for element in robot.iter(tag):
            if element.get("link") != WORLD_LINK:
                element.set("link", prefix + element.get("link", ""))


def urdf_from_model(model: mujoco.MjModel, name: str = "excavator", frame_prefix: str = ""
                    ) -> str:
    """URDF XML for a model built by :func:`build_model`: root ``world``, the planar base joints,
    then ``base_link`` (the body ``caterpillar``) and every body below it. ``frame_prefix``
    (e.g. ``exc1/``) goes before every link name but ``world``, the frame a fleet shares."""
    check_frame_prefix(frame_prefix)
    robot = ET.Element("robot", name=name)
    root = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, ROOT_BODY)
    _base_chain(robot, model, root)
    for body in range(1, model.nbody):
        if body != root and not _descends_from(model, body, root):
            continue
        link = ET.SubElement(robot, "link", name=_link_name(model, body))
        _inertial(link, model, body)
        _visuals(link, model, body)
        if body == root:
            continue
        parent = _link_name(model, model.body_parentid[body])
        child = _link_name(model, body)
        if model.body_jntnum[body] == 0:
            joint = ET.SubElement(robot, "joint", name=f"{parent}_to_{child}", type="fixed")
            ET.SubElement(joint, "parent", link=parent)
            ET.SubElement(joint, "child", link=child)
            _origin(joint, model.body_pos[body], model.body_quat[body])
        else:
            if model.body_jntnum[body] > 1:
                raise ValueError(f"body {child!r} has {model.body_jntnum[body]} joints: only "
                                 "the root body may have several")
            _joint(robot, model, int(model.body_jntadr[body]), parent, child,
                   model.body_pos[body], model.body_quat[body])
    # bucket_tip: a fixed frame at the teeth edge centre.
    tip_site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "bucket_tip")
    ET.SubElement(robot, "link", name="bucket_tip")
    joint = ET.SubElement(robot, "joint", name="bucket_to_bucket_tip", type="fixed")
    ET.SubElement(joint, "parent", link="bucket")
    ET.SubElement(joint, "child", link="bucket_tip")
    _origin(joint, model.site_pos[tip_site], model.site_quat[tip_site])
    if frame_prefix:
        _prefix_links(robot, frame_prefix)
    ET.indent(robot)
    return ET.tostring(robot, encoding="unicode", xml_declaration=False)


def _descends_from(model: mujoco.MjModel, body: int, ancestor: int) -> bool:
    while body > 0:
        body = int(model.body_parentid[body])
        if body == ancestor:
            return True
    return False


def generate_urdf(geometry: ExcavatorGeometry | None = None, track_width_m: float = 2.6,
                  frame_prefix: str = "", wheels: WheeledParams | None = None) -> str:
    """URDF XML string of the excavator described by ``geometry`` (default config), link names
    but ``world`` prefixed with ``frame_prefix``; on ``wheels`` (a wheeled machine preset's
    ``undercarriage.params``) instead of tracks."""
    geometry = geometry if geometry is not None else default_geometry()
    built = build_model(geometry, Linkage(geometry),
                        ModelOptions(terrain_contact=False, wheels=wheels), track_width_m)
    return '<?xml version="1.0"?>\n' + urdf_from_model(built.model, frame_prefix=frame_prefix)


def main(argv: list[str] | None = None) -> int:
    """CLI: write the URDF generated from a geometry file to stdout or ``--output``."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Generate the excavator URDF from the geometry.")
    parser.add_argument("--geometry", type=Path, default=None,
                        help="geometry YAML (default: the package's config/excavator.yaml)")
    parser.add_argument("--machine", default="",
                        help="machine preset (a name in config/machines/ or a file): its "
                             "linkage, masses and undercarriage (wheels) over the geometry")
    parser.add_argument("-o", "--output", type=Path, default=None, help="file (default: stdout)")
    args = parser.parse_args(argv)
    geometry = ExcavatorGeometry.from_yaml(args.geometry) if args.geometry else None
    wheels = None
    if args.machine:
        from excavator_sim.machines import load_machine

        preset = load_machine(args.machine)
        geometry = preset.geometry(geometry)
        wheels = preset.undercarriage.params if preset.undercarriage is not None else None
    text = generate_urdf(geometry, wheels=wheels)
    if args.output is None:
        print(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
