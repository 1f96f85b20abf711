# Stage 5: the aggregate tables (CSV + Parquet), tidied from every run folder in one job
# (engine.analysis.provenance.set_runs: each run checked to be the one planned, made as the
# config says).


rule aggregate:
    input:
        runs=AGGREGATE_RUNS,
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
        reconcile=canonical(REC_SETTINGS),
        pipelines=PIPELINES_DIR,
        split=SPLIT_DIR,
    script:
        "../scripts/aggregate.py"
