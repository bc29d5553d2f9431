"""``--hbm-margin`` values: a fraction of the budget, a percentage or a size with a unit (issue 19
item 10). Budget 55808 MiB = TeleChat2's 54.5 GB."""

from __future__ import annotations

import pytest

from autotune.config.margin import apply_margin, parse_margin_mib
from autotune.config.training import config_from_dict
from autotune.errors import ConfigError

B = 55808.0


@pytest.mark.parametrize("value, mib", [
    (None, 0.0), (0, 0.0), ("0", 0.0), ("0%", 0.0),
    (0.05, 2790.4), ("0.05", 2790.4), ("5%", 2790.4), ("2.5 %", 1395.2),
    ("2GB", 2048.0), ("2GiB", 2048.0), ("2048MiB", 2048.0), ("2048MB", 2048.0), ("1.5 GB", 1536.0),
    ("512M", 512.0),
])
def test_margin_values(value, mib):
    assert parse_margin_mib(value, B) == pytest.approx(mib)


@pytest.mark.parametrize("value, needle", [
    (2, "a bare number is a fraction of the budget and must be < 1"),
    ("2", "for a size give a unit, e.g. '2GB'"),
    (-0.1, "must be a fraction >= 0"),
    ("-5%", "must be a fraction >= 0"),
    ("nan", "must be a fraction >= 0"),
    ("lots", "expected a fraction of the budget (0.05, '5%') or a size with a unit"),
    ("x%", "expected a percentage such as '5%'"),
    ("60GB", "a margin of 61440 MiB leaves nothing of the 55808 MiB budget"),
    ("100%", "must be < 1"),
    (True, "expected a fraction of the budget"),
])
def test_bad_margins_name_the_option_and_rule(value, needle):
    with pytest.raises(ConfigError) as err:
        parse_margin_mib(value, B)
    assert err.value.rule == "R_HBM_MARGIN" and err.value.field == "--hbm-margin"
    assert needle in err.value.message


def test_a_fraction_needs_a_budget():
    with pytest.raises(ConfigError, match="needs an HBM budget"):
        parse_margin_mib(0.05, None)


def _cfg(mem):
    ctx = {"max_device_memory": mem} if mem else {}
    return config_from_dict({"context": ctx, "parallel_config": {"pipeline_stage": 2, "micro_batch_num": 4},
                             "model": {"model_config": {"num_layers": 4, "hidden_size": 64, "num_heads": 4,
                                                        "seq_length": 16, "vocab_size": 100}}})


def test_apply_margin_lowers_the_limit_only():
    cfg = _cfg("54.5GB")
    out, m = apply_margin(cfg, "5%")
    assert m == pytest.approx(2790.4) and out.hbm_mib == pytest.approx(B - 2790.4)
    assert cfg.hbm_mib == B                                    # the input is not changed
    assert out.raw == cfg.raw                                  # best.yaml keeps max_device_memory as written
    same, zero = apply_margin(cfg, None)
    assert same is cfg and zero == 0.0
    with pytest.raises(ConfigError, match="needs an HBM budget"):
        apply_margin(_cfg(None), "2GB")
