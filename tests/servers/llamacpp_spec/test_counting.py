"""Prompt lookup's drafted and accepted tokens, counted from `Llama.generate`'s calls (no llama-cpp-python needed)."""

from __future__ import annotations

from framework.execution.prometheus import parse
from framework.servers.llamacpp_spec.counting import PREFIX, Counters, Request


def test_accepted_is_the_common_prefix_of_each_proposal_and_what_was_emitted():
    # prompt of 5 tokens; emitted 9 at position 5, then the proposal at L=6 is [1, 2, 3]: 1, 2 kept, 7 sampled
    # at the mismatch; the proposal at L=9 is [4, 4] and the request stops after one more token (4): 1 kept
    r = Request(prompt=5, calls=[(6, [1, 2, 3]), (9, [4, 4])], tokens=[9, 1, 2, 7, 4])
    assert r.accepted() == 3


def test_a_bonus_token_after_a_fully_accepted_proposal_is_not_counted_as_drafted():
    r = Request(prompt=2, calls=[(3, [5, 6]), (6, [])], tokens=[1, 5, 6, 8])
    assert r.accepted() == 2


def test_the_counters_sum_requests_and_read_as_prometheus():
    c = Counters()
    for _ in range(2):
        c.start(5)
        c.evaluated()
        for t in (9,):
            c.emitted(t)
        c.proposal(6, [1, 2, 3])
        c.evaluated()
        for t in (1, 2, 7):
            c.emitted(t)
        c.end()
    got = parse(c.prometheus(), PREFIX)
    assert got == {f"{PREFIX}requests_total": 2, f"{PREFIX}generated_tokens_total": 8, f"{PREFIX}target_evals_total": 4,
                   f"{PREFIX}draft_calls_total": 2, f"{PREFIX}drafted_tokens_total": 6,
                   f"{PREFIX}accepted_tokens_total": 4}


def test_outside_a_request_nothing_is_counted():
    c = Counters()
    c.proposal(3, [1])
    c.emitted(1)
    c.end()
    assert parse(c.prometheus(), PREFIX)[f"{PREFIX}requests_total"] == 0
