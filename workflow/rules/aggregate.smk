# Stage 5: per-run tidy tables (a folder of Parquet files per run), then the aggregate
# tables (CSV + Parquet).


# One job tidies every repetition of a pipeline x policy x limit (a second or two each)
# into a folder with a rep<N> folder per run: a tenth of the jobs of one per run, which is
# what planning the paper sweep (and the scheduler) pays for, with no job groups (a group
# asks SLURM for the sum of its jobs).
rule tidy_run:
    input:
        runs=set_runs,
    output:
        tidy=directory(f"{RESULTS}/tidy/{{kind}}/{SET_PATTERN}"),
    log:
        f"{RESULTS}/logs/tidy/{{kind}}/{SET_PATTERN}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tidy/{{kind}}/{SET_PATTERN}.tsv"
    conda:
        "../../envs/analysis.yaml"
    resources:
        mem_mb=2048,
        runtime=10,
    params:
        code=CODE_TIDY,
    shell:
        "python -m engine tidy --out {output.tidy:q} {input.runs:q} 2> {log:q}"


rule aggregate:
    input:
        tidy=TIDY_DIRS,
        unprobed=UNPROBED_TIDY_DIRS,
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
        reps=canonical(TIDY_REPS),
        reconcile=canonical(REC_SETTINGS),
        pipelines=PIPELINES_DIR,
        split=SPLIT_DIR,
    script:
        "../scripts/aggregate.py"
