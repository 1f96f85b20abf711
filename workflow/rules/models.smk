# Stage 1: the zoo networks as prototxt + caffemodel with seeded random weights.


rule zoo_model:
    output:
        caffemodel=f"{MODELS_DIR}/{{stem}}.caffemodel",
        prototxt=f"{MODELS_DIR}/{{stem}}.prototxt",
    params:
        network=lambda wc: ZOO_STEMS[wc.stem],
        seed=config["seed"],
        out=output_dir,
        code=CODE_MODELS,
    wildcard_constraints:
        stem="|".join(ZOO_STEMS) or "(?!)",  # only the zoo's; user models are given
    log:
        f"{RESULTS}/logs/models/{{stem}}.log",
    conda:
        "../../envs/run.yaml"
    shell:
        "python -m engine models --out {params.out:q} --seed {params.seed} {params.network:q}"
        " 2> {log:q}"
