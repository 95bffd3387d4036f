# The two README commands: `make run` (main job, embedded defaults) and `make test`.
SHELL := /bin/bash
VENV := .venv
ACT := source $(VENV)/bin/activate

.PHONY: setup run test lint doctor
setup:
	@bash scripts/bootstrap.sh

run: setup
	@$(ACT) && bolt-agent run --sim --robot reachy_mini_sim --record run_out/reachy_mini.gif

test: setup
	@$(ACT) && bash scripts/test.sh

lint: setup
	@$(ACT) && ruff check . && ruff format --check .

doctor: setup
	@$(ACT) && bolt-agent doctor
