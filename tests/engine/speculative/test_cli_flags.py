"""`recipe serve --speculative METHOD [--num-speculative-tokens K|auto]` reach the engine config."""

from __future__ import annotations

import pytest
from recipe.engine import EngineConfig
from recipe.server.cli_serve import engine_config_from_args

from recipe.cli import build_parser


def test_flags_map_to_the_engine_config() -> None:
    parser = build_parser()
    assert "speculative" not in engine_config_from_args(parser.parse_args(["serve"]))
    assert EngineConfig.from_kwargs("smollm2").spec.speculative is None  # off by default
    for argv, k in ((["--num-speculative-tokens", "3"], 3), (["--num-speculative-tokens", "auto"], "auto"), ([], "auto")):
        kwargs = engine_config_from_args(parser.parse_args(["serve", "--speculative", "ngram", *argv]))
        config = EngineConfig.from_kwargs("smollm2", **kwargs)
        assert (config.spec.speculative, config.spec.num_speculative_tokens) == ("ngram", k)
    assert (EngineConfig.from_kwargs("smollm2").spec.speculative_cost_fit,
            EngineConfig.from_kwargs("smollm2").spec.speculative_draft_vocab) == ("convex", "reduced")
    assert EngineConfig.from_kwargs("smollm2").spec.speculative_cost_cells  # on by default
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-cost-cells",
                              "--speculative-cost-fit", "grid"])
    config = EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args))
    assert (config.spec.speculative_cost_cells, config.spec.speculative_cost_fit) == (False, "grid")
    assert EngineConfig.from_kwargs("smollm2").spec.speculative_cost_cells_fit  # on by default
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-cost-cells-fit"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).spec.speculative_cost_cells_fit is False
    args = parser.parse_args(["serve", "--speculative", "draft-head", "--speculative-cost-fit", "plane",
                              "--speculative-draft-vocab", "full"])
    config = EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args))
    assert (config.spec.speculative_cost_fit, config.spec.speculative_draft_vocab) == ("plane", "full")
    assert config.spec.speculative_draft_head_weights == "q8_0"  # the default
    args = parser.parse_args(["serve", "--speculative", "draft-head", "--speculative-draft-head-weights", "fp32"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).spec.speculative_draft_head_weights == "fp32"
    assert config.spec.speculative_async  # on by default
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-async"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).spec.speculative_async is False
    default = EngineConfig.from_kwargs("smollm2")
    assert (default.spec.speculative_unverified_verdicts, default.spec.speculative_hit_window,
            default.spec.speculative_pause_margin) == (True, 24, 0.6)
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-unverified-verdicts",
                              "--speculative-hit-window", "5", "--speculative-pause-margin", "1",
                              "--speculative-offline-weight", "1e9"])
    config = EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args))
    assert (default.spec.speculative_offline_weight, config.spec.speculative_offline_weight) == (20.0, 1e9)
    assert default.spec.speculative_price_drafting and config.spec.speculative_price_drafting
    args = parser.parse_args(["serve", "--speculative", "draft-head", "--no-speculative-price-drafting"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).spec.speculative_price_drafting is False
    assert default.spec.speculative_ngram_extend
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-ngram-extend"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).spec.speculative_ngram_extend is False
    assert default.spec.speculative_ngram_match_buckets
    args = parser.parse_args(["serve", "--speculative", "ngram", "--no-speculative-ngram-match-buckets"])
    config_off = EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args))
    assert config_off.spec.speculative_ngram_match_buckets is False
    assert (config.spec.speculative_unverified_verdicts, config.spec.speculative_hit_window,
            config.spec.speculative_pause_margin) == (False, 5, 1.0)


@pytest.mark.parametrize("argv", [["--speculative", "eagle"], ["--num-speculative-tokens", "0"],
                                  ["--num-speculative-tokens", "lots"], ["--speculative-cost-fit", "cubic"],
                                  ["--speculative-draft-vocab", "half"], ["--speculative-hit-window", "0"],
                                  ["--speculative-draft-head-weights", "q4_1"]])
def test_bad_values_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", *argv])
    assert exc.value.code == 2
    assert "speculative" in capsys.readouterr().err


def test_speculation_counters_reach_prometheus() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from recipe.engine.speculative import SpecMetrics
    from recipe.server.backend import BackendStats
    from recipe.server.metrics import ServerMetrics

    spec = SpecMetrics(drafts=4, draft_tokens=10, accepted_tokens=7, zero_length=2, drafter_s=0.5, verify_s=1.5,
                       length_histogram={0: 2, 3: 4})
    text = ServerMetrics("recipe", "demo", lambda: BackendStats(speculative=spec)).render().decode()
    got = {(s.name, s.labels.get("length")): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert got[("recipe:spec_decode_num_drafts_total", None)] == 4
    assert got[("recipe:spec_decode_num_accepted_tokens_total", None)] == 7
    assert got[("recipe:spec_decode_verify_seconds_total", None)] == 1.5
    assert got[("recipe:spec_decode_draft_length_choices_total", "3")] == 4
    plain = ServerMetrics("recipe", "demo", lambda: BackendStats()).render().decode()
    assert "spec_decode" not in plain  # nothing when speculation is off
