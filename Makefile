# The two commands a newcomer needs: `make demo` and `make test`. Everything else is a step of those.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF := .tools/node_modules/.bin/buf
# Type-checked packages (mypy strict); grows as each service lands.
TYPED := assembly console services gateway kernel_service cognition_service policy_service biography_service world edge scripts

.PHONY: system-deps demo test check lint typecheck protos protos-check buf-lint buf-breaking pytest install clean deploy-check cpp-client

# `make demo DEMO_ARGS=--stay` keeps the run's services and console up afterwards (Ctrl-C stops them).
DEMO_ARGS ?=
demo: install
	$(VENV)/bin/egbe demo $(DEMO_ARGS)

# The tests' PostgreSQL: the machine's local server unless one is named (testcontainers wins where
# a Docker engine runs).
export EGBE_TEST_POSTGRES_DSN ?= postgresql://postgres@127.0.0.1:5432/test

test: system-deps check pytest

system-deps:
	scripts/install_system_deps.sh

check: lint typecheck protos-check buf-lint deploy-check cpp-client

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py kernel_service/_core/moirai_core.c kernel_service/_core/moirai_core_decls.h kernel_service/_core/moirai_rows.c kernel_service/_core/moirai_behavior.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@1.75.0

protos: install
	$(PY) scripts/export_output_schemas.py
	$(PY) scripts/gen_protos.py
	$(PY) scripts/build_eval_suites.py

protos-check: install
	$(PY) scripts/export_output_schemas.py --check
	$(PY) scripts/gen_protos.py --check
	$(PY) scripts/build_eval_suites.py --check

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

# Container and Kubernetes manifests, without a Docker engine or a cluster: hadolint lints the
# Dockerfile; kubectl's built-in kustomize renders each tree; kubernetes-validate checks every
# rendered object against the Kubernetes JSON schemas (strict: unknown fields fail) of the oldest
# and newest versions we support. tests/deploy checks what the manifests promise.
K8S_TREES := deploy/k8s/base deploy/k8s/overlays/production deploy/k8s/overlays/monitoring deploy/k8s/examples/world-server
K8S_VERSIONS := 1.31.0 1.37.0
deploy-check: install
	$(VENV)/bin/hadolint deploy/Dockerfile
	@command -v kubectl >/dev/null || { echo "deploy-check: kubectl (with its built-in kustomize) is required"; exit 1; }
	@mkdir -p build/k8s
	@set -e; for tree in $(K8S_TREES); do \
	  out=build/k8s/$$(echo $$tree | tr / _).yaml; \
	  kubectl kustomize $$tree > $$out; \
	  for version in $(K8S_VERSIONS); do \
	    $(VENV)/bin/kubernetes-validate --strict --quiet -k $$version $$out; \
	  done; \
	  echo "deploy-check: $$tree valid for Kubernetes $(K8S_VERSIONS)"; \
	done

# The C++ world-server client, built from protos/ with Debian's gRPC C++ packages (.ci/run installs
# libgrpc++-dev and protobuf-compiler-grpc); tests/system runs it against real servers.
cpp-client:
	$(MAKE) -C clients/cpp

pytest: install
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) .tools .egbe runs build *.egg-info
