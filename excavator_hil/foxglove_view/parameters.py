"""foxglove_view's parameters: one spec, read with or without ROS (docs/configuration.md)."""

from __future__ import annotations

from excavator_common.parameters import ParameterSpec, ParameterTable
from excavator_hil.errors import HilConfigError

FOXGLOVE_VIEW = ParameterTable("foxglove_view", (
    ParameterSpec("host", "127.0.0.1", "interface the Foxglove WebSocket server binds; "
                  "loopback by default (another interface exposes the view, read only, to that "
                  "network: the protocol has no authentication)"),
    ParameterSpec("port", 8765, "TCP port of the WebSocket server (the Foxglove app's default "
                  "ws://localhost:8765); 0 = any free port, logged", "", 0, 65535),
    ParameterSpec("tf_rate_hz", 30.0, "rate of /tf (frame transforms from joint_states) at "
                  "most; joint_states in between are skipped", "Hz", 1.0, 200.0),
    ParameterSpec("terrain_rate_hz", 2.0, "rate of /terrain updates at most: each sends only "
                  "the tiles the soil/terrain_patch messages since the last one changed", "Hz",
                  0.1, 30.0),
    ParameterSpec("terrain_tile_cells", 32, "side of a terrain tile [cells]: the unit of a "
                  "terrain update", "count", 4, 256),
    ParameterSpec("soil_params", "", "soil_node's parameter file: the terrain grid ('' = the "
                  "package's config/soil.yaml)", "path"),
    ParameterSpec("force_scale_m_per_n", 5.0e-5, "length of the soil force arrow per newton",
                  "m/N", 1.0e-9, 1.0),
    ParameterSpec("machines", "", "namespaces of the machines to show in one scene, comma-"
                  "separated (a fleet's: exc1,exc2; their URDFs carry the frame prefixes), "
                  "topics /<ns>/...; '' = the one machine of the view's own namespace"),
    ParameterSpec("redis_url", "", "Redis of the PLC bridge, read only: command vs measured "
                  "velocities and latency on /plc/* ('' = no PLC channels)"),
    ParameterSpec("redis_db_base", -1, "a fleet's PLC channels (with machines): machine k's "
                  "bridge in database redis_db_base + k of the server redis_url (given without "
                  "a database, as fleet.launch.py's), on /<ns>/plc/*; -1 = one database, "
                  "redis_url's, on /plc/*", "", -1, 15),
    ParameterSpec("plc_rate_hz", 20.0, "rate of the Redis reads for /plc/*", "Hz", 1.0, 100.0),
), error=HilConfigError)
