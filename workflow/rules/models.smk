# Stage 1: the zoo networks as prototxt + caffemodel with seeded random weights.
import os


rule zoo_model:
    output:
        caffemodel=f"{RESULTS}/models/{{stem}}.caffemodel",
        prototxt=f"{RESULTS}/models/{{stem}}.prototxt",
    params:
        py=PY,
        network=lambda wc: ZOO_STEMS[wc.stem],
        seed=config["seed"],
        out=lambda wc, output: os.path.dirname(output.caffemodel),
        code=CODE_CAFFE,
    wildcard_constraints:
        stem="|".join(ZOO_STEMS) or "(?!)",
    log:
        f"{RESULTS}/logs/models/{{stem}}.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine models --out {params.out} --seed {params.seed} {params.network}"
        " 2> {log}"
