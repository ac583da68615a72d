"""The prefix cache (engine/prefix_cache.py): exact, never stale, within its budget, and it skips what it holds.

Two engines on copies of the tiny model, one with the cache and one without, get the same requests; the cached
one must sample the same tokens with the same logprobs (1e-5) while prefilling fewer tokens, counted by the
engine's `prefill_counts`.
"""

import shutil

import pytest
import torch

from sparring import EngineConfig, ServiceClient, types
from sparring.engine.prefix_cache import PrefillCounts, PrefixCache

SYSTEM = (
    "You are a player in a game of werewolf. The rules: every night the wolves choose a victim; every day all vote."
)


@pytest.fixture(scope="module", params=[True, False], ids=["packed", "merged"])
def clients(request, tiny_model_dir, tmp_path_factory):
    """(cached, uncached) training clients whose adapters hold the same non-zero weights; sampling through packed
    weights with the adapter folded in, or with it merged into the base weights."""
    made = []
    for mib in (64, 0):
        path = shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("model") / f"tiny-{mib}")  # an engine each
        config = EngineConfig(prefix_cache_mib=mib, pack_cpu_weights=request.param)
        service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"), engine_config=config)
        client = service.create_lora_training_client(str(path), rank=4, seed=7)
        step(client)
        made.append(client)
    return made


def step(client) -> None:
    prompt = chat(client, "hello")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(prompt[:-1]),
        loss_fn_inputs={"target_tokens": prompt[1:], "weights": [1.0] * (len(prompt) - 1)},
    )
    client.forward_backward([datum], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=5e-2)).result()


def chat(client, *turns: str) -> list[int]:
    messages = [{"role": "system", "content": SYSTEM}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)
    ]
    return client.get_renderer().render(messages)


def sample_all(
    client, requests: list[tuple[list[int], int, types.SamplingParams]]
) -> tuple[list[types.SampleResponse], PrefillCounts]:
    """Submit every request at once (the engine batches them); the responses and what prefilling them cost."""
    engine = client.engine
    before = PrefillCounts() + engine.prefill_counts
    sampler = client.save_weights_and_get_sampling_client(kind="inflight")
    futures = [sampler.sample(types.ModelInput.from_ints(prompt), n, params) for prompt, n, params in requests]
    return [future.result(timeout=60) for future in futures], engine.prefill_counts - before


def assert_same(cached: list[types.SampleResponse], uncached: list[types.SampleResponse]) -> None:
    for with_cache, without in zip(cached, uncached, strict=True):
        for a, b in zip(with_cache.sequences, without.sequences, strict=True):
            assert a.tokens == b.tokens and a.allowed_tokens == b.allowed_tokens
            torch.testing.assert_close(a.logprobs, b.logprobs, rtol=0, atol=1e-5)


def both(clients, requests) -> PrefillCounts:
    """Sample on both engines, check they agree; what prefilling cost the cached one."""
    return both_responses(clients, requests)[1]


def both_responses(clients, requests) -> tuple[list[types.SampleResponse], PrefillCounts]:
    (cached, counts), (uncached, _) = (sample_all(client, requests) for client in clients)
    assert_same(cached, uncached)
    return cached, counts


def test_cached_prefixes_give_the_same_tokens_and_logprobs_and_skip_their_prefill(clients):
    cached_client, _ = clients
    params = types.SamplingParams(max_tokens=12, seed=3, temperature=1.0, stop=[])
    first = chat(cached_client, "who is the werewolf?")
    fresh = both(clients, [(first, 2, params)])
    assert fresh.prefilled_tokens == len(first) and fresh.cached_tokens == 0
    again = both(clients, [(first, 2, params)])
    assert again.prefilled_tokens == 1 and again.cached_tokens == len(first) - 1  # the last token runs for its logits
    # A batch of several prompts sharing the system prompt (and one new one), several samples each, with choices.
    choose = types.SamplingParams(
        seed=5, temperature=1.5, constraint=types.OutputConstraint(choices=["Player1", "Player2", "nobody"])
    )
    batch = [
        (first, 3, params),
        (chat(cached_client, "who is the seer?"), 2, choose),
        (chat(cached_client, "vote now"), 1, params),
    ]
    shared = [
        next(i for i, (a, b) in enumerate(zip(first, prompt, strict=False)) if a != b) for prompt, _, _ in batch[1:]
    ]
    counts = both(clients, batch)
    assert counts.cached_tokens == len(first) - 1 + sum(shared)  # the others find what they share with `first`
    assert counts.prefilled_tokens == counts.prompt_tokens - counts.cached_tokens


def test_a_prompt_that_several_requests_of_a_batch_share_is_prefilled_once_and_samples_as_alone(clients):
    _, uncached_client = clients
    prompt = chat(uncached_client, "what number am I thinking of?")
    seeded = [types.SamplingParams(max_tokens=8, seed=seed, temperature=1.0, stop=[]) for seed in range(4)]
    together, counts = sample_all(
        uncached_client, [(prompt, 1, params) for params in seeded]
    )  # a GRPO group's episodes
    assert (counts.requests, counts.prompt_tokens, counts.prefilled_tokens) == (4, 4 * len(prompt), len(prompt))
    alone = [sample_all(uncached_client, [(prompt, 1, params)])[0][0] for params in seeded]
    assert_same(together, alone)


def test_a_conversation_prefills_only_its_new_tokens(clients):
    cached_client, _ = clients
    params = types.SamplingParams(max_tokens=10, seed=11, temperature=1.0, stop=[])
    opening = chat(cached_client, "night falls. who do you accuse?")
    (reply,), _ = both_responses(clients, [(opening, 1, params)])
    follow_up = (
        opening
        + reply.sequences[0].tokens
        + cached_client.get_renderer().render([{"role": "user", "content": "why?"}])[-8:]
    )
    counts = both(clients, [(follow_up, 1, params)])
    assert counts.prefilled_tokens == len(follow_up) - len(opening) - len(reply.sequences[0].tokens) + 1


def test_nothing_computed_under_other_weights_is_read(clients, tmp_path):
    cached_client, uncached_client = clients
    params = types.SamplingParams(max_tokens=8, seed=2, stop=[])
    prompt = chat(cached_client, "is it day yet?")
    both(clients, [(prompt, 1, params)])
    assert both(clients, [(prompt, 1, params)]).prefilled_tokens == 1
    for client in clients:  # an optimizer step changes the adapter: its cached prefixes are gone
        step(client)
    assert both(clients, [(prompt, 1, params)]).prefilled_tokens == len(prompt)
    other = ServiceClient(base_dir=tmp_path).create_lora_training_client(cached_client.base_model, rank=4, seed=1)
    assert sample_all(other, [(prompt, 1, params)])[1].prefilled_tokens == len(prompt)  # another adapter on the engine
    base = ServiceClient(base_dir=tmp_path).create_sampling_client(base_model=cached_client.base_model)
    before = PrefillCounts() + cached_client.engine.prefill_counts
    base.sample(types.ModelInput.from_ints(prompt), 1, params).result()
    assert (cached_client.engine.prefill_counts - before).prefilled_tokens == len(prompt)  # the base model
    # Loading weights writes the LoRA tensors in place: the store built before is emptied.
    saved = uncached_client.save_weights_for_sampler("weights").result().path
    cached_client.load_weights(saved).result()
    assert sample_all(cached_client, [(prompt, 1, params)])[1].prefilled_tokens == len(prompt)


def test_eviction_keeps_the_cache_within_its_budget_least_recently_used_first():
    cache = PrefixCache(budget_bytes=3 * 10 * 4 * 4)  # room for 30 tokens of [1 layer, 2, 1 head, N, 2 dims] float32
    store = cache.store("policy", fingerprint=0)

    def kv(tokens):
        values = torch.tensor(tokens, dtype=torch.float32)
        return lambda start: values[start:, None].expand(-1, 2).reshape(1, 1, 1, -1, 2).expand(1, 2, 1, -1, 2).clone()

    old, shared, newer = list(range(10)), list(range(100, 110)), list(range(100, 105)) + list(range(200, 210))
    for tokens in (old, shared, newer):
        store.insert(tokens, kv(tokens))
    assert cache.bytes == 30 * 16 and cache.nodes == 4  # `shared` split at 5 tokens: 10 + 5 + 5 + 10 tokens held
    match = store.match(newer + [1])
    assert match.length == len(newer) and match.kv_L_2_H_N_D()[0, 0, 0, :, 0].tolist() == newer
    store.insert(list(range(300, 315)), kv(list(range(300, 315))))  # 45 tokens: the least recently used go
    assert (
        cache.bytes <= cache.budget_bytes and store.match(old).length == 0 and store.match(newer).length == len(newer)
    )
    assert store.match(shared).length == 5  # its own tail went first; the part it shares with `newer` stays
    assert cache.bytes == sum(node.nbytes for node in cache._recent)
    assert cache.store("policy", fingerprint=1).match(newer).length == 0 and cache.bytes == 0


def test_the_engine_stays_within_a_small_budget(tiny_model_dir, tmp_path):
    path = shutil.copytree(tiny_model_dir, tmp_path / "small-budget")
    service = ServiceClient(base_dir=tmp_path / "ckpt", engine_config=EngineConfig(prefix_cache_mib=0.05))
    sampler = service.create_sampling_client(base_model=str(path))
    for question in ("first", "second question", "a third and longer question", "fourth"):
        prompt = sampler.get_renderer().render([{"role": "user", "content": question * 3}])
        sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=16, seed=1)).result()
        assert 0 < sampler.engine.prefix_cache.bytes <= 0.05 * 2**20


def test_a_second_run_in_the_same_process_gets_the_budget_it_configured(tiny_model_dir, tmp_path, caplog):
    path = str(shutil.copytree(tiny_model_dir, tmp_path / "two-runs"))
    for mib in (0.05, 0.0, 2.0):  # one process-wide engine: each client is built as one run of `tune` builds its own
        service = ServiceClient(base_dir=tmp_path / f"ckpt-{mib}", engine_config=EngineConfig(prefix_cache_mib=mib))
        sampler = service.create_sampling_client(base_model=path)
        prompt = sampler.get_renderer().render([{"role": "user", "content": "hello there"}])
        sampler.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=4, seed=1)).result()
        assert sampler.engine.config.prefix_cache_mib == mib
        assert (sampler.engine.prefix_cache is None) == (mib == 0) and (
            mib == 0 or sampler.engine.prefix_cache.budget_bytes == int(mib * 2**20)
        )
    other = ServiceClient(
        base_dir=tmp_path / "ckpt-other", engine_config=EngineConfig(prefix_cache_mib=2.0, max_batch_rows=3)
    )
    assert (
        other.create_sampling_client(base_model=path).engine.config.max_batch_rows != 3
    )  # one engine: not applied ...
    assert "max_batch_rows" in caplog.text  # ... and said so
