"""`recipe serve`'s sliding-window session cache flags reach the engine config fields of the same name."""

from __future__ import annotations

import argparse

import pytest
from recipe.engine.config import EngineConfig, group_of
from recipe.server.cli_serve import add_parser
from recipe.server.engine_flags import engine_config_from_args


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def swa_engine_config(args: argparse.Namespace) -> dict[str, object]:
    """The engine keyword arguments of the session cache group (`EngineConfig.session`) the flags set."""
    return {k: v for k, v in engine_config_from_args(args).items() if group_of(k) == "session"}


def test_flags_map_to_engine_config_fields() -> None:
    assert swa_engine_config(parse()) == {}
    off = EngineConfig.from_kwargs(**swa_engine_config(parse()))
    assert off.session.swa_session_bytes is None and off.session.swa_session_ttl == 180.0 and off.session.swa_session_grain == 128
    assert off.session.swa_replay and off.session.swa_replay_margin is None
    args = parse("--swa-session-bytes", "256MiB", "--swa-session-ttl", "90", "--swa-session-grain", "256",
                 "--swa-replay-margin", "12")
    assert swa_engine_config(args) == {"swa_session_bytes": 256 << 20, "swa_session_ttl": 90.0,
                                       "swa_session_grain": 256, "swa_replay_margin": 12}
    assert swa_engine_config(parse("--swa-session-bytes", "1GiB", "--no-swa-replay", "--swa-replay-margin",
                                   "exact")) == {"swa_session_bytes": 1 << 30, "swa_replay": False}
    cfg = EngineConfig.from_kwargs(**swa_engine_config(args))
    assert (cfg.session.swa_session_bytes, cfg.session.swa_session_ttl, cfg.session.swa_replay_margin) == (256 << 20, 90.0, 12)


@pytest.mark.parametrize("bad", [("--swa-session-bytes", "lots"), ("--swa-session-ttl", "0"),
                                 ("--swa-session-grain", "-128"), ("--swa-replay-margin", "some")])
def test_bad_flag_values_are_usage_errors(bad: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*bad)
    assert exc.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_disaggregated_workers_get_the_same_session_cache_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker engine is built from the config the router receives: the swa flags must be in it."""
    import recipe.cluster.router as router_module
    from recipe.server.cli_serve import build_backend

    seen: dict[str, object] = {}

    class CapturingRouter:
        def __init__(self, model: str, disagg: object, **config: object) -> None:
            seen.update(config)

    monkeypatch.setattr(router_module, "DisaggLLM", CapturingRouter)
    monkeypatch.setattr("recipe.server.disagg_front.DisaggBackend", lambda router, name, **_: object())
    build_backend(parse("--both-workers", "2", "--swa-session-bytes", "64MiB", "--swa-session-ttl", "30",
                        "--swa-replay-margin", "exact"))
    assert seen["swa_session_bytes"] == 64 << 20 and seen["swa_session_ttl"] == 30.0
    assert "swa_replay_margin" not in seen  # "exact" is the engine's default (None)
