"""An up-front check that Spark's Python workers can import what a pipeline's workers need: on a
local master a failing worker prints Spark's executor error and a Java stack trace before any
Python error, so its interpreter is asked first (`session.worker_python_problem` words the answer)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from rebalancer.pipeline.session.build import (
    DRIVER_VERSION,
    WORKER_MODULES,
    is_connect,
    worker_python,
    worker_python_problem,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Run by the workers' interpreter: which of WORKER_MODULES it lacks (rebalancer only looked for, as
# importing it needs pyspark, which Spark puts on the workers' path itself), then its version.
_PROBE = (
    "import importlib, importlib.util, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found = importlib.util.find_spec(name) if name == 'rebalancer' else importlib.import_module(name)\n"
    "    except Exception:\n"
    "        found = None\n"
    "    if found is None:\n"
    "        print('missing', name)\n"
    "print('version %d.%d' % sys.version_info[:2])\n"
)
_probed: dict[tuple[str, tuple[str, ...]], str] = {}


def check_worker_python(spark: SparkSession) -> None:
    """On a local master, RuntimeError (`worker_python_problem`) before any task runs when the
    workers' interpreter lacks what they import or is another Python version: a task failing on
    it would print Spark's executor error and Java stack trace first. Asked once per interpreter
    and process. Elsewhere the workers are on other machines; `spark_error_reason` reads the first
    task's failure instead."""
    import shutil
    import subprocess

    if is_connect(spark) or not str(spark.sparkContext.master).startswith("local"):
        return
    python = worker_python(spark)
    path = shutil.which(python) or python
    if os.path.abspath(path) == os.path.abspath(sys.executable):
        return
    # A zip added with addPyFile brings rebalancer itself, on a path only the workers have.
    modules = WORKER_MODULES if not spark.sparkContext._python_includes else WORKER_MODULES[:-1]
    if (python, modules) not in _probed:
        try:
            done = subprocess.run([path, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=120)
        except OSError:
            _probed[python, modules] = worker_python_problem(python, [])
        except subprocess.TimeoutExpired:
            return  # a slow machine, not a missing module: the first task tells
        else:
            words = [line.split() for line in done.stdout.splitlines()]
            missing = [parts[1] for parts in words if len(parts) == 2 and parts[0] == "missing"]
            version = next((parts[1] for parts in words if len(parts) == 2 and parts[0] == "version"), None)
            bad = missing or (version is not None and version != DRIVER_VERSION)
            _probed[python, modules] = worker_python_problem(python, missing, version) if bad else ""
    if _probed[python, modules]:
        raise RuntimeError(_probed[python, modules])
