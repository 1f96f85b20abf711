# Stage 2: one partial caffemodel per layer plus a description file per network.


rule split:
    input:
        unpack(model_files),
    output:
        description=f"{SPLIT_DIR}/{{stem}}.description.json",
        partials=directory(f"{SPLIT_DIR}/{{stem}}_partials"),
    log:
        f"{RESULTS}/logs/split/{{stem}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/split/{{stem}}.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        network=lambda wc: NETWORKS[wc.stem],
        out=output_dir,
        code=CODE_SPLIT,
        model=user_model_digest,
    shell:
        "python -m engine split {input.caffemodel:q} --prototxt {input.prototxt:q}"
        " --out {params.out:q} --network {params.network:q} 2> {log:q}"
