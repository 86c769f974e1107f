"""Temperature > 0: speculation leaves the output distribution equal to the target's.

Two proofs: a seeded request gives the very same tokens with speculation on and off (every position keeps
its seed key, so verification draws what plain decoding draws); and a chi-square test over many seeded
samples compares the first two tokens' distributions with the target's exact probabilities.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.engine import SamplingParams
from spec_helpers import OracleDrafter, make_llm, use_drafter
from tiny_paged_model import TinyPagedLM, make_prompts

MODEL = TinyPagedLM(seed=21)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), temperature=st.sampled_from([0.5, 1.0, 1.5]), top_p=st.sampled_from([1.0, 0.9]),
       top_k=st.sampled_from([-1, 20]), penalty=st.sampled_from([0.0, 0.5]), n=st.sampled_from([1, 3]),
       corrupt=st.sampled_from([0.0, 0.5]), k=st.sampled_from([2, "auto"]))
def test_seeded_sampling_gives_the_same_tokens_with_speculation_on_and_off(
        seed: int, temperature: float, top_p: float, top_k: int, penalty: float, n: int, corrupt: float,
        k: int | str) -> None:
    prompts = make_prompts(3, 3, 20, seed=seed)
    params = [SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, presence_penalty=penalty,
                             repetition_penalty=1.0 + penalty, max_tokens=16, n=n, seed=seed + i, logprobs=1)
              for i in range(len(prompts))]
    off = make_llm(MODEL, max_num_batched_tokens=12)
    expected = off.generate(prompts, params)
    on = make_llm(MODEL, max_num_batched_tokens=12, speculative="ngram", num_speculative_tokens=k)
    drafter = OracleDrafter(MODEL, corrupt=corrupt, seed=seed)
    use_drafter(on, drafter)
    got = on.generate(prompts, params)
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in expected]
    for a, b in zip(expected, got, strict=True):
        assert [lp[0] for lp in b.new_logprobs] == [  # type: ignore[union-attr,index]
            pytest.approx(lp[0], abs=1e-9) for lp in a.new_logprobs]  # type: ignore[union-attr,index]
    assert on.engine.stats().speculative.draft_tokens > 0


def chi_square_p_value(observed: list[int], expected_probs: list[float]) -> float:
    """Upper tail of Pearson's statistic (bins with expectation < 5 pooled into one)."""
    total = sum(observed)
    big = [i for i, p in enumerate(expected_probs) if p * total >= 5]
    obs = [observed[i] for i in big] + [total - sum(observed[i] for i in big)]
    exp = [expected_probs[i] * total for i in big] + [total * (1 - sum(expected_probs[i] for i in big))]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    df = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def test_drafted_tokens_follow_the_targets_distribution() -> None:
    """Tokens 2 and 3 of each sample are verified drafts (token 1 comes from the prefill): their marginals
    match the target's, computed exactly by summing over the tokens before them."""
    temperature, samples = 1.3, 1500
    prompt = make_prompts(1, 6, 6, seed=3)[0]

    def probs(ids: list[int]) -> torch.Tensor:
        return torch.softmax(MODEL.full_logits(ids)[-1].double() / temperature, 0)

    with torch.inference_mode():
        p1 = probs(prompt)
        pairs = {t1: p1[t1] * probs([*prompt, t1]) for t1 in range(len(p1))}
        p2 = sum(pairs.values())
        joint = sorted(((float(p[t2]), t1, t2) for t1, p in pairs.items() for t2 in range(len(p1))), reverse=True)
        p3, covered = torch.zeros_like(p1), 0.0
        for w, t1, t2 in joint:  # the pairs holding all but 1e-4 of the mass (the rest moves < 0.2 samples)
            if covered > 1 - 1e-4:
                break
            p3 += w * probs([*prompt, t1, t2])
            covered += w
    llm = make_llm(MODEL, speculative="ngram", num_speculative_tokens=2, max_num_seqs=64,
                   max_num_batched_tokens=512, num_kv_blocks=1024)
    drafter = OracleDrafter(MODEL, corrupt=0.0)  # the target's argmax: accepted with probability p(argmax)
    use_drafter(llm, drafter)
    params = [SamplingParams(temperature=temperature, max_tokens=3, seed=s, ignore_eos=True) for s in range(samples)]
    outs = llm.generate([prompt] * samples, params)
    second, third = [0] * len(p1), [0] * len(p1)
    for o in outs:
        second[o.new_token_ids[1]] += 1
        third[o.new_token_ids[2]] += 1
    verdicts = [a for _, a in drafter.observed]
    assert len(verdicts) == samples and 0 in verdicts and 1 in verdicts  # rejections and acceptances
    assert chi_square_p_value(second, p2.tolist()) > 1e-3
    assert chi_square_p_value(third, (p3 / covered).tolist()) > 1e-3
    # the test has power: the drafter's own (point-mass) proposal is far from the target's distribution
    greedy = [0] * len(p1)
    greedy[int(p2.argmax())] = samples
    assert chi_square_p_value(greedy, p2.tolist()) < 1e-6
