"""Benchmarks: run with `make bench` (or `python -m bench.agent_session`); never part of `make test`.

A benchmark measures the work it names: no Model it opens starts from prefixes an earlier run
left in the disk tier, unless it gives its own ``cache_dir`` (bench.disk_prefix does).
"""

import os

os.environ.setdefault("PYSHIM_PREFIX_CACHE", "")
