"""ROS 2 parameter files read without ROS: the nested YAML seen as ROS's dotted names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``), as ROS 2 names
    nested parameters."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
