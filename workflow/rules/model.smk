# Stage 7: the slowdown model (engine/model, docs/model.md): fit on the aggregate tables
# (one fit per execution mode and runtime), then the cross-validation (leave-pipeline-out
# and leave-network-out) and the per-layer residuals, the native-speed reconstruction
# with its validation in the sandbox and the swap-cost axis, the held-out seed's scores,
# and their figures. The model file is versioned JSON; Snakemake refits it only when its
# input tables, the descriptions or the model code change.


rule fit_model:
    input:
        tables=MODEL_TABLES,
        descriptions=DESCRIPTIONS,
    output:
        MODEL_FILE,
    log:
        f"{RESULTS}/logs/model/fit.log",
    benchmark:
        f"{RESULTS}/benchmarks/model/fit.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        tables=tables_dir,
        split=model_splits,
        policies=" ".join(POLICIES.values()),
        code=CODE_FIT_MODEL,
    shell:
        "python -m engine fit-model --tables {params.tables:q} --split {params.split:q}"
        " --out {output:q} --policies {params.policies} 2> {log:q}"


rule evaluate_model:
    input:
        tables=MODEL_TABLES,
        descriptions=DESCRIPTIONS,
        model=MODEL_FILE,
    output:
        MODEL_OUTPUTS,
    log:
        f"{RESULTS}/logs/model/evaluate.log",
    benchmark:
        f"{RESULTS}/benchmarks/model/evaluate.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        tables=tables_dir,
        split=model_splits,
        out=output_dir,
        code=CODE_EVALUATE_MODEL,
    shell:
        "python -m engine evaluate-model --tables {params.tables:q} --split {params.split:q}"
        " --model {input.model:q} --out {params.out:q} 2> {log:q}"


rule reconstruct_model:
    input:
        tables=MODEL_TABLES,
        descriptions=DESCRIPTIONS,
        model=MODEL_FILE,
    output:
        RECONSTRUCTION_OUTPUTS,
    log:
        f"{RESULTS}/logs/model/reconstruct.log",
    benchmark:
        f"{RESULTS}/benchmarks/model/reconstruct.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        tables=tables_dir,
        split=model_splits,
        out=output_dir,
        resamples=MODEL_CONFIG["resamples"],
        code=CODE_RECONSTRUCT_MODEL,
    shell:
        "python -m engine reconstruct-model --tables {params.tables:q} --split {params.split:q}"
        " --model {input.model:q} --out {params.out:q} --resamples {params.resamples} 2> {log:q}"


# The held-out seed's runs (model.holdout), aggregated apart: the fit never reads them.
rule aggregate_holdout:
    input:
        runs=HOLDOUT_RUNS,
    output:
        HOLDOUT_TABLES,
    log:
        f"{RESULTS}/logs/holdout/aggregate.log",
    benchmark:
        f"{RESULTS}/benchmarks/holdout/aggregate.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        code=CODE_ANALYSIS,
        sets=canonical(HOLDOUT_SETS),
        pipelines=PIPELINES_DIR,
        split=SPLIT_DIR,
    script:
        "../scripts/aggregate_holdout.py"


rule score_holdout:
    input:
        tables=[t for t in HOLDOUT_TABLES if t.endswith(".parquet")],
        descriptions=DESCRIPTIONS,
        model=MODEL_FILE,
    output:
        HOLDOUT_OUTPUTS,
    log:
        f"{RESULTS}/logs/model/holdout.log",
    benchmark:
        f"{RESULTS}/benchmarks/model/holdout.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        tables=tables_dir,
        split=split_dir,
        out=output_dir,
        code=CODE_SCORE_HOLDOUT,
    shell:
        "python -m engine score-holdout --tables {params.tables:q} --split {params.split:q}"
        " --model {input.model:q} --out {params.out:q} 2> {log:q}"


rule model_plot:
    input:
        model_figure_tables,
    output:
        png=report(
            f"{RESULTS}/model/{{model_fig}}.png",
            caption="../report/model.rst",
            category="Model",
            labels={"figure": "{model_fig}"},
        ),
        pdf=f"{RESULTS}/model/{{model_fig}}.pdf",
    log:
        f"{RESULTS}/logs/model/{{model_fig}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/model/{{model_fig}}.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        style=canonical(config["plots"]),
        code=CODE_MODEL_PLOTS,
        facts=model_caption_facts,
    script:
        "../scripts/model_plot.py"
