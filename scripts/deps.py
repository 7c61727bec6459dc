#!/usr/bin/env python3
"""Print the dependencies of pyproject.toml (runtime and the dev extra), one per line.

The development virtualenv installs these and runs the package from the source
tree; `pip install .` is the route that builds and installs the library itself.
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["dev"]))
