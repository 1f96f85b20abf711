"""Bad input to the CLI: every case is one line naming the problem, exit code 2, and
nothing written (no run folder, no temporary folder, no lock)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.caffe import generate, splitter
from engine.cli import main
from engine.errors import EdgeprofError
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline


@pytest.fixture(scope="module")
def age_net(tmp_path_factory) -> Path:
    """AgeNet generated and split; the folder holds m/ (model) and s/ (split)."""
    root = tmp_path_factory.mktemp("bad")
    prototxt, model = generate.write_zoo_model("AgeNet", root / "m", 1)
    splitter.split_model(model, prototxt, root / "s", network="AgeNet")
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), root / "p.json")
    return root


@pytest.fixture
def work(age_net, tmp_path) -> Path:
    """A private copy to spoil."""
    shutil.copytree(age_net, tmp_path / "w")
    return tmp_path / "w"


def _run(capsys, work: Path, *extra: str, pipeline: str = "p.json",
         policy: str = "linear") -> str:
    code = main(["run", "--pipeline", str(work / pipeline), "--split", str(work / "s"),
                 "--policy", policy, "--out", str(work / "out" / "run"), "--backend", "none",
                 "--batch", "1", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert not (work / "out").exists() or list((work / "out").iterdir()) == []
    return err


@pytest.mark.parametrize("flags, message", [
    (["--batch", "0"], "--batch 0: must be a number > 0"),
    (["--seed", "-1"], "--seed -1: must be a number >= 0"),
    (["--timeout", "-1"], "--timeout -1.0: must be a number > 0"),
    (["--blas-threads", "-2"], "--blas-threads -2: must be a number > 0"),
    (["--sample-hz", "-5"], "--sample-hz -5.0: must be a number >= 0"),
    (["--batch", "-1"], "--batch -1: must be a number > 0"),
    (["--timeout", "nan"], "--timeout nan: must be a number > 0"),
    (["--sample-hz", "inf"], "--sample-hz inf: must be a number >= 0"),
    (["--sample-hz", "1e9"], "--sample-hz 1000000000.0: must be at most 10,000"),
    (["--blas-threads", "100000"], "--blas-threads 100000: must be at most 1,024"),
    (["--swap", "1G"], "--swap is the swap allowed on top of --limit; give a --limit too"),
    (["--limit", ""], "--limit is empty; give a value\n"),  # L3: no folder hint for a size
    (["--out", ""], "--out is empty; give a value (for a folder, '.' names this one)"),
    (["--split", ""], "--split is empty; give a value (for a folder, '.' names this one)"),
    (["--limit", "0"], "must be at least one byte"),
    # twenty-fourth held-out pass L1: a uml run under 4K ended as a crash
    (["--limit", "4K"], "--limit 4K: at least 1M"),
])
def test_bad_run_options(capsys, work, flags, message):
    assert message in _run(capsys, work, *flags)


@pytest.mark.parametrize("policy, message", [
    ("partial:", "has ':' but no worker count"),
    ("partial:0", "worker count in 'partial:0' must be 1.."),
    ("roundrobin", "unknown policy 'roundrobin'"),
])
def test_bad_policies(capsys, work, policy, message):
    assert message in _run(capsys, work, policy=policy)


@pytest.mark.parametrize("text, message", [
    ('{"name": "p", "arrivals": [{"time_s": NaN, "networks": ["AgeNet"]}]}',
     "NaN is not a valid number"),
    ('{"name": "p", "arrivals": [{"time_s": Infinity, "networks": ["AgeNet"]}]}',
     "Infinity is not a valid number"),
    ('{"name": "p", "arrivals": [{"time_s": 1e999, "networks": ["AgeNet"]}]}',
     "is not a number of seconds from 0 to"),
    ('{"name": "p", "arrivals": [{"time_s": -1, "networks": ["AgeNet"]}]}',
     "is not a number of seconds from 0 to"),
    ("[]", "not a pipeline"),
    ('{"name": "p", "arrivals": [{"time_s": 0, "networks": "AgeNet"}]}',
     "must be a list of network names"),
    ('{"name": "p", "arrivals": []}', "has no networks"),
    ('{"name": "p", "arrivals": [{"time_s": "0", "networks": ["AgeNet"]}]}',
     "is not a number"),
    ('{"name": "p", "arrivals": [{"time_s": 0, "networks": ["AgeNet"]}], "colour": 1}',
     "unknown key(s) colour"),
    ('{"name": "p", "name": "q", "arrivals": [{"time_s": 0, "networks": ["AgeNet"]}]}',
     "key 'name' appears twice"),
    ('{"name": "p", "arrivals": [{"time_s": 1e308, "networks": ["AgeNet"]}]}',
     "is not a number of seconds from 0 to 1e+06"),
])
def test_bad_pipeline_files(capsys, work, text, message):
    (work / "bad.json").write_text(text)
    err = _run(capsys, work, pipeline="bad.json")
    assert "bad.json" in err and message in err


def test_a_pipeline_that_is_no_regular_file_or_far_too_large_is_refused(capsys, work):
    os.mkfifo(work / "fifo.json")  # reading it would block for ever
    for name in ("/dev/zero", "fifo.json"):
        assert "not a regular file" in _run(capsys, work, pipeline=name)
    (work / "big.json").write_bytes(b" " * (17 * 2**20))
    assert "larger than 16 MiB; not a pipeline" in _run(capsys, work, pipeline="big.json")


def test_a_bad_argument_is_one_line_too(capsys, work):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--pipeline", "p.json", "--policy", "linear", "--split", "s",
              "--out", "o", "--batch", "nan"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: ") and "invalid int value: 'nan'" in err


def test_force_replaces_only_a_run_folder_and_never_the_working_directory(capsys, work,
                                                                         monkeypatch):
    (work / "out" / "run").mkdir(parents=True)
    (work / "out" / "run" / "thesis.txt").write_text("precious")
    for out in (str(work / "out" / "run"), ".", str(work / "out")):
        if out == ".":
            monkeypatch.chdir(work / "out" / "run")
        code = main(["run", "--pipeline", str(work / "p.json"), "--split", str(work / "s"),
                     "--policy", "linear", "--out", out, "--backend", "none", "--force"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert ("holds files but no run (no meta.json)" if out.endswith("run") else
                "is the working directory or above it") in err
    assert (work / "out" / "run" / "thesis.txt").read_text() == "precious"
    assert sorted(p.name for p in (work / "out").iterdir()) == ["run"]


def test_a_missing_prototxt_is_refused(capsys, work):
    (work / "m" / "age_net.prototxt").unlink()
    assert "the deploy prototxt of AgeNet, is missing" in _run(capsys, work)


@pytest.mark.parametrize("policy", ["bulk", "partial:2"])
def test_a_truncated_partial_is_refused_before_any_run_folder(capsys, work, policy):
    desc = splitter.Description.load(work / "s" / "age_net.description.json")
    partial = desc.resolve(desc.layers[12].partial)
    partial.write_bytes(partial.read_bytes()[:1000])
    err = _run(capsys, work, policy=policy)
    assert f"{partial} is 1000 bytes, not the" in err and "re-run the split stage" in err


def test_a_prototxt_edited_after_the_split_is_refused(capsys, work):
    prototxt = work / "m" / "age_net.prototxt"
    prototxt.write_text(prototxt.read_text().replace("num_output: 8", "num_output: 9"))
    err = _run(capsys, work)
    assert "age_net.prototxt does not match" in err and "prototxt_sha256" in err


def test_a_replaced_caffemodel_is_refused(capsys, work):
    model = work / "m" / "age_net.caffemodel"
    model.write_bytes(model.read_bytes()[:-4])
    assert "age_net.caffemodel is" in _run(capsys, work, policy="bulk")


def test_a_description_without_layers_is_refused(capsys, work):
    path = work / "s" / "age_net.description.json"
    data = json.loads(path.read_text())
    del data["layers"]
    path.write_text(json.dumps(data))
    assert "is not a network description" in _run(capsys, work)


@pytest.mark.parametrize("name, value", [("SMP", "abc"), ("BOOT_TIMEOUT", "soon"),
                                         ("TIMEOUT", "-3"), ("RAM", "lots"),
                                         ("BOOT_TIMEOUT", "inf"), ("TIMEOUT", "nan"),
                                         ("ACCEL", "warp"),
                                         # F6 (report 36): these once meant "on"
                                         ("ASCEND", "off"), ("ASCEND", "False"),
                                         ("ASCEND", "2"), ("SD_CARD", "on")])
def test_bad_vm_settings_are_refused_before_a_boot(capsys, work, monkeypatch, name, value):
    from engine.sandbox.config import ENV_NAMES

    monkeypatch.setenv(ENV_NAMES[name], value)
    err = _run(capsys, work, "--backend", "vm", "--limit", "256M")
    assert f"{ENV_NAMES[name]}={value!r} is not valid" in err


def test_the_vm_switches_take_0_and_1():
    """EDGEPROF_UML_ASCEND: on unless 0; EDGEPROF_VM_SD_CARD: off unless 1 (or its old
    true/yes); unset or empty: the default."""
    from engine.sandbox import SandboxConfig

    def read(**env: str) -> tuple[bool, bool]:
        names = {"ASCEND": "EDGEPROF_UML_ASCEND", "SD_CARD": "EDGEPROF_VM_SD_CARD"}
        cfg = SandboxConfig.from_env({names[k]: v for k, v in env.items()})
        return cfg.ascend, cfg.sd_card

    assert read() == (True, False) and read(ASCEND="", SD_CARD="") == (True, False)
    assert read(ASCEND="0", SD_CARD="1") == (False, True)
    assert read(ASCEND="1", SD_CARD="0") == (True, False)
    assert read(SD_CARD="yes") == (True, True)


def test_a_sandbox_setting_under_its_old_name_is_read_with_a_warning(caplog):
    """Issue 37: "vm" named both sandboxes' settings (EDGEPROF_VM_RAM, ...) and the qemu
    guest alone (--backend vm); what both read is EDGEPROF_SANDBOX_*, UML's own
    EDGEPROF_UML_ASCEND. An old name still works for one release, with a warning naming
    the new one; both at once are refused."""
    import logging

    from engine.sandbox import SandboxConfig

    with caplog.at_level(logging.WARNING):
        old = SandboxConfig.from_env({"EDGEPROF_VM_RAM": "2G", "EDGEPROF_VM_ASCEND": "0",
                                      "EDGEPROF_VM_BOOT_TIMEOUT": "7", "EDGEPROF_VM_SMP": "1"})
    assert (old.ram, old.ascend, old.boot_timeout_s, old.smp) == (2**31, False, 7.0, 1)
    said = caplog.text
    assert "EDGEPROF_VM_RAM is now EDGEPROF_SANDBOX_RAM" in said
    assert "EDGEPROF_VM_ASCEND is now EDGEPROF_UML_ASCEND" in said
    assert "EDGEPROF_VM_SMP" not in said  # the qemu guest's own: its name stays
    new = SandboxConfig.from_env({"EDGEPROF_SANDBOX_RAM": "2G", "EDGEPROF_UML_ASCEND": "0",
                                  "EDGEPROF_SANDBOX_BOOT_TIMEOUT": "7"})
    assert (new.ram, new.ascend, new.boot_timeout_s) == (2**31, False, 7.0)
    with pytest.raises(EdgeprofError, match="EDGEPROF_VM_RAM and EDGEPROF_SANDBOX_RAM are "
                                            "both set"):
        SandboxConfig.from_env({"EDGEPROF_VM_RAM": "2G", "EDGEPROF_SANDBOX_RAM": "1G"})


def test_estimates_of_an_unknown_network_are_refused(capsys, work):
    """A misspelt network in --estimates (masa would admit AgeNet on its default
    estimate) is refused, naming the networks --split holds."""
    (work / "e.json").write_text(json.dumps({"AgeNet": 2**20, "agenet": 2**20}))
    err = _run(capsys, work, "--estimates", str(work / "e.json"), policy="masa:2")
    assert "--estimates names 'agenet'" in err and "(known: AgeNet)" in err, err


def test_a_swap_past_the_free_disk_is_refused_before_a_boot(capsys, work, monkeypatch):
    """The sandbox's swap image lies beside --out: a --swap larger than that filesystem's
    free space (statvfs, by df's numbers) is refused naming both, before the guest is
    even looked for (here: an empty guest cache)."""
    monkeypatch.setenv("EDGEPROF_VM_CACHE", str(work / "no-guest"))
    stat = os.statvfs(work)
    free = stat.f_bavail * stat.f_frsize
    asked = free + 2**30
    err = _run(capsys, work, "--backend", "vm", "--limit", "256M", "--swap", str(asked))
    assert f"--swap of {asked / 2**30:.1f} GiB: the guest's swap image of " in err, err
    assert f"in {work / 'out'}) is more than the" in err and "GiB free on its filesystem" in err


@pytest.mark.parametrize("args, message", [
    (["graph", "--policy", "linear", "--count", "0"], "--count 0: must be a number > 0"),
    (["graph", "--policy", "linear", "--count", "-3"], "--count -3: must be a number > 0"),
    (["pipelines", "--count", "-1"], "--count -1: must be a number > 0"),
    (["pipelines", "--split", "/nonexistent"], "--split /nonexistent is not a folder"),
    (["pipelines", "--prefix", "../../evil"], "letters, digits, _ and - only"),
    (["pipelines", "--bins", "300", "100"], "strictly ascending"),
    (["pipelines", "--seed", "-5"], "--seed -5: must be a number >= 0"),
    (["models", "--seed", "-1", "AgeNet"], "--seed -1: must be a number >= 0"),
    (["models", "--out", "/proc/edgeprof-models", "AgeNet"], "cannot use"),
    (["graph", "--policy", "linear", "--out", "/proc/g.dot"], "cannot use"),
])
def test_bad_options_of_other_commands(capsys, work, args, message):
    defaults = {"graph": ["--description", str(work / "s" / "age_net.description.json")],
                "pipelines": ["--out", str(work / "pp")], "models": []}[args[0]]
    if args[0] in ("graph", "models") and "--out" not in args:
        defaults += ["--out", str(work / ("g.dot" if args[0] == "graph" else "mm"))]
    if "--split" not in args and args[0] == "pipelines":
        defaults += ["--split", str(work / "s")]
    assert main([*args, *defaults]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (work / "g.dot").exists() and not (work / "pp").exists()


def test_an_out_inside_a_finished_run_is_refused(capsys, work):
    run = work / "out" / "run"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    assert main(["run", "--pipeline", str(work / "p.json"), "--split", str(work / "s"),
                 "--policy", "linear", "--out", str(run / "nested"), "--backend", "none"]) == 2
    assert "lies inside the run folder" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["meta.json"]


def test_two_descriptions_of_one_network_are_refused(capsys, work):
    desc = work / "s" / "age_net.description.json"
    (work / "s" / "copy.description.json").write_text(desc.read_text())
    err = _run(capsys, work)
    assert "both describe AgeNet" in err


def test_output_into_a_pipe_whose_reader_left_ends_quietly():
    """``python -m engine ... | head``: once the reader is gone the command ends as a
    shell tool killed by SIGPIPE does (141), with no traceback and no error line."""
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run([sys.executable, "-m", "engine", "doctor"], stdout=write,
                              stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def _deep(root: Path, length: int) -> Path:
    """A folder under ``root`` whose path is about ``length`` characters (components of
    200: a file name is at most 255)."""
    path = root
    while len(str(path)) < length - 200:
        path = path / ("d" * 200)
    return path / ("d" * max(1, length - len(str(path)) - 1))


@pytest.mark.parametrize("backend, name, message", [
    ("uml", "a,b", "has a ','"), ("uml", "a:b", "has a ':'"), ("uml", 'a"b', "has a '\"'"),
    ("uml", "a b", "has a space"), ("vm", "a,b", "has a ','"),
    ("uml", "a\tb", "has whitespace ('\\t')"),  # fifth held-out pass L4: not "a space"
    ("uml", None, "too long for the uml sandbox"),
    ("auto", "a b", "has a space"),  # auto choosing uml: refused as well
])
def test_a_path_the_sandbox_cannot_carry_is_refused_before_any_folder(
        capsys, work, monkeypatch, backend, name, message):
    """M2 (new-user pass): a sandbox run's share path goes on UML's kernel command line or
    into qemu's options; one they cannot carry gave exit 1 and an error run folder."""
    from engine.limits import LimitRequest
    from engine.limits.sandbox import UmlSession
    from engine.runner import supervise

    if backend == "auto":  # as on a host without a usable cgroup, with UML built
        monkeypatch.setattr(supervise, "open_run_session",
                            lambda request: UmlSession(LimitRequest(48 * 2**20, None)))
    parent = work / "out" / name if name else _deep(work / "out", 2850)
    code = main(["run", "--pipeline", str(work / "p.json"), "--split", str(work / "s"),
                 "--policy", "linear", "--out", str(parent / "run"), "--backend", backend,
                 "--limit", "48M", "--batch", "1"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (work / "out").exists()


# the engine's own allocation failing under an address-space limit (ulimit -v): a real
# MemoryError, from a command that asks for more than the limit allows
_OOM = """
import resource, sys
import engine.analysis.report as report
from engine.cli import main
from engine.errors import EdgeprofError
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.RLIM_INFINITY))
report.report = lambda *a, **k: bytearray(4 * 2**30)
sys.exit(main(["results-report", "--tables", "unused"]))
"""


def test_a_memory_error_of_the_engine_itself_is_not_bad_input():
    """F7 (report 36): under ulimit -v the supervisor's own MemoryError said 'use a
    smaller --batch or fewer networks', exit 2 (bad input), at the default batch. It is
    exit 1, naming the limit: 3 GiB = 3072 MiB, ulimit -v 3145728 (KiB)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _OOM], capture_output=True, text=True,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ("error: the engine ran out of memory: its address space is "
                           "limited to 3072 MiB (ulimit -v 3145728); raise or lift that "
                           "limit\n")


def _masa_with_estimates(capsys, work: Path, estimates: dict) -> str:
    """A masa:2 run of p.json with these --estimates (it finishes); what it said."""
    (work / "e.json").write_text(json.dumps(estimates))
    code = main(["run", "--pipeline", str(work / "p.json"), "--split", str(work / "s"),
                 "--policy", "masa:2", "--out", str(work / "out" / "run"), "--backend",
                 "none", "--batch", "1", "--estimates", str(work / "e.json")])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def test_estimates_without_a_pipeline_network_say_so_and_run(capsys, work):
    """Passes 5-9 low: a network of the pipeline missing from --estimates was silently
    admitted on masa's own estimate."""
    err = _masa_with_estimates(capsys, work, {})
    assert "note: --estimates names no peak for AgeNet: masa estimates theirs" in err


def test_an_estimate_of_a_network_the_pipeline_does_not_run_is_said_unused(capsys, work):
    """Fifteenth held-out pass, a low: masa's --estimates naming a split network the
    pipeline does not run was accepted and silently ignored."""
    prototxt, model = generate.write_zoo_model("GenderNet", work / "m2", 1)
    splitter.split_model(model, prototxt, work / "s", network="GenderNet")
    err = _masa_with_estimates(capsys, work, {"AgeNet": 30_000_000, "GenderNet": 30_000_000})
    assert "note: --estimates names GenderNet, which this pipeline does not run" in err
    assert "AgeNet, which" not in err


def test_the_old_name_of_split_still_works_with_a_warning_for_one_release(capsys, work):
    """--models (issue 37: it read as the zoo's or the slowdown model's) draws the same
    pipelines as --split and says the new name; both at once, or neither, is refused."""
    drawn = {}
    for flag in ("--split", "--models"):
        out = work / flag.strip("-")
        assert main(["pipelines", flag, str(work / "s"), "--out", str(out), "--count", "2",
                     "--seed", "4"]) == 0
        drawn[flag] = {p.name: p.read_text() for p in sorted(out.glob("*.json"))}
        err = capsys.readouterr().err
        said = "warning: --models is now --split; --models will be removed in the next release"
        assert (said in err) == (flag == "--models"), err
    assert drawn["--split"] == drawn["--models"] and len(drawn["--split"]) == 2
    for argv in (["--split", "s", "--models", "s"], []):
        with pytest.raises(SystemExit) as exc:
            main(["pipelines", *argv, "--out", str(work / "o")])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and "--split" in err, err
    assert not (work / "o").exists()


def test_every_verb_takes_verbose_and_quiet():
    from engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, verb in sub.choices.items():
        flags = {s for a in verb._actions for s in a.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, name


def test_a_command_imports_its_own_verb_alone():
    """engine.cli names every verb's module and imports only the one a command runs: each
    run's supervisor and measured child is such a command, and the other verbs' imports
    cost each a few hundredths of a second. Each name is the verb its module registers."""
    from engine.cli import COMMANDS, build_parser

    def verbs(parser: argparse.ArgumentParser) -> set[str]:
        return set(next(a for a in parser._actions if a.dest == "command").choices)

    for name in COMMANDS:
        assert verbs(build_parser(name)) == {name}
    assert verbs(build_parser()) == set(COMMANDS)
    code = ("import sys\nfrom engine.cli import main\nmain(['tidy'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('engine.commands.')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2],
                       capture_output=True, text=True, timeout=60)
    assert "give --out and the run folders to tidy" in r.stderr, r.stderr
    imported = set(ast.literal_eval(r.stdout))
    assert imported <= {"engine.commands.tidy", "engine.commands.options"}, imported


def test_quiet_keeps_warnings_and_errors_verbose_adds_details(capsys, work):
    """Issue 37: messages go through logging; -q leaves warnings and the error line, the
    default adds progress, -v the run's backend and request."""
    said = {}
    for flag in ("-q", None, "-v"):
        out = work / f"p{flag}"
        argv = ["pipelines", "--models", str(work / "s"), "--out", str(out), "--count", "1"]
        assert main(argv + ([flag] if flag else [])) == 0
        said[flag] = capsys.readouterr().err
    assert "warning: --models is now --split" in said["-q"]
    assert "p000:" not in said["-q"] and "p000:" in said[None] and "p000:" in said["-v"]
    argv = ["run", "--pipeline", str(work / "p.json"), "--split", str(work / "s"), "--policy",
            "linear", "--backend", "none", "--batch", "1"]
    assert main([*argv, "--out", str(work / "r1"), "-v"]) == 0
    verbose = capsys.readouterr().err
    assert "backend none, here" in verbose and '"policy": "linear"' in verbose
    assert "p under linear (unlimited): ok" in verbose
    assert main([*argv, "--out", str(work / "r2")]) == 0
    plain = capsys.readouterr().err
    assert "p under linear (unlimited): ok" in plain and "backend none, here" not in plain
    assert main([*argv, "--out", str(work / "r2"), "-q"]) == 2  # it exists: an error
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
