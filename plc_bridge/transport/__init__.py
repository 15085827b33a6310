"""The PLC link: one write of a block and one read of a block per exchange, one request in
flight, reconnection off the caller's thread. Used by the bridge and the plant link; imports
only the bottom modules of ``plc_bridge`` (config, DB layouts, errors, reconnect)."""
