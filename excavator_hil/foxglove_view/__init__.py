"""The Foxglove live view: the machine, the terrain as it is dug, soil forces, PLC channels and
diagnostics on foxglove-sdk's WebSocket server (docs/foxglove.md)."""
