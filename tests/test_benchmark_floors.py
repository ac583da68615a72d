"""The floors the speed benchmarks print beside their measurements: what a decode step, and a GRPO step, cannot go
below on the host they run on."""

from __future__ import annotations

import argparse

from benchmark_scripts import load_benchmark


def test_the_decode_floors_time_every_weight_and_the_grpo_floor_says_whether_3x_trl_is_within_reach(tiny_model_dir, tiny_loaded, monkeypatch, capsys):
    common = load_benchmark("common")
    model = tiny_loaded.model
    assert sum(w.numel() for w in common.matmul_weights(model)) == sum(p.numel() for p in model.parameters() if p.dim() == 2)
    assert common.weight_read_seconds(model, repeats=2) > 0 and common.decode_matmul_seconds(model, rows=4, repeats=2) > 0

    script = load_benchmark("grpo_vs_trl")
    monkeypatch.setattr(script, "MODEL", str(tiny_model_dir))
    ours = {"completion_tokens": 64.0, "tokens": 104.0}  # 8 completions of 8 tokens, a 5-token prompt in each
    summaries = {trl_step: {"sparring": ours, "trl": {"step": trl_step}} for trl_step in (1e-9, 1e9)}
    script.floors({8: summaries[1e-9]}, argparse.Namespace(max_tokens=8, group_size=8))
    script.floors({8: summaries[1e9]}, argparse.Namespace(max_tokens=8, group_size=8))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("8 completions")]
    assert len(lines) == 4 and all("7 x " in line for line in lines)  # 7 decode steps after the prefill's token
    assert [line.endswith("out of reach") for line in lines] == [True, True, False, False]
    config = model.config
    head = config.vocab_size * config.hidden_size
    backbone = sum(p.numel() for p in model.model.layers.parameters() if p.dim() == 2)
    expected_gflop = 4 * (backbone * (5 + 64) + head * 64) / 1e9  # the group's prompt once, every completion token
    assert expected_gflop > 0.001 and all(f"training {expected_gflop:.4g} GFLOP" in line for line in lines)
