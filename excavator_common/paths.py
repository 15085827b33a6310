"""Where the package's installed data (config/, urdf/, rviz/) lives.

On a ROS 2 install the files are in the package's share directory; in a source checkout or an
editable pip install they are next to the Python packages.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_NAME = "excavator_hil"
_SOURCE_ROOT = Path(__file__).resolve().parents[1]


def share_dir() -> Path:
    """The directory holding ``config/``, ``launch/``, ``rviz/``: source tree first, then the
    ament index, then ``<prefix>/share/excavator_hil``."""
    if (_SOURCE_ROOT / "config" / "excavator.yaml").is_file():
        return _SOURCE_ROOT
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE_NAME))
    except (ImportError, KeyError, ValueError):  # no ament index, or package not registered
        return Path(sys.prefix) / "share" / PACKAGE_NAME


def config_file(name: str) -> Path:
    """Path of ``config/<name>`` in the share directory."""
    return share_dir() / "config" / name
