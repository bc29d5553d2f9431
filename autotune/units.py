"""The only unit constants of autotune.

Conventions used across the package: time in milliseconds (``*_ms``), memory in MiB (``*_mib``)
unless a name says ``*_bytes``.
"""

from __future__ import annotations

import re

from autotune.errors import ConfigError

BYTES_PER_MIB = 1024 * 1024
MIB_PER_GIB = 1024
MS_PER_S = 1000.0

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_SIZE_UNIT_MIB = {"": 1.0 / BYTES_PER_MIB, "K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


def parse_memory_mib(value: object, *, field: str) -> float:
    """Parse a MindSpore memory string such as ``"54.5GB"`` into MiB.

    MindSpore's ``max_device_memory`` uses binary units under decimal names ("GB" means GiB),
    so ``"54.5GB"`` is 54.5 × 1024 = 55808 MiB. A bare number is taken as GiB; ``"1024MB"`` as MiB.

    Raises:
        ConfigError: the value is not a positive size (names ``field``).
    """
    if isinstance(value, bool):
        raise ConfigError(f"expected a size such as '54.5GB', got {value!r}", field=field,
                          value=value, rule="memory_size")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ConfigError(f"must be > 0, got {value!r}", field=field, value=value,
                              rule="memory_size")
        return float(value) * MIB_PER_GIB
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m:
            num = float(m.group(1))
            unit = m.group(2).upper()
            if not m.group(3) and not unit:
                mib = num * MIB_PER_GIB  # bare number: GiB
            else:
                mib = num * _SIZE_UNIT_MIB[unit]
            if mib > 0:
                return mib
    raise ConfigError(f"expected a size such as '54.5GB' (GB = GiB as in MindSpore), got {value!r}",
                      field=field, value=value, rule="memory_size")
