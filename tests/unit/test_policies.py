"""Task graphs of every policy, edge by edge, against EdgeCaffe's semantics."""

from __future__ import annotations

import pytest

from engine.schedule.policies import PolicyError, parse_policy
from engine.schedule.tasks import Instance, Kind

L, FC = 4, 2  # a 4-layer network whose fc part starts at layer 2


def _instances(n: int, same_arrival: bool = True) -> list[Instance]:
    return [Instance(i, "Net", 0 if same_arrival else i, L, FC) for i in range(n)]


def _edges(policy: str, n: int = 1, same_arrival: bool = True) -> set:
    g = parse_policy(policy).build(_instances(n, same_arrival))
    name = {t.id: (t.instance, t.label) for t in g.tasks}
    return {(name[a], name[b]) for a, b in g.edges()}


def _net(i: int, pairs: list[tuple[str, str]]) -> set:
    return {((i, a), (i, b)) for a, b in pairs}


PARTIAL = ([("INIT", f"LOAD_{k}") for k in range(L)]
           + [(f"LOAD_{k}", f"EXEC_{k}") for k in range(L)]
           + [("INIT", "EXEC_0")] + [(f"EXEC_{k - 1}", f"EXEC_{k}") for k in range(1, L)])


def test_policy_names_and_worker_counts():
    assert parse_policy("partial").name == "partial:2"
    assert parse_policy("partial:3").workers == 3
    assert parse_policy("masa:1").admission
    assert parse_policy("deepeye").worker_pools == ((0,), (1,))
    assert parse_policy("bulk").workers == 1 and parse_policy("linear").workers == 1
    assert parse_policy("execprio-inter:2").order == "execprio"
    for bad, words in [("fifo", "unknown policy 'fifo'"), ("partial:0", "must be 1..8"),
                       ("partial:x", "must be 1..8"), ("bulk:2", "fixed number of workers")]:
        with pytest.raises(PolicyError, match=words):
            parse_policy(bad)


@pytest.mark.parametrize("policy", ["partial:2", "execprio:1", "masa:2"])
def test_partial_graph(policy):
    assert _edges(policy) == _net(0, PARTIAL)
    # no inter-network edges
    assert _edges(policy, 2) == _net(0, PARTIAL) | _net(1, PARTIAL)


def test_masa_splits_exec_and_load_init_pools():
    g = parse_policy("masa").build(_instances(1))
    assert g.pools == 2
    assert {t.pool for t in g.tasks if t.kind == Kind.EXEC} == {0}
    assert {t.pool for t in g.tasks if t.kind != Kind.EXEC} == {1}


def test_execprio_inter_adds_sequential_networks():
    assert _edges("execprio-inter", 2) == (_net(0, PARTIAL) | _net(1, PARTIAL)
                                          | {((0, f"EXEC_{L - 1}"), (1, "INIT"))})


def test_linear_is_one_chain_and_networks_are_sequential():
    chain = ["INIT"] + [f"{k}_{i}" for i in range(L) for k in ("LOAD", "EXEC")]
    pairs = list(zip(chain, chain[1:]))
    assert _edges("linear", 2) == _net(0, pairs) | _net(1, pairs) | {
        ((0, f"EXEC_{L - 1}"), (1, "INIT"))}


def test_bulk_graph():
    pairs = [("INIT", "LOAD"), ("LOAD", "EXEC")]
    assert _edges("bulk", 2) == _net(0, pairs) | _net(1, pairs) | {((0, "EXEC"), (1, "INIT"))}


DEEPEYE = [
    ("INIT", "LOAD_0"), ("LOAD_0", "LOAD_1"), ("INIT", "EXEC_0"), ("LOAD_0", "EXEC_0"),
    ("EXEC_0", "EXEC_1"), ("LOAD_1", "EXEC_1"),
    ("INIT", "LOAD_2"), ("LOAD_2", "LOAD_3"), ("LOAD_2", "EXEC_2"), ("EXEC_1", "EXEC_2"),
    ("LOAD_3", "EXEC_2"), ("EXEC_2", "EXEC_3"), ("LOAD_3", "EXEC_3"),
]
DEEPEYE_LINKS = {
    ((1, "LOAD_1"), (0, "EXEC_0")),  # the batch's conv weights all load before conv runs
    ((0, "LOAD_1"), (1, "INIT")),  # conv loading pipelined model by model
    ((0, "EXEC_1"), (1, "EXEC_0")),  # conv execution in network order
    ((0, "LOAD_3"), (1, "LOAD_2")),  # fc loading in network order
}


def test_deepeye_graph_pools_and_batch_links():
    assert _edges("deepeye") == _net(0, DEEPEYE) | {((0, "LOAD_1"), (0, "EXEC_0"))}
    assert _edges("deepeye", 2) == _net(0, DEEPEYE) | _net(1, DEEPEYE) | DEEPEYE_LINKS
    g = parse_policy("deepeye").build(_instances(1))
    pools = {t.label: t.pool for t in g.tasks}
    assert pools == {"INIT": 0, "LOAD_0": 0, "EXEC_0": 0, "LOAD_1": 0, "EXEC_1": 0,
                     "LOAD_2": 1, "EXEC_2": 1, "LOAD_3": 1, "EXEC_3": 1}


def test_deepeye_frugal_waits_for_previous_fc_exec():
    assert _edges("deepeye-frugal", 2) == (_net(0, DEEPEYE) | _net(1, DEEPEYE) | DEEPEYE_LINKS
                                          | {((0, "EXEC_3"), (1, "LOAD_2"))})


def test_deepeye_links_only_within_an_arrival():
    assert _edges("deepeye", 2, same_arrival=False) == (
        _net(0, DEEPEYE) | _net(1, DEEPEYE)
        | {((0, "LOAD_1"), (0, "EXEC_0")), ((1, "LOAD_1"), (1, "EXEC_0"))})


@pytest.mark.parametrize("policy", ["bulk", "linear", "partial:3", "deepeye", "deepeye-frugal",
                                    "execprio", "execprio-inter", "masa"])
def test_every_policy_graph_is_a_dag_with_all_tasks(policy):
    g = parse_policy(policy).build(_instances(3))
    g.check_acyclic()
    per_net = 3 if policy == "bulk" else 1 + 2 * L
    assert len(g.tasks) == 3 * per_net
    assert [t.id for t in g.tasks] == list(range(len(g.tasks)))


@pytest.mark.parametrize("policy, chains", [
    ("bulk", [[0, 1, 2]]), ("linear", [[0, 1, 2]]), ("execprio-inter:2", [[0, 1, 2]]),
    ("partial:2", [[0], [1], [2]]), ("execprio:2", [[0], [1], [2]]),
    ("masa:2", [[0], [1], [2]]), ("deepeye", [[0], [1], [2]]),
    ("deepeye-frugal", [[0], [1], [2]])])
def test_networks_run_one_after_another_only_where_the_policy_says_so(policy, chains):
    """The module docstring's semantics: bulk, linear and -inter run networks one after
    another; under the others (deepeye's next INIT waits only for the conv loads) any two
    can be in memory at once."""
    from engine.schedule.plan import one_after_another

    assert one_after_another(parse_policy(policy).build(_instances(3, False))) == chains
