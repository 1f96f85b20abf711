"""The code and the workflow's rules as the project keeps them: ruff-clean (pyproject's
[tool.ruff]), the rules formatted by snakefmt ([tool.snakefmt]), the license and the
citation file in place. CI runs these with the rest of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = ["Snakefile", *sorted(str(p.relative_to(REPO))
                               for p in (REPO / "workflow" / "rules").glob("*.smk"))]


def test_the_python_code_is_ruff_clean():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "engine", "tests", "benchmarks",
                        "workflow/scripts"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_rules_are_snakefmt_formatted():
    r = subprocess.run([sys.executable, "-m", "snakefmt", "--check", *RULES], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_citation_file_cites_the_paper_and_names_the_license():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"]
    dois = {ref["doi"] for ref in cff["references"]}
    # Masa (the paper EdgeCaffe's authors ask to cite) and MemA (EdgeCaffe's own)
    assert dois == {"10.1109/PERCOM50583.2021.9439111",
                    "10.1109/PerComWorkshops51409.2021.9430952"}
    assert (REPO / "LICENSE").read_text().startswith(f"{cff['license']} License")
