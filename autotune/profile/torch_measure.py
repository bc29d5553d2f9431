"""Optional (``autotune[torch]``): measure one Llama-style decoder layer with PyTorch.

Builds a decoder layer from the model dims (RMSNorm -> GQA attention with causal
``scaled_dot_product_attention`` -> RMSNorm -> SwiGLU MLP, residuals; no tensor parallelism) on the
local device and measures, per micro-batch:

- ``fwd_ms`` / ``bwd_ms``: median wall time of forward / backward over ``repeats`` after ``warmup``
  runs (synchronized on CUDA);
- ``act_mib``: the activation kept between forward and backward, counted exactly as the bytes of
  the distinct tensor storages autograd saves (``torch.autograd.graph.saved_tensors_hooks``),
  parameters excluded — device independent, so CPU numbers are valid memory numbers;
- ``full.act_mib`` / ``full.extra_ms`` / ``full.workspace_mib``: the same with the layer wrapped in
  ``torch.utils.checkpoint`` (non-reentrant): kept = the layer input; extra = backward time with
  checkpoint minus without; workspace = the activation re-created during backward (= ``act_mib``).

Times on CPU are only useful as ratios; memory is exact for this layer definition. The numbers
describe the *whole* layer on one device: with tensor/sequence parallelism divide accordingly or
prefer the analytic profile (which models the sharding) for memory.

Needs PyTorch: ``pip install 'autotune[torch]'``. Raises :class:`ConfigError` (rule
``torch_missing``) when it is not installed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError
from autotune.units import BYTES_PER_MIB


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415 - optional heavy dependency (the torch extra)
    except ImportError:
        raise ConfigError("PyTorch is not installed; install the optional extra: pip install "
                          "'autotune[torch]'", field="--from-torch", value=None,
                          rule="torch_missing") from None
    return torch


@dataclass(frozen=True)
class TorchLayerMeasurement:
    """Result of :func:`measure_layer` (ms and MiB per micro-batch; see module docstring)."""

    fwd_ms: float
    bwd_ms: float
    act_mib: float
    full_act_mib: float
    full_extra_ms: float
    params: int
    device: str
    dtype: str

    def fields(self, kind: str = "dense") -> dict[str, float]:
        """Profile field paths for :func:`autotune.profile.merge.merge_profile`."""
        k = f"kinds.{kind}"
        return {f"{k}.fwd_ms": self.fwd_ms, f"{k}.bwd_ms": self.bwd_ms, f"{k}.act_mib": self.act_mib,
                f"{k}.full.act_mib": self.full_act_mib, f"{k}.full.extra_ms": self.full_extra_ms,
                f"{k}.full.workspace_mib": self.act_mib}


def _build_layer(torch: Any, h: int, a: int, g: int, f: int) -> Any:
    nn = torch.nn
    F = torch.nn.functional
    d = h // a

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))

        def forward(self, x: Any) -> Any:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = RMSNorm(), RMSNorm()
            self.q = nn.Linear(h, a * d, bias=False)
            self.kv = nn.Linear(h, 2 * g * d, bias=False)
            self.o = nn.Linear(a * d, h, bias=False)
            self.gate_up = nn.Linear(h, 2 * f, bias=False)
            self.down = nn.Linear(f, h, bias=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            y = self.n1(x)
            q = self.q(y).view(b, s, a, d).transpose(1, 2)
            k, v = self.kv(y).view(b, s, 2, g, d).unbind(2)
            k = k.transpose(1, 2).repeat_interleave(a // g, dim=1)
            v = v.transpose(1, 2).repeat_interleave(a // g, dim=1)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(att.transpose(1, 2).reshape(b, s, a * d))
            gate, up = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    return Layer()


def _saved_bytes(torch: Any, fn: Any, x: Any, param_ptrs: set[int]) -> tuple[int, Any]:
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in param_ptrs:
            seen[ptr] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x)
    return sum(seen.values()), out


def measure_layer(hidden_size: int, num_heads: int, n_kv_heads: int, intermediate_size: int,
                  seq_length: int, *, micro_batch_size: int = 1, dtype: str = "float32",
                  device: str = "cpu", repeats: int = 3, warmup: int = 1, seed: int = 0) -> TorchLayerMeasurement:
    """Measure one decoder layer (see module docstring).

    Raises:
        ConfigError: PyTorch missing (``torch_missing``), or inconsistent dims (``torch_dims``).
    """
    torch = _torch()
    if hidden_size % num_heads or num_heads % n_kv_heads:
        raise ConfigError(f"hidden_size ({hidden_size}) must divide by num_heads ({num_heads}) and "
                          f"num_heads by n_kv_heads ({n_kv_heads})", field="model.model_config",
                          value=None, rule="torch_dims")
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    dev = torch.device(device)
    layer = _build_layer(torch, hidden_size, num_heads, n_kv_heads, intermediate_size).to(dev, dt)
    params = sum(p.numel() for p in layer.parameters())
    param_ptrs = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    x = torch.randn(micro_batch_size, seq_length, hidden_size, device=dev, dtype=dt, requires_grad=True)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def ckpt(inp: Any) -> Any:
        return torch.utils.checkpoint.checkpoint(layer, inp, use_reentrant=False)

    def timed(fn: Any) -> tuple[float, float]:
        fw, bw = [], []
        for i in range(warmup + repeats):
            layer.zero_grad(set_to_none=True)
            x.grad = None
            sync()
            t0 = time.perf_counter()
            out = fn(x)
            sync()
            t1 = time.perf_counter()
            out.sum().backward()
            sync()
            t2 = time.perf_counter()
            if i >= warmup:
                fw.append(t1 - t0)
                bw.append(t2 - t1)
        fw.sort()
        bw.sort()
        return fw[len(fw) // 2] * 1e3, bw[len(bw) // 2] * 1e3

    act_b, out = _saved_bytes(torch, layer, x, param_ptrs)
    out.sum().backward()
    full_b, out = _saved_bytes(torch, ckpt, x, param_ptrs)
    out.sum().backward()
    fwd_ms, bwd_ms = timed(layer)
    _, bwd_ck = timed(ckpt)
    return TorchLayerMeasurement(fwd_ms=fwd_ms, bwd_ms=bwd_ms, act_mib=act_b / BYTES_PER_MIB,
                                 full_act_mib=full_b / BYTES_PER_MIB,
                                 full_extra_ms=max(0.0, bwd_ck - bwd_ms), params=int(params),
                                 device=str(dev), dtype=dtype)
