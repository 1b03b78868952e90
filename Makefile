# The two commands of the README: `make demo` and `make test`. `make down` removes the sandbox.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: demo test test-bench down bootstrap lint
bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@bash scripts/demo.sh

test: bootstrap
	@bash scripts/test.sh

lint: bootstrap
	@bash scripts/test.sh lint

test-bench: bootstrap
	@bash scripts/test.sh bench

down: bootstrap
	@python -m tests.sandbox down --all
