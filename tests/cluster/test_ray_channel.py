"""The pieces of the Ray-actor workers that need no Ray: the actor's channel delivers the router's messages
in send order whatever order the (threaded) actor runs the calls in, and a shipped model unpacks to the same
files. The flags of `recipe serve --ray-address` make the config they name."""

from __future__ import annotations

import argparse
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.cluster.config import DisaggConfig
from recipe.cluster.ray_workers import ActorChannel, pack_model, unpack_model


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(), min_size=0, max_size=40).flatmap(
    lambda msgs: st.permutations(list(enumerate(msgs))).map(lambda order: (msgs, order))))
def test_pushes_in_any_order_are_received_in_send_order(case: tuple[list[int], list[tuple[int, int]]]) -> None:
    msgs, order = case
    ch = ActorChannel()
    for seq, msg in order:
        ch.push(seq, msg)
    got = []
    while ch.poll(0.0):
        got.append(ch.recv())
    assert got == msgs


def test_pull_returns_sent_messages_then_the_end() -> None:
    ch = ActorChannel()
    assert ch.pull(0.01) == ([], False, None)
    ch.send("a")
    ch.send("b")
    assert ch.pull(0.01) == (["a", "b"], False, None)
    threading.Timer(0.05, ch.finish, args=("RuntimeError: boom",)).start()
    assert ch.pull(5.0) == ([], True, "RuntimeError: boom")


def test_a_shipped_model_unpacks_to_the_same_files(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"a": 1}')
    (src / "sub" / "w.bin").write_bytes(bytes(range(256)) * 3)
    path, root = unpack_model(pack_model(str(src)), single_file=False)
    try:
        assert path == root != str(src)
        assert sorted(p.relative_to(path).as_posix() for p in Path(path).rglob("*") if p.is_file()) == [
            "config.json", "sub/w.bin"]
        assert (Path(path) / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
    finally:
        shutil.rmtree(root)
    one = src / "sub" / "w.bin"
    path, root = unpack_model(pack_model(str(one)), single_file=True)
    try:
        assert Path(path).name == "w.bin" and Path(path).read_bytes() == one.read_bytes()
    finally:
        shutil.rmtree(root)


def test_ray_address_makes_the_object_store_the_transport() -> None:
    assert DisaggConfig(ray_address="auto").transport == "ray"
    assert DisaggConfig().transport == "shm"
    with pytest.raises(ValueError, match="needs ray_address"):
        DisaggConfig(transport="ray")
    with pytest.raises(ValueError, match="ray_cpus_per_worker"):
        DisaggConfig(ray_address="auto", ray_cpus_per_worker=0)


def test_serve_flags_name_the_ray_config() -> None:
    from recipe.server import cli_serve
    from recipe.server.disagg_front import disagg_config_from_args, disagg_requested

    parser = argparse.ArgumentParser()
    cli_serve.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--ray-address", "auto", "--ray-cpus-per-worker", "2", "--no-ray-ship-model"])
    assert disagg_requested(args)
    c = disagg_config_from_args(args)
    assert (c.prefill_workers, c.decode_workers, c.ray_address, c.ray_cpus_per_worker, c.ray_ship_model,
            c.transport) == (1, 1, "auto", 2.0, False, "ray")
    args = parser.parse_args(["serve", "--ray-address", "10.0.0.1:6379", "--prefill-workers", "2",
                              "--decode-workers", "3"])
    c = disagg_config_from_args(args)
    assert (c.prefill_workers, c.decode_workers, c.ray_address, c.ray_ship_model) == (2, 3, "10.0.0.1:6379", True)
    assert not disagg_requested(parser.parse_args(["serve"]))
