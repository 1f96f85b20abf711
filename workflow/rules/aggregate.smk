# Stage 5: the aggregate tables (CSV + Parquet), tidied from every run folder in one job
# (engine.analysis.provenance.set_runs: each run checked to be the one planned, made as the
# config says).


rule aggregate:
    input:
        unpack(aggregate_runs),
        reconcile=REC_DIR,
    output:
        expand(f"{RESULTS}/tables/{{table}}.{{ext}}", table=TABLES, ext=["csv", "parquet"]),
    log:
        f"{RESULTS}/logs/aggregate.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        code=CODE_ANALYSIS,
        sets=canonical(AGGREGATE_SETS),
        first=FIRST_REPS,
        sequential=canonical(SEQUENTIAL),
        reconcile=canonical(REC_SETTINGS),
        pipelines=PIPELINES_DIR,
        split=SPLIT_DIR,
    script:
        "../scripts/aggregate.py"


# run.sequential: after a pipeline's first repetitions, how many it runs
# (engine.analysis.sequential); the aggregate asks for the rest.
checkpoint look:
    input:
        look_runs,
    output:
        LOOK,
    log:
        f"{RESULTS}/logs/looks/{{pipeline}}.log",
    priority: LOOK_PRIORITY
    conda:
        "../../envs/analysis.yaml"
    params:
        code=CODE_LOOK,
        sets=look_sets,
        sequential=canonical(SEQUENTIAL),
        first=FIRST_REPS,
        pipelines=PIPELINES_DIR,
        split=SPLIT_DIR,
    script:
        "../scripts/look.py"
