"""`run(RunRequest(...))`: what `rebalancer pipeline run` does, from Python.

The request is validated once, where it is made, and resolved once (`resolved.resolve_run`): the
output mode (Spark's SaveMode words: error, overwrite, append) is checked before any work, so two
runs' outputs never end up mixed in one directory, and an error or overwrite run is swapped in only
once complete. `cmd_run` builds a `RunRequest` from its flags and calls `run`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rebalancer.pipeline.batch import drive_batch
from rebalancer.pipeline.outputs.claim import one_group_run_per_output
from rebalancer.pipeline.outputs.summary import RunSummary
from rebalancer.pipeline.outputs.swap import run_outputs
from rebalancer.pipeline.resolved import RunHooks, RunRequest, resolve_run
from rebalancer.pipeline.stream.driver import drive_stream

# RunRequest and RunSummary are documented under this module's name, as is resolve_input.
__all__ = ["run"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.stream.state import BatchProgress


@one_group_run_per_output(lambda arguments: (arguments["request"].input, arguments["request"].output))
def run(
    request: RunRequest,
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[BatchProgress], None] | None = None,
) -> RunSummary:
    """Run the pipeline as `rebalancer pipeline run` does, and return its summary.

    `spark` defaults to the active session. `progress` is called with each stage's name (a batch
    run), `on_batch` with each micro-batch applied (a stream). Raises ValueError, naming the field,
    for a request the output refuses (see `RunRequest.mode`) or an input that cannot be read.

    Every check comes before anything is written or replaced (`resolve_run`): the input against the
    output and the checkpoint, the plan asked for, the output mode, the sink's tables. In error and
    overwrite modes the run is then written beside the previous one and swapped in once complete
    (`outputs.swap`): an interrupted run leaves the previous one as it was.
    """
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise ValueError("spark: no active SparkSession; pass spark= (see rebalancer.pipeline.session.build.build_session)")
    resolved = resolve_run(request, spark, output_name=str(request.output))
    with run_outputs(list(resolved.states), request.mode, spark) as outputs:
        staged = resolved.at(outputs, spark)
        hooks = RunHooks(progress, on_batch, outputs.publish, outputs.take_group)
        return drive_stream(staged, hooks, spark) if staged.stream is not None else drive_batch(staged, hooks, spark)
