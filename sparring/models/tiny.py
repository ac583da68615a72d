"""A tiny random chat model, built in-process in about a second, for fast tests.

Unit tests of sampling, training and rollouts need a real tokenizer and a real
``transformers`` causal LM, but not a good one.  ``build_tiny_model`` trains a
byte-level BPE tokenizer on a small built-in corpus, gives it SmolLM2's special
tokens and chat template (so the ChatML renderer applies), initialises a
two-layer Llama with a fixed seed and saves both as an ordinary Hugging Face
model directory that ``load_base_model`` loads like any other.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

logger = logging.getLogger(__name__)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TRAINING_CORPUS = """\
You are a helpful AI assistant named SmolLM, trained by Hugging Face.
The quick brown fox jumps over the lazy dog. A journey of 1000 miles begins with a single step.
Hello! How are you today? I am fine, thank you. What would you like to do next?
Let's play a game: guess the number between 1 and 100. Is it 42? No, it's higher. Is it 73? Yes!
The werewolf hides among the villagers; at night it chooses a victim, and by day everyone votes.
Tic-tac-toe is played on a 3x3 grid. Player X moves first, then player O. Three in a row wins.
In the debate, the first speaker argues for the motion and the second speaker argues against it.
Twenty questions: is it an animal? Is it bigger than a bread box? Does it live in the water?
Please call the tool with the right arguments: {"name": "get_weather", "arguments": {"city": "Paris"}}.
The weather in Paris is 18 degrees and sunny; in London it is 12 degrees with light rain.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 2024 3.14159 -7 +5 50% $20 #1 (a) [b] <c> x=y*2.
Reinforcement learning trains a policy to maximise reward. The agent observes, acts and learns.
Good morning, good evening, goodbye. Thanks for your help! Could you explain that again, please?
The sun rises in the east and sets in the west. Water boils at 100 degrees Celsius at sea level.
She said: "I think the answer is seven." He replied, 'That seems wrong; let me check the maths.'
Math: 2 + 2 = 4, 3 * 7 = 21, 10 / 4 = 2.5, and 9 - 12 = -3. Prime numbers: 2, 3, 5, 7, 11, 13.
My favourite colours are red, green and blue. The cat sat on the mat while the dog slept outside.
Question: what is the capital of France? Answer: the capital of France is Paris.
The user asks a question, the assistant answers it, and the tool returns a result as JSON.
Write a short poem about the sea: waves roll in, gulls cry, and the tide goes out again at dusk.
Step 1: read the task. Step 2: think about it. Step 3: answer clearly and briefly. Done!
"""


def _train_tokenizer(vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[ENDOFTEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(TRAINING_CORPUS.splitlines(keepends=True), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        unk_token=None,
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    path: Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    max_position_embeddings: int = 1024,
) -> Path:
    """Build and save a tiny random Llama chat model (+ tokenizer) at ``path``; deterministic per seed."""
    started = time.perf_counter()
    path = Path(path)
    tokenizer = _train_tokenizer(vocab_size, max_position_embeddings)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=1.6 / hidden_size**0.5,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        # Default-sized weights (std 0.02) give a near-uniform next-token
        # distribution, and large tied embeddings alone make the model repeat
        # its input token.  Large layer weights (initializer_range above) plus
        # these embeddings give ~3 nats of entropy and no echoing.
        with torch.no_grad():
            model.get_input_embeddings().weight.normal_(0.0, 3.0 / hidden_size**0.5)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    logger.info("built tiny model (seed %d) at %s in %.2f s", seed, path, time.perf_counter() - started)
    return path
