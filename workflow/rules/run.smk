# Stage 4: one job per pipeline x policy x memory limit x repetition, each writing a run
# folder (in a qemu guest when the limited runs go to the vm backend, common.smk). An
# OOM-killed or timed-out run is a result (exit 0, termination recorded); a crash fails
# the job with the engine's message, and a rerun continues from there.


rule run:
    input:
        pipeline=f"{RESULTS}/pipelines/{{pipeline}}.json",
        descriptions=DESCRIPTIONS,
        vm_guest=lambda wc: VM_GUEST if USE_VM and wc.limit != "none" else [],
    output:
        directory(f"{RESULTS}/runs/{{pipeline}}/{{policy}}/{{limit}}/rep{{rep}}"),
    params:
        py=PY,
        policy=lambda wc: POLICIES[wc.policy],
        models=lambda wc, input: os.path.dirname(input.descriptions[0]),
        limit=lambda wc: limit_args(wc.limit),
        batch=f"--batch {RUN['batch']}" if RUN["batch"] else "",
        seed=lambda wc: config["seed"] + int(wc.rep),
        options=RUN_OPTIONS,
        code=run_code,
        # the guest this workflow built (rule vm_guest), for runs that go to the VM
        vm_env=lambda wc, input: (
            f"EDGEPROF_VM_CACHE={os.path.dirname(input.vm_guest)} " if input.vm_guest else ""
        ),
    wildcard_constraints:
        policy="|".join(POLICIES),
        rep=r"\d+",
    resources:
        mem_mb=lambda wc: run_mem_mb(wc.limit),
        runtime=lambda wc: int(RUN["timeout_s"] // 60) + 5,
    log:
        f"{RESULTS}/logs/runs/{{pipeline}}/{{policy}}/{{limit}}/rep{{rep}}.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.vm_env}{params.py} -m engine run --pipeline {input.pipeline}"
        " --policy {params.policy} --models {params.models} --out {output} {params.limit}"
        " {params.batch} --seed {params.seed} {params.options} 2> {log}"


# The reconciliation run: the same engine with tcmalloc preloaded and a heap profile
# dumped at every task boundary (slow, so only one pipeline).
rule reconcile_run:
    input:
        pipeline=f"{RESULTS}/pipelines/{REC['pipeline']}.json",
        descriptions=DESCRIPTIONS,
    output:
        directory(REC_DIR),
    params:
        py=PY,
        policy=REC["policy"],
        models=lambda wc, input: os.path.dirname(input.descriptions[0]),
        limit=limit_args(REC["limit"]),
        batch=f"--batch {RUN['batch']}" if RUN["batch"] else "",
        seed=config["seed"],
        options=RUN_OPTIONS,
        code=f"{CODE_RUN_SHARED}-{policy_fingerprint(parse_policy(REC['policy']).family)}",
    resources:
        mem_mb=run_mem_mb(REC["limit"]),
    log:
        f"{RESULTS}/logs/reconcile.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine run --pipeline {input.pipeline} --policy {params.policy}"
        " --models {params.models} --out {output} {params.limit} {params.batch}"
        " --seed {params.seed} {params.options} --heap-profile 2> {log}"
