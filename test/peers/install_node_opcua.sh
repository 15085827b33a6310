#!/bin/sh
# Install node-opcua (the independent OPC UA implementation test/test_opcua_node_peer.py checks
# against) into test/peers/node_opcua/node_modules from its lockfile: `npm ci`, no scripts run.
# Needs Node >= 18 and npm; the tests skip and say so without it.
set -eu
cd "$(dirname "$0")/node_opcua"
exec npm ci --ignore-scripts --no-audit --no-fund
