# Stage 3: seeded multi-network pipelines (one JSON file each).


rule pipelines:
    input:
        descriptions=DESCRIPTIONS,
    output:
        expand(f"{PIPELINES_DIR}/{{name}}.json", name=PIPELINES),
    log:
        f"{RESULTS}/logs/pipelines.log",
    benchmark:
        f"{RESULTS}/benchmarks/pipelines.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        split=split_dir,
        out=output_dir,
        args=PIPELINES_ARGS,
        code=CODE_PIPELINES,
    shell:
        "python -m engine pipelines --split {params.split:q} --out {params.out:q} {params.args}"
        " 2> {log:q}"


# The smaller pipelines that the limited runs use when they go to the VM (sandbox.enabled).
rule sandbox_pipelines:
    input:
        descriptions=DESCRIPTIONS,
    output:
        expand(f"{PIPELINES_DIR}/{{name}}.json", name=VM_PIPELINES),
    log:
        f"{RESULTS}/logs/sandbox_pipelines.log",
    benchmark:
        f"{RESULTS}/benchmarks/sandbox_pipelines.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        split=split_dir,
        out=output_dir,
        args=SANDBOX_PIPELINES_ARGS,
        code=CODE_PIPELINES,
    shell:
        "python -m engine pipelines --split {params.split:q} --out {params.out:q} {params.args}"
        " 2> {log:q}"


# The model's held-out pipelines (model.holdout): the same generators with a seed never
# used in fitting.
rule holdout_pipelines:
    input:
        descriptions=DESCRIPTIONS,
    output:
        expand(f"{PIPELINES_DIR}/{{name}}.json", name=HOLDOUT_PIPELINES),
    log:
        f"{RESULTS}/logs/holdout_pipelines.log",
    benchmark:
        f"{RESULTS}/benchmarks/holdout_pipelines.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        split=split_dir,
        out=output_dir,
        args=HOLDOUT_PIPELINES_ARGS,
        code=CODE_PIPELINES,
    shell:
        "python -m engine pipelines --split {params.split:q} --out {params.out:q} {params.args}"
        " 2> {log:q}"


rule holdout_sandbox_pipelines:
    input:
        descriptions=DESCRIPTIONS,
    output:
        expand(f"{PIPELINES_DIR}/{{name}}.json", name=HOLDOUT_VM_PIPELINES),
    log:
        f"{RESULTS}/logs/holdout_sandbox_pipelines.log",
    benchmark:
        f"{RESULTS}/benchmarks/holdout_sandbox_pipelines.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        split=split_dir,
        out=output_dir,
        args=HOLDOUT_SANDBOX_PIPELINES_ARGS,
        code=CODE_PIPELINES,
    shell:
        "python -m engine pipelines --split {params.split:q} --out {params.out:q} {params.args}"
        " 2> {log:q}"
