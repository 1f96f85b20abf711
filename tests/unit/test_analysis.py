"""Analysis stage: tidy tables, aggregation, speed-up and figures.

Real run folders come from the engine's CLI (AgeNet + GenderNet, Bulk and Linear,
unconstrained and with a 256M limit the `none` backend cannot enforce). Cases this machine
cannot produce (an OOM kill under an enforced limit, a run under VM emulation, sampler
series) are fabricated from copies of those real folders.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.patches import Rectangle
from PIL import Image

from engine.analysis import plots
from engine.analysis.aggregate import MAX_SAMPLES_PER_RUN, aggregate
from engine.analysis.figures.common import save_figure
from engine.analysis.summaries import speedup_summary, speedup_table, summary_table
from engine.analysis.tablefiles import write_tables
from engine.analysis.tidy import IDENTITY, tidy_run
from engine.errors import EdgeprofError
from tests.fabricated import edit_meta, record_tables
from tests.figure_checks import unlabelled_panels

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
PARAM_BYTES = 4 * (11_415_048 + 11_411_970)  # AgeNet + GenderNet weights, float32


def _engine(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "engine", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]


def _fake_samples(folder: Path, t0: int, n: int, peak: int) -> None:
    """A sampler series of n rows over the run's span, peaking at ``peak`` bytes."""
    end = pd.read_csv(folder / "tasks.csv")["end_ns"].max()
    t = np.linspace(0, end, n)
    rss = (80 * MIB + (peak - 80 * MIB) * np.sin(np.pi * t / end) ** 2).astype(np.int64)
    pd.DataFrame({"t_ns": t0 + t.astype(np.int64), "rss_bytes": rss, "uss_bytes": "",
                  "swap_bytes": 0, "cg_current_bytes": "", "cg_swap_current_bytes": ""}
                 ).to_csv(folder / "samples.csv", index=False)
    edit_meta(folder, sampler={"samples": n})
    record_tables(folder)


def _fabricate_oom(real: Path, out: Path) -> None:
    """Bulk killed by the OOM killer under an enforced 128M limit, half-way through."""
    shutil.copytree(real, out)
    tasks = pd.read_csv(out / "tasks.csv")
    kept = tasks[tasks["end_ns"] < tasks["end_ns"].max() / 2]
    kept.to_csv(out / "tasks.csv", index=False)
    nets = pd.read_csv(out / "networks.csv").iloc[:1]
    nets.assign(end_ns=np.nan, response_ns=np.nan, complete=False).to_csv(
        out / "networks.csv", index=False)
    meta = edit_meta(out, limit_bytes=128 * MIB, limit_enforced=True, backend="cgroup2",
                      termination="memory", running_at_end=["0:AgeNet EXEC"],
                      tasks_finished=len(kept),
                      gnu_time={"gt_max_rss_bytes": 131072 * 1024})
    _fake_samples(out, meta["t0_monotonic_ns"], 50, 128 * MIB)


def _fabricate_limited(real: Path, out: Path) -> None:
    """Linear finishing under the enforced 128M limit, with a long sampler series."""
    shutil.copytree(real, out)
    meta = edit_meta(out, limit_bytes=128 * MIB, limit_enforced=True, backend="cgroup2",
                      gnu_time={"gt_max_rss_bytes": 120_000 * 1024})
    _fake_samples(out, meta["t0_monotonic_ns"], 5000, 110 * MIB)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """results/runs/p000/{policy}/{limit}/rep{n}: four real runs, three fabricated."""
    root = tmp_path_factory.mktemp("campaign")
    _wait([_engine("models", "--out", "models", "AgeNet", "GenderNet", cwd=root)])
    _wait([_engine("split", f"models/{stem}.caffemodel", "--out", "split", "--network", net,
                   cwd=root) for stem, net in (("age_net", "AgeNet"), ("gender_net", "GenderNet"))])
    pipe = {"name": "p000", "arrivals": [{"time_s": 0.0, "networks": ["AgeNet", "GenderNet"]}],
            "arrival_mode": "batch", "param_bytes": PARAM_BYTES, "size_bin": "0-100 MiB"}
    (root / "p000.json").write_text(json.dumps(pipe))
    runs = root / "runs" / "p000"
    _wait([_engine("run", "--pipeline", "p000.json", "--policy", policy, "--split", "split",
                   "--out", str(runs / policy / limit / "rep0"), "--backend", "none",
                   "--no-probes", "--batch", "1",
                   *([] if limit == "none" else ["--limit", limit]), cwd=root)
           for policy in ("bulk", "linear") for limit in ("none", "256M")])
    _fabricate_oom(runs / "bulk" / "none" / "rep0", runs / "bulk" / "128M" / "rep0")
    _fabricate_limited(runs / "linear" / "none" / "rep0", runs / "linear" / "128M" / "rep0")
    emulated = runs / "linear" / "none" / "rep1"
    shutil.copytree(runs / "linear" / "none" / "rep0", emulated)
    edit_meta(emulated, emulated=True)
    return root


@pytest.fixture(scope="module")
def agg(campaign) -> dict[str, pd.DataFrame]:
    runs = [tidy_run(run) for run in sorted((campaign / "runs").glob("*/*/*/rep*"))]
    return aggregate(runs, campaign / "runs" / "p000" / "linear" / "none" / "rep0")


def _run(agg, policy: str, limit: str, rep: int = 0) -> pd.Series:
    runs = agg["runs"]
    row = runs[(runs.policy == policy) & (runs["limit"] == limit) & (runs.rep == rep)]
    assert len(row) == 1
    return row.iloc[0]


def test_tidy_run_of_a_real_run(campaign):
    t = tidy_run(campaign / "runs" / "p000" / "linear" / "none" / "rep0")
    run = t["runs"].iloc[0]
    assert (run.run_id, run.pipeline, run.policy, run["limit"], run.rep) == (
        "p000/linear/none/rep0", "p000", "linear", "none", 0)
    assert run.n_networks == 2 and run.param_bytes == PARAM_BYTES
    assert run.termination == "ok" and not run.limit_enforced and not run.emulated
    assert 0 < run.mean_response_s <= run.makespan_s < run.wall_s < 60
    # probes were off: not measured is NaN, never 0
    assert np.isnan(run.gt_max_rss_bytes) and np.isnan(run.peak_rss_bytes)
    tasks = t["tasks"]
    assert set(IDENTITY) <= set(tasks.columns)
    assert (tasks.run_id == run.run_id).all()
    loads = tasks[tasks.task_type == "LOAD"]
    assert loads.bytes_loaded.sum() == PARAM_BYTES
    assert (tasks.end_ns >= tasks.start_ns).all()
    assert t["networks"].complete.all() and len(t["networks"]) == 2
    assert t["samples"].empty


def test_a_run_killed_before_gnu_time_wrote_its_times_has_no_cpu_time(campaign, tmp_path):
    """A timed-out run whose GNU time report has no user and system times: its CPU time
    is unknown (NaN), never an error that stops the campaign's tables."""
    import shutil

    run = Path(shutil.copytree(campaign / "runs" / "p000" / "linear" / "none" / "rep0",
                               tmp_path / "rep0"))
    meta = json.loads((run / "meta.json").read_text())
    edit_meta(run, gnu_time={**(meta.get("gnu_time") or {}), "gt_user_s": None,
                             "gt_sys_s": None})
    row = tidy_run(run)["runs"].iloc[0]
    assert np.isnan(row["cpu_s"]) and row["termination"] == "ok"


def test_the_tidy_verb_writes_one_folder_per_run_or_nothing(campaign, tmp_path, capsys):
    """python -m engine tidy (the workflow's tidy_run job): a folder per run named as the
    run's own; a damaged run among them is one line, exit 2, and nothing written."""
    from engine.cli import main

    base = campaign / "runs" / "p000" / "linear" / "none"
    out = tmp_path / "tidy"
    assert main(["tidy", "--out", str(out), str(base / "rep0"), str(base / "rep1")]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["rep0", "rep1"]
    for rep, emulated in (("rep0", False), ("rep1", True)):
        assert sorted(p.name for p in (out / rep).iterdir()) == [
            "digests.json", "networks.parquet", "runs.parquet", "samples.parquet",
            "tasks.parquet"]
        runs = pd.read_parquet(out / rep / "runs.parquet")
        assert runs.run_id.tolist() == [f"p000/linear/none/{rep}"]
        assert bool(runs.emulated.iloc[0]) is emulated
        tasks = pd.read_parquet(out / rep / "tasks.parquet")
        assert len(tasks) == len(pd.read_csv(base / rep / "tasks.csv"))
    capsys.readouterr()

    damaged = tmp_path / "bad" / "rep1"
    shutil.copytree(base / "rep0", damaged)
    (damaged / "tasks.csv").write_text("")
    out = tmp_path / "tidy2"
    assert main(["tidy", "--out", str(out), str(base / "rep0"), str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(damaged / "tasks.csv") in err
    assert not out.exists()
    twin = shutil.copytree(base / "rep0", tmp_path / "x" / "rep0")
    assert main(["tidy", "--out", str(out), str(base / "rep0"), str(twin)]) == 2
    assert "rep0 more than once" in capsys.readouterr().err and not out.exists()
    # not a run folder at all: said before anything else
    assert main(["tidy", "--out", str(out), str(base / "rep0"), str(tmp_path / "none")]) == 2
    assert "none is missing, not a run folder" in capsys.readouterr().err
    for argv in ([], ["--out", str(out)], [str(base / "rep0")]):
        assert main(["tidy", *argv]) == 2
        err = capsys.readouterr().err
        assert "give --out and the run folders to tidy" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("damage", ["emptied", "rows cut", "cut mid-row"])
def test_a_damaged_tasks_table_is_an_error_naming_it(campaign, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(campaign / "runs" / "p000" / "linear" / "none" / "rep0", run)
    text = (run / "tasks.csv").read_text()
    lines = text.splitlines(keepends=True)
    (run / "tasks.csv").write_text({"emptied": "", "rows cut": "".join(lines[:len(lines) // 2]),
                                    "cut mid-row": text[:-7]}[damage])
    with pytest.raises(EdgeprofError, match=re.escape(str(run / "tasks.csv"))):
        tidy_run(run)


def test_limit_not_enforced_is_kept_apart(agg):
    run = _run(agg, "bulk", "256M")
    assert run.limit_bytes == 256 * MIB and not run.limit_enforced
    for name in ("tasks", "networks"):
        rows = agg[name][agg[name]["limit"] == "256M"]
        assert len(rows) and not rows.limit_enforced.any()


def test_oom_run_keeps_its_rows_and_has_no_makespan(agg):
    run = _run(agg, "bulk", "128M")
    assert run.termination == "memory" and run.limit_enforced
    assert np.isnan(run.makespan_s) and run.running_at_end == "0:AgeNet EXEC"
    assert run.gt_max_rss_bytes == 128 * MIB
    nets = agg["networks"][agg["networks"].run_id == run.run_id]
    # the network that never started is listed too, as incomplete
    assert list(nets.network) == ["AgeNet", "GenderNet"] and not nets.complete.any()
    assert 0 < run.tasks_finished < _run(agg, "bulk", "none").tasks_finished


def test_speedup_over_bulk(agg):
    sp = agg["speedup"]
    bulk = sp[sp.policy == "bulk"]
    assert (bulk.loc[bulk.termination == "ok", "speedup"] == 1.0).all()
    linear = sp[(sp.policy == "linear") & (sp["limit"] == "none") & (sp.rep == 0)].iloc[0]
    assert 0.1 < linear.speedup < 10 and linear.reason == ""
    assert linear.speedup == pytest.approx(linear.bulk_makespan_s / linear.makespan_s)
    oom = sp[(sp.policy == "bulk") & (sp["limit"] == "128M")].iloc[0]
    assert oom.termination == "memory" and np.isnan(oom.speedup)
    assert oom.reason == "bulk ended 'memory'"
    after_oom = sp[(sp.policy == "linear") & (sp["limit"] == "128M")].iloc[0]
    assert np.isnan(after_oom.speedup) and after_oom.reason == "bulk ended 'memory'"
    # an emulated run is never compared with a native Bulk
    emulated = sp[sp.emulated].iloc[0]
    assert np.isnan(emulated.speedup) and emulated.reason == "no bulk run"


def test_a_cell_missing_pairs_for_its_own_kill_and_for_bulks_names_both():
    """Twenty-seventh held-out pass L2: deepeye's pair of rep0 is missing because deepeye
    was OOM-killed, that of rep1 because Bulk was; the summary and the figure's label
    named only Bulk's ("bulk OOM")."""
    from engine.analysis.figures.common import why_short

    ends = {("bulk", 0): "ok", ("deepeye", 0): "memory", ("bulk", 1): "memory",
            ("deepeye", 1): "ok", ("bulk", 2): "ok", ("deepeye", 2): "ok"}
    runs = pd.DataFrame([
        {"pipeline": "v000", "limit": "12M", "limit_enforced": True, "emulated": True,
         "sandbox": "uml", "runtime": "lean", "rep": rep, "size_bin": "small",
         "n_networks": 2, "param_bytes": 1, "limit_bytes": 12 * MIB, "policy": policy,
         "policy_family": policy, "workers": 1, "termination": end,
         "makespan_s": 1.0 if end == "ok" else np.nan}
        for (policy, rep), end in ends.items()])
    summary = speedup_summary(speedup_table(runs))
    cell = summary[(summary.policy == "deepeye") & (summary.level == "pipeline")].iloc[0]
    assert cell.pairs_missing == 2
    assert set(cell.missing_why.split("; ")) == {"deepeye ended 'memory'",
                                                 "bulk ended 'memory'"}
    assert set(why_short(cell.missing_why).split(", ")) == {"OOM", "bulk OOM"}
    assert why_short("bulk ended 'memory'") == "bulk OOM"
    # twenty-eighth held-out pass L3: a mixed cell's mark read "2× 1 OOM, 1 timeout"
    from engine.analysis.figures.common import failed_mark, short_end

    assert failed_mark(2, short_end("1 memory, 1 timeout")) == "1 OOM, 1 timeout"
    assert failed_mark(3, short_end("memory")) == "3× OOM"
    # twenty-eighth held-out pass L3: where both ended early in one repetition, both
    runs.loc[(runs.policy == "bulk") & (runs.rep == 0), ["termination", "makespan_s"]] = [
        "timeout", np.nan]
    pairs = speedup_table(runs)
    both = pairs[(pairs.policy == "deepeye") & (pairs.rep == 0)].iloc[0]
    assert both.reason == "deepeye ended 'memory'; bulk ended 'timeout'"
    cell = speedup_summary(pairs)
    cell = cell[(cell.policy == "deepeye") & (cell.level == "pipeline")].iloc[0]
    assert set(why_short(cell.missing_why).split(", ")) == {"OOM", "bulk OOM", "bulk timeout"}


def test_samples_are_aligned_and_thinned_keeping_the_peak(agg):
    run = _run(agg, "linear", "128M")
    assert run.n_samples == 5000 and run.peak_rss_bytes == pytest.approx(110 * MIB, rel=1e-3)
    assert 80 * MIB < run.mean_rss_bytes < run.peak_rss_bytes
    samples = agg["samples"][agg["samples"].run_id == run.run_id]
    assert len(samples) <= MAX_SAMPLES_PER_RUN
    assert samples.rss_bytes.max() == run.peak_rss_bytes
    assert samples.t_s.min() == 0 and samples.t_s.max() == pytest.approx(
        run.makespan_s, rel=0.05)


def test_reconcile_table_comes_from_the_reconcile_run(agg):
    rec = agg["reconcile"]
    assert len(rec) and set(rec.task_type) == {"INIT", "LOAD", "EXEC"}
    assert rec.loc[rec.task_type == "LOAD", "param_bytes"].sum() == PARAM_BYTES


def test_write_tables_round_trips_atomically(agg, tmp_path):
    write_tables(agg, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {f"{n}.{ext}" for n in agg for ext in ("csv", "parquet")}
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(runs, agg["runs"])
    assert len(pd.read_csv(tmp_path / "tasks.csv")) == len(agg["tasks"])


CONTEXT = {"run": {"policies": ["bulk", "linear"], "reconcile": {"pipeline": "p000"}}}
STYLE = {"dpi": 80, "font_size": 9, "palette": "tab10"}


def _texts(fig) -> str:
    """Every title, text and legend entry of a figure, joined."""
    parts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        parts += [ax.get_title()] + [t.get_text() for t in ax.texts]
        if ax.get_legend():
            parts += [t.get_text() for t in ax.get_legend().get_texts()]
    for legend in fig.legends:
        parts += [legend.get_title().get_text()] + [t.get_text() for t in legend.get_texts()]
    return "\n".join(parts)


def _assert_saved(fig, path: Path, min_bytes: int = 5000) -> None:
    save_figure(fig, path.with_suffix(".png"), path.with_suffix(".pdf"), STYLE["dpi"])
    for ext in (".png", ".pdf"):
        assert path.with_suffix(ext).stat().st_size > min_bytes
    with Image.open(path.with_suffix(".png")) as img:
        assert img.width >= 400 and img.height >= 150


def _assert_legible(fig) -> None:
    """The figure's legends and texts lie inside it, and none sits on another or on a
    panel (as a suptitle drawn over the legend did)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    whole = fig.bbox
    boxes = [(f"legend {i}", leg.get_window_extent(renderer))
             for i, leg in enumerate(fig.legends)]
    boxes += [(repr(t.get_text()), t.get_window_extent(renderer))
              for t in fig.texts if t.get_text()]
    for label, box in boxes:
        assert (box.x0 >= whole.x0 - 1 and box.y0 >= whole.y0 - 1
                and box.x1 <= whole.x1 + 1 and box.y1 <= whole.y1 + 1), f"{label} is clipped"
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), f"{a} overlaps {b}"
        for ax in fig.axes:
            if ax.get_visible() and ax.axison:
                assert not box_a.overlaps(ax.bbox), f"{a} overlaps a panel"


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_every_figure_is_drawn_from_real_tables(agg, name, tmp_path):
    fig = plots.make_figure(name, agg, STYLE, CONTEXT)
    _assert_legible(fig)
    _assert_saved(fig, tmp_path / name)
    # the campaign ran no partial:k policy, and at one batch (the batch figure:
    # tests/unit/test_batch_axis.py)
    if name in ("partial_workers", "batch"):
        assert "no data" in _texts(fig)
    else:
        assert "no data" not in _texts(fig)


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_every_drawn_panel_shows_something_and_names_its_axes(agg, name):
    """Issue 39: speedup.png's unconstrained columns had an empty slowdown placeholder
    (a default 0-1 axis) at the bottom, the only panel there with the x label."""
    tables = agg
    if name == "partial_workers":  # the campaign ran no partial:k: its bulk runs stand in
        runs = agg["runs"]
        bulk = runs["policy"] == "bulk"
        tables = {**agg, "runs": runs.assign(policy=runs["policy"].where(~bulk, "partial:1"),
                                             policy_family=runs["policy_family"].where(
                                                 ~bulk, "partial"))}
    if name == "batch":  # the campaign ran at batch 1: its runs stand in at batch 2 too
        runs = agg["runs"]
        both = pd.concat([runs, runs.assign(batch=2, run_id=runs["run_id"] + "/b2")],
                         ignore_index=True)
        tables = {**agg, "runs": both, "summary": summary_table(both)}
    fig = plots.make_figure(name, tables, STYLE, CONTEXT)
    assert "no data" not in _texts(fig)
    assert not (problems := unlabelled_panels(fig)), "\n".join(problems)


def test_memory_over_time_shows_one_batchs_runs_and_names_it(agg):
    """Held-out pass 29, M4: at two batches the figure drew both batches' runs, two
    panels per policy, under a title naming the first batch only."""
    both = {name: (pd.concat([t, t.assign(batch=2, run_id=t["run_id"] + "/b2")],
                             ignore_index=True) if "run_id" in t and not t.empty else t)
            for name, t in agg.items()}
    one = plots.make_figure("memory_over_time", agg, STYLE, CONTEXT)
    two = plots.make_figure("memory_over_time", both, STYLE, CONTEXT)
    titles = [ax.get_title() for ax in two.axes if ax.axison]
    assert titles == [ax.get_title() for ax in one.axes if ax.axison]
    assert "batch 1" in two._suptitle.get_text()


def test_the_partial_workers_mark_names_every_way_its_runs_ended(agg):
    """Twenty-eighth held-out pass: a policy's runs that ended in two ways were marked by
    the more frequent alone ("2× OOM" for a kill and a timeout)."""
    runs = agg["runs"]
    bulk = runs["policy"] == "bulk"
    runs = runs.assign(policy=runs["policy"].where(~bulk, "partial:1"),
                       policy_family=runs["policy_family"].where(~bulk, "partial"))
    # one of its runs OOM-killed, and a second repetition of it timed out
    one = runs[runs["policy"] == "partial:1"].iloc[[0]]
    runs = pd.concat([runs.drop(index=one.index), one.assign(termination="memory"),
                      one.assign(termination="timeout", rep=one["rep"] + 1,
                                 run_id=one["run_id"] + "-twin")], ignore_index=True)
    text = _texts(plots.make_figure("partial_workers", {**agg, "runs": runs}, STYLE, CONTEXT))
    assert "1 OOM, 1 timeout" in text and "2× OOM" not in text


def test_failed_runs_and_unenforced_limits_are_labelled(agg):
    text = _texts(plots.make_figure("speedup", agg, STYLE, CONTEXT))
    assert "256M (not enforced)" in text and "unconstrained\nemulated" in text
    assert "128M" in text and "OOM" in text and "bulk OOM" in text
    memory = plots.make_figure("memory", agg, STYLE, CONTEXT)
    assert "OOM" in _texts(memory)
    # the killed bulk run's memory is data (up to the kill): its bars are drawn, hatched,
    # as the legend says (fifteenth held-out pass L1: solid, against the legend)
    hatched = [b for ax in memory.axes for b in ax.patches
               if isinstance(b, Rectangle) and b.get_hatch() and b.get_height() > 0]
    assert hatched, "no bar counting the OOM-killed run is hatched"
    assert any("counts runs that did not finish" in t.get_text() for leg in memory.legends
               for t in leg.get_texts())
    over_time = _texts(plots.make_figure("memory_over_time", agg, STYLE, CONTEXT))
    assert "limit 128M" in over_time and "bulk — OOM" in over_time


def test_reconciliation_names_the_instruments_not_measured(agg):
    text = _texts(plots.make_figure("reconciliation", agg, STYLE, CONTEXT))
    assert "max RSS, whole run (GNU time + VmHWM windows): not measured" in text
    assert "heap profile in-use (window end): not measured" in text


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_empty_tables_give_a_no_data_figure(name, tmp_path):
    empty = {n: pd.DataFrame() for n in ("runs", "tasks", "networks", "samples",
                                         "reconcile", "speedup")}
    fig = plots.make_figure(name, empty, STYLE, {})
    assert "no data" in _texts(fig)
    _assert_saved(fig, tmp_path / name, min_bytes=1000)


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_every_figure_is_drawn_when_every_run_timed_out(agg, name, tmp_path):
    """Nineteenth pass M1: a campaign whose runs all ended 'timeout' (run.timeout_s too
    short) has no median anywhere; the speed-up figure ended in a TypeError."""
    runs = agg["runs"].assign(termination="timeout", makespan_s=np.nan)
    speedup = speedup_table(runs)
    timed_out = {**agg, "runs": runs, "summary": summary_table(runs),
                 "speedup": speedup, "speedup_summary": speedup_summary(speedup)}
    for key in ("runs", "summary", "speedup", "speedup_summary"):  # as the plot job reads
        write_tables({key: timed_out[key]}, tmp_path / "t")  # them: all-null columns
        timed_out[key] = pd.read_parquet(tmp_path / "t" / f"{key}.parquet")  # read as None
    fig = plots.make_figure(name, timed_out, STYLE, CONTEXT)
    _assert_saved(fig, tmp_path / name, min_bytes=1000)
    if name == "speedup":
        assert "timeout" in _texts(fig)


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_every_figure_is_drawn_without_bulk_runs(agg, name, tmp_path):
    runs = agg["runs"][agg["runs"]["policy"] != "bulk"]
    no_bulk = {**{k: v[v["policy"] != "bulk"] if "policy" in v else v
                  for k, v in agg.items()}, "speedup": speedup_table(runs)}
    context = {"run": {**CONTEXT["run"], "policies": [
        p for p in CONTEXT["run"]["policies"] if p != "bulk"]}}
    fig = plots.make_figure(name, no_bulk, STYLE, context)
    save_figure(fig, tmp_path / "f.png", tmp_path / "f.pdf", STYLE["dpi"])
    assert (tmp_path / "f.png").stat().st_size > 1000
    _assert_legible(fig)
    if name == "speedup":
        assert "no speed-up panel" in _texts(fig)
        labels = [ax.get_ylabel() for ax in fig.axes]
        assert "median inference time (s)" in labels
        assert not any("speed-up" in label for label in labels)


def test_results_report_reads_a_tables_folder_without_a_summary(agg, tmp_path):
    """Fifteenth held-out pass, a low: on the held-out runs' tables (runs, tasks and
    networks, no summary) results-report asked for an aggregate stage that never writes
    one there; it summarizes the runs itself, as the aggregate stage would."""
    from engine.analysis.report import report

    whole, runs_only = tmp_path / "whole", tmp_path / "runs_only"
    for folder in (whole, runs_only):
        folder.mkdir()
        agg["runs"].to_parquet(folder / "runs.parquet")
    summary_table(agg["runs"]).to_parquet(whole / "summary.parquet")
    assert report(runs_only) == report(whole)


def test_a_cell_of_runs_that_ended_in_different_ways_names_each_way(agg, tmp_path):
    """Sixteenth held-out pass M2: a cell of 2 OOM kills and 2 timeouts was reported
    "4 of 4 runs ended memory" (the most frequent way, ties by name), in the summary, in
    results-report and as "OOM" on the figures."""
    from engine.analysis.figures.common import short_end
    from engine.analysis.report import report

    base = agg["runs"].iloc[[0]]
    runs = pd.concat([base.assign(run_id=f"{base['run_id'].iloc[0]}/x{i}", rep=i,
                                  termination=how)
                      for i, how in enumerate(["memory", "timeout", "memory", "ok"])])
    summary = summary_table(runs)
    row = summary[summary["level"] == "pipeline"]
    assert list(row["ended"]) == ["2 memory, 1 timeout"]
    assert short_end("2 memory, 1 timeout") == "2 OOM, 1 timeout" and short_end("memory") == "OOM"
    summary.to_parquet(tmp_path / "summary.parquet")
    assert "runs did not finish (2 memory, 1 timeout)" in report(tmp_path)
