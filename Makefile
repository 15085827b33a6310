# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   the main job
#   make test   lint + the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export MUJOCO_GL ?= egl

.PHONY: demo test lint bench browser clean-venv

$(STAMP): requirements.txt setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/excavator-hil demo $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Debian's chromium + chromedriver for the dashboard's browser tests: installed only as root
# with apt (no browser download); elsewhere those tests skip and say why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null; \
	else echo "make browser: no chromium/chromedriver and not root with apt-get:" \
	  "test/test_dashboard_e2e.py will skip"; fi

test: lint browser
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
