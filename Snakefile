from snakemake.utils import min_version

min_version("9.17")  # callable priorities (rule run)


include: "workflow/rules/common.smk"
include: "workflow/rules/vm.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/split.smk"
include: "workflow/rules/pipelines.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/report.smk"


# The default target; TARGETS is defined in common.smk.
rule all:
    input:
        TARGETS,
        sequential_targets,
