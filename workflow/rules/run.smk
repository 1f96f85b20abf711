# Stage 4: one job per pipeline x policy x memory limit x repetition, each writing a run
# folder (in a qemu guest for the runs that go to the vm backend: engine.workflow), plus
# the probe-overhead twins (kind "unprobed": the same run with --no-probes). Priorities
# start them interleaved across policies (engine.workflow.plan.run_order). An OOM-killed or
# timed-out run is a result (exit 0, termination recorded); a crash fails the job with
# the engine's message, and a rerun continues from there. A job runs a block of runs
# instead with run.per_job "block" (docs/cluster.md), and the sandbox's runs with
# sandbox.per_boot "block", one boot each (docs/sandboxes.md).


if PER_JOB == "run":

    rule run:
        input:
            # the description files are the pipelines' input already (rule pipelines), so
            # a changed split reruns the runs through their pipeline; listing them here too
            # cost planning the paper sweep 200,000 more file lookups
            pipeline=f"{PIPELINES_DIR}/{{pipeline}}.json",
            vm_guest=RUN_VM_GUEST,
        output:
            directory(RUN_DIR),
        log:
            RUN_LOG,
        benchmark:
            f"{RESULTS}/benchmarks/{KIND_PATTERN}.tsv"
        wildcard_constraints:
            kind=RUN_KIND,
        priority: run_priority
        conda:
            "../../envs/run.yaml"
        resources:
            mem_mb=run_mem,
            runtime=RUN_RUNTIME,
        params:
            # what the results depend on, compared for a rerun (the command is derived)
            policy=run_policy,
            split=SPLIT_DIR,
            limit=run_limit_args,
            batch=run_batch,
            runtime=run_runtime,
            seed=run_seed,
            options=RUN_OPTIONS,
            code=run_code,
            sandbox=run_sandbox_settings,
            command=run_line,
        shell:
            "{params.command}"


# a job per block of runs (a pipeline under one limit in one repetition; in one sandbox
# boot, under every limit of its run set), one rule per shape of block (its limits, place
# and runs: its outputs)
for _i, _shape in enumerate(BLOCK_SHAPES):

    rule:
        name:
            f"run_block_{_i}"
        input:
            pipeline=f"{PIPELINES_DIR}/{{pipeline}}.json",
            vm_guest=VM_GUEST if _shape_in_qemu(_shape) else [],
        output:
            [directory(path) for path in block_paths(_i, RUN_DIR)],
        log:
            block_paths(_i, RUN_LOG),
        benchmark:
            f"{RESULTS}/benchmarks/blocks/{{pipeline}}/{_shape.limit}/rep{{rep}}.{_i}.tsv"
        wildcard_constraints:
            pipeline="|".join(map(re.escape, _shape.pipelines)),
            rep="|".join(map(str, _shape.reps)),
        priority: block_priority(_i)
        conda:
            "../../envs/run.yaml"
        resources:
            **block_resources(_i),
        params:
            # compared for a rerun: every run's line, and the code of its policies
            runs=block_shell(_i),
            sandbox=SANDBOX_SETTINGS if _shape.in_sandbox else {},
            code="-".join(sorted({RUN_CODE[policy_id(p)] for _, p, _ in _shape.runs})),
        shell:
            "{params.runs}"


# The reconciliation run: the same engine with tcmalloc preloaded and a heap profile
# dumped at every task boundary (slow, so only one pipeline).
rule reconcile_run:
    input:
        pipeline=f"{PIPELINES_DIR}/{REC['pipeline']}.json",
        descriptions=DESCRIPTIONS,
        vm_guest=reconcile_vm_guest,
    output:
        directory(REC_DIR),
    log:
        f"{RESULTS}/logs/reconcile.log",
    benchmark:
        f"{RESULTS}/benchmarks/reconcile.tsv"
    conda:
        "../../envs/run.yaml"
    resources:
        mem_mb=RUN_MEM_MB[
            mem_key(reconcile_in_sandbox(config), str(REC["limit"]), REC["pipeline"], REC_BATCH)
        ],
        runtime=RUN_RUNTIME,
    params:
        policy=REC["policy"],
        split=split_dir,
        limit=REC_LIMIT_ARGS,
        batch=REC_BATCH_ARGS,
        runtime=f"--runtime {RUN['runtime']}",
        seed=config["seed"],
        options=RUN_OPTIONS,
        code=REC_CODE,
        sandbox=SANDBOX_SETTINGS if reconcile_in_sandbox(config) else {},
        vm_env=vm_env,
    shell:
        "{params.vm_env}python -m engine run --pipeline {input.pipeline:q}"
        " --policy {params.policy:q} --split {params.split:q} --out {output:q} {params.limit}"
        " {params.batch} {params.runtime} --seed {params.seed} {params.options} --heap-profile"
        " 2> {log:q}"
