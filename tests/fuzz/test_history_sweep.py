"""``benchmarks/history_sweep.py`` on a small git repository made here: which files it takes
(every distinct YAML blob of every ref that names pipeline_stage, once), how it tallies them
(accepted, rejected by rule) and that it flags nothing on well-handled input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import history_sweep  # noqa: E402

REAL = (ROOT / "examples" / "real_configs" / "05_glm4_9b.yaml").read_text(encoding="utf-8")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture()
def mirror(tmp_path: Path) -> Path:
    repo = tmp_path / "mf"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "configs").mkdir()
    (repo / "configs" / "glm4.yaml").write_text(REAL, encoding="utf-8")
    (repo / "configs" / "broken.yaml").write_text("parallel_config:\n  pipeline_stage: [2\n", encoding="utf-8")
    (repo / "configs" / "vit.yaml").write_text("parallel_config:\n  pipeline_stage: 2\nmodel:\n  model_config:\n"
                                               "    type: ViTConfig\n", encoding="utf-8")
    (repo / "configs" / "no_pp.yaml").write_text("runner_config:\n  epochs: 1\n", encoding="utf-8")
    (repo / "README.md").write_text("pipeline_stage\n", encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    _git(repo, "checkout", "-q", "-b", "r2")
    (repo / "configs" / "glm4_copy.yaml").write_text(REAL, encoding="utf-8")           # same bytes, other path
    (repo / "configs" / "glm4_m32.yaml").write_text(REAL.replace("micro_batch_num: 64", "micro_batch_num: 32"),
                                                    encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "two")
    return repo


def test_history_files_are_distinct_blobs_with_every_place(mirror):
    files = history_sweep.history_files(str(mirror))
    assert len(files) == 4                  # glm4 (3 places), glm4_m32, broken, vit; no_pp and README.md out
    places = sorted(sorted(p) for p, _ in files.values())
    assert [("main", "configs/glm4.yaml"), ("r2", "configs/glm4.yaml"), ("r2", "configs/glm4_copy.yaml")] in places
    for got_places, raw in files.values():   # the bytes are those of the file at each place
        ref, path = got_places[0]
        assert raw == subprocess.run(["git", "-C", str(mirror), "show", f"{ref}:{path}"], capture_output=True,
                                     check=True).stdout


def test_sweep_tallies_accepts_and_rules(mirror, tmp_path):
    res = history_sweep.sweep(str(mirror), tmp_path)
    assert res.files == 4
    for name in ("check", "evaluate"):
        t = res.tallies[name]
        assert t.runs == 4 and t.accepted == 2, (name, t)
        assert all(t.counts[c] == 0 for c in history_sweep.COLUMNS), (name, t.counts)
        assert dict(res.rules[name]) == {"yaml": 1, "R_MISSING": 1}, res.rules[name]
    assert all(where.split(":", 1)[1].startswith("configs/glm4") for _, _, where in res.accepted_pp)
    assert sorted(p.name for _, p, _ in res.accepted_pp) == sorted(
        f"{sha}.yaml" for sha, (places, _) in history_sweep.history_files(str(mirror)).items()
        if any(path.startswith("configs/glm4") for _, path in places))


def test_missing_mirror_exits_2(tmp_path, capsys):
    assert history_sweep.main(["--mirror", str(tmp_path / "nowhere")]) == 2
    assert "mirror not found" in capsys.readouterr().err
