# Stage 3: seeded multi-network pipelines (one JSON file each).


rule pipelines:
    input:
        DESCRIPTIONS,
    output:
        expand(f"{RESULTS}/pipelines/{{name}}.json", name=PIPELINES),
    params:
        py=PY,
        models=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output[0]),
        networks=" ".join(NETWORKS.values()),
        cfg=config["pipelines"],
        arrival=lambda wc: " ".join(
            f"--{k} {v}" if k != "mode" else f"--arrival {v}"
            for k, v in config["pipelines"]["arrival"].items()
        ),
        seed=config["seed"],
        bins=" ".join(str(b) for b in config["pipelines"]["bins_mib"]),
    log:
        f"{RESULTS}/logs/pipelines.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine pipelines --models {params.models} --out {params.out}"
        " --count {params.cfg[count]} --seed {params.seed}"
        " --length {params.cfg[length][0]} {params.cfg[length][1]} {params.arrival}"
        " --bins {params.bins} --networks {params.networks} 2> {log}"


# The smaller pipelines that runs under a limit use when they go to the vm backend.
rule vm_pipelines:
    input:
        DESCRIPTIONS,
    output:
        expand(f"{RESULTS}/pipelines/{{name}}.json", name=VM_PIPELINES),
    params:
        py=PY,
        models=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output[0]),
        cfg=VM["pipelines"] if VM else {},
        seed=config["seed"],
        bins=" ".join(str(b) for b in config["pipelines"]["bins_mib"]),
    log:
        f"{RESULTS}/logs/vm_pipelines.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine pipelines --models {params.models} --out {params.out}"
        " --count {params.cfg[count]} --seed {params.seed} --prefix v"
        " --length {params.cfg[length][0]} {params.cfg[length][1]}"
        " --bins {params.bins} --networks {params.cfg[networks]} 2> {log}"
