"""`recipe serve --speculative METHOD [--num-speculative-tokens K|auto]` reach the engine config."""

from __future__ import annotations

import pytest
from recipe.engine import EngineConfig
from recipe.server.cli_serve import engine_config_from_args

from recipe.cli import build_parser


def test_flags_map_to_the_engine_config() -> None:
    parser = build_parser()
    assert "speculative" not in engine_config_from_args(parser.parse_args(["serve"]))
    assert EngineConfig.from_kwargs("smollm2").speculative is None  # off by default
    for argv, k in ((["--num-speculative-tokens", "3"], 3), (["--num-speculative-tokens", "auto"], "auto"), ([], "auto")):
        kwargs = engine_config_from_args(parser.parse_args(["serve", "--speculative", "ngram", *argv]))
        config = EngineConfig.from_kwargs("smollm2", **kwargs)
        assert (config.speculative, config.num_speculative_tokens) == ("ngram", k)


@pytest.mark.parametrize("argv", [["--speculative", "eagle"], ["--num-speculative-tokens", "0"],
                                  ["--num-speculative-tokens", "lots"]])
def test_bad_values_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", *argv])
    assert exc.value.code == 2
    assert "speculative" in capsys.readouterr().err
