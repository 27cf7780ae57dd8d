# Two commands: `make run` trains the default job, `make test` runs the test suite.
# Both create the virtual environment in .venv on first use (scripts/setup_env.sh).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test test-gpu setup clean

$(VENV)/.installed: pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $@

setup: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/fa-train $(ARGS)

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q $(ARGS)

test-gpu: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m gpu $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
