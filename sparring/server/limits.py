"""`ServerLimits`: the bounds `sparring serve` checks before it accepts any work.

A served request costs what its client asks for: decode steps, activation
memory, disk. Every request is checked against these bounds (and against the
model's context length) when it arrives, and one that exceeds any of them is
refused with a 4xx naming the field and the bound, so no client can tie up
the one engine every client shares. `LimitExceeded` is that refusal; each
protocol turns it into its own error shape. The same record holds how long
a stopping server drains (`drain_s`).

A body costs memory and time before any of that can be checked (a JSON
parse, a protobuf decode, a decompression), so each route's body is
bounded by what the route can accept (`body_limit`): a chat or sampling
request by its share of `max_request_tokens` at a generous number of bytes
per token, a training batch likewise with its per-token loss inputs, and
every other route, whose body names a few ids, by `SMALL_BODY_BYTES`; never
beyond `max_body_bytes`. A compressed body is bounded by the same number
once inflated, and by its work: it may inflate to at most
`MAX_INFLATION_RATIO` times its own size (`inflation_limit`), so a small bomb
(2 KB of zstd that inflates to 64 MB of zeros) is refused after inflating a
few hundred KB, not decoded for half a minute.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SMALL_BODY_BYTES = 1 << 20
"""Body bound of the routes that take ids and options only (sessions, futures, checkpoints), and the slack every
other route's bound gets for the fields around its tokens."""
PROMPT_BYTES_PER_TOKEN = 32
"""Bytes of a request body per prompt token, generously: a token is 1-16 characters, up to 6 bytes each once
JSON-escaped, and a token id in a JSON list is at most 8 bytes."""
BATCH_BYTES_PER_TOKEN = 160
"""Bytes of a forward_backward body per token: its id plus the loss inputs of its position (targets, weights,
logprobs, advantages as JSON numbers)."""
PROMPT_ROUTES = ("/v1/chat/completions", "/v1/responses", "/api/v1/asample")
"""Routes whose body is a prompt (and its options)."""
BATCH_ROUTES = ("/api/v1/forward_backward", "/api/v1/forward")
"""Routes whose body is a training batch."""
MAX_INFLATION_RATIO = 100
"""Most a compressed body may inflate, as a multiple of its compressed size: a real batch's token ids and loss
inputs compress a few times (tens at most), a bomb thousands of times."""


class LimitExceeded(ValueError):
    """A request over one of the server's bounds; the message names the field and the bound."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class ServerLimits(BaseModel):
    """Per-request bounds of a served app (and its shutdown grace)."""

    model_config = ConfigDict(extra="forbid")

    max_request_tokens: int = Field(default=1_048_576, ge=1)
    """Most tokens one request may make the engine process: prompt + num_samples x max_tokens for sampling, all
    datums' tokens for forward_backward."""
    max_num_samples: int = Field(default=64, ge=1)
    """Most completions one sampling request (or `n` of a chat request) asks for."""
    max_lora_rank: int = Field(default=256, ge=1)
    """Largest LoRA rank a client may create (memory grows linearly with it)."""
    max_body_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    """Largest request body accepted on any route (HTTP 413 beyond it); each route's own bound (`body_limit`) is
    lower."""
    drain_s: float = Field(default=10.0, ge=0.0)
    header_timeout_s: float = Field(default=10.0, gt=0.0)
    """Seconds a client may take to send a request's headers (from connecting, or the last response); then closed."""
    body_timeout_s: float = Field(default=120.0, gt=0.0)
    """Seconds a client may take to send a request's body once its headers are in; then its connection is closed."""
    """On SIGTERM, how long in-flight requests may still finish before they are cancelled and the server exits."""

    def body_limit(self, path: str) -> int:
        """Largest body (and, compressed, largest inflated body) the route at `path` accepts."""
        if path in PROMPT_ROUTES:
            bound = self.max_request_tokens * PROMPT_BYTES_PER_TOKEN + SMALL_BODY_BYTES
        elif path in BATCH_ROUTES:
            bound = self.max_request_tokens * BATCH_BYTES_PER_TOKEN + SMALL_BODY_BYTES
        else:
            bound = SMALL_BODY_BYTES
        return min(bound, self.max_body_bytes)

    def check_tokens(self, field: str, tokens: int, what: str) -> None:
        if tokens > self.max_request_tokens:
            raise LimitExceeded(
                field,
                f"{what} come to {tokens} tokens; this server accepts at most {self.max_request_tokens} "
                "per request (serve --max-request-tokens)",
            )

    def check_num_samples(self, field: str, count: int) -> None:
        if count > self.max_num_samples:
            raise LimitExceeded(
                field, f"{count} is above this server's limit of {self.max_num_samples} samples per request"
            )


def inflation_limit(route_limit: int, compressed_bytes: int) -> int:
    """Most bytes a compressed body of `compressed_bytes` may inflate to on a route bounded by `route_limit`:
    `MAX_INFLATION_RATIO` times its size (a body may always inflate to `SMALL_BODY_BYTES`), never beyond the route's."""
    return min(route_limit, max(SMALL_BODY_BYTES, MAX_INFLATION_RATIO * compressed_bytes))


def check_sampling_room(field: str, prompt_tokens: int, max_tokens: int | None, context: int) -> None:
    """prompt + max_tokens must fit the model's context (max_tokens None: the prompt must leave room for one token)."""
    if max_tokens is not None and max_tokens > context:
        raise LimitExceeded(field, f"{max_tokens} is above the model's context length of {context} tokens")
    if prompt_tokens + (max_tokens or 1) > context:
        raise LimitExceeded(
            field,
            f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens or 1}) exceed the model's "
            f"context length of {context} tokens",
        )
