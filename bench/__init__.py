"""Benchmarks: run with `make bench` (or `python -m bench.agent_session`); never part of `make test`."""
