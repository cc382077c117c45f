import os
import sys

# `python -m` puts the current folder first on the import path, where a model file named like a
# standard or installed module (profile.py, sympy.py) would hide it from torch and fxprof. The
# model loader makes the current folder importable itself, as each MODEL spelling needs
# (fxprof.models.load_model), as the `fxprof` script does.
if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == os.getcwd():
    del sys.path[0]

from .cli import main  # noqa: E402

sys.exit(main())
