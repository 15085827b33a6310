"""``excavator-hil ament-register``: make a pip-installed excavator_hil visible to ``ros2``.

``ros2 launch excavator_hil <file>``, ``ros2 run excavator_hil <node>`` and launch files'
``FindPackageShare`` / ``Node(package="excavator_hil", ...)`` look the package up in the ament
index of the prefixes on ``AMENT_PREFIX_PATH``: ``<prefix>/share/ament_index/resource_index/
packages/excavator_hil``, the data in ``<prefix>/share/excavator_hil/`` and the executables in
``<prefix>/lib/excavator_hil/<exe>``. ``colcon build`` lays that out; ``pip install`` does not
(an editable install writes none of it, a regular one the ``share/`` part only). This command
writes it into a prefix, by default the running environment's (``sys.prefix``, i.e. the venv):

    excavator-hil ament-register                 # once after `pip install -e .`
    export AMENT_PREFIX_PATH=$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}
    ros2 launch excavator_hil sim.launch.py

From a source checkout (an editable install) the share files are symbolic links to the checkout,
so edits to launch files and parameter files show at once (``--copy`` copies them instead).
Re-run it after adding a launch, parameter or RViz file. ``--prefix DIR`` writes elsewhere,
``--remove`` takes the registration out again. Only paths of this package are touched.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "excavator_hil"
# The package's share/ layout: destination folder under share/<pkg> -> source patterns in the
# checkout. setup.py's data_files install the same (test/test_launch_files.py checks both agree).
SHARE_LAYOUT: dict[str, tuple[str, ...]] = {
    "": ("package.xml",),
    "launch": ("launch/*.launch.py",),
    "config": ("config/*.yaml", "config/*.xml"),
    "config/machines": ("config/machines/*.yaml",),
    "rviz": ("rviz/*.rviz",),
    "layouts": ("layouts/*.json",),
    "systemd": ("deploy/systemd/*",),
}
MARKER = Path("share/ament_index/resource_index/packages") / PACKAGE


@dataclass(frozen=True)
class Registration:
    prefix: Path
    share_files: list[Path]
    executables: list[Path]


def source_root() -> Path:
    """Where the share files come from: the checkout of an editable install (the folder with
    package.xml next to the Python packages), else ``<sys.prefix>/share/excavator_hil`` where a
    regular ``pip install`` put setup.py's data_files."""
    import excavator_hil

    checkout = Path(excavator_hil.__file__).resolve().parents[1]
    if (checkout / "package.xml").is_file() and (checkout / "launch").is_dir():
        return checkout
    installed = Path(sys.prefix) / "share" / PACKAGE
    if (installed / "package.xml").is_file():
        return installed
    raise FileNotFoundError(
        f"found neither a checkout with package.xml at {checkout} nor installed data files in "
        f"{installed}: reinstall the package (pip install . or pip install -e <checkout>)")


def console_scripts() -> dict[str, str]:
    """Executable name -> ``module:function`` of this distribution's console scripts: from the
    checkout's setup.py when registering a checkout (an editable install's metadata keeps the
    scripts of its last ``pip install``, so a node added since would be missing), else from the
    installed distribution."""
    setup = source_root() / "setup.py"
    if setup.is_file():
        import ast

        for node in ast.walk(ast.parse(setup.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "entry_points":
                scripts = ast.literal_eval(node.value)["console_scripts"]
                return {name.strip(): target.strip()
                        for name, target in (line.split("=", 1) for line in scripts)}
    dist = importlib.metadata.distribution(PACKAGE)
    return {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}


def share_sources(root: Path) -> dict[Path, Path]:
    """Destination below ``share/<pkg>`` -> source file."""
    out: dict[Path, Path] = {}
    checkout = (root / "setup.py").is_file()
    for dest, patterns in SHARE_LAYOUT.items():
        for pattern in patterns:
            # From an installed share/ the files already sit in their destination folders.
            pat = pattern if checkout else str(Path(dest) / Path(pattern).name)
            for src in sorted(glob.glob(str(root / pat))):
                out[Path(dest) / Path(src).name] = Path(src)
    return out


def _place(src: Path, dst: Path, copy: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink() or dst.exists():
        if not copy and dst.is_symlink() and dst.resolve() == src.resolve():
            return
        if dst.resolve() == src.resolve() and not dst.is_symlink():
            return  # already the installed file itself
        dst.unlink()
    if copy:
        shutil.copy2(src, dst)
    else:
        dst.symlink_to(src.resolve())


def _script(entry: str) -> str:
    module, _, func = entry.partition(":")
    return (f"#!{sys.executable}\n"
            f"# Written by `excavator-hil ament-register`: runs {entry}.\n"
            "import sys\n"
            f"from {module} import {func}\n"
            f"sys.exit({func}())\n")


def register(prefix: Path, copy: bool = False) -> Registration:
    """Write the ament index entry, the share files and ``lib/<pkg>/<exe>`` into ``prefix``."""
    root = source_root()
    share = prefix / "share" / PACKAGE
    placed = []
    for rel, src in share_sources(root).items():
        dst = share / rel
        _place(src, dst, copy)
        placed.append(dst)
    if not (share / "package.xml").is_file():
        raise FileNotFoundError(f"no package.xml found under {root}")
    marker = prefix / MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    lib = prefix / "lib" / PACKAGE
    lib.mkdir(parents=True, exist_ok=True)
    exes = []
    for name, entry in sorted(console_scripts().items()):
        path = lib / name
        if path.is_symlink():
            path.unlink()
        path.write_text(_script(entry))
        path.chmod(0o755)
        exes.append(path)
    return Registration(prefix, placed, exes)


def unregister(prefix: Path) -> None:
    (prefix / MARKER).unlink(missing_ok=True)
    for folder in (prefix / "share" / PACKAGE, prefix / "lib" / PACKAGE):
        if folder.is_dir():
            shutil.rmtree(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="excavator-hil ament-register",
        description="Register this pip-installed package in an ament prefix so that ros2 "
                    "launch / ros2 run find it (what colcon build would lay out).")
    parser.add_argument("--prefix", type=Path, default=Path(sys.prefix),
                        help="ament prefix to write into (default: this environment, "
                             f"{sys.prefix})")
    parser.add_argument("--copy", action="store_true",
                        help="copy the share files instead of linking them to the checkout")
    parser.add_argument("--remove", action="store_true", help="remove the registration")
    args = parser.parse_args(argv)
    prefix = args.prefix.resolve()
    if args.remove:
        unregister(prefix)
        print(f"removed {PACKAGE} from the ament prefix {prefix}")
        return 0
    try:
        reg = register(prefix, args.copy)
    except (FileNotFoundError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    paths = os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)
    print(f"registered {PACKAGE} in {prefix}: {len(reg.share_files)} share files "
          f"({'copied' if args.copy else 'linked'}), {len(reg.executables)} executables in "
          f"{prefix / 'lib' / PACKAGE}")
    if str(prefix) not in paths:
        print(f"now: export AMENT_PREFIX_PATH={prefix}${{AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
