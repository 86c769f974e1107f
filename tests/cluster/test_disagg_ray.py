"""1 prefill + 1 decode worker as Ray actors on a two-node Ray cluster started by the test (two `ray start`
processes on this machine, 1 CPU and an 80 MB object store each): greedy outputs equal one colocated engine
(n > 1, stop tokens, prefix hits), the KV goes through the object store, the model reaches the actors
through it too (the checkpoint path is deleted once the workers loaded it, and a worker SIGKILLed after
that restarts from the shipped copy), and the cluster is stopped by its own pids.

Ray is a dev dependency (`recipe-serve[cluster]` in the dev extra, installed by scripts/setup.sh), so this runs
in the default suite: about 40-60 s on 2 busy cores, most of it the cluster starting.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import ray  # a dev dependency: a missing ray is a broken environment, not a skip
from disagg_helpers import prompts_of, reference, run_all
from local_ray_cluster import LocalRayCluster
from recipe.cluster.config import DisaggConfig
from recipe.cluster.router import DisaggLLM
from recipe.engine import LLM, SamplingParams
from recipe.engine.disagg.ray_transport import RayHandle

CONFIG = {"dtype": "float32", "num_kv_blocks": 160, "block_size": 4, "num_threads": 1, "max_num_batched_tokens": 64}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    c = LocalRayCluster(tmp_path_factory.mktemp("ray"), nodes=2, cpus_per_node=1, object_store_mb=80)
    try:
        c.connect()
        yield c
    finally:
        ray.shutdown()
        c.stop()
    assert c.leftover_pids() == []


@pytest.fixture(scope="module")
def shipped_checkpoint(llama_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkpoint that the test deletes once the workers loaded it."""
    dst = tmp_path_factory.mktemp("ship") / "model"
    shutil.copytree(llama_checkpoint, dst)
    return dst


@pytest.fixture(scope="module")
def router(cluster: LocalRayCluster, shipped_checkpoint: Path):  # type: ignore[no-untyped-def]
    r = DisaggLLM(str(shipped_checkpoint), DisaggConfig(prefill_workers=1, decode_workers=1, ready_timeout_s=300,
                                                       ray_address=cluster.address), **CONFIG)
    shutil.rmtree(shipped_checkpoint)  # from here on only the object store has the model
    yield r
    r._stop_all()
    assert ray.is_initialized(), "the router leaves a connection it did not make"


@pytest.fixture(scope="module")
def colocated(llama_checkpoint: Path):  # type: ignore[no-untyped-def]
    llm = LLM(str(llama_checkpoint), **CONFIG)
    yield llm
    llm.shutdown()


def test_workers_are_actors_on_different_nodes(router: DisaggLLM) -> None:
    workers = router.workers()
    assert [w["role"] for w in workers] == ["prefill", "decode"]
    assert all(w["state"] == "ready" for w in workers)
    nodes = {w["node"] for w in workers}
    assert len(nodes) == 2 and None not in nodes, workers  # SPREAD over the two nodes
    assert os.getpid() not in {w["pid"] for w in workers}
    assert router.config.transport == "ray"


def test_greedy_outputs_through_ray_equal_a_colocated_engine(router: DisaggLLM, colocated: LLM) -> None:
    shared = prompts_of(4, 1, 30, 31)[0]
    prompts = [*prompts_of(11, 5), [*shared, 5, 6], [*shared, 7]]
    params = [SamplingParams(temperature=0.0, max_tokens=mt, n=n, stop_token_ids=s)
              for mt, n, s in [(12, 1, ()), (15, 3, ()), (1, 1, ()), (16, 1, (40, 41, 42)), (6, 2, (7,)),
                               (8, 1, ()), (8, 2, ())]]
    before = len(router.handoffs)
    got = run_all(router, prompts[:-1], params[:-1], prefix="ray")
    got += run_all(router, prompts[-1:], params[-1:], prefix="ray-hit")  # after its prefix was decoded
    assert got == reference(colocated, prompts, params)
    sent = router.handoffs[before:]
    assert sent and router.handoff_bytes > 0
    full_blocks = len(prompts[-1]) // 4
    assert sent[-1].blocks < full_blocks - 4, "the prefix the decode node held was sent again"


def test_a_killed_actor_restarts_from_the_shipped_model(router: DisaggLLM, colocated: LLM,
                                                        shipped_checkpoint: Path) -> None:
    assert not shipped_checkpoint.exists()
    victim = next(w for w in router.workers() if w["role"] == "decode")
    os.kill(victim["pid"], signal.SIGKILL)  # the actors run on this machine's two Ray nodes
    deadline = time.monotonic() + 120
    while not (router.restarts >= 1 and router.health_problem() is None):
        assert time.monotonic() < deadline, router.workers()
        time.sleep(0.2)
    assert next(w for w in router.workers() if w["role"] == "decode")["pid"] != victim["pid"]
    prompts = prompts_of(12, 3)
    params = [SamplingParams(temperature=0.0, max_tokens=10, n=n) for n in (1, 2, 1)]
    assert run_all(router, prompts, params, prefix="ray-after-kill") == reference(colocated, prompts, params)


def test_the_object_store_transport_round_trips_and_times_out_cleanly(router: DisaggLLM) -> None:
    import numpy as np
    from recipe.engine.disagg.transport import TransportError, make_transport

    t = make_transport("ray", timeout_s=5.0)  # this process is a Ray driver (the cluster fixture)
    arrays = {"0/k": np.arange(4096, dtype=np.uint8), "1/v": np.full((3, 5), 7, dtype=np.uint8)}
    got = t.take(t.put(arrays))
    assert got.keys() == arrays.keys() and all(np.array_equal(got[k], arrays[k]) for k in arrays)
    assert all(a.flags.writeable for a in got.values())

    @ray.remote(num_cpus=0, max_retries=0)
    def never_ready() -> None:
        time.sleep(600)  # a payload that does not arrive (a stalled or dead sender)

    stalled = never_ready.remote()  # type: ignore[attr-defined]
    t0 = time.monotonic()
    with pytest.raises(TransportError, match="not fetched within"):
        t.take(RayHandle(stalled))
    assert time.monotonic() - t0 < 30
    ray.cancel(stalled, force=True)
