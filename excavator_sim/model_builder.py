"""The MuJoCo excavator, built in code with ``mujoco.MjSpec`` from the one geometry object.

Bodies (frames as in docs/simulation.md; side-view points (x, z) of the geometry sit at (x, 0, z)):

- ``caterpillar`` (= ``base_link``, origin A on the ground): planar joints ``base_x``, ``base_y``
  (slides along world x, y) and ``base_yaw`` (hinge about z). The tracks drive these three
  joints as a skid-steer vehicle; the machine stays on the ground plane (no roll/pitch/heave).
- A wheeled undercarriage (``ModelOptions.wheels``, a machine preset's ``undercarriage:``)
  replaces the track boxes by four wheels at the drive train's wheel positions (the centre of
  the wheel rectangle at base_link's origin): a steered wheel is a knuckle body
  ``knuckle_<w>`` on hinge ``steer_<w>`` (about z, limited to the steering's end stops) carrying
  body ``wheel_<w>`` on hinge ``wheel_<w>`` (about y: positive rolls forward); an unsteered
  wheel is body ``wheel_<w>`` on its hinge alone. These joints are the drive train's
  (:mod:`excavator_sim.drivetrain.wheeled`): the simulation sets them from it every period, and
  the URDF and ``joint_states`` carry them under the names ``plant/actuation`` uses. Their
  bodies are light (``WHEEL_BODY_MASS_KG``) and touch nothing: the undercarriage's mass is the
  ``caterpillar`` part's, the tyres' forces are the drive train's.
- ``chassis`` at B, hinge ``swing`` about +z.
- ``boom`` at C, ``arm`` at H, ``bucket`` at M: hinges ``boom``/``arm``/``bucket`` with axis
  (0, -1, 0), so positive = counter-clockwise in the side view, qpos = the linkage's relative
  joint angle.
- Each cylinder: a barrel body hinged at its pivot (``<name>_pivot``, axis (0, -1, 0), qpos = the
  barrel's angle in its parent's frame) and a rod body on a slide (``<name>``, qpos = the piston
  extension [m], the same definition as :class:`Linkage`). The rod eye is ``rod_length_m``
  beyond the rod origin.
- ``h_link`` hinged on the bucket-cylinder rod eye J (joint ``h_link``), ``side_link`` hinged on
  the bucket at L (joint ``side_link``).
- Four loops closed by site-to-site ``connect`` equalities: E (boom rod / boom), G (arm rod /
  arm), K (H link / arm), J (side link / H link). Sites make the constraint independent of the
  reference configuration.

The model is built in the reference pose (every joint at 0); the initial pose is a keyframe
``initial`` computed from :meth:`Linkage.points` for the requested joint angles, so the loops
close exactly at t = 0. Geoms are primitives sized from the points; only the bucket's contact
spheres (teeth edge, heel) touch the terrain (contype/conaffinity), so the linkage has no
self-contacts by construction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import mujoco
import numpy as np

from excavator_kinematics.geometry import Cylinder, ExcavatorGeometry, Vec2
from excavator_kinematics.linkage import Linkage
from excavator_sim.drivetrain.wheeled import WHEELS, WheeledParams
from excavator_sim.heightfield import TerrainGrid, add_height_field, fill_flat
from excavator_sim.hydraulics import Hydraulics, add_actuators

# Inertial properties of the upstream MuJoCo model (KennyVilella/excavator_simulator_mujoco,
# model/excavator/excavator.xml: Meshlab estimates, steel at 8000 kg/m^3), per body:
# (mass [kg], centre of mass [m], (Ixx, Iyy, Izz, Ixy, Ixz, Iyz) [kg m^2]), in the upstream
# body frames. Those frames are y-up (mesh convention), x the same as ours; they map to ours by
# (x, y, z)_upstream -> (x, -z, y). Masses here are scaled to config/excavator.yaml masses_kg.
_UPSTREAM_INERTIALS: dict[str, tuple[float, tuple[float, float, float], tuple[float, ...]]] = {
    "caterpillar": (12200.0, (-0.07, 0.386, 0.0), (4896, 10884, 6689, -46, 29, 12)),
    "chassis": (20592.0, (-0.486, 0.480, -0.15), (6958, 17170, 13393, -980, 2311, 677)),
    "boom": (1600.0, (1.729, 0.463, 0.0), (87, 1690, 1768, -14, 0.2, -0.02)),
    "arm": (880.0, (0.476, 0.119, 0.0), (15, 290, 302, 23, 0.2, -0.02)),
    "bucket": (450.0, (0.231, -0.468, 0.0), (77, 55, 65, -11, 0.2, -0.02)),
    "boom_cylinder": (116.0, (0.397, 0.0, 0.0), (2.8, 11, 8.5, 0, 0, 0)),
    "boom_rod": (29.0, (0.787, 0.0, 0.0), (0.7, 5.8, 5.1, 0, 0, 0)),
    "arm_cylinder": (63.0, (0.581, 0.0, 0.0), (0.07, 9.6, 9.6, 0, 0, 0)),
    "arm_rod": (30.0, (0.700, 0.0, 0.0), (0.03, 4.2, 4.2, 0, 0, 0)),
    "bucket_cylinder": (25.0, (0.332, 0.0, 0.0), (0.02, 1.9, 1.9, 0, 0, 0)),
    "bucket_rod": (16.0, (0.538, 0.0, 0.0), (0.02, 1.3, 1.3, 0, 0, 0)),
    "h_link": (17.0, (0.227, 0.0, 0.0), (0.09, 0.5, 0.5, 0, 0, 0)),
    "side_link": (18.0, (0.112, 0.0, 0.0), (0.06, 0.5, 0.5, 0, 0, 0)),
}

# Upstream frame -> ours: x stays, upstream y (up) -> z, upstream z -> -y.
_R_UPSTREAM = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])

# Joint names.
BASE_JOINTS = ("base_x", "base_y", "base_yaw")
ACTIVE_JOINTS = ("swing", "boom", "arm", "bucket")
CYLINDER_JOINTS = ("boom_cylinder", "arm_cylinder", "bucket_cylinder")
PASSIVE_JOINTS = ("boom_cylinder_pivot", "arm_cylinder_pivot", "bucket_cylinder_pivot",
                  "h_link", "side_link")
# Loop closures: (name, site on body 1, site on body 2).
LOOPS = (("loop_E", "boom_rod_E", "boom_E"), ("loop_G", "arm_rod_G", "arm_G"),
         ("loop_K", "h_link_K", "arm_K"), ("loop_J", "side_link_J", "h_link_J"))

# A wheeled undercarriage's joints (see the module docstring) and their bodies' mass [kg]: they
# show the wheels, the drive train moves them.
WHEEL_BODY_MASS_KG = 1.0
WHEEL_WIDTH_M = 0.6   # [m] drawn: a twin 8.25-20 / 10.00-20 class wheel


def wheel_joint_names(params: WheeledParams) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(wheel joints, steering joints)`` of a wheeled undercarriage, in ``WHEELS`` order."""
    return (tuple(f"wheel_{w}" for w in WHEELS), tuple(f"steer_{w}" for w in params.steered))


_AXIS_SIDE = [0.0, -1.0, 0.0]  # positive = counter-clockwise in the side view (x right, z up)
CONTACT_RADIUS = 0.05  # [m] bucket contact spheres (teeth edge and heel)


@dataclass(frozen=True)
class InitialPose:
    """Initial joint angles [rad] and base pose in ``world`` ([m], [m], [rad])."""

    swing: float = 0.0
    boom: float = math.radians(30.0)
    arm: float = math.radians(-60.0)
    bucket: float = math.radians(70.0)
    base_x: float = 0.0
    base_y: float = 0.0
    base_yaw: float = 0.0


@dataclass(frozen=True)
class ModelOptions:
    """Everything the builder needs besides the geometry."""

    hydraulics: Hydraulics | None = None
    terrain: TerrainGrid = field(default_factory=TerrainGrid)
    terrain_contact: bool = True
    initial: InitialPose = field(default_factory=InitialPose)
    timestep: float = 0.001
    wheels: WheeledParams | None = None   # a wheeled undercarriage; None: tracks
    equality_solref: tuple[float, float] = (0.002, 1.0)
    equality_solimp: tuple[float, float, float] = (0.99, 0.999, 0.001)


def _side(p: tuple[float, float] | np.ndarray) -> list[float]:
    """Side-view (x, z) -> 3-D (x, 0, z)."""
    return [float(p[0]), 0.0, float(p[1])]


def _atan2(v: np.ndarray) -> float:
    return float(math.atan2(v[1], v[0]))


def _set_inertial(body: mujoco.MjsBody, part: str, mass: float) -> None:
    up_mass, com, full = _UPSTREAM_INERTIALS[part]
    ixx, iyy, izz, ixy, ixz, iyz = full
    inertia_up = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]], dtype=float)
    inertia = _R_UPSTREAM @ inertia_up @ _R_UPSTREAM.T * (mass / up_mass)
    body.explicitinertial = True
    body.mass = mass
    body.ipos = (_R_UPSTREAM @ np.array(com)).tolist()
    body.fullinertia = [inertia[0, 0], inertia[1, 1], inertia[2, 2],
                        inertia[0, 1], inertia[0, 2], inertia[1, 2]]


def _visual(geom: mujoco.MjsGeom, rgba: list[float]) -> mujoco.MjsGeom:
    geom.contype = 0
    geom.conaffinity = 0
    geom.mass = 0.0
    geom.density = 0.0
    geom.rgba = rgba
    return geom


def _capsule(body: mujoco.MjsBody, p0: list[float], p1: list[float], radius: float,
             rgba: list[float], name: str = "") -> mujoco.MjsGeom:
    g = body.add_geom()
    g.name = name
    g.type = mujoco.mjtGeom.mjGEOM_CAPSULE
    g.fromto = p0 + p1
    g.size = [radius, 0.0, 0.0]
    return _visual(g, rgba)


def _box(body: mujoco.MjsBody, p0: list[float], p1: list[float], half_y: float,
         half_thickness: float, rgba: list[float], name: str = "") -> mujoco.MjsGeom:
    """A box from p0 to p1 (both in the x-z plane), ``half_y`` wide across, thin across.

    (MuJoCo's ``fromto`` gives a box a square cross-section, so the pose is set here.)
    """
    dx, dz = p1[0] - p0[0], p1[2] - p0[2]
    angle = math.atan2(dz, dx)  # about -y: x turns toward +z
    g = body.add_geom()
    g.name = name
    g.type = mujoco.mjtGeom.mjGEOM_BOX
    g.pos = [0.5 * (p0[0] + p1[0]), 0.5 * (p0[1] + p1[1]), 0.5 * (p0[2] + p1[2])]
    g.quat = [math.cos(0.5 * angle), 0.0, -math.sin(0.5 * angle), 0.0]
    g.size = [0.5 * math.hypot(dx, dz), half_y, half_thickness]
    return _visual(g, rgba)


def _hinge(body: mujoco.MjsBody, name: str, rng: tuple[float, float] | None = None,
           axis: list[float] | None = None) -> mujoco.MjsJoint:
    j = body.add_joint()
    j.name = name
    j.type = mujoco.mjtJoint.mjJNT_HINGE
    j.axis = axis if axis is not None else _AXIS_SIDE
    if rng is not None:
        j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
        j.range = list(rng)
    else:
        j.limited = mujoco.mjtLimited.mjLIMITED_FALSE
    return j


def _site(body: mujoco.MjsBody, name: str, pos: list[float]) -> None:
    s = body.add_site()
    s.name = name
    s.pos = pos
    s.size = [0.03, 0.0, 0.0]
    s.rgba = [1.0, 0.1, 0.1, 0.6]


YELLOW = [0.95, 0.65, 0.12, 1.0]
DARK = [0.2, 0.2, 0.22, 1.0]
ROD = [0.9, 0.9, 0.92, 1.0]
STEEL = [0.7, 0.72, 0.75, 1.0]
GREY = [0.45, 0.45, 0.48, 1.0]


def _cylinder_bodies(parent: mujoco.MjsBody, cyl: Cylinder, axis: str, pivot: Vec2,
                     masses: Mapping[str, float], barrel_radius: float, rod_radius: float,
                     eye: str | None) -> mujoco.MjsBody:
    """A hydraulic cylinder: barrel body hinged at ``pivot`` on ``parent`` and the rod on a
    slide joint named like the cylinder (its position is the piston extension [m], limited to
    the stroke). ``eye`` names the rod-eye site ``<axis>_rod_<eye>`` that a loop constraint
    connects. Returns the rod body."""
    barrel_body = parent.add_body()
    barrel_body.name = cyl.name
    barrel_body.pos = _side(pivot)
    _hinge(barrel_body, f"{cyl.name}_pivot")
    _set_inertial(barrel_body, cyl.name, masses[cyl.name])
    barrel = cyl.rod_length_m + cyl.stroke_min_m - 0.1
    _capsule(barrel_body, [0.0, 0.0, 0.0], [barrel, 0.0, 0.0], barrel_radius, STEEL,
             f"{cyl.name}_barrel")
    rod = barrel_body.add_body()
    rod.name = f"{axis}_rod"
    j = rod.add_joint()
    j.name = cyl.name
    j.type = mujoco.mjtJoint.mjJNT_SLIDE
    j.axis = [1.0, 0.0, 0.0]
    j.range = [cyl.stroke_min_m, cyl.stroke_max_m]
    j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
    _set_inertial(rod, f"{axis}_rod", masses[f"{axis}_rod"])
    _capsule(rod, [0.0, 0.0, 0.0], [cyl.rod_length_m, 0.0, 0.0], rod_radius, ROD,
             f"{cyl.name}_rod")
    if eye is not None:
        _site(rod, f"{axis}_rod_{eye}", [cyl.rod_length_m, 0.0, 0.0])
    return rod


def _light_body(parent: mujoco.MjsBody, name: str, pos: list[float]) -> mujoco.MjsBody:
    body = parent.add_body()
    body.name = name
    body.pos = pos
    body.explicitinertial = True
    body.mass = WHEEL_BODY_MASS_KG
    body.ipos = [0.0, 0.0, 0.0]
    body.inertia = [0.1, 0.1, 0.1]
    return body


def _wheels(cat: mujoco.MjsBody, params: WheeledParams, swing_height_m: float) -> None:
    """The wheeled undercarriage's frame, knuckles and wheels (module docstring)."""
    geo = params.geometry
    r = geo.wheel_radius_m
    frame = cat.add_geom()
    frame.name = "wheel_frame"
    frame.type = mujoco.mjtGeom.mjGEOM_BOX
    bottom = 0.9 * r
    frame.pos = [0.0, 0.0, 0.5 * (bottom + swing_height_m)]
    frame.size = [0.5 * geo.wheelbase_m + 0.3, max(0.3, 0.5 * geo.track_m - WHEEL_WIDTH_M),
                  max(0.05, 0.5 * (swing_height_m - bottom))]
    _visual(frame, GREY)
    end_stop = params.steering.max_angle_rad
    for w in WHEELS:
        x, y = geo.position(w)
        parent = cat
        pos = [x, y, r]
        if w in params.steered:
            parent = _light_body(cat, f"knuckle_{w}", pos)
            _hinge(parent, f"steer_{w}", (-end_stop, end_stop), axis=[0.0, 0.0, 1.0])
            pos = [0.0, 0.0, 0.0]
        wheel = _light_body(parent, f"wheel_{w}", pos)
        _hinge(wheel, f"wheel_{w}", axis=[0.0, 1.0, 0.0])
        tyre = wheel.add_geom()
        tyre.name = f"tyre_{w}"
        tyre.type = mujoco.mjtGeom.mjGEOM_CYLINDER
        tyre.quat = [math.cos(0.25 * math.pi), math.sin(0.25 * math.pi), 0.0, 0.0]  # axis y
        tyre.size = [r, 0.5 * WHEEL_WIDTH_M, 0.0]
        _visual(tyre, DARK)
        hub = wheel.add_geom()   # shows the wheel turning
        hub.name = f"hub_{w}"
        hub.type = mujoco.mjtGeom.mjGEOM_BOX
        hub.pos = [0.0, 0.0, 0.0]
        hub.size = [0.8 * r, 0.5 * WHEEL_WIDTH_M + 0.01, 0.06]
        _visual(hub, YELLOW)


def build_spec(geometry: ExcavatorGeometry, linkage: Linkage, options: ModelOptions,
               track_width_m: float = 2.4) -> mujoco.MjSpec:
    """The excavator as an ``MjSpec`` (not compiled): bodies, joints, loops, actuators, terrain."""
    g = geometry
    masses = {**{k: v[0] for k, v in _UPSTREAM_INERTIALS.items()}, **dict(g.masses_kg)}
    spec = mujoco.MjSpec()
    spec.modelname = "excavator"
    spec.compiler.degree = False
    spec.compiler.autolimits = True
    # The upstream boom rod's tensor sits exactly on the triangle inequality (0.7 + 5.1 = 5.8);
    # scaled to other masses, rounding can put it a hair outside: let MuJoCo balance it.
    spec.compiler.balanceinertia = True
    spec.option.timestep = options.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.gravity = [0.0, 0.0, -9.81]
    spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    spec.stat.center = [3.0, 0.0, 1.5]
    spec.stat.extent = 10.0

    sky = spec.add_texture()
    sky.name = "sky"
    sky.type = mujoco.mjtTexture.mjTEXTURE_SKYBOX
    sky.builtin = mujoco.mjtBuiltin.mjBUILTIN_GRADIENT
    sky.rgb1 = [0.55, 0.7, 0.9]
    sky.rgb2 = [0.95, 0.95, 1.0]
    sky.width = 256
    sky.height = 256
    light = spec.worldbody.add_light()
    light.name = "sun"
    light.pos = [0.0, 0.0, 20.0]
    light.dir = [0.3, 0.2, -1.0]
    light.diffuse = [0.7, 0.7, 0.7]
    add_height_field(spec, options.terrain, options.terrain_contact)

    # --- caterpillar (base_link) ----------------------------------------------------------
    cat = spec.worldbody.add_body()
    cat.name = "caterpillar"
    for name, axis in (("base_x", [1.0, 0.0, 0.0]), ("base_y", [0.0, 1.0, 0.0])):
        j = cat.add_joint()
        j.name = name
        j.type = mujoco.mjtJoint.mjJNT_SLIDE
        j.axis = axis
    _hinge(cat, "base_yaw", axis=[0.0, 0.0, 1.0])
    _set_inertial(cat, "caterpillar", masses["caterpillar"])
    if options.wheels is not None:
        _wheels(cat, options.wheels, g.B[1])
    else:
        half_track = 0.5 * track_width_m
        track_h = 0.8
        for side, y in (("left", half_track), ("right", -half_track)):
            t = cat.add_geom()
            t.name = f"track_{side}"
            t.type = mujoco.mjtGeom.mjGEOM_BOX
            t.pos = [0.0, y, 0.5 * track_h]
            t.size = [2.3, 0.3, 0.5 * track_h]
            _visual(t, DARK)
        frame = cat.add_geom()
        frame.name = "track_frame"
        frame.type = mujoco.mjtGeom.mjGEOM_BOX
        frame.pos = [0.0, 0.0, 0.5 * g.B[1]]
        frame.size = [1.2, half_track - 0.3, 0.25 * g.B[1]]
        _visual(frame, GREY)
    _site(cat, "base_link", [0.0, 0.0, 0.0])

    # --- chassis (swing at B) ------------------------------------------------------------
    ch = cat.add_body()
    ch.name = "chassis"
    ch.pos = [g.B[0], 0.0, g.B[1]]
    _hinge(ch, "swing", g.swing_limits_rad, axis=[0.0, 0.0, 1.0])
    _set_inertial(ch, "chassis", masses["chassis"])
    body_box = ch.add_geom()
    body_box.name = "upper_structure"
    body_box.type = mujoco.mjtGeom.mjGEOM_BOX
    body_box.pos = [-1.1, 0.0, 0.55]
    body_box.size = [1.6, 1.3, 0.5]
    _visual(body_box, YELLOW)
    cab = ch.add_geom()
    cab.name = "cab"
    cab.type = mujoco.mjtGeom.mjGEOM_BOX
    cab.pos = [0.0, 0.85, 1.4]
    cab.size = [0.5, 0.45, 0.45]
    _visual(cab, [0.3, 0.35, 0.4, 1.0])
    _box(ch, _side((0.0, 0.1)), _side(g.C), 0.3, 0.15, YELLOW, "boom_foot")

    # --- boom cylinder (barrel at D, rod on a slide) -------------------------------------
    _cylinder_bodies(ch, g.cylinders["boom_cylinder"], "boom", g.D, masses, 0.11, 0.06, "E")

    # --- boom (at C) ---------------------------------------------------------------------
    boom = ch.add_body()
    boom.name = "boom"
    boom.pos = _side(g.C)
    _hinge(boom, "boom", linkage.joint_limits["boom"])
    _set_inertial(boom, "boom", masses["boom"])
    _box(boom, [0.0, 0.0, 0.0], _side(g.F), 0.3, 0.22, YELLOW, "boom_lower")
    _box(boom, _side(g.F), _side(g.H), 0.28, 0.2, YELLOW, "boom_upper")
    _site(boom, "boom_E", _side(g.E))

    # --- arm cylinder (barrel at F on the boom) ------------------------------------------
    _cylinder_bodies(boom, g.cylinders["arm_cylinder"], "arm", g.F, masses, 0.1, 0.055, "G")

    # --- arm (at H) ----------------------------------------------------------------------
    arm = boom.add_body()
    arm.name = "arm"
    arm.pos = _side(g.H)
    _hinge(arm, "arm", linkage.joint_limits["arm"])
    _set_inertial(arm, "arm", masses["arm"])
    _box(arm, _side(g.G), _side(g.M), 0.22, 0.16, YELLOW, "arm_beam")
    _box(arm, _side(g.I), _side(g.K), 0.2, 0.1, YELLOW, "arm_top")
    _site(arm, "arm_G", _side(g.G))
    _site(arm, "arm_K", _side(g.K))

    # --- bucket cylinder (barrel at I on the arm), H link on its rod eye J ---------------
    kc = g.cylinders["bucket_cylinder"]
    bucket_rod = _cylinder_bodies(arm, kc, "bucket", g.I, masses, 0.09, 0.05, None)
    h_link = bucket_rod.add_body()
    h_link.name = "h_link"
    h_link.pos = [kc.rod_length_m, 0.0, 0.0]
    _hinge(h_link, "h_link")
    _set_inertial(h_link, "h_link", masses["h_link"])
    _capsule(h_link, [0.0, 0.0, 0.0], [g.JK, 0.0, 0.0], 0.05, GREY, "h_link")
    _site(h_link, "h_link_J", [0.0, 0.0, 0.0])
    _site(h_link, "h_link_K", [g.JK, 0.0, 0.0])

    # --- bucket (at M), side link at L ---------------------------------------------------
    bucket = arm.add_body()
    bucket.name = "bucket"
    bucket.pos = _side(g.M)
    _hinge(bucket, "bucket", linkage.joint_limits["bucket"])
    _set_inertial(bucket, "bucket", masses["bucket"])
    half_w = 0.5 * g.bucket_width_m
    origin = [0.0, 0.0, 0.0]
    tip, base = _side(g.tip), _side(g.bucket_base)
    _box(bucket, tip, base, half_w, 0.03, DARK, "bucket_bottom")
    _box(bucket, base, origin, half_w, 0.03, DARK, "bucket_back")
    # Terrain contact through spheres along the cutting edge and the heel: the bucket stands
    # on these on hard ground, and spheres cost a few prisms of the height field each, where
    # the wide plates cost hundreds (5x slower steps in contact).
    for edge, point, count in (("edge", g.tip, 5), ("heel", g.bucket_base, 3)):
        for k, y in enumerate(np.linspace(-half_w + CONTACT_RADIUS, half_w - CONTACT_RADIUS,
                                          count)):
            sphere = bucket.add_geom()
            sphere.name = f"bucket_contact_{edge}_{k}"
            sphere.type = mujoco.mjtGeom.mjGEOM_SPHERE
            sphere.pos = [point[0], float(y), point[1]]
            sphere.size = [CONTACT_RADIUS, 0.0, 0.0]
            _visual(sphere, [0.9, 0.2, 0.2, 1.0])
            sphere.group = 3  # hidden in renders by default
            sphere.conaffinity = 1 if options.terrain_contact else 0
    for side, y in (("left", half_w), ("right", -half_w)):
        _capsule(bucket, [tip[0], y, tip[2]], [0.0, y, 0.0], 0.02, DARK, f"bucket_side_{side}")
    _site(bucket, "bucket_origin", origin)
    _site(bucket, "bucket_tip", tip)
    _site(bucket, "bucket_base", base)
    side_link = bucket.add_body()
    side_link.name = "side_link"
    side_link.pos = _side(g.L)
    _hinge(side_link, "side_link")
    _set_inertial(side_link, "side_link", masses["side_link"])
    _capsule(side_link, [0.0, 0.0, 0.0], [g.JL, 0.0, 0.0], 0.05, GREY, "side_link")
    _site(side_link, "side_link_J", [g.JL, 0.0, 0.0])

    # --- loops ---------------------------------------------------------------------------
    for name, s1, s2 in LOOPS:
        eq = spec.add_equality()
        eq.name = name
        eq.type = mujoco.mjtEq.mjEQ_CONNECT
        eq.objtype = mujoco.mjtObj.mjOBJ_SITE
        eq.name1 = s1
        eq.name2 = s2
        eq.solref = list(options.equality_solref)
        eq.solimp = [*options.equality_solimp, 0.5, 2.0]

    if options.hydraulics is not None:
        add_actuators(spec, options.hydraulics, linkage.extension_limits, g.swing_limits_rad)

    key = spec.add_key()
    key.name = "initial"
    return spec


def initial_qpos(model: mujoco.MjModel, linkage: Linkage, pose: InitialPose) -> np.ndarray:
    """qpos of the closed linkage at ``pose`` (raises if a joint angle is outside its limits)."""
    linkage.check_joints(pose.boom, pose.arm, pose.bucket)
    values = passive_joint_values(linkage, pose.boom, pose.arm, pose.bucket)
    values.update(swing=pose.swing, boom=pose.boom, arm=pose.arm, bucket=pose.bucket,
                  base_x=pose.base_x, base_y=pose.base_y, base_yaw=pose.base_yaw)
    qpos = np.array(model.qpos0, dtype=float)   # a copy
    for name, value in values.items():
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        qpos[model.jnt_qposadr[jid]] = value
    return qpos


def passive_joint_values(linkage: Linkage, boom: float, arm: float, bucket: float
                         ) -> dict[str, float]:
    """Cylinder pivot angles [rad], extensions [m] and link angles [rad] from the linkage."""
    g = linkage.geometry
    p = {k: np.asarray(v, dtype=float) for k, v in linkage.points(boom, arm, bucket).items()}
    arm_abs = boom + arm
    de, fg, ij = p["E"] - p["D"], p["G"] - p["F"], p["J"] - p["I"]
    return {
        "boom_cylinder_pivot": _atan2(de),
        "boom_cylinder": float(np.hypot(*de)) - g.cylinders["boom_cylinder"].rod_length_m,
        "arm_cylinder_pivot": _atan2(fg) - boom,
        "arm_cylinder": float(np.hypot(*fg)) - g.cylinders["arm_cylinder"].rod_length_m,
        "bucket_cylinder_pivot": _atan2(ij) - arm_abs,
        "bucket_cylinder": float(np.hypot(*ij)) - g.cylinders["bucket_cylinder"].rod_length_m,
        "h_link": _atan2(p["K"] - p["J"]) - _atan2(ij),
        "side_link": _atan2(p["J"] - p["L"]) - (arm_abs + bucket),
    }


@dataclass
class BuiltModel:
    """A compiled model with its initial state and the index maps the simulation uses."""

    spec: mujoco.MjSpec
    model: mujoco.MjModel
    qpos_initial: np.ndarray
    qpos_adr: Mapping[str, int]
    dof_adr: Mapping[str, int]
    actuator_id: Mapping[str, int]
    site_id: Mapping[str, int]


def build_model(geometry: ExcavatorGeometry, linkage: Linkage | None = None,
                options: ModelOptions | None = None, track_width_m: float = 2.4) -> BuiltModel:
    """Build and compile the excavator; the keyframe ``initial`` holds the closed initial pose."""
    linkage = linkage if linkage is not None else Linkage(geometry)
    options = options if options is not None else ModelOptions()
    return finish_model(build_spec(geometry, linkage, options, track_width_m), linkage, options)


def finish_model(spec: mujoco.MjSpec, linkage: Linkage, options: ModelOptions) -> BuiltModel:
    """Compile a spec from :func:`build_spec` (possibly edited, e.g. other actuators) and set the
    flat terrain and the keyframe ``initial`` (the closed pose, activations = held positions
    pre-loaded for gravity: :func:`preload_cylinders`)."""
    model = spec.compile()
    # The compiler rescales elevation data to [0, 1]; write the flat heights in metres again.
    fill_flat(model, options.terrain)
    qpos = initial_qpos(model, linkage, options.initial)
    model.key_qpos[0] = qpos
    act_ids = {model.actuator(i).name: i for i in range(model.nu)}
    for aid in act_ids.values():
        if model.actuator_actnum[aid] > 0:
            jid = model.actuator_trnid[aid, 0]
            model.key_act[0, model.actuator_actadr[aid]] = qpos[model.jnt_qposadr[jid]]
    preload_cylinders(model, linkage)
    joints = [model.joint(i).name for i in range(model.njnt)]
    return BuiltModel(
        spec=spec, model=model, qpos_initial=qpos,
        qpos_adr={n: int(model.jnt_qposadr[i]) for i, n in enumerate(joints)},
        dof_adr={n: int(model.jnt_dofadr[i]) for i, n in enumerate(joints)},
        actuator_id=act_ids,
        site_id={model.site(i).name: i for i in range(model.nsite)},
    )


def preload_cylinders(model: mujoco.MjModel, linkage: Linkage | None = None, key: int = 0,
                      settle_s: float = 1.5, rounds: int = 4) -> np.ndarray:
    """Start the held cylinders in static equilibrium at keyframe ``key``.

    A machine at rest has its chambers pressurised: the oil columns already carry the load. An
    unloaded column (activation = rod position) lets the machine drop until it compresses
    (21-82 mm in 0.1 s before issue 14). Here the keyframe is settled once at build time, with
    the valves closed (ctrl = 0) and MuJoCo's own dynamics (constraints and four-bar included):
    each round lets the machine come to rest, then moves each held position by the sag, so the
    machine rests at the requested joint angles (with ``linkage``: the loop closures' compliance
    included, as the simulation's outer loop holds it; without: the rods at the requested
    extensions) with the columns compressed by ``F / kp``. The keyframe's qpos takes the rested
    pose and its velocities are zero. Returns the
    cylinder forces at rest [N] and writes ``model.key_qpos`` / ``model.key_act`` (a model
    without the three held cylinder actuators is left as it is)."""
    names = {model.actuator(i).name: i for i in range(model.nu)}
    ids = [names.get(n, -1) for n in ("boom_cylinder", "arm_cylinder", "bucket_cylinder")]
    if min(ids) < 0 or any(model.actuator_actnum[a] != 1 for a in ids):
        return np.zeros(3)  # no held cylinders (a passive or edited model): nothing to load
    data = mujoco.MjData(model)
    qadr = [int(model.jnt_qposadr[model.actuator_trnid[a, 0]]) for a in ids]
    adr = [int(model.actuator_actadr[a]) for a in ids]
    kp = np.array([float(model.actuator_gainprm[a, 0]) for a in ids])
    ext = model.key_qpos[key, qadr].copy()
    qpos = model.key_qpos[key].copy()
    act = model.key_act[key].copy()
    jadr = [int(model.jnt_qposadr[model.joint(n).id]) for n in ("boom", "arm", "bucket")]
    steps = max(1, round(settle_s / model.opt.timestep))
    force = np.zeros(3)
    for k in range(rounds):
        mujoco.mj_resetDataKeyframe(model, data, key)
        data.qpos[:] = qpos
        data.act[:] = act
        data.ctrl[:] = 0.0
        mujoco.mj_step(model, data, steps)
        force = data.actuator_force[ids].copy()
        if k == 0 or linkage is None:
            # hold the rods where they were asked to be: shift the held positions by the sag
            act[adr] = ext + force / kp
            qpos = data.qpos.copy()
            qpos[qadr] = ext
        else:
            # hold the joints there: shift by the rod travel that takes out the joints' sag
            boom, arm, bucket = (float(x) for x in data.qpos[jadr])
            kin = np.array(linkage.extensions(boom, arm, bucket, check=False))
            act[adr] += ext - kin
            qpos = data.qpos.copy()
            qpos[qadr] += ext - kin
    mujoco.mj_resetDataKeyframe(model, data, key)
    data.qpos[:] = qpos
    data.act[:] = act
    mujoco.mj_step(model, data, steps)
    model.key_qpos[key] = data.qpos
    model.key_act[key] = data.act
    return force


def loop_residuals(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """Distance [m] between the two sites of each loop closure (needs ``mj_kinematics``)."""
    out = np.empty(len(LOOPS))
    for k, (_, s1, s2) in enumerate(LOOPS):
        a = data.site(s1).xpos
        b = data.site(s2).xpos
        out[k] = float(np.linalg.norm(a - b))
    return out
