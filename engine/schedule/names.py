"""A policy's name where ``:`` cannot go: its own module, so that what reads run folders
(the tables' jobs) does not depend on the policies' task graphs (engine.workflow.fingerprint
follows imports)."""


def policy_id(name: str) -> str:
    """A policy's canonical name as its run folders and the workflow's wildcards spell it
    (``partial:2`` -> ``partial_2``): ``:`` is not safe in every path a run folder goes
    through (a sandbox's share, ``ubd0=``)."""
    return name.replace(":", "_")
