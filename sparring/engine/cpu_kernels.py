"""sparring's compiled float32 CPU kernels for the sampler's decode steps, and the learner's elementwise passes.

A decode step multiplies 1-64 rows by every weight of the model, so it costs
reading the weights more than multiplying them, and between its matmuls it
runs dozens of tiny ops whose every call costs more than its arithmetic.

- `row_matmul(x, weight, bias)`: x @ weight^T + bias. oneDNN's packed
  kernels read a block of the weight, then multiply it, one after the other
  (a step at 8 rows costs the read *plus* the arithmetic); this one asks
  for the weight rows a few tiles ahead while it multiplies the current
  ones, so the two overlap (timings: benchmarks/README.md), on the plain
  row-major weight, so a copy with an adapter folded in is one `addmm` with no
  reorder after it. Every output is one dot product summed in a fixed
  order, so it does not depend on how many rows or weights are multiplied
  together (a fused projection gives the bits of its parts; a prompt
  prefilled in pieces, those of one prefill).
- `rms_norm(x, weight, eps)`: Llama's RMSNorm in one pass per row, where
  `F.rms_norm` runs six ops (~85 us a call at 8 rows, 61 calls a step).
- `decode_attention(...)`: one query per row against its cached keys and
  values, each key and value read once for its group's query heads, with a
  running maximum (one pass): SDPA's CPU kernel took ~0.2 ms a layer at 8
  rows, ~0.6 at 32.
- `decode_layer(hidden, weights, ...)`: a whole Llama decoder layer for a
  decode step (norm, q/k/v, rotary, cache write, attention, o, residual,
  norm, gate/up, SiLU product, down, residual) through the kernels above
  and a few loops, in one call, so a step pays no per-op Python cost.
  `DecodeLayerWeights` holds what it reads.
- For the learner, forward and backward, rows split between threads:
  `rms_norm_rows` (keeping each row's inverse norm) and `rms_norm_backward`,
  `rotary` (into the [B, H, T, D] layout attention reads, and back),
  `silu_product` and its backward (`learner_layers`); the head's
  `log_sum_exp_rows` and `target_logprob_gradient` (`target_logprobs`):
  each one pass where torch's ops make several.
- `available()`: whether they run here. The C source beside this file
  (`cpu_kernels.c`, AVX2 + FMA, OpenMP on torch's own runtime) is compiled
  once per content with the system's C compiler (`$CC`, else `cc`) into
  `sparring_home()/kernels` (~1 s). Where there is no x86 AVX2 CPU or no
  compiler, or the build fails, the sampler keeps oneDNN's packed copies and
  torch's ops, and the reason is logged once.
- `KERNEL_PARAMETERS`: every kernel's C parameters, declared once; ctypes
  takes the argument lists from it, and the source's definitions are checked
  against it before the build (`prototype_mismatches`: a difference turns the
  kernels off, naming it). `ATTENTION_LIMITS` reach the C as -D flags.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.catalogue import sparring_home

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("cpu_kernels.c")

# What `decode_attention` holds per query group on its stack: the build passes them to the C as MAX_GROUP and
# MAX_HEAD_DIM, and the decoder runs the kernel only within them.
ATTENTION_LIMITS = {"group": 16, "head_dim": 256}

_FLAGS = [
    "-O3",
    "-mavx2",
    "-mfma",
    "-fopenmp",
    "-shared",
    "-fPIC",
    f"-DMAX_GROUP={ATTENTION_LIMITS['group']}",
    f"-DMAX_HEAD_DIM={ATTENTION_LIMITS['head_dim']}",
]

# Every kernel cpu_kernels.c exports, with its parameters as the C defines them: the one declaration of their
# argument lists. ctypes takes each kernel's argtypes from it, and loading the library first checks it against the
# source's definitions (`prototype_mismatches`), so an argument added, dropped or retyped on either side turns the
# kernels off with the difference named instead of passing misread arguments.
KERNEL_PARAMETERS = {
    "row_matmul": "const float* x, const float* w, const float* bias, float* y, long M, long N, long K, int threads",
    "rms_norm": "const float* x, const float* weight, float* y, long M, long K, float eps",
    "decode_attention": (
        "const float* q, const float* keys, const float* values, const unsigned char* valid, float* out, long B, "
        "long H, long H_kv, long S, long D, long length, float scale, int threads"
    ),
    "decode_layer": (
        "float* hidden, long B, long E, const float* input_norm, const float* post_norm, float eps, "
        "const float* w_qkv, const float* b_qkv, const float* w_o, const float* b_o, const float* w_gate_up, "
        "const float* b_gate_up, const float* w_down, const float* b_down, long I, const float* cos, "
        "const float* sin, float* keys, float* values, const unsigned char* valid, long H, long H_kv, long S, "
        "long D, long slot, float scale, float* scratch, int threads"
    ),
    "rms_norm_rows": (
        "const float* x, const float* weight, float* y, float* inverse, long M, long K, float eps, int threads"
    ),
    "rms_norm_backward": (
        "const float* grad, const float* x, const float* weight, const float* inverse, float* grad_x, long M, long K, "
        "int threads"
    ),
    "rotary": (
        "const float* x, float* out, const float* cos, const float* sin, long B, long T, long H, long D, int inverse, "
        "int threads"
    ),
    "silu_product_rows": "const float* gate, const float* up, float* out, long count, int threads",
    "silu_product_backward": (
        "const float* grad, const float* gate, const float* up, float* grad_gate, float* grad_up, long count, "
        "int threads"
    ),
    "log_sum_exp_rows": "const float* x, float* out, long M, long V, int threads",
    "target_logprob_gradient": (
        "const float* x, const float* lse, const float* grad, const long* targets, float* out, long M, long V, "
        "int threads"
    ),
}
_SCALARS = {"long": ctypes.c_long, "int": ctypes.c_int, "float": ctypes.c_float}


def available() -> bool:
    """Whether the kernels can run on this machine (they are built on the first call)."""
    return _library() is not None


def row_matmul(x: torch.Tensor, weight_O_I: torch.Tensor, bias_O: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight^T + bias for float32 CPU tensors (any leading dimensions on x; the weight contiguous)."""
    _require_contiguous(weight_O_I=weight_O_I, bias_O=bias_O)
    x_M_I = x.reshape(-1, x.shape[-1]).contiguous()
    out_M_O = torch.empty(len(x_M_I), weight_O_I.shape[0], dtype=x.dtype)
    _library().row_matmul(
        x_M_I.data_ptr(),
        weight_O_I.data_ptr(),
        _pointer(bias_O),
        out_M_O.data_ptr(),
        len(x_M_I),
        weight_O_I.shape[0],
        weight_O_I.shape[1],
        torch.get_num_threads(),
    )
    return out_M_O.view(*x.shape[:-1], -1)


def rms_norm(x: torch.Tensor, weight_I: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, for float32 CPU tensors."""
    x_M_I = x.reshape(-1, x.shape[-1]).contiguous()
    out_M_I = torch.empty_like(x_M_I)
    _library().rms_norm(x_M_I.data_ptr(), weight_I.data_ptr(), out_M_I.data_ptr(), len(x_M_I), x_M_I.shape[1], eps)
    return out_M_I.view(x.shape)


def decode_attention(
    query_B_H_D: torch.Tensor,
    keys_B_G_S_D: torch.Tensor,
    values_B_G_S_D: torch.Tensor,
    key_valid_B_S: torch.Tensor,
    length: int,
    scale: float,
) -> torch.Tensor:
    """Softmax(q k^T * scale) v for one query per row over slots 0..length-1 where `key_valid_B_S` (its own slot,
    the last, always counts); query head h reads key head h // (H / G). Returns [B, H, D]."""
    batch, heads, head_dim = query_B_H_D.shape
    _require_contiguous(keys_B_G_S_D=keys_B_G_S_D, values_B_G_S_D=values_B_G_S_D, key_valid_B_S=key_valid_B_S)
    query_B_H_D = query_B_H_D.contiguous()
    out_B_H_D = torch.empty_like(query_B_H_D)
    _library().decode_attention(
        query_B_H_D.data_ptr(),
        keys_B_G_S_D.data_ptr(),
        values_B_G_S_D.data_ptr(),
        key_valid_B_S.data_ptr(),
        out_B_H_D.data_ptr(),
        batch,
        heads,
        keys_B_G_S_D.shape[1],
        keys_B_G_S_D.shape[2],
        head_dim,
        length,
        scale,
        torch.get_num_threads(),
    )
    return out_B_H_D


@dataclass(frozen=True)
class DecodeLayerWeights:
    """One Llama-style decoder layer's tensors as `decode_layer` reads them (float32, CPU, contiguous)."""

    input_norm_E: torch.Tensor
    """RMSNorm weight before attention."""
    post_norm_E: torch.Tensor
    """RMSNorm weight before the MLP."""
    eps: float
    """Both norms' epsilon (a layer whose norms differ runs op by op)."""
    qkv_weight: torch.Tensor
    """q, k and v stacked by rows, [(H + 2 H_kv) D, E], adapters folded in."""
    qkv_bias: torch.Tensor | None
    """Their biases stacked (Qwen2), or None."""
    o_weight: torch.Tensor
    """The output projection, [E, H D]."""
    o_bias: torch.Tensor | None
    """Its bias, or None."""
    gate_up_weight: torch.Tensor
    """gate and up stacked by rows, [2 I, E]."""
    gate_up_bias: torch.Tensor | None
    """Their biases stacked, or None."""
    down_weight: torch.Tensor
    """The down projection, [E, I]."""
    down_bias: torch.Tensor | None
    """Its bias, or None."""
    heads: int
    """Query heads H."""
    kv_heads: int
    """Key/value heads H_kv (H a multiple of it)."""
    head_dim: int
    """D, even (rotary turns its halves)."""
    scale: float
    """Attention's score scaling."""

    def __post_init__(self):
        _require_contiguous(
            **{
                name: getattr(self, name)
                for name in self.__dataclass_fields__
                if isinstance(getattr(self, name), torch.Tensor)
            }
        )

    def scratch_floats(self, batch: int) -> int:
        """The scratch `decode_layer` needs for `batch` rows (cpu_kernels.c)."""
        hidden, inner = self.o_weight.shape[0], self.down_weight.shape[1]
        return batch * (2 * hidden + (3 * self.heads + 2 * self.kv_heads) * self.head_dim + 3 * inner)


def decode_layer(
    hidden_B_E: torch.Tensor,
    weights: DecodeLayerWeights,
    cos_B_D: torch.Tensor,
    sin_B_D: torch.Tensor,
    keys_B_G_S_D: torch.Tensor,
    values_B_G_S_D: torch.Tensor,
    key_valid_B_S: torch.Tensor,
    slot: int,
    scratch: torch.Tensor,
) -> None:
    """Run the layer for one new token per row, in place on `hidden_B_E`, writing the token's rotated key and its
    value into `slot` of the caches (`key_valid_B_S` already marks it); `scratch` holds `weights.scratch_floats(B)`."""
    _require_contiguous(
        hidden_B_E=hidden_B_E,
        cos_B_D=cos_B_D,
        sin_B_D=sin_B_D,
        keys_B_G_S_D=keys_B_G_S_D,
        values_B_G_S_D=values_B_G_S_D,
        key_valid_B_S=key_valid_B_S,
    )
    batch, width = hidden_B_E.shape
    if scratch.numel() < weights.scratch_floats(batch):
        raise ValueError(f"scratch holds {scratch.numel()} floats; {batch} rows need {weights.scratch_floats(batch)}")
    w = weights
    _library().decode_layer(
        hidden_B_E.data_ptr(), batch, width, w.input_norm_E.data_ptr(), w.post_norm_E.data_ptr(), w.eps,
        w.qkv_weight.data_ptr(), _pointer(w.qkv_bias), w.o_weight.data_ptr(), _pointer(w.o_bias),
        w.gate_up_weight.data_ptr(), _pointer(w.gate_up_bias), w.down_weight.data_ptr(), _pointer(w.down_bias),
        w.down_weight.shape[1],
        cos_B_D.data_ptr(), sin_B_D.data_ptr(), keys_B_G_S_D.data_ptr(), values_B_G_S_D.data_ptr(),
        key_valid_B_S.data_ptr(),
        w.heads, w.kv_heads, keys_B_G_S_D.shape[2], w.head_dim, slot, w.scale, scratch.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip


def rms_norm_rows(x_M_K: torch.Tensor, weight_K: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`rms_norm` over rows split between threads, and each row's 1 / sqrt(mean(x^2) + eps) for the backward."""
    _require_contiguous(x_M_K=x_M_K, weight_K=weight_K)
    out_M_K, inverse_M = torch.empty_like(x_M_K), x_M_K.new_empty(len(x_M_K))
    _library().rms_norm_rows(
        x_M_K.data_ptr(),
        weight_K.data_ptr(),
        out_M_K.data_ptr(),
        inverse_M.data_ptr(),
        *x_M_K.shape,
        eps,
        torch.get_num_threads(),
    )
    return out_M_K, inverse_M


def rms_norm_backward(
    grad_M_K: torch.Tensor, x_M_K: torch.Tensor, weight_K: torch.Tensor, inverse_M: torch.Tensor
) -> torch.Tensor:
    """The gradient of `rms_norm_rows` for x (the weight frozen), from the forward's input and inverses."""
    _require_contiguous(grad_M_K=grad_M_K, x_M_K=x_M_K, weight_K=weight_K, inverse_M=inverse_M)
    grad_x_M_K = torch.empty_like(x_M_K)
    _library().rms_norm_backward(
        grad_M_K.data_ptr(),
        x_M_K.data_ptr(),
        weight_K.data_ptr(),
        inverse_M.data_ptr(),
        grad_x_M_K.data_ptr(),
        *x_M_K.shape,
        torch.get_num_threads(),
    )
    return grad_x_M_K


def rotary(x: torch.Tensor, cos_B_T_D: torch.Tensor, sin_B_T_D: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Llama's rotary embedding (`rotate_half`'s halves) of x [B, T, H, D] into a new [B, H, T, D] tensor; with
    `inverse`, its backward: a gradient [B, H, T, D] turned back into [B, T, H, D]."""
    _require_contiguous(x=x, cos_B_T_D=cos_B_T_D, sin_B_T_D=sin_B_T_D)
    batch, length = cos_B_T_D.shape[:2]
    heads, head_dim = (x.shape[1], x.shape[3]) if inverse else x.shape[2:]
    out = x.new_empty((batch, length, heads, head_dim) if inverse else (batch, heads, length, head_dim))
    _library().rotary(
        x.data_ptr(),
        out.data_ptr(),
        cos_B_T_D.data_ptr(),
        sin_B_T_D.data_ptr(),
        batch,
        length,
        heads,
        head_dim,
        inverse,
        torch.get_num_threads(),
    )
    return out


def silu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up elementwise (SwiGLU), split between threads."""
    _require_contiguous(gate=gate, up=up)
    out = torch.empty_like(gate)
    _library().silu_product_rows(gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel(), torch.get_num_threads())
    return out


def silu_product_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `silu_product` for gate and up."""
    _require_contiguous(grad=grad, gate=gate, up=up)
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
    _library().silu_product_backward(
        grad.data_ptr(),
        gate.data_ptr(),
        up.data_ptr(),
        grad_gate.data_ptr(),
        grad_up.data_ptr(),
        gate.numel(),
        torch.get_num_threads(),
    )
    return grad_gate, grad_up


def log_sum_exp_rows(logits_M_V: torch.Tensor) -> torch.Tensor:
    """log(sum(exp(row))) of every row, shifted by the row's maximum (torch.logsumexp's value, two reads a row)."""
    _require_contiguous(logits_M_V=logits_M_V)
    out_M = logits_M_V.new_empty(len(logits_M_V))
    _library().log_sum_exp_rows(logits_M_V.data_ptr(), out_M.data_ptr(), *logits_M_V.shape, torch.get_num_threads())
    return out_M


def target_logprob_gradient(
    logits_M_V: torch.Tensor,
    log_normaliser_M: torch.Tensor,
    grad_M: torch.Tensor,
    targets_M: torch.Tensor,
    out_M_V: torch.Tensor,
) -> torch.Tensor:
    """Into `out_M_V`, the gradient of grad * (logits[target] - log_normaliser) for every row's logits: grad times
    (one-hot(target) - softmax), in one pass."""
    _require_contiguous(
        logits_M_V=logits_M_V, log_normaliser_M=log_normaliser_M, grad_M=grad_M, targets_M=targets_M, out_M_V=out_M_V
    )
    if targets_M.dtype != torch.long or out_M_V.shape != logits_M_V.shape:
        raise ValueError(
            f"targets_M must be int64 (got {targets_M.dtype}) and out_M_V shaped as the logits "
            f"{tuple(logits_M_V.shape)} (got {tuple(out_M_V.shape)})"
        )
    _library().target_logprob_gradient(
        logits_M_V.data_ptr(),
        log_normaliser_M.data_ptr(),
        grad_M.data_ptr(),
        targets_M.data_ptr(),
        out_M_V.data_ptr(),
        *logits_M_V.shape,
        torch.get_num_threads(),
    )
    return out_M_V


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def _require_contiguous(**tensors: torch.Tensor | None) -> None:
    """The kernels read these by pointer as dense row-major arrays."""
    for name, tensor in tensors.items():
        if tensor is not None and not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous (shape {tuple(tensor.shape)}, strides {tensor.stride()})")


@functools.cache
def _library() -> ctypes.CDLL | None:
    reason = _unsupported() or _mismatch_reason()
    if reason is None:
        try:
            library = ctypes.CDLL(str(_built()))
        except subprocess.CalledProcessError as error:
            reason = f"{_compiler()} could not build {_SOURCE.name}: {error.stderr.strip()[-400:]}"
        except OSError as error:
            reason = f"could not build or load {_SOURCE.name}: {error}"
        else:
            for name, parameters in KERNEL_PARAMETERS.items():
                kernel = getattr(library, name)
                kernel.argtypes = [_ctype(parameter) for parameter in _split(parameters)]
                kernel.restype = None
            return library
    log.warning(
        "sparring's CPU kernels are off (%s); decode steps run on oneDNN and torch's ops, and the "
        "learner's layers on torch's ops, instead",
        reason,
    )
    return None


def prototype_mismatches(source: str) -> list[str]:
    """Where `KERNEL_PARAMETERS` and the kernels the C `source` exports (its non-static `void` functions) disagree:
    one line per kernel missing on either side or defined with other parameters; empty when they agree."""
    defined = {
        name: _split(parameters)
        for name, parameters in re.findall(r"^void\s+(\w+)\s*\(([^)]*)\)\s*\{", source, flags=re.MULTILINE)
    }
    problems = [
        f"{name} is declared in KERNEL_PARAMETERS but not defined" for name in KERNEL_PARAMETERS if name not in defined
    ]
    problems += [
        f"{name} is defined but not declared in KERNEL_PARAMETERS" for name in defined if name not in KERNEL_PARAMETERS
    ]
    for name, parameters in KERNEL_PARAMETERS.items():
        if name in defined and _split(parameters) != defined[name]:
            problems.append(
                f"{name} takes ({', '.join(defined[name])}), KERNEL_PARAMETERS says ({', '.join(_split(parameters))})"
            )
    return problems


def _mismatch_reason() -> str | None:
    problems = prototype_mismatches(_SOURCE.read_text())
    return f"{_SOURCE.name} and KERNEL_PARAMETERS disagree: {'; '.join(problems)}" if problems else None


def _split(parameters: str) -> list[str]:
    """C parameters, one string each, spaces normalised ("const float *x" and "const float* x" alike)."""
    return [" ".join(part.replace("*", "* ").split()).replace(" *", "*") for part in parameters.split(",")]


def _ctype(parameter: str) -> type:
    """The ctypes type a C parameter is passed as: any pointer as void*, else its scalar type."""
    kind = parameter.rsplit(" ", 1)[0]
    return ctypes.c_void_p if kind.endswith("*") else _SCALARS[kind]


def _unsupported() -> str | None:
    """Why the kernels cannot run here, or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the CPU is {platform.machine()}, not x86-64"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return f"the CPU lacks AVX2 (torch reports {torch.backends.cpu.get_cpu_capability()})"
    if shutil.which(_compiler()) is None:
        return f"no C compiler {_compiler()!r} on PATH"
    return None


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _built() -> Path:
    """The compiled library for this source and these flags, building it when missing (written under a temporary
    name, then renamed, so processes building it at once never load a half-written file)."""
    digest = hashlib.sha256(_SOURCE.read_bytes() + " ".join([_compiler(), *_FLAGS]).encode()).hexdigest()[:16]
    target = sparring_home() / "kernels" / f"cpu_kernels-{digest}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            staged = Path(scratch) / target.name
            subprocess.run(
                [_compiler(), *_FLAGS, str(_SOURCE), "-o", str(staged)], check=True, capture_output=True, text=True
            )
            os.replace(staged, target)
    return target
