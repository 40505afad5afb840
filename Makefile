# deltalog: the README names `make demo` and `make test`; the rest are listed by `make help`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help setup demo demo-full demo-wordnet test test-slow fuzz lint typecheck ui screenshot bench bench-recursion clean

help:
	@echo "make demo       set up, build the local warehouse, run the pipeline twice, print a report"
	@echo "make demo-full  the demo on the whole Debian index (about 15 minutes)"
	@echo "make demo-wordnet  the demo of the second pipeline, the WordNet hypernym graph (10-15 min)"
	@echo "make test       set up and run the default test suite"
	@echo "make test-slow  the slow tests (larger data)"
	@echo "make fuzz       fuzz the CLI for FUZZ_MINUTES minutes (default 30): tracebacks, wrong answers"
	@echo "make lint       ruff + mypy"
	@echo "make ui         the Dagster UI on http://127.0.0.1:3000"
	@echo "make screenshot the README's UI screenshots (docs/img/; installs chromium when missing)"
	@echo "make bench      benchmarks (print tables of measurements and ratios)"
	@echo "make bench-recursion  transitive closure under change: ours vs DuckDB, Pathway, egglog,"
	@echo "                pydbsp (peers get venvs in .bench-venvs/ on first use; about 30-40 minutes)"

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $(STAMP)

setup: $(STAMP)

# The quick demo runs on the Debian sections admin, libs and utils (about 3-5 minutes);
# demo-full runs on the whole bookworm index (4M-row closure; about 15 minutes on 2 cores).
demo: $(STAMP)
	$(BIN)/python -m deltalog.dagster_project.demo --sections admin,libs,utils

demo-full: $(STAMP)
	$(BIN)/python -m deltalog.dagster_project.demo

demo-wordnet: $(STAMP)
	$(BIN)/python -m deltalog.dagster_project.demo --pipeline wordnet

test: $(STAMP)
	bash scripts/run_tests.sh

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

fuzz: $(STAMP)
	$(BIN)/python scripts/fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check deltalog tests bench scripts
	$(BIN)/mypy deltalog

ui: $(STAMP)
	bash scripts/ui.sh

screenshot: $(STAMP)
	bash scripts/screenshot.sh

bench: $(STAMP)
	$(BIN)/python -m bench.run_all
	$(BIN)/python -m bench.explain

bench-recursion: $(STAMP)
	$(BIN)/python -m bench.recursion_vs_peers

clean:
	rm -rf warehouse .dagster_home/storage .dagster_home/history .dagster_home/logs \
		.dagster_home/schedules .dagster_home/.logs_queue
