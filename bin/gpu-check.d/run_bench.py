"""benchmarks/run.py with the caller's PYTHONPATH kept for its workers.

run.py gives every worker ``PYTHONPATH=<repository>``, which would hide packages the GPU check
installed under its own prefix (mpi4py, for the multi-rank jobs). Same arguments as run.py.
Run from the repository root."""
import os
import sys

sys.path.insert(0, os.getcwd())
import benchmarks.run as r  # noqa: E402

_env = r._env
r._env = lambda threads: {**_env(threads), "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
sys.argv[0] = r.__file__
r.main()
