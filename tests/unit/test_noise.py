"""A host too noisy to measure says so (engine.analysis.noise): after a campaign, from its
own tables; before one, from the machine."""

from __future__ import annotations

import pandas as pd

from engine.analysis import noise
from engine.analysis.noise import CV_LIMIT, OTHER_CPUS_LIMIT, host_checks, run_warnings
from engine.cli import main


def _floor(cv: float) -> pd.DataFrame:
    return pd.DataFrame([{"mode": "native", "metric": "makespan", "cells": 30, "runs": 180,
                          "cv_median": cv, "cv_ci_low": cv * 0.8, "cv_ci_high": cv * 1.2,
                          "cv_max": 2 * cv, "rel_range_median": 2 * cv}])


def _runs(other: float, busy: float, load: float = 2.9) -> pd.DataFrame:
    return pd.DataFrame({"emulated": [False] * 4, "child_cpus": [1] * 4,
                         "host_load1_start": [load] * 4, "host_load1_end": [load] * 4,
                         "host_other_cpus": [other] * 4, "host_busy_cpus": [busy] * 4})


def test_a_quiet_campaign_gives_no_warning(monkeypatch):
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    # the run's own threads make the load ~3 on a quiet 2-CPU machine: not a warning
    assert run_warnings(_runs(0.1, 1.2, load=2.9), _floor(0.035)) == []
    # a two-worker run fills both CPUs itself: other work took little
    assert run_warnings(_runs(0.2, 1.98), _floor(0.035)) == []
    # other work on a big machine with CPUs to spare
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 64)
    assert run_warnings(_runs(20.0, 21.0), _floor(0.035)) == []


def test_a_noisy_floor_and_a_loaded_host_are_each_named_with_their_numbers(monkeypatch):
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    warnings = run_warnings(_runs(1.3, 2.0, load=7.5), _floor(0.43))
    assert len(warnings) == 2
    assert "43 %" in warnings[0] and "30 cells" in warnings[0]
    assert "1.3 CPUs" in warnings[1] and "7.5" in warnings[1] and "2 CPUs" in warnings[1]
    # just under the limits: quiet enough
    assert run_warnings(_runs(OTHER_CPUS_LIMIT * 0.99, 2.0), _floor(CV_LIMIT * 0.99)) == []
    assert len(run_warnings(_runs(OTHER_CPUS_LIMIT, 2.0), _floor(0.03))) == 1
    # a CPU left idle: the runs had one to themselves
    assert run_warnings(_runs(0.6, 0.99), _floor(0.03)) == []


def test_the_cpus_are_the_run_hosts_not_this_machines(monkeypatch):
    """doctor --tables on another machine: the runs' own host had 64 CPUs, 44 idle."""
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    runs = _runs(10.0, 20.0).assign(host_cpus=64)
    assert run_warnings(runs, _floor(0.03)) == []
    assert len(run_warnings(runs.assign(host_cpus=2), _floor(0.03))) == 1


def test_tables_recorded_before_other_cpus_give_no_load_warning():
    runs = _runs(1.3, 2.0, load=7.5).drop(columns="host_other_cpus")
    assert run_warnings(runs, _floor(0.03)) == []


def test_doctor_names_every_check_and_exits_with_its_verdict(capsys, monkeypatch):
    checks = host_checks()
    assert {c[0].split(":")[0].split(" ")[0] for c in checks} >= {"load", "CPU", "CPUs",
                                                                  "transparent", "host"}
    # the verdict of the checks it printed (measured once: the CPUs' use changes)
    for fine in (True, False):
        said = [(what, ok and fine if what.startswith("CPUs") else ok, meaning)
                for what, ok, meaning in checks]
        monkeypatch.setattr(noise, "host_checks", lambda said=said: said)
        rc = main(["doctor"])
        out = capsys.readouterr().out
        assert rc == (0 if all(ok is not False for _, ok, _ in said) else 1)
        assert ("quiet enough" in out) == (rc == 0)
    # a note (what the host cannot do, e.g. a low vm.max_map_count) is said, not a verdict
    monkeypatch.setattr(noise, "host_checks", lambda: [("load 0.1", True, ""),
                                                       ("vm.max_map_count: 65530 (x)", None,
                                                        "")])
    assert main(["doctor"]) == 0
    assert "note vm.max_map_count: 65530 (x)\n" in capsys.readouterr().out


def test_a_run_that_computed_other_outputs_than_its_siblings_is_named():
    from engine.analysis.summaries import outputs_agree

    runs = pd.DataFrame({"run_id": [f"p0/{p}/none/rep0" for p in "abcd"] + ["p0/a/none/rep1"],
                         "pipeline": ["p0"] * 5, "rep": [0, 0, 0, 0, 1],
                         "sandbox": ["uml"] * 5, "emulated": [True] * 5,
                         "termination": ["ok", "ok", "ok", "memory", "ok"],
                         "outputs_sha256": ["x", "x", "y", None, "z"]})
    agree = outputs_agree(runs)
    assert agree.tolist()[:3] == [True, True, False]
    assert agree.isna().tolist()[3:] == [True, True]  # killed; alone in its repetition
    warnings = run_warnings(runs.assign(outputs_agree=agree), pd.DataFrame())
    assert len(warnings) == 1 and "p0/c/none/rep0" in warnings[0]


def test_a_crashed_run_is_named_and_an_oom_kill_is_not():
    runs = pd.DataFrame({"run_id": ["p0/bulk/1G/rep0", "p0/linear/1G/rep0", "p1/bulk/1G/rep0"],
                         "termination": ["error", "memory", "ok"]})
    warnings = run_warnings(runs, pd.DataFrame())
    assert len(warnings) == 1 and warnings[0].startswith("1 run(s) crashed (p0/bulk/1G/rep0)")
    assert "remove its run folder and its tidy set and run the workflow again" in warnings[0]


def test_the_hosts_map_count_is_read_and_said_with_what_it_costs_uml(tmp_path):
    """vm.max_map_count caps a UML guest process's host mappings (docs/sandboxes.md):
    doctor says how close the build probe's worst pattern came to it."""
    from engine.limits.umlhost import MAP_COUNT_ENOUGH, map_count_note, max_map_count

    (tmp_path / "m").write_text("65530\n")
    assert max_map_count(str(tmp_path / "m")) == 65530
    note = map_count_note(65530, {"copy_read": 3000, "swap_heavy": 32765})
    assert "peaked at 32765 host mappings (swap_heavy), 50 % of the cap" in note
    assert "no build probe" in map_count_note(65530)
    assert map_count_note(MAP_COUNT_ENOUGH) is None and map_count_note(None) is None
    assert max_map_count(str(tmp_path / "none")) is None
    (tmp_path / "m").write_text("lots")
    assert max_map_count(str(tmp_path / "m")) is None
