# Stage 5: per-run tidy tables (a folder of Parquet files per run), then the aggregate
# tables (CSV + Parquet).


rule tidy_run:
    input:
        run=f"{RESULTS}/runs/{{run}}",
    output:
        tidy=directory(f"{RESULTS}/tidy/{{run}}"),
    params:
        code=CODE_ANALYSIS,
    resources:
        mem_mb=2048,
        runtime=10,
    group:
        "tidy"
    log:
        f"{RESULTS}/logs/tidy/{{run}}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tidy_run.py"


rule aggregate:
    input:
        tidy=TIDY_DIRS,
        reconcile=REC_DIR,
    output:
        expand(f"{RESULTS}/tables/{{table}}.{{ext}}", table=TABLES, ext=["csv", "parquet"]),
    params:
        code=CODE_ANALYSIS,
    log:
        f"{RESULTS}/logs/aggregate.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/aggregate.py"
