# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   the main job
#   make test   lint + the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export MUJOCO_GL ?= egl
# The real `ros2 launch` (launch, launch_ros, ros2cli wheels built from source for Kilted), where
# the shared folder is beside the checkout: test/test_launch_real.py runs the launch files with it
# (and skips without it).
ROS2_LAUNCH ?= $(firstword $(wildcard ../shared/ros2-launch ../../shared/ros2-launch))
LAUNCH_STAMP := $(VENV)/.ros2-launch
# The suite runs in two pytest-xdist processes: a test file per unit of work, the whole-stack
# files (demos, the soak, recorded teleoperation) one unit, started first (test/conftest.py);
# each worker has its own ROS domain (test/helpers.py). One process took ~26 min on this 2-core
# class of machine, over CI's 20. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

.PHONY: demo test lint bench browser faketime clean-venv snap7-c node-opcua foxglove-peer \
	soil-kernels

$(STAMP): requirements.txt setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# The soil's kernels compiled ahead of time (excavator_sim.soil.kernels_aot: numba's pycc and
# the C compiler) into excavator_sim/soil/_soil_kernels*.so: a process that runs the soil (sim_node,
# soil_node) then loads neither numba nor LLVM (~130 MiB PSS each, issue 32). Rebuilt when a
# kernel's source changes; where it cannot be built the JIT runs them, as before (docs/soil.md).
EXT_SUFFIX := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
SOIL_KERNELS := excavator_sim/soil/_soil_kernels$(EXT_SUFFIX)
$(SOIL_KERNELS): excavator_sim/soil/terrain_kernels.py excavator_sim/soil/bucket_body_kernels.py \
		excavator_sim/soil/kernels_aot.py excavator_sim/soil/kernels.py \
		excavator_sim/soil/terrain_config.py | $(STAMP)
	$(PY) -m excavator_sim.soil.kernels_aot
soil-kernels: $(SOIL_KERNELS)

demo: $(STAMP)
	-$(MAKE) --no-print-directory soil-kernels
	$(VENV)/bin/excavator-hil demo $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy   # [tool.mypy] in pyproject.toml: the five packages (excavator_common at the bottom), strict, cached

# Debian's chromium + chromedriver for the dashboard's browser tests: installed only as root
# with apt (no browser download); elsewhere those tests skip and say why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null; \
	else echo "make browser: no chromium/chromedriver and not root with apt-get:" \
	  "test/test_dashboard_e2e.py will skip"; fi

# Debian's libfaketime: test/test_bridge_seq.py restarts the plc_bridge process with its wall
# clock an hour back. Installed only as root with apt; elsewhere that test skips and says why.
faketime:
	@if [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || \
	   [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1 ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    faketime libfaketime >/dev/null; \
	else echo "make faketime: no libfaketime and not root with apt-get:" \
	  "the libfaketime test of test/test_bridge_seq.py will skip"; fi

# The original C snap7 library (its S7 server is the tests' second, independent PLC
# implementation): python-snap7 1.3's wheel bundles libsnap7.so. Optional: without it (offline)
# those tests skip and say so.
SNAP7_C := $(VENV)/snap7-c/libsnap7.so
$(SNAP7_C): | $(STAMP)
	rm -rf $(VENV)/snap7-c/dl && mkdir -p $(VENV)/snap7-c/dl
	$(PY) -m pip download --quiet --no-deps --only-binary :all: --dest $(VENV)/snap7-c/dl \
		"python-snap7==1.3"
	$(PY) -c "import sys, zipfile, glob; z = zipfile.ZipFile(glob.glob(sys.argv[1])[0]); \
		open(sys.argv[2], 'wb').write(z.read('snap7/lib/libsnap7.so'))" \
		"$(VENV)/snap7-c/dl/python_snap7-1.3-*.whl" $(SNAP7_C)
snap7-c: $(SNAP7_C)

# node-opcua (Node.js), the tests' independent OPC UA implementation: `npm ci` from the lockfile
# in test/peers/node_opcua (no install scripts run). Optional: without Node.js or offline,
# test/test_opcua_node_peer.py skips and says so.
NODE_OPCUA := test/peers/node_opcua/node_modules/node-opcua/package.json
$(NODE_OPCUA): test/peers/node_opcua/package-lock.json
	sh test/peers/install_node_opcua.sh
node-opcua: $(NODE_OPCUA)

# The Foxglove WebSocket protocol's reference client (npm @foxglove/ws-protocol, ws, protobufjs;
# pinned by test/peers/foxglove/package-lock.json): test/test_foxglove_view.py's independent peer.
# Optional: without node/npm (or offline) that test skips and says so.
FOXGLOVE_PEER := test/peers/foxglove/node_modules/.package-lock.json
$(FOXGLOVE_PEER): test/peers/foxglove/package-lock.json
	cd test/peers/foxglove && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
foxglove-peer:
	@if command -v npm >/dev/null; then $(MAKE) -s --no-print-directory $(FOXGLOVE_PEER); \
	else echo "make foxglove-peer: no npm: test/test_foxglove_view.py's live test will skip"; fi

$(LAUNCH_STAMP): $(STAMP) $(wildcard $(ROS2_LAUNCH)/wheels/*.whl)
ifneq ($(ROS2_LAUNCH),)
	PYTHON=$(abspath $(PY)) bash $(ROS2_LAUNCH)/install.sh
endif
	@touch $@

test: lint browser faketime $(LAUNCH_STAMP) $(SOIL_KERNELS)
	-$(MAKE) --no-print-directory snap7-c
	-$(MAKE) --no-print-directory node-opcua
	-$(MAKE) --no-print-directory foxglove-peer
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

bench: $(STAMP)
	-$(MAKE) --no-print-directory soil-kernels
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean-venv:
	rm -rf $(VENV) excavator_sim/soil/_soil_kernels*.so
