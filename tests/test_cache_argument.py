"""The KV cache is passed and read the way the installed transformers wants: same numbers, no deprecation warning.

transformers 5.24 renamed `past_key_values` to `cache`; both spellings are checked against a run with no cache at
all on the tiny model, and the installed release must not warn (warnings module or its own logger).
"""

import logging
import warnings

import torch
from transformers import DynamicCache

from sparring.engine.decoder import HFCache, HFDecoder
from sparring.models.cache_argument import cache_kwargs, returned_cache


def test_a_cached_continuation_matches_one_pass_without_a_deprecation_warning(tiny_loaded, caplog):
    causal_lm = tiny_loaded.model
    tokens_1_T = torch.tensor([[5, 17, 42, 9, 31, 8]])
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="transformers"):
        warnings.simplefilter("error")
        whole_1_T_V = causal_lm(input_ids=tokens_1_T).logits
        head = causal_lm.model(input_ids=tokens_1_T[:, :4], use_cache=True)
        cache = returned_cache(head)
        tail = causal_lm(input_ids=tokens_1_T[:, 4:], use_cache=True, **cache_kwargs(causal_lm, cache)).logits
    assert isinstance(cache, DynamicCache)
    torch.testing.assert_close(tail, whole_1_T_V[:, 4:], atol=1e-5, rtol=1e-5)
    assert not [record for record in caplog.records if "deprecated" in record.getMessage()]


def test_the_generic_decoder_steps_through_the_models_own_cache(tiny_loaded):
    decoder = HFDecoder(tiny_loaded.model)
    cache: HFCache = decoder.allocate(batch=1, max_len=8)
    tokens_1_T = torch.tensor([[5, 17, 42, 9]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prefill = decoder.forward(tokens_1_T[:, :3], torch.arange(3)[None], torch.ones(1, 3, dtype=torch.bool), cache)
        step = decoder.forward(tokens_1_T[:, 3:], torch.tensor([[3]]), torch.ones(1, 1, dtype=torch.bool), cache)
    whole_1_T_V = tiny_loaded.model(input_ids=tokens_1_T).logits
    torch.testing.assert_close(prefill, whole_1_T_V[:, 2].float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step, whole_1_T_V[:, 3].float(), atol=1e-5, rtol=1e-5)
