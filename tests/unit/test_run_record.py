"""The run's request (built once from the CLI, handed to the guest as JSON), its typed
record (meta.json), and the task-overlap count of run folders."""

from __future__ import annotations

import json
import math
import mmap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.analysis.tidy import page_bytes
from engine.cli import build_parser
from engine.commands.run import run_request
from engine.errors import EdgeprofError
from engine.limits import LimitRequest
from engine.runner.folder import _overlaps
from engine.runner.meta import (
    SCHEMA_VERSION,
    PipelineInfo,
    RunMeta,
    describe,
    host_facts,
    record_digest,
)
from engine.runner.request import RunRequest

REPO = Path(__file__).resolve().parents[2]
MiB = 2**20


def _parse(*extra: str, policy: str = "partial") -> RunRequest:
    return run_request(build_parser().parse_args(
        ["run", "--pipeline", "p.json", "--policy", policy, "--split", "m", "--out", "o",
         *extra]))


def test_the_request_holds_every_run_option_and_survives_json():
    req = _parse("--limit", "512M", "--swap", "0", "--budget", "256M", "--batch", "2",
                 "--seed", "4", "--blas-threads", "2", "--timeout", "30", "--heap-profile",
                 "--sample-hz", "50", "--sample-uss", "--backend", "cgroup2", "--force",
                 policy="masa")
    assert req.policy == "masa:2"  # the canonical name, decided once
    assert req.limits == LimitRequest(512 * MiB, 0, "cgroup2")
    assert (req.options.budget, req.options.batch, req.options.seed) == (256 * MiB, 2, 4)
    assert (req.options.blas_threads, req.options.timeout_s) == (2, 30.0)
    assert req.probes.heap_profile and req.probes.sample_uss and req.probes.sample_hz == 50
    assert req.force
    assert RunRequest.from_json(req.to_json()) == req
    guest = req.with_changes(out="/run/vmout/run", backend="cgroup2", force=False)
    assert guest.out == "/run/vmout/run" and not guest.force
    assert guest.limits == req.limits and guest.options == req.options


def test_no_probes_turns_every_window_probe_off_and_the_budget_defaults_to_the_limit():
    req = _parse("--no-probes", "--limit", "1G")
    p = req.probes
    assert not (p.process or p.cgroup or p.gnu_time) and p.sample_hz == 0
    assert req.options.budget == 2**30 and req.limits.swap_bytes is None



def _meta() -> RunMeta:
    return RunMeta(pipeline=PipelineInfo("p.json", "p000", "batch", "<150M", 10, ["AgeNet"]),
                   policy="linear", termination="ok", limits={"backend": "none"},
                   gnu_time={"gt_max_rss_bytes": 4096})


def test_the_record_round_trips_through_meta_json(tmp_path):
    meta = _meta()
    meta.write(tmp_path)
    on_disk = json.loads((tmp_path / "meta.json").read_text())
    assert on_disk["schema_version"] == SCHEMA_VERSION
    assert on_disk["pipeline"]["networks"] == ["AgeNet"]
    assert on_disk["oom_kills"] is None  # not measured is None, never 0
    assert RunMeta.read(tmp_path) == meta


def test_the_page_size_of_the_kernel_that_counted_a_runs_pages():
    """The host's for a native run, the guest's for a sandboxed one (its counters are the
    guest kernel's); a record from before the page size was kept counted 4 KiB pages on
    x86 and is unknown elsewhere."""
    assert host_facts()["page_size"] == mmap.PAGESIZE
    meta = _meta()
    meta.host = {"machine": "aarch64", "page_size": 16384}
    assert page_bytes(meta) == 16384
    meta.sandbox = {"guest": {"machine": "aarch64", "page_size": 65536}}
    assert page_bytes(meta) == 65536
    meta.sandbox, meta.host = None, {"machine": "x86_64"}
    assert page_bytes(meta) == 4096
    meta.host = {"machine": "aarch64"}
    assert math.isnan(page_bytes(meta))


def test_a_record_without_its_digest_or_of_a_foreign_kind_is_refused(tmp_path):
    _meta().write(tmp_path)
    data = json.loads((tmp_path / "meta.json").read_text())
    for strip in ({"schema_version"}, {"record_digest"}, {"schema_version", "record_digest"}):
        (tmp_path / "meta.json").write_text(json.dumps(
            {k: v for k, v in data.items() if k not in strip}))
        with pytest.raises(EdgeprofError, match="record_digest|was edited"):
            RunMeta.read(tmp_path)
    data = {**data, "record_digest": None}
    data["record_digest"] = record_digest(data | {"colour": "red"})
    (tmp_path / "meta.json").write_text(json.dumps(data | {"colour": "red"}))
    with pytest.raises(EdgeprofError, match="unknown field.*colour"):
        RunMeta.read(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps(data | {"schema_version": 99}))
    with pytest.raises(EdgeprofError, match="schema_version 99 is newer"):
        RunMeta.read(tmp_path)
    (tmp_path / "meta.json").write_text('{"policy": ')
    with pytest.raises(EdgeprofError, match="cannot read the run record"):
        RunMeta.read(tmp_path)


def test_the_docs_list_every_field_of_the_record():
    page = (REPO / "docs" / "engine.md").read_text()
    assert describe() in page, "docs/engine.md's 'What a run writes' is out of date: " \
                               "paste the output of python -m engine.runner.meta"


def _overlaps_by_definition(spans: list[tuple[int, int]]) -> list[int]:
    return [sum(1 for j, (s, e) in enumerate(spans) if j != i and s < end and e > start)
            for i, (start, end) in enumerate(spans)]


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10)), max_size=60))
def test_the_overlap_sweep_counts_what_the_definition_counts(raw):
    spans = [(s, s + d) for s, d in raw]
    rows = [{"start_ns": s, "end_ns": e} for s, e in spans]
    _overlaps(rows)
    assert [r["overlap"] for r in rows] == _overlaps_by_definition(spans)


def test_a_claimed_out_is_published_without_deleting_what_it_did_not_create(tmp_path):
    from engine.runner.outdir import OutClaim

    out = tmp_path / "run"
    with OutClaim(out) as claim:
        folder = claim.tempdir()
        (folder / "meta.json").write_text("new")
        out.mkdir()  # made by hand while the run went on
        (out / "mine").write_text("keep me")
        with pytest.raises(EdgeprofError, match="appeared while this run went on; its "
                                                "result is kept in"):
            claim.publish(folder)
    assert (out / "mine").read_text() == "keep me"
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.")]
    assert len(kept) == 1 and (kept[0] / "meta.json").read_text() == "new"


def test_force_replaces_an_earlier_run_only_when_the_new_one_is_published(tmp_path):
    from engine.runner.outdir import OutClaim

    out = tmp_path / "run"
    out.mkdir()
    _meta().write(out)
    old = (out / "meta.json").read_text()
    with pytest.raises(EdgeprofError, match="already holds a finished run; pass --force"):
        OutClaim(out)
    with OutClaim(out, force=True) as claim:
        folder = claim.tempdir()
        assert (out / "meta.json").read_text() == old  # still there while the run goes
        (folder / "meta.json").write_text("new")
        claim.publish(folder)
    assert (out / "meta.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no lock, no old copy


@pytest.mark.parametrize("how", ["record not JSON", "a stray file", "edited record"])
def test_force_never_replaces_a_folder_that_is_not_a_run(tmp_path, how):
    from engine.runner.outdir import OutClaim

    out = tmp_path / "run"
    out.mkdir()
    _meta().write(out)
    if how == "record not JSON":
        (out / "meta.json").write_text("not json")
    elif how == "a stray file":
        (out / "important.txt").write_text("precious")
    else:
        (out / "meta.json").write_text((out / "meta.json").read_text().replace(
            '"policy": "linear"', '"policy": "partial:1"'))
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(EdgeprofError, match="--force replaces only a run folder"):
        OutClaim(out, force=True)
    assert sorted(p.name for p in out.iterdir()) == before


def test_an_out_that_holds_the_runs_inputs_or_loops_is_refused(tmp_path):
    from engine.runner.outdir import OutClaim

    out = tmp_path / "run"
    out.mkdir()
    _meta().write(out)
    (out / "pipe.json").write_text("{}")
    with pytest.raises(EdgeprofError, match="holds .*pipe.json, which this run reads"):
        OutClaim(out, force=True, inputs=(out / "pipe.json", tmp_path))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(EdgeprofError, match="--out .*a: .*choose another --out"):
        OutClaim(tmp_path / "a")
    # "run/new/.." is the run folder itself: refused without --force, nothing made in it
    with pytest.raises(EdgeprofError, match="already holds a finished run"):
        OutClaim(out / "new" / "..")
    assert not (out / "new").exists()


def test_a_run_killed_while_replacing_an_earlier_one_gives_the_earlier_one_back(tmp_path):
    from engine.runner.outdir import OutClaim

    # what a SIGKILL between publish's two renames leaves: the earlier run moved aside
    old = tmp_path / ".run.old.99999999.x" / "run"
    old.mkdir(parents=True)
    (old / "meta.json").write_text("earlier")  # only its presence counts here
    with pytest.raises(EdgeprofError, match="already holds a finished run"):
        OutClaim(tmp_path / "run")
    assert (tmp_path / "run" / "meta.json").read_text() == "earlier"


@pytest.mark.parametrize("field, value", [("hwm_rss_bytes", 1), ("termination", "memory"),
                                          ("wall_s", "fast"), ("limit_enforced", True)])
def test_a_record_edited_by_hand_is_refused(tmp_path, field, value):
    _meta().write(tmp_path)
    data = json.loads((tmp_path / "meta.json").read_text())
    assert RunMeta.read(tmp_path).policy == "linear"
    (tmp_path / "meta.json").write_text(json.dumps(data | {field: value}, indent=1))
    with pytest.raises(EdgeprofError, match="was edited after the run"):
        RunMeta.read(tmp_path)
    # a record without its digest but of a schema that has one is no exception
    del data["record_digest"]
    (tmp_path / "meta.json").write_text(json.dumps(data))
    with pytest.raises(EdgeprofError, match="carries no record_digest"):
        RunMeta.read(tmp_path)


def test_a_record_from_before_the_sandbox_block_reads_under_the_new_names(tmp_path):
    """Schema 7 (issue 37): the sandbox's facts were "vm" (either sandbox), their kernel
    "sandbox"; an older record, sealed as it was written, reads under the new names."""
    from engine.analysis.tidy import sandbox_of

    data = _meta().to_dict() | {"schema_version": 6}
    data.pop("sandbox")
    data["vm"] = {"sandbox": "uml", "host_maps_peak": 4000}
    data["record_digest"] = record_digest(data)
    (tmp_path / "meta.json").write_text(json.dumps(data))
    meta = RunMeta.read(tmp_path)
    assert meta.sandbox == {"kernel": "uml", "host_maps_peak": 4000}
    assert sandbox_of(meta) == "uml"
    # a record of this schema with the old name is no record of this edgeprof
    data = _meta().to_dict() | {"vm": {"sandbox": "uml"}}
    data["record_digest"] = record_digest(data)
    (tmp_path / "meta.json").write_text(json.dumps(data))
    with pytest.raises(EdgeprofError, match="unknown field"):
        RunMeta.read(tmp_path)
