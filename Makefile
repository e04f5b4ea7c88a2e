# relay_ir: `make demo` (the main job) and `make test` set everything up on a fresh machine.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
NPROC := $(shell nproc 2>/dev/null || echo 2)

.PHONY: all test test-stress demo install bench bench-peers bench-all lint clean test-gpu new-op

all: test

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

# NOTE: the demo extra (scikit-learn, tqdm) is part of every install so that the test suite's
# shortened demo runs too.
$(STAMP): $(VPY) setup.cfg pyproject.toml
	$(VPY) -m pip install -q -e ".[test,demo]"
	touch $(STAMP)

install: $(STAMP)

# NOTE: pytest exits 5 when a marker selects no test; an empty tier is not a failure
test: $(STAMP)
	$(VPY) -m pytest -n $(NPROC) -m "not stress" $(PYTEST_ARGS) || test $$? -eq 5

# The full-size scale gates (100,000-binding programs, million-step loops) the default run
# checks at a few thousand bindings under a low recursion limit.
test-stress: $(STAMP)
	$(VPY) -m pytest -n $(NPROC) -m stress $(PYTEST_ARGS) || test $$? -eq 5

test-gpu: $(STAMP)
	$(VPY) -m pytest -m gpu $(PYTEST_ARGS)

demo: $(STAMP)
	$(VPY) -m relay_ir.demo

# W1-W8 side by side with every installed peer (numpy always; JAX and PyTorch when the `bench`
# extra is installed: make bench-peers). BENCH_ARGS: e.g. --rounds 3 --only W2,W3.
BENCH_ARGS ?=
bench: $(STAMP)
	$(VPY) benchmarks/run_workloads.py $(BENCH_ARGS)

bench-peers: $(STAMP)
	$(VPY) -m pip install -q -e ".[bench]"

bench-all: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(VPY) $$b || exit 1; done

# Scaffold an operator: make new-op NAME=nn.my_op [FAMILY=nn] [INPUTS=2]
new-op: $(STAMP)
	@test -n "$(NAME)" || (echo "usage: make new-op NAME=nn.my_op [FAMILY=nn] [INPUTS=1]"; exit 2)
	$(VPY) scripts/new_op.py $(NAME) $(if $(FAMILY),--family $(FAMILY)) $(if $(INPUTS),--inputs $(INPUTS))

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
