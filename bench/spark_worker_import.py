"""spark-worker-import: what a Spark streaming source's Python worker does before it connects back.

    python -m bench.spark_worker_import [--runs 5]
    python -m bench.spark_worker_import --connect-back

PySpark starts a new Python (`python -m pyspark.sql.streaming.python_streaming_source_runner`)
for each streaming Python data source a query starts, and gives it a hard-coded 10 s to
connect back (`PythonWorkerFactory.createSimpleWorker`; no setting changes it). Under heavy
load a query can then die with "Python worker failed to connect back".

Without flags, each of `--runs` rounds times in fresh processes:
- `runner (zip)`: the interpreter plus the runner's imports with PYTHONPATH as Spark sets it
  (pyspark.zip first, which holds no bytecode: every worker compiles what it imports);
- `runner (site-packages)`: the same imports from the installed, byte-compiled pyspark;
- `connector`: `import popmq.spark.source` after the runner's imports, which is what
  unpickling the data source costs the worker.
Each is reported as wall and CPU (user + system) seconds, median and min over the rounds,
with the load average around the run; `process total` is a whole fresh interpreter
(start-up, runner, connector).

`--connect-back` starts a local[2] session and three streaming queries over a stub source,
to see which of these counts toward the 10 s: one plain, one whose source module sleeps
15 s on import in the runner, and one whose runner sleeps 12 s before its own imports (a
sitecustomize in a temporary directory on PYTHONPATH). Only time spent before the runner
connects back can fail a query.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

_TIMED = """
import json, resource, sys, time
wall, cpu = time.perf_counter(), time.process_time()
import {module} as m
assert ({zip!r} in m.__file__) == {from_zip!r}, m.__file__
now_wall, now_cpu = time.perf_counter(), time.process_time()
import popmq.spark.source
print(json.dumps({{"runner_wall": now_wall - wall, "runner_cpu": now_cpu - cpu,
                  "connector_wall": time.perf_counter() - now_wall,
                  "connector_cpu": time.process_time() - now_cpu}}))
"""


def _spark_python_path() -> list[str]:
    """What Spark puts first on a worker's PYTHONPATH (PythonUtils.sparkPythonPath)."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return [str(lib / "pyspark.zip"), *map(str, sorted(lib.glob("py4j-*-src.zip")))]


def _one(from_zip: bool) -> dict[str, float]:
    """One fresh interpreter: its whole CPU and wall time, and its import timings."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if from_zip:
        path = [*_spark_python_path(), *path]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    code = _TIMED.format(module=RUNNER, zip="pyspark.zip", from_zip=from_zip)
    before = os.times()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout
    after = os.times()
    result: dict[str, float] = json.loads(out)
    result["process_wall"] = after.elapsed - before.elapsed
    result["process_cpu"] = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return result


def _imports(runs: int) -> None:
    load = os.getloadavg()
    rounds = [(_one(True), _one(False)) for _ in range(runs)]
    rows = [
        ("process total (zip)", [z["process_wall"] for z, _ in rounds],
         [z["process_cpu"] for z, _ in rounds]),
        ("runner (zip), imports", [z["runner_wall"] for z, _ in rounds],
         [z["runner_cpu"] for z, _ in rounds]),
        ("process total (site-packages)", [s["process_wall"] for _, s in rounds],
         [s["process_cpu"] for _, s in rounds]),
        ("runner (site-packages), imports", [s["runner_wall"] for _, s in rounds],
         [s["runner_cpu"] for _, s in rounds]),
        ("connector, after the runner (zip)", [z["connector_wall"] for z, _ in rounds],
         [z["connector_cpu"] for z, _ in rounds]),
    ]  # fmt: skip
    print(f"{runs} rounds, load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print("| what | wall s median | wall s min | CPU s median | CPU s min |")
    print("|---|---|---|---|---|")
    for name, wall, cpu in rows:
        print(f"| {name} | {statistics.median(wall):.3f} | {min(wall):.3f} | "
              f"{statistics.median(cpu):.3f} | {min(cpu):.3f} |")  # fmt: skip


_SITECUSTOMIZE = f"""
import os, sys, time
if os.path.exists(os.path.join({{here!r}}, "delay_start")) and {RUNNER!r} in sys.orig_argv:
    time.sleep(12)
"""

_SOURCE = f"""
import os, sys, time
_main = getattr(sys.modules.get("__main__"), "__spec__", None)
_delay = os.path.exists(os.path.join({{here!r}}, "delay_import"))
if _delay and getattr(_main, "name", "") == {RUNNER!r}:
    time.sleep(15)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StructField, StructType

class StubReader(DataSourceStreamReader):
    def initialOffset(self): return {{{{"o": 0}}}}
    def latestOffset(self): return {{{{"o": 1}}}}
    def partitions(self, start, end): return [InputPartition(0)]
    def read(self, partition): yield (1,)
    def commit(self, end): pass

class StubSource(DataSource):
    @classmethod
    def name(cls): return "stub"
    def schema(self): return StructType([StructField("x", LongType())])
    def streamReader(self, schema): return StubReader()
"""

_QUERIES = """
import os, sys, time
from pyspark.sql import SparkSession
from stub_source import StubSource
here = sys.argv[1]
os.environ["PYSPARK_PYTHON"] = sys.executable
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.python.authenticate.socketTimeout", "120s").getOrCreate())
spark.sparkContext.setLogLevel("OFF")
spark.dataSource.register(StubSource)
for case, flag in (("plain", None), ("source_import_sleeps_15s", "delay_import"),
                   ("runner_startup_sleeps_12s", "delay_start")):
    for name in ("delay_start", "delay_import"):
        if os.path.exists(os.path.join(here, name)):
            os.remove(os.path.join(here, name))
    if flag:
        open(os.path.join(here, flag), "w").close()
    began = time.monotonic()
    query = (spark.readStream.format("stub").load().writeStream.format("memory")
             .queryName(case).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        outcome = f"ran, {spark.table(case).count()} row"
    except Exception as error:
        outcome = "failed: " + str(error).splitlines()[0].split("terminated with exception: ")[-1]
    print(f"RESULT | {case} | {outcome} | {time.monotonic() - began:.1f} s", flush=True)
spark.stop()
"""


def _connect_back() -> None:
    with tempfile.TemporaryDirectory(prefix="spark-connect-back-") as here:
        Path(here, "sitecustomize.py").write_text(_SITECUSTOMIZE.format(here=here))
        Path(here, "stub_source.py").write_text(_SOURCE.format(here=here))
        Path(here, "queries.py").write_text(textwrap.dedent(_QUERIES))
        path = [here, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        load = os.getloadavg()
        out = subprocess.run(
            [sys.executable, str(Path(here, "queries.py")), here],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    print(f"load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| query | outcome | time to end |")
    print("|---|---|---|")
    for line in out.splitlines():
        if line.startswith("RESULT | "):
            print(line.removeprefix("RESULT ") + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds of fresh processes")
    parser.add_argument(
        "--connect-back", action="store_true", help="which delays fail a query (Spark)"
    )
    args = parser.parse_args(argv)
    if args.connect_back:
        _connect_back()
    else:
        _imports(args.runs)


if __name__ == "__main__":
    main()
