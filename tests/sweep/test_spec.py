"""Sweep file validation, scenario expansion, content-hashed study names, URL masking, CLI exit 2."""

from __future__ import annotations


import pytest

from autotune.errors import ConfigError
from autotune.sweep.spec import STUDY_PREFIX, load_sweep
from autotune.tuner.storage import mask_url, normalize_url, redact
from tests.sweep.sweep_helpers import DATA, cli, write_sweep


def test_matrix_expands_to_named_scenarios(tmp_path):
    sw = load_sweep(write_sweep(tmp_path / "s.yaml", mbs=(4, 8), memories=("1GB", "0.6GB")))
    names = [s.name for s in sw.scenarios]
    assert names == ["tiny-mb4-hbm1GB", "tiny-mb4-hbm0.6GB", "tiny-mb8-hbm1GB", "tiny-mb8-hbm0.6GB"]
    assert [s.config.micro_batch_num for s in sw.scenarios] == [4, 4, 8, 8]
    assert [round(s.config.hbm_mib) for s in sw.scenarios] == [1024, 614, 1024, 614]
    assert len({s.study_name for s in sw.scenarios}) == 4
    assert all(s.study_name.startswith(STUDY_PREFIX) for s in sw.scenarios)
    assert sw.lease_seconds == 10  # as written by write_sweep


def test_study_name_follows_content_not_file(tmp_path):
    a = load_sweep(write_sweep(tmp_path / "a.yaml", trials=16)).scenarios
    b = load_sweep(write_sweep(tmp_path / "b.yaml", trials=16)).scenarios
    c = load_sweep(write_sweep(tmp_path / "c.yaml", trials=17)).scenarios
    assert [s.study_name for s in a] == [s.study_name for s in b]        # same content, same study
    assert not {s.study_name for s in a} & {s.study_name for s in c}     # changed budget, new study
    cfg = (DATA / "tiny.yaml").read_text().replace("offset: 0", "offset: [1, -1]")
    (tmp_path / "tiny2.yaml").write_text(cfg)
    d = tmp_path / "d.yaml"
    d.write_text((tmp_path / "a.yaml").read_text().replace(str(DATA / "tiny.yaml"), str(tmp_path / "tiny2.yaml")))
    assert not {s.study_name for s in a} & {s.study_name for s in load_sweep(d).scenarios}


@pytest.mark.parametrize("extra, field, rule", [
    ("  - name: bad\n    config: %s\n    set: {parallel_config.micro_batch_nm: 8}\n" % (DATA / "tiny.yaml"),
     "scenarios.1.set.parallel_config.micro_batch_nm", "sweep_override"),
    ("  - name: tiny-mb4-hbm1GB\n    config: %s\n    set: {parallel_config.micro_batch_num: 16}\n" % (DATA / "tiny.yaml"),
     "scenarios.1.name", "sweep_duplicate"),
    ("  - name: missing\n    config: nowhere.yaml\n", "scenarios.1.config", "file"),
    ("  - name: odd\n    config: %s\n    set: {parallel_config.pipeline_stage: 0}\n" % (DATA / "tiny.yaml"),
     "parallel_config.pipeline_stage", "R_RANGE"),
    ("  - name: typo\n    config: %s\n    trails: 5\n" % (DATA / "tiny.yaml"), "scenarios.1.trails", "sweep"),
])
def test_bad_input_names_the_field(tmp_path, extra, field, rule):
    with pytest.raises(ConfigError) as ei:
        load_sweep(write_sweep(tmp_path / "s.yaml", extra=extra))
    assert ei.value.field == field and ei.value.rule == rule


def test_cli_bad_input_exit_2_one_line(tmp_path):
    s = write_sweep(tmp_path / "s.yaml", extra="  - name: x\n    config: nowhere.yaml\n")
    res = cli("sweep", str(s), "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    assert res.stderr.startswith("error: [file] scenarios.1.config:") and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_storage_password_never_shown(tmp_path):
    url = "postgresql+psycopg://alice:Tops3cret!@127.0.0.1:1/nodb"
    assert mask_url(url) == "postgresql+psycopg://alice:***@127.0.0.1:1/nodb"
    assert redact(f"failed: {url} (password=Tops3cret!)", url) == (
        "failed: postgresql+psycopg://alice:***@127.0.0.1:1/nodb (password=***)")
    assert normalize_url("postgresql://u@h/db").startswith("postgresql+")
    s = write_sweep(tmp_path / "s.yaml")
    res = cli("sweep", str(s), "--out", str(tmp_path / "out"), env={"AUTOTUNE_STORAGE": url})
    assert res.returncode == 2
    assert "Tops3cret" not in res.stdout + res.stderr
    assert "alice:***@" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_baseline_exit_2(tmp_path):
    s = write_sweep(tmp_path / "s.yaml")
    (tmp_path / "prev.csv").write_text("a,b\n1,2\n")
    res = cli("sweep", str(s), "--out", str(tmp_path / "out"), "--baseline", str(tmp_path / "prev.csv"))
    assert res.returncode == 2 and "[baseline] --baseline" in res.stderr


def test_shipped_nightly_example_validates(root):
    sw = load_sweep(root / "examples" / "nightly_sweep.yaml")
    assert len(sw.scenarios) >= 3
    assert {s.config.source.split(":")[-1] for s in sw.scenarios} == {
        "telechat2_115b-mb8", "telechat2_115b-mb16", "llama3_1_70b-hbm52.5GB", "llama3_1_70b-hbm58GB"}


def test_imports_flow_one_way():
    """tuner.storage never imports tuner.runner (runner imports storage), and sweep.worker never
    imports sweep.run (run starts the workers): the two import cycles are gone."""
    import ast

    from tests.sweep.sweep_helpers import ROOT

    def imported(path):
        tree = ast.parse((ROOT / path).read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert not {m for m in imported("autotune/tuner/storage.py") if m.startswith("autotune.tuner")}
    assert "autotune.tuner.storage" in imported("autotune/tuner/runner.py")
    assert "autotune.sweep.run" not in imported("autotune/sweep/worker.py")
    assert "autotune.sweep.run" not in imported("autotune/sweep/claims.py")


@pytest.mark.parametrize("extra, extra_top, field", [
    ("  - name: t\n    config: %s\n    timeout: .nan\n" % (DATA / "tiny.yaml"), "", "scenarios.1.timeout"),
    ("  - name: t\n    config: %s\n    timeout: .inf\n" % (DATA / "tiny.yaml"), "", "scenarios.1.timeout"),
    ("", "storage_retry_seconds: .inf\n", "storage_retry_seconds"),
])
def test_non_finite_seconds_are_refused(tmp_path, extra, extra_top, field):
    """``.inf`` passed ``gt=0`` and would be written as the invalid JSON ``Infinity``."""
    with pytest.raises(ConfigError) as ei:
        load_sweep(write_sweep(tmp_path / "s.yaml", extra=extra, extra_top=extra_top))
    assert (ei.value.field, ei.value.rule) == (field, "sweep") and "finite" in str(ei.value)
