"""Installable parts: the wheel, its extras, and the ImportErrors that name a missing extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import rebalancer
from cli_helpers import blocker
from rebalancer._extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = ("balance", "queue", "consumers", "shedding", "pipeline", "produce", "testing", "cli")

# Imports every package an extra brings fail, as on a core-only install (pip install partition-rebalancer).
BLOCKER = blocker(
    '{"pyspark", "pandas", "pyarrow", "aiokafka", "confluent_kafka", "matplotlib", "rich", "javaproperties"}'
)

# The core at work: a plan, a partitioned queue's assignment, a BatchQueue draining 100 items.
CORE_USE = textwrap.dedent("""
    from rebalancer.balance import plan_rebalance
    from rebalancer.consumers import PartitionedQueue
    from rebalancer.queue import BatchQueueConfig, BatchQueueManager, ThreadPolicy

    assert sorted(plan_rebalance([5, 3, 2], [0, 0, 0], 2).load_after) == [5, 5]
    pq = PartitionedQueue(7, rebalance_delay_s=0.0)
    pq.bind("c1", now=0.0)
    assert pq.poll(now=0.0) and pq.assignment == {"c1": list(range(7))}
    seen = []
    q = BatchQueueManager.create("core-only", BatchQueueConfig(threads=ThreadPolicy.fixed(1)))
    q.add_handler(int, seen.extend)
    assert all(q.produce(i) for i in range(100))
    BatchQueueManager.shutdown("core-only")
    assert sorted(seen) == list(range(100))
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources, so the shared working tree gets no build/ or egg-info."""
    src = tmp_path_factory.mktemp("sdist")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = src / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        check=True, capture_output=True, text=True,
    )
    (path,) = out.glob("partition_rebalancer-*.whl")
    return path


def test_the_wheel_carries_types_license_and_the_extras(wheel: Path):
    assert wheel.name == f"partition_rebalancer-{rebalancer.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"partition_rebalancer-{rebalancer.__version__}.dist-info"
        metadata = Parser().parsestr(z.read(f"{info}/METADATA").decode())
        license_text = z.read(f"{info}/licenses/LICENSE").decode()
    assert "rebalancer/py.typed" in names
    assert {f"rebalancer/{c}/__init__.py" for c in COMPONENTS if c != "cli"} <= names
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert metadata["License-Expression"] == "Apache-2.0"
    # `rebalancer` on PyPI is another project (whose import package is `rebalancer` too): ours is
    # published under a free name, and keeps its import package and command.
    assert metadata["Name"] == rebalancer.DISTRIBUTION == "partition-rebalancer"
    extras = set(metadata.get_all("Provides-Extra"))
    assert extras == {"all", "dev", "kafka", "plots", "spark", "postgres", "cli", "pulsar"}
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist")]
    assert sorted(r.name for r in requires if r.marker is None) == ["numpy"]
    by_extra = {e: {r.name for r in requires if r.marker is not None and r.marker.evaluate({"extra": e})}
                for e in extras}
    assert by_extra["spark"] >= {"pyspark", "pandas", "pyarrow", "matplotlib"}  # + the Spark Connect client
    assert by_extra["kafka"] == {"aiokafka", "confluent-kafka"}
    assert by_extra["plots"] == {"matplotlib"}
    assert by_extra["postgres"] == {"psycopg", "pgpq"}
    assert by_extra["cli"] == {"rich"}
    assert by_extra["pulsar"] == {"javaproperties", "httpx"}
    assert by_extra["all"] == {"partition-rebalancer"}
    # Each extra installs what rebalancer._extras checks for it (module names, as imported).
    for extra, modules in EXTRAS.items():
        assert {m.replace("_", "-") for m in modules} <= by_extra[extra], extra
    (everything,) = [r for r in requires if r.name == "partition-rebalancer"]
    assert everything.extras == extras - {"all", "dev"}  # [all] is every extra but the developers' tools


def fresh_venv(wheel: Path, venv: Path, dependencies: Path) -> tuple[Path, Path]:
    """A new venv with the wheel installed and `dependencies` (a site directory) on its path; (python, site).

    The dependencies are installed ones (offline), on a plain path in a .pth, so the .pth files there
    (the editable install of the working tree) are not processed and cannot shadow the wheel.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(f"{dependencies}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, text=True)
    return python, site


def test_the_wheel_installs_into_a_fresh_venv_and_imports_every_component(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    python, site = fresh_venv(wheel, venv, Path(sysconfig.get_paths()["purelib"]))
    probe = textwrap.dedent(f"""
        import importlib, pathlib
        for name in {COMPONENTS!r}:
            module = importlib.import_module("rebalancer." + name)
            assert pathlib.Path(module.__file__).is_relative_to({str(site)!r}), module.__file__
        import rebalancer
        print(rebalancer.__version__)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.stdout == f"{rebalancer.__version__}\n"
    version = subprocess.run([venv / "bin" / "rebalancer", "--version"], check=True, capture_output=True,
                             text=True, cwd=tmp_path, env=env)
    assert version.stdout == f"rebalancer {rebalancer.__version__}\n"


def test_the_wheel_with_numpy_alone_runs_the_core_and_names_every_missing_extra(wheel: Path, tmp_path: Path):
    """A core install (`pip install partition-rebalancer`): numpy is the only other package on the path."""
    import numpy

    only_numpy = tmp_path / "only-numpy"
    only_numpy.mkdir()
    installed = Path(numpy.__file__).parent.parent
    for entry in [*installed.glob("numpy"), *installed.glob("numpy.libs"), *installed.glob("numpy-*.dist-info")]:
        (only_numpy / entry.name).symlink_to(entry)
    venv = tmp_path / "venv"
    python, site = fresh_venv(wheel, venv, only_numpy)
    probe = textwrap.dedent(f"""
        import importlib, importlib.util, pathlib, sys
        third_party = {{"numpy", "rich", "javaproperties", "pyspark", "pandas", "pyarrow", "matplotlib",
                       "aiokafka", "confluent_kafka", "psycopg", "pgpq"}}
        print(sorted(m for m in third_party if importlib.util.find_spec(m) is not None))
        for name in ("balance", "queue", "consumers", "shedding", "shedding.model", "shedding.compare"):
            module = importlib.import_module("rebalancer." + name)
            assert pathlib.Path(module.__file__).is_relative_to({str(site)!r}), module.__file__
    """) + CORE_USE + textwrap.dedent("""
        from rebalancer._extras import MissingExtraError
        from rebalancer.shedding import ShedderConfig

        for name in ("pipeline", "produce", "testing"):
            try:
                importlib.import_module("rebalancer." + name)
            except MissingExtraError as exc:
                print(exc.extra)
        try:
            ShedderConfig.from_broker_conf("broker.conf")
        except MissingExtraError as exc:
            print(exc)
        print(sorted(m for m in sys.modules if m.partition(".")[0] in third_party and "." not in m))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "['numpy']",
        "spark",
        "kafka",
        "kafka",
        "ShedderConfig.from_broker_conf needs javaproperties, from the 'pulsar' extra: "
        "pip install 'partition-rebalancer[pulsar]'",
        "['numpy']",
    ]
    command = venv / "bin" / "rebalancer"
    version = subprocess.run([command, "--version"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert (version.returncode, version.stdout) == (0, f"rebalancer {rebalancer.__version__}\n")
    top_help = subprocess.run([command, "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert top_help.returncode == 0 and "consumers demo" in top_help.stdout, top_help.stderr
    for component in ("queue", "pipeline"):
        used = subprocess.run([command, component, "demo"], capture_output=True, text=True, cwd=tmp_path, env=env)
        assert (used.returncode, used.stderr) == (2, (
            f"rebalancer: error: rebalancer {component} needs rich, from the 'cli' extra: "
            "pip install 'partition-rebalancer[cli]'\n"
        ))


def test_the_core_needs_only_numpy_and_each_extra_is_named_when_missing():
    probe = BLOCKER + CORE_USE + textwrap.dedent("""
        from rebalancer._extras import MissingExtraError
        from rebalancer.shedding import AvgShedder
        from rebalancer.shedding.compare import plot_result

        AvgShedder()

        for name in ("rebalancer.pipeline", "rebalancer.produce", "rebalancer.testing"):
            try:
                __import__(name)
            except MissingExtraError as exc:
                print(exc)
            else:
                raise AssertionError(name + " imported without its extra")
        try:
            plot_result(None, None)
        except MissingExtraError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "rebalancer.pipeline needs pyspark, pandas, pyarrow, matplotlib, from the 'spark' extra: "
        "pip install 'partition-rebalancer[spark]'",
        "rebalancer.produce needs aiokafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'",
        "rebalancer.testing needs confluent_kafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'",
        "rebalancer.shedding plots needs matplotlib, from the 'plots' extra: pip install 'partition-rebalancer[plots]'",
    ]


@pytest.mark.parametrize(("component", "blocked", "extra"), [
    ("rebalancer.pipeline", "pandas", "spark"),
    ("rebalancer.produce", "aiokafka", "kafka"),
    ("rebalancer.testing", "confluent_kafka", "kafka"),
])
def test_a_missing_extra_is_an_import_error_naming_it(monkeypatch, component, blocked, extra):
    from rebalancer._extras import MissingExtraError

    for name in [m for m in sys.modules if m == component or m.startswith(component + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(ImportError) as error:
        __import__(component)
    assert isinstance(error.value, MissingExtraError)
    assert error.value.name == blocked and error.value.extra == extra
    assert str(error.value) == (
        f"{component} needs {blocked}, from the '{extra}' extra: pip install 'partition-rebalancer[{extra}]'"
    )


def test_an_unknown_extra_is_a_value_error():
    from rebalancer._extras import require_extra

    with pytest.raises(ValueError, match=(
        "extra must be one of \\['cli', 'kafka', 'plots', 'postgres', 'pulsar', 'spark'\\], got 'sparks'"
    )):
        require_extra("x", "sparks")


def _make_dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make TARGET` would run on a fresh checkout (no .venv yet), without running them."""
    checkout = tmp_path / target
    checkout.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, checkout / name)
    shutil.copytree(ROOT / "conformance", checkout / "conformance", ignore=shutil.ignore_patterns("target"))
    # --no-print-directory: under `make test` (CI) this make is a sub-make, which would print
    # "Entering directory" lines around the commands.
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", target], cwd=checkout, check=True, capture_output=True, text=True
    )
    return out.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_installs_only_the_main_jobs_extras_and_make_test_everything(tmp_path: Path):
    run = _make_dry_run("run", tmp_path)
    installs = [line for line in run if " -m pip install " in line and "--upgrade pip" not in line]
    assert installs == [".venv/bin/python -m pip install -e '.[spark,cli]'"]  # no --quiet: pip's progress shows
    # One line first: what comes, and about how long it takes (issue 46, item 3).
    said = 'echo "make run: installs pyspark, pandas, pyarrow, matplotlib, rich (~1 GB, 2-4 min)"'
    assert run.index(said) < run.index(installs[0]) and len(said) - len('echo ""') <= 80
    assert "scripts/ensure-java.sh" in run and run[-1].startswith(".venv/bin/rebalancer pipeline run")
    assert not [line for line in run if "postgres" in line or "maven" in line or "kafka" in line]
    test = _make_dry_run("test", tmp_path)
    assert ".venv/bin/python -m pip install --quiet -e '.[all,dev]'" in test
    assert {"scripts/ensure-java.sh", "scripts/ensure-postgres.sh", "scripts/fetch-kafka.sh", "scripts/fetch-pulsar.sh"} <= set(test)
