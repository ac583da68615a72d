"""The floors the speed benchmarks print beside their measurements: what a decode step, and a GRPO step, cannot go
below on the host they run on."""

from __future__ import annotations

import argparse

import torch
from benchmark_scripts import load_benchmark

from sparring.engine import get_engine
from sparring.engine.packed_weights import packed_frozen, packed_matmul


def test_the_decode_floors_time_every_weight_and_the_grpo_floor_says_whether_3x_trl_is_within_reach(
    tiny_model_dir, tiny_loaded, monkeypatch, capsys
):
    common = load_benchmark("common")
    model = tiny_loaded.model
    assert sum(w.numel() for w in common.matmul_weights(model)) == sum(
        p.numel() for p in model.parameters() if p.dim() == 2
    )
    assert (
        common.weight_read_seconds(model, repeats=2) > 0 and common.decode_matmul_seconds(model, rows=4, repeats=2) > 0
    )

    script = load_benchmark("grpo_vs_trl")
    monkeypatch.setattr(script, "MODEL", str(tiny_model_dir))
    ours = {"completion_tokens": 64.0, "tokens": 104.0}  # 8 completions of 8 tokens, a 5-token prompt in each
    summaries = {trl_step: {"sparring": ours, "trl": {"step": trl_step}} for trl_step in (1e-9, 1e9)}
    script.floors({8: summaries[1e-9]}, argparse.Namespace(max_tokens=8, group_size=8))
    script.floors({8: summaries[1e9]}, argparse.Namespace(max_tokens=8, group_size=8))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("8 completions")]
    assert len(lines) == 6 and all("7 x " in line for line in lines)  # 7 decode steps after the prefill's token
    assert [line.endswith("out of reach") for line in lines] == [True] * 3 + [False] * 3
    config = model.config
    head = config.vocab_size * config.hidden_size
    backbone = sum(p.numel() for p in model.model.layers.parameters() if p.dim() == 2)
    expected_gflop = 4 * (backbone * (5 + 64) + head * 64) / 1e9  # the group's prompt once, every completion token
    at_the_ceiling, as_run = (
        [line for line in lines if "at the ceiling" in line],
        [line for line in lines if "the learner's matmuls alone" in line],
    )
    assert (
        len(at_the_ceiling) == 4
        and expected_gflop > 0.001
        and all(f"training {expected_gflop:.4g} GFLOP" in line for line in at_the_ceiling)
    )
    assert len(as_run) == 2


def test_the_matmul_recorder_counts_each_call_by_layout_and_replays_it_alone():
    common = load_benchmark("common")
    a, b = torch.randn(6, 4), torch.randn(5, 4)
    out, packed_b = torch.zeros(6, 5), packed_frozen(b)
    with common.MatmulRecorder() as recorder:
        for _ in range(3):
            a @ b.t()
        a @ b.t().contiguous()
        out.addmm_(a, b.t(), alpha=0.5)
        packed_matmul(a, packed_b)  # x @ W^T through a packed [out, in] weight
        torch.relu(a)  # not a matmul: not recorded
    layouts = {
        (str(func), tuple(arg.stride for arg in args if isinstance(arg, common.TensorLayout))): count
        for (func, args, _), count in recorder.calls.items()
    }
    assert layouts == {
        ("aten.mm.default", ((4, 1), (1, 4))): 3,
        ("aten.mm.default", ((4, 1), (5, 1))): 1,
        ("aten.addmm_.default", ((5, 1), (4, 1), (1, 4))): 1,
        ("mkldnn._linear_pointwise.default", ((4, 1),)): 1,
    }
    assert recorder.flops() == 6 * 2 * 6 * 4 * 5
    assert recorder.replay_seconds(repeats=2) > 0


def test_the_learner_matmuls_of_a_grpo_batch_are_its_forward_and_backward(tiny_model_dir, tiny_loaded):
    common = load_benchmark("common")
    adapters_before = set(get_engine(str(tiny_model_dir)).bank.adapters)
    seconds, gflop = common.learner_matmul_seconds(
        str(tiny_model_dir), ["What is 2 + 3?"], group_size=4, completion_tokens=6, repeats=1
    )
    assert set(get_engine(str(tiny_model_dir)).bank.adapters) == adapters_before  # its adapter released
    config = tiny_loaded.model.config
    prompt = len(tiny_loaded.renderer.render([{"role": "user", "content": "What is 2 + 3?"}]))
    backbone = sum(p.numel() for p in tiny_loaded.model.model.layers.parameters() if p.dim() == 2)
    # At least the frozen weights' forward and backward over the prompt once and every completion token, and the
    # head over every completion token forward and backward.
    at_least = (4 * backbone * (prompt - 1 + 4 * 6) + 4 * config.vocab_size * config.hidden_size * 4 * 6) / 1e9
    assert seconds > 0 and at_least * 0.95 <= gflop <= at_least * 3
