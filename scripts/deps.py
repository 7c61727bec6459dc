#!/usr/bin/env python3
"""Print the dependencies of pyproject.toml (the build backend, runtime and the dev extra), one per line.

The development virtualenv installs these and runs the package from the source
tree; `pip install .` is the route that builds and installs the library itself.
The build backend (scikit-build-core) is among them because scripts/fetch_llama.py
downloads the llama-cpp-python sdist without build isolation, and pip still prepares
that sdist's metadata with it.
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    pyproject = tomllib.load(f)
project = pyproject["project"]
needs = pyproject["build-system"]["requires"] + project["dependencies"] + project["optional-dependencies"]["dev"]
print("\n".join(dict.fromkeys(needs)))  # once each, in order
