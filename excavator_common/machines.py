"""Which machine of a fleet a tool drives (pure Python: no ROS): the machines on the graph,
the choice of one, its topics and its frame prefix.

A machine is a namespace in which a simulation (or a real machine's driver) publishes
``joint_states`` (sensor_msgs/msg/JointState): ``fleet.launch.py`` puts machine k in ``/exc<k+1>``
(or the k-th of ``namespaces``), a single machine lives in the root namespace or the one given
to its launch. Tools that serve any machine of a fleet (teleop_node's ``machine`` parameter,
the dashboard's selector) name it by its absolute namespace (``/exc2``; ``/`` the root) and
reach its topics as ``/exc2/<topic>``; their own namespace keeps relative names, so a tool
started inside a machine's namespace works as before.

Rules (docs/dashboard.md, docs/teleoperation.md):
- the list is what the graph shows now, naturally sorted (``/exc2`` before ``/exc10``); a
  selector's options are every machine seen since start, in the order they were first seen
  (a machine that left is marked, not removed): an option's place never changes under a user
  who is about to pick it;
- a choice is only ever made by the user: the tool's own namespace at start (or the machine it
  was started for), then whatever the user picks from the list; a machine that leaves the graph
  stays chosen (shown as gone), never replaced by another one;
- a machine's TF prefix is read from its ``robot_description`` (the link ``<prefix>base_link``):
  ``fleet.launch.py`` prefixes ``<ns>/``, a single machine launched in a namespace has none.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MACHINE_TOPIC = "joint_states"
MACHINE_TYPE = "sensor_msgs/msg/JointState"
BASE_LINK = "base_link"
_TOKEN = r"[A-Za-z_][A-Za-z0-9_]*"


def machine_namespace(name: str) -> str:
    """The absolute namespace of a machine named ``name`` (``exc2``, ``/exc2``, ``/site/exc2/``
    -> ``/exc2``, ``/site/exc2``; ``/`` the root); ValueError naming the value and the fix."""
    text = name.strip()
    if text in ("/", ""):
        if text == "":
            raise ValueError("machine '': give a namespace, e.g. exc2 or /exc2 ('/' for the "
                             "root namespace)")
        return "/"
    parts = text.strip("/").split("/")
    if not all(re.fullmatch(_TOKEN, p) for p in parts):
        raise ValueError(f"machine {name!r} is not a ROS namespace (letters, digits, '_', not "
                         "starting with a digit, parts separated by '/'), e.g. exc2 or /exc2")
    return "/" + "/".join(parts)


def machine_topic(machine: str, name: str, own: str | None = None) -> str:
    """Topic ``name`` (relative, e.g. ``joint_states``) of ``machine`` (an absolute namespace):
    ``/exc2/joint_states``; relative (``name`` itself) when ``machine`` is ``own``, the caller's
    own namespace, so remappings of the caller's relative topics still apply."""
    if own is not None and machine == own:
        return name
    return ("" if machine == "/" else machine) + "/" + name


def machines_on_graph(topics: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """The machines in a graph's ``(topic, types)`` list (``get_topic_names_and_types``): every
    namespace with a ``joint_states`` of type sensor_msgs/msg/JointState, naturally sorted."""
    found = set()
    for topic, types in topics:
        if topic.rsplit("/", 1)[-1] != MACHINE_TOPIC or MACHINE_TYPE not in types:
            continue
        ns = topic[: -len(MACHINE_TOPIC)].rstrip("/") or "/"
        found.add(ns)
    return sorted(found, key=_natural)


def _natural(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def frame_prefix_from_urdf(urdf: str) -> str:
    """The TF frame prefix of a machine from its URDF: what precedes ``base_link`` in the name
    of its base link (``exc2/base_link`` -> ``exc2/``; ``base_link`` -> ``''``). ValueError when
    the text is no URDF or has no base link, or more than one."""
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as exc:
        raise ValueError(f"robot_description is not XML ({exc})") from None
    bases = [link.get("name", "") for link in root.iter("link")
             if link.get("name", "").rsplit("/", 1)[-1] == BASE_LINK]
    if len(bases) != 1:
        raise ValueError(f"robot_description has {len(bases)} links named '<prefix>base_link' "
                         f"({', '.join(bases) or 'none'}): expected one")
    return bases[0][: -len(BASE_LINK)]


@dataclass
class MachineChoice:
    """The machine a tool serves: chosen by the user from the machines on the graph.

    ``own``: the tool's namespace (absolute), the choice at start unless ``chosen`` names
    another. :meth:`update` takes the graph's list; :meth:`choose` the user's pick."""

    own: str = "/"
    chosen: str = ""
    listed: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)   # every machine listed once, first seen first

    def __post_init__(self) -> None:
        self.own = machine_namespace(self.own)
        self.chosen = machine_namespace(self.chosen) if self.chosen else self.own

    def update(self, listed: Sequence[str]) -> bool:
        """The machines the graph shows now; True when the list changed. The choice stays,
        whether or not its machine is still listed."""
        new = sorted({machine_namespace(m) for m in listed}, key=_natural)
        changed = new != self.listed
        self.listed = new
        self.seen += [m for m in new if m not in self.seen]
        return changed

    @property
    def present(self) -> bool:
        """The chosen machine is on the graph now."""
        return self.chosen in self.listed

    def choose(self, value: object) -> str:
        """The user picks ``value`` (any JSON value a client sent): one of the listed machines or
        the tool's own namespace. ValueError naming the value and the choices otherwise; the
        choice is then unchanged."""
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"machine {value!r} is not a namespace: choose one of "
                             f"{', '.join(self.options()) or 'none (no machine on the graph)'}")
        name = machine_namespace(value)
        if name not in self.listed and name != self.own:
            raise ValueError(f"machine {name} is not on the graph: choose one of "
                             f"{', '.join(self.listed) or 'none (no machine on the graph yet)'}")
        self.chosen = name
        return name

    def options(self) -> dict[str, str]:
        """Value -> label for a selector, in a stable order (a selector picks by place): the
        chosen one first when it was never on the graph, then every machine seen, first seen
        first; those not on the graph now marked so."""
        names = ([] if self.chosen in self.seen else [self.chosen]) + self.seen
        return {m: m + (" (own namespace)" if m == self.own else "")
                + ("" if m in self.listed else " (not on the graph)") for m in names}
