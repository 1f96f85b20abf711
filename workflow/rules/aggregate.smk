# Stage 5: per-run tidy tables (a folder of Parquet files per run), then the aggregate
# tables (CSV + Parquet).


# One job per pipeline tidies every run set of one kind on it (a second or two a set):
# a fraction of the jobs of one per run, which is what planning the paper sweep (and the
# scheduler) pays for, and one process's start and analysis imports for them all, with
# no job groups (a group asks SLURM for the sum of its jobs). One rule per shape of
# pipeline (its kind and run sets: its outputs).
for _i, _shape in enumerate(TIDY_SHAPES):

    rule:
        name:
            f"tidy_{_i}"
        input:
            runs=tidy_runs(_i),
        output:
            [
                directory(f"{RESULTS}/tidy/{_shape.kind}/{{pipeline}}/{policy}/{limit}")
                for policy, limit in _shape.sets
            ],
        log:
            f"{RESULTS}/logs/tidy/{_shape.kind}/{{pipeline}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/tidy/{_shape.kind}/{{pipeline}}.tsv"
        wildcard_constraints:
            pipeline="|".join(map(re.escape, _shape.pipelines)),
        conda:
            "../../envs/analysis.yaml"
        resources:
            mem_mb=2048,
            runtime=10,
        params:
            code=CODE_TIDY,
            sets=tidy_sets(_i),
        shell:
            "python -m engine tidy {params.sets} 2> {log:q}"


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
