"""Output paths are checked before any work (issue 19 item 6), and ``apply`` takes ``--out`` like
every other command (item 9).

The search itself is replaced by a function that fails the test, so "checked before the search"
is tested directly, not by timing.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

import autotune.api
from autotune.cli import main
from tests.emit.conftest import TOY8_PROFILE, TOY_CONFIG


@pytest.fixture
def toy(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(TOY_CONFIG)
    prof = tmp_path / "profile.yaml"
    prof.write_text(TOY8_PROFILE)
    return cfg, prof


@pytest.fixture
def no_search(monkeypatch):
    """A search that must not start: the output check has to stop the command first."""
    def boom(*a, **k):
        raise AssertionError("the search ran although an output path was bad")

    monkeypatch.setattr(autotune.api, "search", boom)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    return lines[0]


def test_search_out_exists_stops_before_the_search(toy, tmp_path, no_search):
    cfg, prof = toy
    out = tmp_path / "best.yaml"
    out.write_text("mine: 1\n")
    res = run("search", cfg, "--profile", prof, "--out", out)
    assert res.exit_code == 2
    err = one_error(res)
    assert str(out) in err and "--force" in err and "[overwrite] --out:" in err
    assert out.read_text() == "mine: 1\n"


def test_search_report_dir_with_a_report_stops_before_the_search(toy, tmp_path, no_search):
    cfg, prof = toy
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "report.html").write_text("old")
    (rep / "study_history.png").write_text("old")
    res = run("search", cfg, "--profile", prof, "--report", rep)
    assert res.exit_code == 2
    err = one_error(res)
    assert "[overwrite] --report:" in err and "report.html" in err and "study_history.png" in err
    assert "--force" in err
    assert (rep / "report.html").read_text() == "old"


def test_search_out_under_a_file_stops_before_the_search(toy, tmp_path, no_search):
    cfg, prof = toy
    (tmp_path / "afile").write_text("")
    res = run("search", cfg, "--profile", prof, "--out", tmp_path / "afile" / "best.yaml")
    assert res.exit_code == 2
    err = one_error(res)
    assert "[R_UNWRITABLE]" in err and "afile is a file, not a folder" in err
    res = run("search", cfg, "--profile", prof, "--report", tmp_path / "afile")  # click's own check
    assert res.exit_code == 2 and "is a file" in res.output
    res = run("search", cfg, "--profile", prof, "--report", tmp_path / "afile" / "rep")
    assert res.exit_code == 2 and "[R_UNWRITABLE] --report:" in one_error(res)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_search_unwritable_folder_stops_before_the_search(toy, tmp_path, no_search):
    cfg, prof = toy
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = run("search", cfg, "--profile", prof, "--out", ro / "sub" / "best.yaml")
        assert res.exit_code == 2 and "is not writable" in one_error(res)
    finally:
        ro.chmod(0o755)


def test_search_unwritable_folder_as_seen_by_access(toy, tmp_path, no_search, monkeypatch):
    """The same refusal where the tests run as root (who may write anywhere): the folder's
    os.access answer is what the check reads."""
    import autotune.commands._paths as paths

    cfg, prof = toy
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(paths.os, "access",
                        lambda p, mode: False if str(p) == str(ro) and mode & os.W_OK else real(p, mode))
    res = run("search", cfg, "--profile", prof, "--out", ro / "sub" / "best.yaml")
    assert res.exit_code == 2 and f"the folder {ro} is not writable" in one_error(res)
    res = run("search", cfg, "--profile", prof, "--report", ro)
    assert res.exit_code == 2 and f"cannot write into {ro}" in one_error(res)


def test_search_folder_that_takes_no_new_file_stops_before_the_search(toy, tmp_path, no_search, monkeypatch):
    """os.access says yes (root, or a read-only mount) but no file can be created there: a new
    user's ``--out /proc/x.yaml`` ran the whole search and then failed with a traceback. The check
    now creates and removes a temporary file in the folder first."""
    import errno
    import tempfile

    import autotune.commands._paths as paths

    cfg, prof = toy
    ro = tmp_path / "ro"
    ro.mkdir()
    real = tempfile.TemporaryFile

    def refuse(*a, dir=None, **k):  # noqa: A002 - tempfile's own keyword
        if str(dir) == str(ro):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(paths.tempfile, "TemporaryFile", refuse)
    res = run("search", cfg, "--profile", prof, "--out", ro / "sub" / "best.yaml")
    assert res.exit_code == 2
    assert f"no file can be created in {ro} (Read-only file system)" in one_error(res)
    res = run("search", cfg, "--profile", prof, "--report", ro)
    assert res.exit_code == 2 and "[R_UNWRITABLE] --report:" in one_error(res)
    assert list(tmp_path.rglob("tmp*")) == []  # the probe leaves nothing behind where it works


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux's /proc")
def test_search_out_under_proc_stops_before_the_search(toy, no_search):
    """The new user's case itself: /proc takes no new file, whoever runs the command."""
    cfg, prof = toy
    res = run("search", cfg, "--profile", prof, "--out", "/proc/x.yaml")
    assert res.exit_code == 2 and "cannot write /proc/x.yaml: no file can be created in /proc" in one_error(res)


def test_write_that_fails_after_the_check_is_one_line(tmp_path, monkeypatch):
    """A write that fails all the same (the disk filled up since the check) raises the one-line
    ConfigError, not an OSError traceback."""
    import errno
    from pathlib import Path

    from autotune.commands._paths import write_text
    from autotune.errors import ConfigError

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(ConfigError, match="No space left on device") as e:
        write_text(tmp_path / "best.yaml", "x: 1\n")
    assert e.value.rule == "R_UNWRITABLE"


def test_search_out_and_report_write_with_force(toy, tmp_path):
    cfg, prof = toy
    out = tmp_path / "best.yaml"
    out.write_text("mine: 1\n")
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "report.html").write_text("old")
    (rep / "notes.txt").write_text("keep")  # not a report file: never a clash
    res = run("search", cfg, "--profile", prof, "--out", out, "--report", rep, "--trials", "5", "--force")
    assert res.exit_code == 0, res.output
    assert "offset:" in out.read_text() and "mine: 1" not in out.read_text()
    assert (rep / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (rep / "notes.txt").read_text() == "keep"


def test_report_refuses_to_overwrite_without_force(toy, tmp_path):
    cfg, prof = toy
    rep = tmp_path / "rep"
    res = run("report", cfg, "--profile", prof, "--out", rep)
    assert res.exit_code == 0, res.output
    html = (rep / "report.html").read_text()
    (rep / "report.html").write_text("edited")
    res = run("report", cfg, "--profile", prof, "--out", rep)
    assert res.exit_code == 2
    err = one_error(res)
    assert str(rep) in err and "--force" in err and "report.html" in err
    assert (rep / "report.html").read_text() == "edited"
    res = run("report", cfg, "--profile", prof, "--out", rep, "--force")
    assert res.exit_code == 0, res.output
    # the same config gives the same page (up to the generation time stamp)
    strip = lambda h: "\n".join(ln for ln in h.splitlines() if "generated by autotune" not in ln)  # noqa: E731
    assert strip((rep / "report.html").read_text()) == strip(html)


def test_report_into_an_existing_empty_folder(toy, tmp_path):
    cfg, prof = toy
    rep = tmp_path / "rep"
    rep.mkdir()
    res = run("report", cfg, "--profile", prof, "--out", rep)
    assert res.exit_code == 0, res.output
    assert (rep / "report.md").is_file()


def test_profile_out_and_report_checked_first(toy, tmp_path):
    cfg, _ = toy
    out = tmp_path / "p.yaml"
    out.write_text("mine")
    res = run("profile", cfg, "--out", out)
    assert res.exit_code == 2 and "--force" in one_error(res)
    assert "assumptions" not in res.output  # nothing derived before the check
    rep = tmp_path / "fit.json"
    rep.write_text("{}")
    res = run("profile", cfg, "--out", tmp_path / "new.yaml", "--report", rep)
    assert res.exit_code == 2 and "[overwrite] --report:" in one_error(res)
    assert not (tmp_path / "new.yaml").exists()


def test_probe_out_checked_before_writing_any_block(tmp_path):
    d = tmp_path / "probes"
    d.mkdir()
    (d / "runs.yaml").write_text("mine")
    res = run("probe", "--pipeline-stage", "4", "--num-layers", "8", "--kinds", "full", "--out", d)
    assert res.exit_code == 2 and "runs.yaml" in one_error(res)
    assert sorted(p.name for p in d.iterdir()) == ["runs.yaml"]  # no probe block written


APPLY_CFG = ("# my config\nmodel:\n  model_config:\n    num_layers: 8  # keep\n"
             "parallel_config:\n  pipeline_stage: 4\n  micro_batch_num: 8\n")
APPLY_BEST = "model:\n  model_config:\n    offset: [1, 0, 0, -1]\n"


@pytest.mark.parametrize("flag", ["--out", "-o", "--output"])
def test_apply_out_short_and_old_name(tmp_path, flag):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(APPLY_CFG)
    best = tmp_path / "b.yaml"
    best.write_text(APPLY_BEST)
    out = tmp_path / "tuned.yaml"
    res = run("apply", best, cfg, flag, out)
    assert res.exit_code == 0, res.output
    assert "    num_layers: 8  # keep\n    offset: [1, 0, 0, -1]\n" in out.read_text()
    res = run("apply", best, cfg, flag, out)  # exists now
    assert res.exit_code == 2 and "[R_OVERWRITE] --out:" in one_error(res)


def test_apply_help_shows_out_not_the_old_name():
    res = run("apply", "--help")
    assert "-o, --out" in res.output and "--output" not in res.output


def test_apply_out_and_old_name_must_agree(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(APPLY_CFG)
    best = tmp_path / "b.yaml"
    best.write_text(APPLY_BEST)
    res = run("apply", best, cfg, "--out", tmp_path / "a.yaml", "--output", tmp_path / "b2.yaml")
    assert res.exit_code == 2 and "give the output once" in one_error(res)


def test_megatron_search_out_checked_before_the_search(tmp_path, monkeypatch):
    from autotune.commands import _megatron

    monkeypatch.setattr(_megatron, "run", lambda *a, **k: pytest.fail("the Megatron search ran"))
    args = tmp_path / "megatron.yaml"
    args.write_text("num_layers: 8\nhidden_size: 256\nnum_attention_heads: 4\nseq_length: 128\n"
                    "pipeline_model_parallel_size: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n")
    out = tmp_path / "tuned.yaml"
    out.write_text("mine")
    res = run("search", args, "--from", "megatron", "--out", out)
    assert res.exit_code == 2 and "[overwrite] --out:" in one_error(res) and out.read_text() == "mine"
