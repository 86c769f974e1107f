"""The draft-length policy maximises expected emitted tokens per second of step time (checked by brute force)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.speculative.cost_model import StepCost, convex, isotonic, nnls
from recipe.engine.speculative.length_policy import choose_lengths, survivals


def rate(conf: list[list[float]], lengths: tuple[int, ...] | list[int], cost: StepCost, base: int) -> float:
    expected = len(conf) + sum(sum(survivals(c)[:k]) for c, k in zip(conf, lengths, strict=True))
    return expected / cost.predict(len(conf), base + sum(lengths))


confidences = st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=4), min_size=1, max_size=3)
costs = st.builds(StepCost, st.floats(0.001, 0.1), st.floats(0.0, 0.01), st.floats(0.0, 0.05))


@settings(max_examples=200, deadline=None)
@given(conf=confidences, cost=costs)
def test_chosen_lengths_are_optimal_among_all_prefix_choices(conf: list[list[float]], cost: StepCost) -> None:
    base = len(conf)
    got = choose_lengths(conf, lambda t: cost.predict(len(conf), t), base)
    assert all(0 <= k <= len(c) for k, c in zip(got, conf, strict=True))
    best = max(rate(conf, ks, cost, base) for ks in itertools.product(*(range(len(c) + 1) for c in conf)))
    assert rate(conf, got, cost, base) >= best * (1 - 1e-9)


def test_a_costly_step_speculates_less_and_some_sequences_take_zero() -> None:
    conf = [[0.95, 0.9, 0.9, 0.9], [0.3, 0.2, 0.2, 0.1], [0.9, 0.5, 0.2, 0.1]]
    flat = choose_lengths(conf, lambda t: 1.0, 3)
    assert flat == [4, 4, 4]  # free tokens: verify everything
    steep = choose_lengths(conf, lambda t: 0.01 + 0.01 * t, 3)
    assert steep[0] > 0 and steep[1] == 0  # the unlikely draft is not worth its tokens
    assert choose_lengths(conf, lambda t: 0.01 + 0.01 * t, 3, max_extra_tokens=1) == [1, 0, 0]


def test_cost_model_fits_saves_and_corrects(tmp_path) -> None:  # type: ignore[no-untyped-def]
    samples = [(b, t, 0.02 + 0.001 * b + 0.004 * t) for b in (1, 4, 8) for t in (b * 2, b * 5)]
    cost = StepCost.fit(samples)
    assert abs(cost.predict(4, 20) - (0.02 + 0.004 + 0.08)) < 1e-9
    cost.save(tmp_path / "cost.json")
    assert StepCost.load(tmp_path / "cost.json").predict(4, 20) == cost.predict(4, 20)
    for _ in range(200):
        cost.observe(4, 20, 2 * (0.02 + 0.004 + 0.08))  # the machine got twice as slow
    assert 1.9 < cost.correction < 2.01


def test_auto_pauses_a_drafter_whose_first_tokens_miss() -> None:
    """A confident drafter that is always wrong: "auto" verifies its drafts until the first-token hit rate
    falls below break-even, then drafts only on probe steps (every PROBE_EVERY-th); output unchanged."""
    from recipe.engine import SamplingParams
    from recipe.engine.speculative import Draft
    from recipe.engine.speculative.speculator import PROBE_EVERY
    from spec_helpers import make_llm, use_drafter
    from tiny_paged_model import VOCAB, TinyPagedLM

    model = TinyPagedLM(seed=3)

    class WrongDrafter:
        calls = 0

        def propose(self, seqs, max_lens):  # type: ignore[no-untyped-def]
            self.calls += 1
            return [Draft([(int(model.full_logits(list(s.token_ids))[-1].argmax()) + 1) % VOCAB] * n, [0.95] * n)
                    for s, n in zip(seqs, max_lens, strict=True)]

        def after_step(self, step, result):  # type: ignore[no-untyped-def]
            pass

        def observe(self, draft, num_accepted):  # type: ignore[no-untyped-def]
            pass

    params = SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True)
    prompt = [[5, 9, 13, 2, 7]]
    expected = make_llm(model).generate(prompt, params)
    llm = make_llm(model, speculative="ngram", num_speculative_tokens="auto")
    drafter = WrongDrafter()
    use_drafter(llm, drafter)
    llm.engine.speculator.cost = StepCost(0.01, 0.0, 0.002)  # a draft token costs 0.2 of a step: break-even 0.2
    got = llm.generate(prompt, params)
    assert got[0].new_token_ids == expected[0].new_token_ids
    spec = llm.engine.speculator
    assert spec.first_hit_rate < 0.1
    assert spec.metrics.draft_tokens > 0 and spec.metrics.accepted_tokens == 0
    # paused after 7 misses (1/9 < 0.12: the pause margin 0.6 of break-even 0.2)
    assert drafter.calls <= 8 + llm.engine.steps // PROBE_EVERY


def test_grid_cost_interpolates_the_measured_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Measured points are predicted exactly, between them linearly, past them by the plane's slopes; a
    faster measurement of a longer query is pooled with the shorter one's; the file keeps the points."""
    measured = {(1, 1): 0.040, (1, 2): 0.038, (1, 3): 0.045, (1, 5): 0.060,
                (8, 8): 0.090, (8, 16): 0.092, (8, 24): 0.110, (8, 40): 0.150}
    samples = [(s, t, sec) for (s, t), sec in measured.items()]
    cost = StepCost.fit(samples, grid=True)
    plane = StepCost.fit(samples)
    assert not plane.points and plane.predict(8, 16) == plane.plane(8, 16)
    for (s, t), sec in measured.items():
        want = 0.039 if (s, t) in ((1, 1), (1, 2)) else sec  # 0.038 after 0.040: noise, pooled
        assert abs(cost.predict(s, t) - want) < 1e-12, (s, t)
    assert abs(cost.predict(1, 4) - 0.0525) < 1e-12  # halfway between q=3 and q=5
    assert abs(cost.predict(8, 32) - 0.130) < 1e-12
    assert abs(cost.predict(4, 8) - (0.039 + (0.092 - 0.039) * 3 / 7)) < 1e-12  # q=2 across batch sizes 1..8
    assert abs(cost.predict(16, 32) - (0.092 + plane.plane(16, 32) - plane.plane(8, 16))) < 1e-12
    assert abs(cost.predict(1, 9) - (0.060 + 4 * plane.per_token)) < 1e-12
    # the plane charges a batch of 8 a draft token per sequence far more than the grid measured
    assert (plane.predict(8, 16) - plane.predict(8, 8)) > 5 * (cost.predict(8, 16) - cost.predict(8, 8))
    cost.save(tmp_path / "cost.json")
    loaded = StepCost.load(tmp_path / "cost.json")
    assert loaded.points == cost.points and loaded.predict(4, 13) == cost.predict(4, 13)
    plane.save(tmp_path / "plane.json")
    assert not StepCost.load(tmp_path / "plane.json").points


grid_costs = st.lists(st.floats(0.001, 0.1), min_size=4, max_size=4).map(
    lambda ts: StepCost.fit([(1, 1, ts[0]), (1, 2, ts[1]), (1, 4, ts[2]), (1, 8, ts[3])], grid=True))


@settings(max_examples=100, deadline=None)
@given(conf=st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=3), min_size=1, max_size=1),
       cost=grid_costs)
def test_chosen_lengths_are_optimal_under_a_measured_grid(conf: list[list[float]], cost: StepCost) -> None:
    got = choose_lengths(conf, lambda t: cost.predict(1, t), 1)
    best = max(rate(conf, ks, cost, 1) for ks in itertools.product(*(range(len(c) + 1) for c in conf)))
    assert rate(conf, got, cost, 1) >= best * (1 - 1e-9)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_isotonic_is_the_nearest_non_decreasing_sequence(values: list[float]) -> None:
    import numpy as np

    got = isotonic(values)
    assert len(got) == len(values) and bool(np.all(np.diff(got) >= -1e-12))
    assert abs(got.sum() - sum(values)) < 1e-9  # pooled means keep the total
    if all(b >= a for a, b in itertools.pairwise(values)):
        assert np.allclose(got, values)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.integers(1, 4), min_size=1, max_size=7), values=st.lists(st.floats(0.0, 1.0), min_size=8,
                                                                                   max_size=8))
def test_convex_fit_is_non_decreasing_convex_and_centred(steps: list[int], values: list[float]) -> None:
    import numpy as np

    xs = list(np.cumsum([1, *steps]))
    ys = values[:len(xs)]
    got = convex(xs, ys)
    assert len(got) == len(xs)
    if len(xs) > 1:
        slopes = np.diff(got) / np.diff(xs)
        assert bool(np.all(slopes >= -1e-12)) and bool(np.all(np.diff(slopes) >= -1e-9))
    assert abs(float(np.sum(got - np.asarray(ys)))) < 1e-9  # placed at the least-squares offset
    slopes = np.cumsum(values[:len(steps)])  # non-negative and non-decreasing: a convex, rising profile
    rising = np.concatenate([[values[-1]], values[-1] + np.cumsum(slopes * np.asarray(steps))])
    assert np.allclose(convex(xs, list(rising)), rising)  # a convex non-decreasing profile is kept as measured


def test_convex_grid_pools_a_profiles_noise_into_rising_marginals() -> None:
    """A start-up profile of one sequence (ms) whose third token measured almost free and fourth dear."""
    profile = [27.3, 29.3, 30.6, 34.3, 34.9, 38.2, 41.0]
    samples = [(1, t, ms / 1e3) for t, ms in enumerate(profile, 1)]
    iso, cvx = StepCost.fit(samples, grid=True), StepCost.fit(samples, grid=True, convex=True)
    marginal = [cvx.predict(1, t + 1) - cvx.predict(1, t) for t in range(1, 7)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(marginal))
    assert iso.predict(1, 3) - iso.predict(1, 2) < 0.0014 < cvx.predict(1, 3) - cvx.predict(1, 2)


@pytest.mark.parametrize("fit_cells", [True, False])
def test_cost_cells_learn_the_running_steps_shape_and_the_drift(fit_cells: bool) -> None:
    """The profile says a third token costs 1.3 ms; running steps cost 3.5 ms for it, while the machine slows by
    20%. Cells learn the shape, the correction the drift; the earlier model keeps the profile's shape."""
    samples = [(1, 1, 0.0273), (1, 2, 0.0293), (1, 3, 0.0306), (1, 4, 0.0343), (1, 5, 0.0349)]
    true = {1: 0.030, 2: 0.033, 3: 0.0365, 4: 0.040}
    learned = StepCost.fit(samples, grid=True)
    learned.learn_cells, learned.fit_cells = True, fit_cells
    fixed = StepCost.fit(samples, grid=True)
    for i in range(600):
        drift = 1.0 + 0.2 * i / 600
        t = (2, 3, 2, 1)[i % 4]
        for cost in (learned, fixed):
            cost.observe(1, t, true[t] * drift)
    for t in (1, 2, 3):
        assert learned.predict(1, t) == pytest.approx(true[t] * 1.2, rel=0.03), t
    assert learned.predict(1, 3) - learned.predict(1, 2) == pytest.approx(0.0035 * 1.2, rel=0.15)
    assert fixed.predict(1, 3) - fixed.predict(1, 2) < 0.0020  # the profile's 1.3 ms, scaled
    assert learned.factor(2, 4) == 1.0  # a batch size not yet measured keeps the profile
    if not fit_cells:  # an unmeasured step takes its nearest measured neighbour's factor: (1, 4) as (1, 3)
        assert learned.factor(1, 4) == learned.factor(1, 3)
    else:  # fitted with the profile's points as the prior of its shape: rising, and (1, 4) above (1, 3)
        assert all(learned.predict(1, t + 1) > learned.predict(1, t) for t in range(1, 9))


@settings(max_examples=300, deadline=None)
@given(a=st.lists(st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4), min_size=1, max_size=8),
       b=st.lists(st.floats(-1.0, 1.0), min_size=8, max_size=8))
def test_nnls_meets_the_optimality_conditions(a: list[list[float]], b: list[float]) -> None:
    """x >= 0; the gradient of -|ax - b|^2/2 is <= 0 where x = 0 and 0 where x > 0 (Karush-Kuhn-Tucker)."""
    import numpy as np

    am, bv = np.array(a), np.array(b[:len(a)])
    x = nnls(am, bv)
    grad = am.T @ (bv - am @ x)
    assert bool(np.all(x >= 0)) and bool(np.all(grad <= 1e-7))
    assert bool(np.all(np.abs(grad[x > 0]) <= 1e-7))


@settings(max_examples=200, deadline=None)
@given(points=st.lists(st.tuples(st.integers(1, 24), st.floats(0.0, 1.0), st.floats(0.1, 50.0)), min_size=1,
                       max_size=12), other=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2))
def test_weighted_convex_fit_is_no_worse_than_a_rising_line_or_the_mean(
        points: list[tuple[int, float, float]], other: list[float]) -> None:
    """Weighted, with repeated xs: convex, non-decreasing, centred, and its weighted squared error at most a
    rising line's (a candidate of the same family) or the weighted mean's."""
    import numpy as np

    points.sort()
    xs, ys, ws = ([p[i] for p in points] for i in range(3))
    got = convex(xs, ys, ws)
    w, y, x = np.array(ws), np.array(ys), np.array(xs, dtype=float)
    sse = float(np.sum(w * (got - y) ** 2))
    assert abs(float(np.sum(w * (got - y)))) < 1e-7
    distinct = sorted(set(xs))
    at = np.array([got[xs.index(t)] for t in distinct])
    assert all(abs(got[i] - at[distinct.index(t)]) < 1e-9 for i, t in enumerate(xs))  # one value per x
    if len(distinct) > 1:
        slopes = np.diff(at) / np.diff(distinct)
        assert bool(np.all(slopes >= -1e-9)) and bool(np.all(np.diff(slopes) >= -1e-7))
    line = other[0] + other[1] * x
    line += float(np.average(y - line, weights=w))
    assert sse <= float(np.sum(w * (line - y) ** 2)) + 1e-9
    assert sse <= float(np.sum(w * (np.average(y, weights=w) - y) ** 2)) + 1e-9


def test_fitted_cells_price_a_draft_row_at_eight_sequences_more_steadily() -> None:
    """Eight sequences, a ~40 ms step, each draft row 2 ms (a measured run: 1.3-2 ms), steps timed with 8% noise
    and observed at the token counts and frequencies a JSON run at batch 8 gave (a /tmp probe). Over 12 seeds
    the fitted cells price rows 9-14 nearer 2 ms than the cells alone, and never below 0 or out of order."""
    import numpy as np

    profile = [(8, 8, 0.0386), (8, 16, 0.0528), (8, 24, 0.0640), (8, 40, 0.0962), (8, 72, 0.2684)]
    freq = {8: 45, 9: 29, 10: 3, 12: 4, 13: 26, 15: 5, 16: 3}
    draws = [t for t, n in freq.items() for _ in range(n)]
    errors: dict[bool, list[float]] = {True: [], False: []}
    for seed in range(12):
        rng = np.random.default_rng(seed)
        costs = {}
        for fit in (True, False):
            cost = StepCost.fit(profile, grid=True, convex=True)
            cost.learn_cells, cost.fit_cells = True, fit
            costs[fit] = cost
        for _ in range(4):
            for t in rng.permutation(draws):
                seconds = (0.040 + 0.002 * (t - 8)) * float(np.exp(rng.normal(0.0, 0.08)))
                for cost in costs.values():
                    cost.observe(8, int(t), seconds)
        for fit, cost in costs.items():
            marginal = [(cost.predict(8, t + 1) - cost.predict(8, t)) / cost.correction for t in range(8, 14)]
            errors[fit].append(float(np.mean(np.abs(np.array(marginal) - 0.002))))
            if fit:
                assert min(marginal) >= 0.0 and all(b >= a - 1e-12 for a, b in itertools.pairwise(marginal))
    assert np.mean(errors[True]) < 0.6 * np.mean(errors[False])
