# Stage 1: the zoo networks as prototxt + caffemodel with seeded random weights.


rule zoo_model:
    output:
        caffemodel=f"{MODELS_DIR}/{{stem}}.caffemodel",
        prototxt=f"{MODELS_DIR}/{{stem}}.prototxt",
    log:
        f"{RESULTS}/logs/models/{{stem}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/models/{{stem}}.tsv"
    wildcard_constraints:
        stem="|".join(ZOO_STEMS) or "(?!)",  # only the zoo's; user models are given
    conda:
        "../../envs/run.yaml"
    params:
        network=lambda wc: ZOO_STEMS[wc.stem],
        seed=config["seed"],
        out=output_dir,
        code=CODE_MODELS,
    shell:
        "python -m engine models --out {params.out:q} --seed {params.seed} {params.network:q}"
        " 2> {log:q}"
