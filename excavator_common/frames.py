"""TF frame names of one machine in a fleet: the ``frame_prefix`` every node of a machine uses.

A machine's frames are ``<prefix><name>`` (``exc2/base_link``, ``exc2/odom``); ``world`` is the
one frame the machines share (REP-105's map/world level), never prefixed.
"""

from __future__ import annotations

import re

WORLD = "world"


def check_frame_prefix(prefix: str) -> str:
    """``prefix`` if it is a valid TF frame prefix (empty, or letters, digits, ``_`` and ``/``
    ending in ``/``, no leading ``/``: e.g. ``exc1/``); ValueError naming the fix otherwise."""
    if prefix and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_/]*/", prefix):
        raise ValueError(f"frame_prefix {prefix!r}: use letters, digits, '_' and '/', start with "
                         "a letter or '_', end with '/' (e.g. 'exc1/'), or '' for none")
    return prefix


def prefixed(prefix: str, frame: str) -> str:
    """``frame`` of the machine with ``prefix`` (``world`` stays shared)."""
    return frame if frame == WORLD else prefix + frame
