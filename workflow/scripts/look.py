"""Snakemake script (run.sequential): a pipeline's first repetitions -> how many it runs
(engine.analysis.sequential.look), as JSON."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import json
import sys

from engine.analysis.provenance import planned_runs
from engine.analysis.sequential import look
from engine.analysis.summaries import speedup_table
from engine.analysis.tablefiles import stack
from engine.files import script_errors, write_text_atomic

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
with script_errors():  # one line on the console, as the engine's verbs
    params, pipeline = snakemake.params, snakemake.wildcards.pipeline
    first, seq = params.first, params.sequential
    runs = stack(planned_runs(params.sets, params.pipelines, params.split, True,
                              {pipeline: first}))["runs"]
    result = look(speedup_table(runs), seq["width"], first, seq["max_repetitions"])
    record = {"pipeline": pipeline, "first": first, **seq, **result}
    write_text_atomic(snakemake.output[0], json.dumps(record, indent=1) + "\n")
print(f"{pipeline}: {result['repetitions']} repetitions", file=sys.stderr)
