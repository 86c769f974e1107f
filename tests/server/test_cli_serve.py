"""`recipe serve` as a process: the startup banner, the exposure rule, and draining on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RECIPE_API_KEYS": ""}
    return subprocess.Popen([sys.executable, "-m", "recipe.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def test_no_key_refuses_a_public_address() -> None:
    p = _serve("--host", "0.0.0.0", "--backend", "echo", "--port", str(_free_port()))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2 and "--allow-unauthenticated" in out


def test_banner_then_sigterm_drains_the_stream_in_flight() -> None:
    port = _free_port()
    p = _serve("--backend", "echo", "--model", "DeepSeek-V4-Pro", "--port", str(port), "--responses-db", ":memory:",
               "--echo-token-delay", "0.05", "--echo-mode", "repeat", "--log-level", "warning")
    try:
        assert p.stdout is not None
        seen = []
        while not (seen and seen[-1].startswith("Recipe is serving")):
            line = p.stdout.readline()
            assert line, f"the server exited before its banner: {seen}"
            seen.append(line)
        assert f"http://127.0.0.1:{port}" in seen[-1] and "DeepSeek-V4-Pro" in seen[-1]
        body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "drain me"}], "max_tokens": 30,
                "stream": True, "thinking": {"type": "disabled"}}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            p.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"  # the request in flight finished normally
        assert any('"finish_reason":"length"' in line for line in rest)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    deadline = time.time() + 1
    while time.time() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.2)
        except httpx.HTTPError:
            break
    else:
        raise AssertionError("the server still answers after shutdown")


def test_engine_flags_set_every_engine_option_with_vllm_names() -> None:
    from recipe.engine import EngineConfig
    from recipe.server.cli_serve import engine_config_from_args

    from recipe.cli import build_parser

    parser = build_parser()
    # unset flags keep the engine defaults, except that a server profiles its threads per step size by default
    assert engine_config_from_args(parser.parse_args(["serve"])) == {"step_threads": "auto"}
    args = parser.parse_args([
        "serve", "--dtype", "bfloat16", "--threads", "2", "--kv-cache-bytes", "1000000", "--max-num-seqs", "4",
        "--max-num-batched-tokens", "256", "--max-model-len", "512", "--no-enable-prefix-caching",
        "--no-async-scheduling"])
    config = EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args))
    assert (config.checkpoint.dtype, config.kernels.num_threads, config.kv.kv_cache_bytes, config.scheduler.max_num_seqs,
            config.scheduler.max_num_batched_tokens, config.checkpoint.max_model_len, config.kv.enable_prefix_caching,
            config.scheduler.async_scheduling) == ("bfloat16", 2, 1_000_000, 4, 256, 512, False, False)
    on = engine_config_from_args(parser.parse_args(["serve", "--enable-prefix-caching", "--async-scheduling"]))
    assert on == {"enable_prefix_caching": True, "async_scheduling": True, "step_threads": "auto"}
    speed = engine_config_from_args(parser.parse_args(["serve", "--weight-format", "q4_1", "--attention-backend", "native",
                                                      "--norm-backend", "native", "--decode-backend", "fused",
                                                      "--linear-backend", "few-rows", "--step-threads", "auto"]))
    config = EngineConfig.from_kwargs("smollm2", **speed)
    assert (config.kernels.weight_format, config.kernels.attention_backend, config.kernels.norm_backend, config.kernels.decode_backend,
            config.kernels.linear_backend, config.kernels.step_threads) == ("q4_1", "native", "native", "fused", "few-rows", "auto")
    off = engine_config_from_args(parser.parse_args(["serve", "--step-threads", "off"]))
    assert off == {"step_threads": "off"} and EngineConfig.from_kwargs("smollm2", **off).kernels.step_threads == "off"
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(parser.parse_args(["serve"]))).kernels.huge_pages
    pages = engine_config_from_args(parser.parse_args(["serve", "--no-huge-pages"]))
    assert pages["huge_pages"] is False and not EngineConfig.from_kwargs("smollm2", **pages).kernels.huge_pages


def test_an_engine_option_out_of_range_is_a_clear_exit() -> None:
    p = _serve("--max-num-seqs", "0", "--port", str(_free_port()))
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 2 and "max_num_seqs must be >= 1" in out


def test_pure_python_stream_flag_serves_from_the_pure_modules() -> None:
    """`--pure-python-stream` is the off switch of the compiled stream modules: the banner says which
    modules serve, and a stream from them arrives whole."""
    from recipe import compiled_stream

    for flags, expected in (((), "compiled" if compiled_stream.build_dir().is_dir() else "pure Python"),
                            (("--pure-python-stream",), "pure Python")):
        port = _free_port()
        p = _serve("--backend", "echo", "--model", "DeepSeek-V4-Pro", "--port", str(port), "--responses-db", ":memory:",
                   "--log-level", "warning", *flags)
        try:
            assert p.stdout is not None
            seen: list[str] = []
            while not (seen and seen[-1].lstrip().startswith("stream processing")):
                line = p.stdout.readline()
                assert line, f"the server exited before its banner: {seen}"
                seen.append(line)
            assert expected in seen[-1], (flags, seen[-1])
            body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                    "stream": True, "thinking": {"type": "disabled"}}
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30) as r:
                lines = [line for line in r.iter_lines() if line]
            assert lines[-1] == "data: [DONE]"
        finally:
            p.terminate()
            p.wait(timeout=30)
