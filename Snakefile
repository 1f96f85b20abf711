include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/split.smk"


# The default target; TARGETS is defined in common.smk.
rule all:
    input:
        TARGETS,
