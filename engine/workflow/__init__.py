"""What the Snakemake workflow (workflow/rules/common.smk) computes from its config, one
concern per module:

- ``plan``: which runs exist, where they run (natively or in a sandbox) and the order they
  start in;
- ``checks``: what the config's JSON schema cannot say;
- ``args``: the command-line arguments the rules pass to ``python -m engine``;
- ``resources``: what a job asks a cluster for (memory, runtime, its own SLURM step);
- ``environ``: the jobs' PATH and PYTHONPATH;
- ``fingerprint``: a hash of the code each kind of job runs;
- ``snakemake_api``: the rules' functions' signatures told to Snakemake once (the one
  module that imports Snakemake, behind a version check).

Pure functions: validated config dicts in, argument strings, job lists and resource numbers
out. Nothing else here imports Snakemake, probes the host (no systemctl, no qemu) or writes a
file, so building the DAG stays cheap on a submit host and the rules stay thin. Which runs
go to a sandbox is a config choice (``sandbox.enabled``), never decided by probing the machine.

This file imports none of its modules: a job that imports one of them depends on that
module's code only (``fingerprint.job_modules`` follows imports, package ``__init__``s
included).
"""
