"""What a command line means to `recipe serve`'s parser, as JSON: each flag's option strings, dest, default,
type (by what it makes of probe strings), choices, nargs, action, const, metavar and required, so a test can
prove a rewrite of the parser changes none of them (help text and argument groups left out), and what sample command lines make of the engine's and the server's
config.

`python tests/server/parser_fingerprint.py` rewrites tests/server/serve_flags.json from the current parser;
run it only when a flag is meant to change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("serve_flags.json")
# strings each flag's type is applied to: numbers of each sign and kind, units, keywords, pairs, junk
PROBES = ("0", "1", "-1", "3", "12", "2.5", "1e3", " 7 ", "", "auto", "exact", "off", "512MiB", "1GiB", "2GB", "1.5k",
          "lots", "chat=1d", "agent=3d", "chat", "chat=forever", "a=b", "=b", "a=")


# command lines whose engine keyword arguments and server config the fixture records
COMMAND_LINES = (
    "", "--model m.gguf --dtype bfloat16 --threads 2 --max-model-len 512 --weight-format q4_1 --exact",
    "--no-exact --step-threads off --attention-backend native --norm-backend native --linear-backend few-rows "
    "--no-huge-pages --decode-backend layers",
    "--huge-pages --decode-backend fused --attention-backend reference --norm-backend torch",
    "--kv-cache-bytes 1000000 --kv-host-bytes 1GiB --kv-dir /tmp/kv --kv-disk-bytes 2GB --kv-retention agent=1d "
    "--kv-retention batch=12h --kv-retention-api chat=agent --kv-retention-key sk=batch --no-enable-prefix-caching",
    "--enable-prefix-caching --swa-session-bytes 256MiB --swa-session-ttl 90 --swa-session-grain 256 "
    "--swa-replay-margin 12 --no-swa-replay",
    "--swa-session-bytes 1GiB --swa-replay-margin exact",
    "--max-num-seqs 4 --max-num-batched-tokens 256 --no-async-scheduling --expert-parallel-size 4",
    "--async-scheduling --speculative ngram --num-speculative-tokens 3 --speculative-cost-fit plane "
    "--no-speculative-cost-cells --no-speculative-cost-cells-fit --speculative-draft-vocab full "
    "--speculative-draft-head-weights fp32 --no-speculative-async --no-speculative-unverified-verdicts "
    "--speculative-hit-window 8 --speculative-pause-margin 1 --speculative-offline-weight 0 "
    "--no-speculative-price-drafting --no-speculative-ngram-extend --no-speculative-ngram-match-buckets",
    "--speculative draft-head --num-speculative-tokens auto --speculative-cost-cells --speculative-cost-cells-fit "
    "--speculative-async --speculative-unverified-verdicts --speculative-price-drafting --speculative-ngram-extend "
    "--speculative-ngram-match-buckets",
    "--host 0.0.0.0 --port 9 --api-key a --api-key b --allow-unauthenticated --served-model-name x "
    "--responses-db :memory: --max-body-bytes 10 --max-pending 3 --request-timeout 5 --header-timeout 1 "
    "--body-timeout 2 --heap-trim-interval 0 --constraint-memo-mib 0.5 --malloc-arena-max 0 "
    "--stream-stall-timeout 4 --drain-timeout 6 --metrics-prefix vllm --strict-reference "
    "--default-thinking-mode disabled --no-close-tool-objects --no-close-within-limit --max-output-tokens 7",
)


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The engine keyword arguments `recipe serve` builds its engine with from `args`."""
    from recipe.server.engine_flags import engine_config_from_args

    return engine_config_from_args(args)


def meanings(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Each of COMMAND_LINES: the engine keyword arguments and the `ServerConfig` it gives, as JSON values."""
    from recipe.server.cli_serve import config_from_args

    out = {}
    for line in COMMAND_LINES:
        args = parser.parse_args(line.split())
        server = dataclasses.asdict(config_from_args(args))
        out[line] = json.loads(json.dumps({"engine": engine_kwargs(args), "server": {
            k: _default(v) for k, v in server.items()}}))
    return out


def serve_parser() -> argparse.ArgumentParser:
    from recipe.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def _type(kind: Any) -> dict[str, str] | None:
    if kind is None:
        return None
    out = {}
    for probe in PROBES:
        try:
            out[probe] = repr(kind(probe))
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:  # the three argparse turns into usage errors
            out[probe] = f"error: {type(exc).__name__}"
    return out


def _default(value: Any) -> Any:
    from recipe.server.config import default_responses_db

    return "<default_responses_db>" if value == str(default_responses_db()) else value


def fingerprint(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Every flag of `parser` but -h, keyed by its first option string."""
    return {
        a.option_strings[0]: {
            "option_strings": list(a.option_strings), "dest": a.dest, "default": _default(a.default),
            "default_type": type(a.default).__name__, "type": _type(a.type),
            "choices": None if a.choices is None else list(a.choices), "nargs": a.nargs, "action": type(a).__name__,
            "const": a.const, "metavar": a.metavar, "required": a.required,
        }
        for a in parser._actions if not isinstance(a, argparse._HelpAction)
    }


if __name__ == "__main__":
    parser = serve_parser()
    FIXTURE.write_text(json.dumps({"flags": fingerprint(parser), "meanings": meanings(parser)}, indent=1,
                                  sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
