#!/usr/bin/env python3
"""Type-check the README's Python the way a user's checker would: every ```python block as a module of
its own (a user copies one block), under mypy --strict and basedpyright's strict mode, with no
ignore. `make lint` runs it.

    python scripts/readme_types.py [README.md]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def snippets(readme: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)


def main() -> int:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    blocks = snippets(readme)
    with tempfile.TemporaryDirectory() as tmp:
        modules = []
        for i, block in enumerate(blocks, start=1):
            modules.append(Path(tmp) / f"readme_block_{i}.py")
            modules[-1].write_text(block)
        config = Path(tmp) / "pyrightconfig.json"
        config.write_text(
            json.dumps({"typeCheckingMode": "strict", "pythonVersion": "3.11", "extraPaths": [str(ROOT)]})
        )
        checks = [
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, modules)],
            [
                sys.executable,
                "-m",
                "basedpyright",
                "--pythonpath",
                sys.executable,
                "--project",
                str(config),
                *map(str, modules),
            ],
        ]
        failed = 0
        for cmd in checks:
            env = {**os.environ, "MYPYPATH": str(ROOT)}
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                failed += 1
                print(out.stdout + out.stderr, end="")
        print(f"README: {len(blocks)} Python blocks, {len(checks) - failed} of {len(checks)} checkers clean")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
