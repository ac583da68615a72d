"""A compiled float32 kernel for matmuls of a few rows against a plain weight: the sampler's decode steps.

A decode step multiplies 1-64 rows by every weight of the model, so it costs
reading the weights more than multiplying them. oneDNN's packed kernels read
a block of the weight, then multiply it, one after the other (a step at 8
rows costs the read *plus* the arithmetic: benchmarks/README.md, session 61).
`row_matmul` asks for the weight rows a few tiles ahead while it multiplies
the current ones, so the read and the arithmetic overlap: a decode step's
weight matmuls of SmolLM2-135M ran 1.2-1.3x faster than through oneDNN's
packed copies at 1-32 rows on the 2-core AMD machine (session 62), on the
plain row-major weight, so a copy with an adapter folded in is one `addmm`
with no reorder after it.

- `row_matmul(x, weight, bias)`: x @ weight^T + bias, any leading dimensions
  on x. Every output is one dot product summed in a fixed order, so it does
  not depend on how many rows or weights are multiplied together (a fused
  projection gives the bits of its parts; a prompt prefilled in pieces, those
  of one prefill).
- `available()`: whether it runs here. The C source beside this file
  (`row_matmul.c`, AVX2 + FMA, OpenMP on torch's own runtime) is compiled once
  per content with the system's C compiler (`$CC`, else `cc`) into
  `sparring_home()/kernels` (~1 s). Where there is no x86 AVX2 CPU or no
  compiler, or the build fails, the sampler keeps oneDNN's packed copies and
  the reason is logged once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..models.catalogue import sparring_home

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("row_matmul.c")
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC"]


def available() -> bool:
    """Whether `row_matmul` can run on this machine (the kernel is built on the first call)."""
    return _library() is not None


def row_matmul(x: torch.Tensor, weight_O_I: torch.Tensor, bias_O: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight^T + bias for float32 CPU tensors (any leading dimensions on x; the weight contiguous)."""
    x_M_I = x.reshape(-1, x.shape[-1]).contiguous()
    out_M_O = torch.empty(len(x_M_I), weight_O_I.shape[0], dtype=x.dtype)
    _library().row_matmul(
        x_M_I.data_ptr(), weight_O_I.data_ptr(), None if bias_O is None else bias_O.data_ptr(), out_M_O.data_ptr(),
        len(x_M_I), weight_O_I.shape[0], weight_O_I.shape[1], torch.get_num_threads(),
    )
    return out_M_O.view(*x.shape[:-1], -1)


@functools.cache
def _library() -> ctypes.CDLL | None:
    reason = _unsupported()
    if reason is None:
        try:
            library = ctypes.CDLL(str(_built()))
        except subprocess.CalledProcessError as error:
            reason = f"{_compiler()} could not build {_SOURCE.name}: {error.stderr.strip()[-400:]}"
        except OSError as error:
            reason = f"could not build or load {_SOURCE.name}: {error}"
        else:
            library.row_matmul.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 3 + [ctypes.c_int]
            library.row_matmul.restype = None
            return library
    log.warning("the sampler's row kernel is off (%s); decode steps multiply through oneDNN instead", reason)
    return None


def _unsupported() -> str | None:
    """Why the kernel cannot run here, or None."""
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
    target = sparring_home() / "kernels" / f"row_matmul-{digest}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            staged = Path(scratch) / target.name
            subprocess.run([_compiler(), *_FLAGS, str(_SOURCE), "-o", str(staged)], check=True, capture_output=True, text=True)
            os.replace(staged, target)
    return target
