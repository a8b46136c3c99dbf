# The two commands a newcomer needs: `make demo` and `make test`. Everything else is a step of those.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF := .tools/node_modules/.bin/buf
# Type-checked packages (mypy strict); grows as each service lands.
TYPED := services gateway kernel_service cognition_service policy_service biography_service world scripts

.PHONY: demo test check lint typecheck protos protos-check buf-lint buf-breaking pytest install clean

demo: install
	$(VENV)/bin/egbe demo

test: check pytest

check: lint typecheck protos-check buf-lint

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py kernel_service/_core/moirai_core.c kernel_service/_core/moirai_core_decls.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@1.75.0

protos: install
	$(PY) scripts/gen_protos.py

protos-check: install
	$(PY) scripts/gen_protos.py --check

buf-lint: $(BUF)
	$(BUF) lint

# Wire compatibility against a git ref (default: the previous commit).
BUF_AGAINST ?= .git\#ref=HEAD~1
buf-breaking: $(BUF)
	$(BUF) breaking --against '$(BUF_AGAINST)'

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy $(TYPED)

pytest: install
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) .tools .egbe runs build *.egg-info
