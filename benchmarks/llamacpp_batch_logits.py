"""Why prompt lookup changes SmolLM2's greedy output on llama.cpp's CPU backend: a batch's logits are not a step's.

`Llama.generate` (llama-cpp-python 0.3.36) accepts a proposed token when the target's own greedy choice at that
position agrees, so speculation is lossless only if the logits a verify batch computes for a position equal the
ones a one-token decode step computes there. This script measures that on the copy prompt of
tests/e2e/test_llamacpp_smollm2.py: it decodes greedily one token per evaluation (as without speculation), then
evaluates the same output tokens in one batch after the prompt (as a verify step does) and prints, per position,
the largest logit difference over the vocabulary and both argmaxes. Needs llama-cpp-python and the model
(`.ci/llamacpp.sh`). Prints JSON.

    python benchmarks/llamacpp_batch_logits.py [--repeat-penalty 1.0]
    python benchmarks/llamacpp_batch_logits.py --eval-cost   # what a verify batch costs against a decode step

`--eval-cost` prints the median time of one evaluation of 1 and of 11 tokens after the prompt (one thread,
without and with `logits_all`, which the server forces on with prompt lookup): on one CPU thread a verify
batch is not free, so accepted tokens per evaluation must beat the batch's cost for prompt lookup to pay.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from framework.assets import smollm2

PROMPT = ("Copy the following sentence exactly: The committee met on Tuesday to review the budget, and it "
          "approved the new library and the bridge repairs.\nCopy:")


def eval_cost(repeats: int = 15) -> dict[str, float]:
    """Median milliseconds of one evaluation of 1 and of 11 tokens after the prompt, without and with logits_all."""
    import time

    from llama_cpp import Llama

    out: dict[str, float] = {}
    for logits_all in (False, True):
        llm = Llama(str(smollm2.locate().path), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False, seed=1,
                    logits_all=logits_all)
        prompt = llm.tokenize(PROMPT.encode())
        for k in (1, 11):
            times = []
            for _ in range(repeats):
                llm.reset()
                llm.eval(prompt)
                t0 = time.perf_counter()
                llm.eval(prompt[:k])
                times.append(time.perf_counter() - t0)
            out[f"logits_all={logits_all}, tokens={k}"] = round(1000 * sorted(times)[len(times) // 2], 2)
    return out


def main() -> None:
    from llama_cpp import Llama

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat-penalty", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--eval-cost", action="store_true")
    args = ap.parse_args()
    if args.eval_cost:
        print(json.dumps({"model_sha256": smollm2.SHA256, "median_eval_ms": eval_cost()}, indent=1))
        return
    llm = Llama(str(smollm2.locate().path), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False, seed=1,
                logits_all=True)
    prompt = llm.tokenize(PROMPT.encode())
    eos = llm.token_eos()
    gen: list[int] = []
    for t in llm.generate(prompt, temp=0.0, repeat_penalty=args.repeat_penalty):
        gen.append(t)
        if len(gen) >= args.max_tokens or t == eos:
            break
    llm.reset()
    llm.eval(prompt)
    step = [np.array(llm.scores[len(prompt) - 1])]
    for t in gen[:-1]:  # one token per evaluation: a plain decode step
        llm.eval([t])
        step.append(np.array(llm.scores[llm.n_tokens - 1]))
    llm.reset()
    llm.eval(prompt)
    llm.eval(gen[:-1])  # the same tokens in one evaluation: a verify batch
    batch = [np.array(llm.scores[len(prompt) - 1 + i]) for i in range(len(gen))]
    rows = []
    for i, (s, b) in enumerate(zip(step, batch, strict=True)):
        rows.append({"position": i, "token": gen[i],
                     "argmax_step": int(np.argmax(s)), "argmax_batch": int(np.argmax(b)),
                     "max_abs_logit_difference": round(float(np.max(np.abs(s - b))), 4),
                     "eos_logit_minus_best_other_step": round(float(s[eos] - np.max(np.delete(s, eos))), 4),
                     "eos_logit_minus_best_other_batch": round(float(b[eos] - np.max(np.delete(b, eos))), 4)})
    print(json.dumps({"model_sha256": smollm2.SHA256, "eos": eos, "generated": gen,
                      "text": llm.detokenize(gen).decode(errors="replace"), "positions": rows}, indent=1))


if __name__ == "__main__":
    main()
