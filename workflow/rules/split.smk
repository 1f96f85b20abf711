# Stage 2: one partial caffemodel per layer plus a description file per network.


rule split:
    input:
        unpack(model_files),
    output:
        description=f"{RESULTS}/split/{{stem}}.description.json",
        partials=directory(f"{RESULTS}/split/{{stem}}_partials"),
    params:
        py=PY,
        network=lambda wc: NETWORKS[wc.stem],
        out=lambda wc, output: os.path.dirname(output.description),
        code=CODE_CAFFE,
    log:
        f"{RESULTS}/logs/split/{{stem}}.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine split {input.caffemodel} --prototxt {input.prototxt}"
        " --out {params.out} --network {params.network} 2> {log}"
