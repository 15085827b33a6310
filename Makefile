# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   the main job
#   make test   lint + the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export MUJOCO_GL ?= egl

.PHONY: demo test lint bench clean-venv

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

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
