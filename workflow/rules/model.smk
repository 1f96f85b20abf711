# Stage 7: the slowdown model (engine/model, docs/model.md):
# fit on the aggregate tables, then leave-pipelines-out cross-validation and the per-layer
# residuals, then their figures. The model file is versioned JSON; Snakemake refits it
# only when its input tables, the descriptions or the model code change.


rule fit_model:
    input:
        tables=MODEL_TABLES,
        descriptions=DESCRIPTIONS,
    output:
        MODEL_FILE,
    params:
        tables=tables_dir,
        models=split_dir,
        policies=" ".join(POLICIES.values()),
        code=CODE_MODEL,
    log:
        f"{RESULTS}/logs/model/fit.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m engine fit-model --tables {params.tables} --models {params.models}"
        " --out {output} --policies {params.policies} 2> {log}"


rule evaluate_model:
    input:
        tables=MODEL_TABLES,
        descriptions=DESCRIPTIONS,
        model=MODEL_FILE,
    output:
        MODEL_OUTPUTS,
    params:
        tables=tables_dir,
        models=split_dir,
        out=output_dir,
        code=CODE_MODEL,
    log:
        f"{RESULTS}/logs/model/evaluate.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m engine evaluate-model --tables {params.tables} --models {params.models}"
        " --model {input.model} --out {params.out} 2> {log}"


rule model_plot:
    input:
        f"{RESULTS}/model/cv_predictions.parquet",
        f"{RESULTS}/model/layer_residuals.parquet",
    output:
        png=report(
            f"{RESULTS}/model/{{model_fig}}.png",
            caption="../report/model.rst",
            category="Model",
            labels={"figure": "{model_fig}"},
        ),
        pdf=f"{RESULTS}/model/{{model_fig}}.pdf",
    params:
        style=config["plots"],
        code=CODE_MODEL_PLOTS,
        facts=model_caption_facts,
    log:
        f"{RESULTS}/logs/model/{{model_fig}}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/model_plot.py"
