# Stage 6: one figure per file (PNG for the report, PDF for papers), bundled by
# `snakemake --report report.zip` under the front page workflow/report/workflow.rst.
# One caption file serves every figure: Snakemake does not fill wildcards into a caption
# path, so figures.rst picks its section by the `fig` wildcard.


report: "../report/workflow.rst"


rule plot:
    input:
        expand(f"{RESULTS}/tables/{{table}}.parquet", table=TABLES),
    output:
        png=report(
            f"{RESULTS}/plots/{{fig}}.png",
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{fig}"},
        ),
        pdf=f"{RESULTS}/plots/{{fig}}.pdf",
    log:
        f"{RESULTS}/logs/plots/{{fig}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/plots/{{fig}}.tsv"
    conda:
        "../../envs/analysis.yaml"
    params:
        style=canonical(config["plots"]),
        run=canonical(RUN),
        code=CODE_PLOTS,
        facts=caption_facts,
    script:
        "../scripts/plot.py"


# At the end of a workflow: a host too noisy for its results to mean much says so, with
# its numbers (engine.analysis.noise; the figures' captions say it too).
onsuccess:
    from engine.analysis.noise import table_warnings

    for _warning in table_warnings(f"{RESULTS}/tables"):
        print(f"WARNING: {_warning}", file=sys.stderr)
