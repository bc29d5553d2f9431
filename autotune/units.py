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
#: A size whose number is signed, NaN or infinite: a size out of range rather than not a size.
_BAD_NUMBER_RE = re.compile(r"^\s*(-\s*[0-9]*\.?[0-9]+|[-+]?(nan|inf|infinity))\s*([KMGT]?)(I?B)?\s*$",
                            re.IGNORECASE)
_SIZE_UNIT_MIB = {"": 1.0 / BYTES_PER_MIB, "K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}
#: Largest HBM budget accepted (MiB): 1024 GiB, MindFormers' own "no limit" default
#: (``max_device_memory: '1024GB'`` in ``core/context/build_context.py``); the largest accelerator
#: memory today is under 300 GB.
MAX_MEMORY_MIB = 1024.0 * MIB_PER_GIB


def parse_memory_mib(value: object, *, field: str) -> float:
    """Parse a memory size with a unit, such as ``"54.5GB"``, into MiB.

    MindSpore's ``max_device_memory`` uses binary units under decimal names ("GB" means GiB), so
    ``"54.5GB"`` is 54.5 × 1024 = 55808 MiB; ``"1024MB"`` / ``"1024MiB"`` are MiB, ``"1TB"`` is
    1024 GiB. A unit is required: MindSpore's format is ``"<number>GB"``, and a bare ``60`` could
    mean GB or MiB (rule R_MEMORY_UNIT; the fix names ``'60GB'`` only when that is itself a valid
    size). The size must be > 0 and at most 1024 GiB (:data:`MAX_MEMORY_MIB`, rule R_MEMORY_RANGE;
    ``'-58GB'``, ``'nanGB'``, ``'infGB'`` included).

    Raises:
        ConfigError: not a size at all (a list, null, a boolean, ``'lots'``: rule R_TYPE), no unit
            (R_MEMORY_UNIT), or out of range (R_MEMORY_RANGE); names ``field``.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        suggestion = f"{value}GB"
        try:
            parse_memory_mib(suggestion, field=field)
            fix = f"write e.g. {suggestion!r}"
        except ConfigError:                      # nan, a negative or too large number: no 'nanGB'
            fix = "write the per-device HBM budget with a unit, e.g. '60GB'"
        raise ConfigError(f"a memory size needs a unit, got {value!r}; fix: {fix} (GB = GiB, as MindSpore "
                          "reads max_device_memory)", field=field, value=value, rule="R_MEMORY_UNIT")
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m:
            num = float(m.group(1))
            unit = m.group(2).upper()
            if not m.group(3) and not unit:
                raise ConfigError(f"a memory size needs a unit, got {value[:80]!r}; fix: write e.g. "
                                  f"'{value.strip()[:40]}GB' (GB = GiB, as MindSpore reads max_device_memory)",
                                  field=field, value=value, rule="R_MEMORY_UNIT")
            mib = num * _SIZE_UNIT_MIB[unit]
            if 0 < mib <= MAX_MEMORY_MIB:
                return mib
        if m or _BAD_NUMBER_RE.match(value):
            raise ConfigError(f"must be > 0 and at most 1024GB (more memory than any device has), got "
                              f"{value[:80]!r}; fix: give the per-device HBM budget, e.g. '60GB'", field=field,
                              value=value, rule="R_MEMORY_RANGE")
    shown = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else f"a {type(value).__name__}"
    raise ConfigError(f"expected a memory size such as '54.5GB' (GB = GiB as in MindSpore), got {shown[:80]}",
                      field=field, value=value, rule="R_TYPE")
