"""Token-level constraints for the sampler: which tokens may come next, row by row.

An `OutputConstraint` (choices, regex or JSON schema) is compiled once per
request into a `CompiledConstraint`; every sampled row starts its own
`RowConstraint`, which says which tokens may come next (`allowed`, in the
encoding of `allowed_tokens`), follows the sampled token (`advance`) and
says when the completion is complete with nothing allowed after it
(`finished`). A completion ends with one of the request's stop tokens once
the constraint accepts it, so the reply is a whole, closed turn.

- `ChoiceTrie`: a trie of the choices' token ids (each choice tokenised as
  the tokenizer writes it alone). Measured fastest on CPU (see
  docs/constrained-actions.md) and exact by construction; a node's allowed list is
  computed once.
- `GrammarConstraint`: regexes and JSON schemas through llguidance's
  `LLMatcher` (per-row state is a copy of one compiled matcher; the mask is
  its bitmask unpacked, its EOS bit standing for the request's stop tokens);
  a `closing` text after the match becomes part of the grammar (a lark
  grammar around `%json` for a schema).

`ConstraintCompiler` builds them for one tokenizer and keeps the last few
compiled, since an agent repeats the same constraint turn after turn.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..types import OutputConstraint
from .allowed_tokens import encode_allowed


class RowConstraint(Protocol):
    """One sampled row's position inside a constraint."""

    finished: bool
    """True once the completion is complete and no token may follow (the row ends without a stop token)."""

    def allowed(self) -> list[int]:
        """The tokens allowed next, encoded (never empty)."""

    def advance(self, token: int) -> None:
        """Follow the sampled token."""


class CompiledConstraint(Protocol):
    """A constraint ready to start rows."""

    longest: int | None
    """Most tokens a valid completion takes, its stop token included; None when unbounded."""

    def start(self) -> RowConstraint: ...


@dataclass
class _TrieNode:
    children: dict[int, _TrieNode] = field(default_factory=dict)
    complete: bool = False
    """A choice ends here."""
    allowed: list[int] = field(default_factory=list)
    """Encoded tokens allowed after this node: its children, and the stop tokens where a choice ends."""


class ChoiceTrie:
    """The token ids of a list of choices as a trie."""

    def __init__(self, choice_tokens: list[list[int]], end_tokens: frozenset[int]):
        self.root = _TrieNode()
        for tokens in choice_tokens:
            node = self.root
            for token in tokens:
                node = node.children.setdefault(token, _TrieNode())
            node.complete = True
        stack = [self.root]
        while stack:
            node = stack.pop()
            node.allowed = sorted(set(node.children) | (end_tokens if node.complete else set()))
            stack.extend(node.children.values())
        self.longest = max(len(tokens) for tokens in choice_tokens) + (1 if end_tokens else 0)

    def start(self) -> _ChoiceRow:
        return _ChoiceRow(self.root)


class _ChoiceRow:
    def __init__(self, node: _TrieNode):
        self.node: _TrieNode | None = node
        self.finished = not node.allowed

    def allowed(self) -> list[int]:
        return self.node.allowed

    def advance(self, token: int) -> None:
        self.node = self.node.children.get(token)  # None after a stop token: the row has ended
        self.finished = self.node is None or not self.node.allowed


class GrammarConstraint:
    """A regex or JSON-schema grammar, compiled by llguidance for one tokenizer."""

    longest = None

    def __init__(self, llg_tokenizer, grammar: str, end_tokens: frozenset[int], vocab_size: int, eos_token: int):
        import llguidance

        try:
            self.matcher = llguidance.LLMatcher(llg_tokenizer, grammar, log_level=0)
        except ValueError as error:
            raise ValueError(f"the constraint does not compile: {error}") from None
        if self.matcher.is_error():
            raise ValueError(f"the constraint does not compile: {self.matcher.get_error()}")
        self.end_tokens = sorted(end_tokens)
        self.vocab_size = vocab_size
        self.eos_token = eos_token

    def start(self) -> _GrammarRow:
        return _GrammarRow(self, self.matcher.deep_copy())


_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""JSON as `json.dumps` writes it: a small model would otherwise spend its tokens on whitespace (a schema's own
`x-guidance` options override this)."""


class _GrammarRow:
    def __init__(self, grammar: GrammarConstraint, matcher):
        self.grammar = grammar
        self.matcher = matcher
        self._next_allowed()

    def _next_allowed(self) -> None:
        """Compute the next allowed set now, so `finished` is known before the next step."""
        if self.matcher.is_error():
            raise RuntimeError(f"constrained sampling left its grammar: {self.matcher.get_error()}")
        allowed_V = np.zeros(self.grammar.vocab_size, dtype=bool)
        if self.matcher.is_stopped():  # complete, and nothing may follow but the end of the turn
            may_end = True
        else:
            bits_V = np.unpackbits(
                np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little"
            ).view(bool)
            width = min(len(bits_V), self.grammar.vocab_size)
            allowed_V[:width] = bits_V[:width]
            may_end = bool(allowed_V[self.grammar.eos_token])
            allowed_V[self.grammar.eos_token] = False
        if may_end and self.grammar.end_tokens:
            allowed_V[self.grammar.end_tokens] = True
        self.finished = not allowed_V.any()
        self._allowed = [] if self.finished else encode_allowed(allowed_V)

    def allowed(self) -> list[int]:
        return self._allowed

    def advance(self, token: int) -> None:
        if token in self.grammar.end_tokens:
            self.finished, self._allowed = True, []
            return
        if not self.matcher.consume_token(token):
            raise RuntimeError(
                f"constrained sampling drew token {token}, which its grammar does not allow: {self.matcher.get_error()}"
            )
        self._next_allowed()


class ConstraintCompiler:
    """Compiles constraints for one tokenizer and vocabulary size."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.compile = functools.lru_cache(maxsize=64)(self._compile)

    @functools.cached_property
    def _llg_tokenizer(self):
        import llguidance.hf

        return llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size)

    def _compile(self, constraint_json: str, end_tokens: frozenset[int]) -> CompiledConstraint:
        """`constraint_json`: an `OutputConstraint` as JSON (hashable, so compiled ones are cached)."""
        constraint = OutputConstraint.model_validate_json(constraint_json)
        if constraint.choices is not None:
            choice_tokens = [
                list(self.tokenizer.encode(choice, add_special_tokens=False)) for choice in constraint.choices
            ]
            return ChoiceTrie(choice_tokens, end_tokens)
        import llguidance

        closing = constraint.closing or ""
        if constraint.regex is not None:
            grammar = llguidance.LLMatcher.grammar_from_regex(f"(?:{constraint.regex}){re.escape(closing)}")
        elif closing:
            schema = {
                **constraint.json_schema,
                "x-guidance": {**_JSON_LAYOUT, **constraint.json_schema.get("x-guidance", {})},
            }
            grammar = llguidance.LLMatcher.grammar_from_lark(
                f"start: value {json.dumps(closing)}\nvalue: %json {json.dumps(schema)}"
            )
        else:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(constraint.json_schema), defaults=_JSON_LAYOUT
            )
        return GrammarConstraint(self._llg_tokenizer, grammar, end_tokens, self.vocab_size, self.tokenizer.eos_token_id)
