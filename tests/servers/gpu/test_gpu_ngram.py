"""The n-gram drafter: pure lookup and acceptance, and the server's greedy outputs unchanged by NGRAM (tiny, CPU)."""

from __future__ import annotations

import json

import pytest
import requests
from cli_helpers import stop_group

from framework.servers.gpu import ngram

torch = pytest.importorskip("torch", reason="the GPU server needs torch (pip install -e '.[gpu]')")
pytestmark = pytest.mark.gpu  # the GPU server on the CPU (torch): its own tier, `pytest -m gpu`

from test_gpu_server import start  # noqa: E402

NGRAM = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]


def test_propose_takes_what_followed_the_latest_longest_match():
    #            0  1  2  3  4  5  6  7  8  9
    history = [5, 6, 7, 8, 9, 1, 6, 7, 2, 6, 7]
    # the last 3-gram (2, 6, 7) never occurred before; the 2-gram (6, 7) did, last at index 6: 2, 6, 7 follow
    assert ngram.propose(history, 3) == [2, 6, 7]
    assert ngram.propose(history, 3, max_n=2, min_n=2) == [2, 6, 7]
    assert ngram.propose([1, 2, 3], 4) == []  # nothing repeats
    assert ngram.propose([4, 4], 3) == [4]  # the successor of the only earlier 4
    assert ngram.propose([], 3) == [] and ngram.propose([1, 1, 1], 0) == []


def test_accept_keeps_the_agreeing_prefix_and_the_targets_next_token():
    assert ngram.accept([1, 2, 3], [1, 2, 3, 4]) == [1, 2, 3, 4]
    assert ngram.accept([1, 2, 3], [1, 9, 3, 4]) == [1, 9]
    assert ngram.accept([1, 2, 3], [7, 2, 3, 4]) == [7]
    assert ngram.accept([], [5]) == [5]


def test_ngram_needs_tp1():
    from framework.servers.gpu.args import GpuServerArgs

    with pytest.raises(ValueError, match="NGRAM runs at --tp-size 1"):
        GpuServerArgs(model_path="tiny", tp_size=2, speculative_algorithm="NGRAM")


def _generate(url: str, ids: list[int], n: int) -> tuple[list[int], dict]:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    r = requests.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    return out["output_ids"], out["meta_info"]


def _plain_greedy(ids: list[int], n: int) -> list[int]:
    """Greedy decoding of the server's model (tiny, --random-seed 1, float32) in this process, token by token."""
    from framework.servers.gpu import shapes
    from framework.servers.gpu.model import Llama

    model = Llama(shapes.PRESETS["tiny"], seed=1, context=128)
    cache = model.new_cache(1)
    with torch.inference_mode():
        logits = model(torch.tensor([ids]), torch.arange(len(ids)).unsqueeze(0), cache, last_only=True)
        out = [int(logits[0, -1].argmax())]
        while len(out) < n:
            pos = len(ids) + len(out) - 1
            logits = model(torch.tensor([[out[-1]]]), torch.tensor([[pos]]), cache)
            out.append(int(logits[0, -1].argmax()))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url, _ = start(tmp_path_factory.mktemp("ngram"), *NGRAM)
    yield url
    stop_group(proc, grace=15)


def test_greedy_outputs_are_identical_with_ngram_and_drafts_are_counted(server):
    passage = list(range(100, 124))
    prompts = [passage + [7] + passage[:4], list(range(300, 340)), [9, 8, 7] * 8]  # copy, none, periodic
    accepted = 0
    for ids in prompts:
        out, meta = _generate(server, ids, 40)
        assert out == _plain_greedy(ids, 40), f"NGRAM changed the greedy output for {ids[:6]}..."
        assert 0 <= meta["spec_accept_token_num"] <= meta["spec_draft_token_num"] <= 3 * meta["spec_verify_ct"]
        assert meta["spec_verify_ct"] <= 40 and meta["spec_verify_ct"] + meta["spec_accept_token_num"] >= 40 - 1
        accepted += meta["spec_accept_token_num"]
    # a random tiny model falls into short loops under greedy decoding, which the output's own n-grams predict
    assert accepted > 0
    info = requests.get(server + "/get_server_info", timeout=10).json()
    assert info["internal_states"][0]["spec_accept_token_num"] >= accepted
    assert info["gpu_server"]["speculative_algorithm"] == "NGRAM"
    assert info["gpu_server"]["speculative_acceptance"] == "greedy verification"
    json.dumps(info)
