"""`recipe serve`'s engine flags are generated from `EngineConfig`'s fields: one help text per field, one
`--help` group per config group in the issue's order, and every value a flag accepts is one the engine takes."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_fingerprint import serve_parser
from recipe.engine.config import GROUPS, EngineConfig
from recipe.server.engine_flags import TITLES, EngineFlag, engine_config_from_args, engine_flags
from recipe.server.serve_flags import default_text

PARSER = serve_parser()
ACTIONS = {a.dest: a for a in PARSER._actions}
FLAGS = {flag.dest: flag for flag in engine_flags()}


def parse(*argv: str) -> argparse.Namespace:
    return PARSER.parse_args(list(argv))


def test_groups_follow_the_issue_order_and_hold_their_fields_flags() -> None:
    assert list(GROUPS) == ["checkpoint", "kv", "session", "scheduler", "spec", "parallel", "kernels"]
    titles = [g.title for g in PARSER._action_groups]
    assert titles[titles.index("requests") + 1:] == [TITLES[g] for g in GROUPS]
    by_title = {g.title: {a.dest for a in g._group_actions} for g in PARSER._action_groups}
    for flag in engine_flags():
        assert flag.dest in by_title[TITLES[flag.group]], flag.option


def test_each_flag_says_its_field_help_and_the_engine_default() -> None:
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            flag = next((x for x in engine_flags() if x.field == f.name), None)
            if f.metadata.get("flag", "") is None:
                assert flag is None, f.name
                continue
            assert flag is not None and flag.group == group, f.name
            assert ACTIONS[flag.dest].help == f.metadata["help"], f.name  # one source: the field
            shown = default_text(ACTIONS[flag.dest])
            if f.default is not None and not flag.option.startswith("--no-") and f.name != "step_threads":
                expected = ("on" if f.default else "off") if isinstance(f.default, bool) else str(f.default)
                assert shown == expected, f.name
    assert default_text(ACTIONS["step_threads"]) == "auto"  # recipe serve's own default, the one it passes


def _choices(flag: EngineFlag) -> list[tuple[list[str], object]]:
    action = ACTIONS[flag.dest]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [([flag.option], True), (["--no-" + flag.option[2:]], False)]
    if action.nargs == 0:  # a lone --no-x switch
        return [([flag.option], False)]
    return [([flag.option, str(c)], c) for c in action.choices or ()]


CHOICES = [(flag, argv, value) for flag in engine_flags() for argv, value in _choices(flag)]


@pytest.mark.parametrize(("flag", "argv", "value"), CHOICES, ids=[" ".join(c[1]) for c in CHOICES])
def test_every_choice_and_switch_is_a_value_the_engine_takes(flag: EngineFlag, argv: list[str], value: object) -> None:
    kwargs = engine_config_from_args(parse(*argv))
    assert kwargs[flag.field] == value
    config = EngineConfig.from_kwargs("smollm2", **kwargs)
    assert getattr(getattr(config, flag.group), flag.field) == value


# one valid command line per valued flag, with the value the engine then receives
VALUES: list[tuple[str, list[str], object]] = [
    (f.field, argv, value) for f in engine_flags() for argv, value in _choices(f)] + [
    ("dtype", ["--dtype", "bfloat16"], "bfloat16"), ("max_model_len", ["--max-model-len", "64"], 64),
    ("num_threads", ["--threads", "3"], 3), ("kv_cache_bytes", ["--kv-cache-bytes", "4096"], 4096),
    ("kv_host_bytes", ["--kv-host-bytes", "1KiB"], 1024), ("kv_dir", ["--kv-dir", "/tmp/kv"], "/tmp/kv"),
    ("kv_disk_bytes", ["--kv-disk-bytes", "2MB"], 2 * 10**6),
    ("kv_retention", ["--kv-retention", "batch=1h", "--kv-retention", "chat=2d"], ["batch=1h", "chat=2d"]),
    ("swa_session_bytes", ["--swa-session-bytes", "3GiB"], 3 << 30),
    ("swa_session_ttl", ["--swa-session-ttl", "2.5"], 2.5), ("swa_session_grain", ["--swa-session-grain", "32"], 32),
    ("swa_replay_margin", ["--swa-replay-margin", "0"], 0), ("max_num_seqs", ["--max-num-seqs", "5"], 5),
    ("max_num_batched_tokens", ["--max-num-batched-tokens", "99"], 99),
    ("num_speculative_tokens", ["--num-speculative-tokens", "4"], 4),
    ("num_speculative_tokens", ["--num-speculative-tokens", "auto"], "auto"),
    ("speculative_hit_window", ["--speculative-hit-window", "7"], 7),
    ("speculative_pause_margin", ["--speculative-pause-margin", "0.5"], 0.5),
    ("speculative_offline_weight", ["--speculative-offline-weight", "3"], 3.0),
    ("expert_parallel_size", ["--expert-parallel-size", "2"], 2),
]


def test_every_flag_has_a_value_here() -> None:
    assert {field for field, _, _ in VALUES} == {f.field for f in engine_flags()} - {"model"}


@given(st.lists(st.sampled_from(VALUES), unique_by=lambda v: v[0]))
def test_flags_reach_their_fields_alone_whatever_else_is_set(chosen: list[tuple[str, list[str], object]]) -> None:
    """Any set of flags gives exactly their fields, each its own value, beside recipe serve's step-thread
    default: no flag leaks into another field, and an unset one passes nothing."""
    argv = [token for _, tokens, _ in chosen for token in tokens]
    assert engine_config_from_args(parse(*argv)) == {"step_threads": "auto", **{f: v for f, _, v in chosen}}
