"""DeepSeek-V4 (window and compressed cache kinds) over 1 prefill + 1 decode worker process: the hand-off
connector carries every kind through shared memory, and greedy outputs (n > 1, prefix hits on the decode
side) equal one colocated engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from disagg_helpers import reference, run_all
from recipe.cluster.config import DisaggConfig
from recipe.cluster.router import DisaggLLM
from recipe.engine import LLM, SamplingParams
from v4_checkpoints import write_v4_checkpoint

CONFIG = {"num_kv_blocks": 96, "block_size": 4, "num_threads": 1, "max_num_seqs": 8, "max_num_batched_tokens": 16}


@pytest.fixture(scope="module")
def v4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v4_checkpoint(tmp_path_factory.mktemp("v4_disagg"), "mixed", seed=4)


@pytest.fixture(scope="module")
def router(v4_dir: Path) -> Iterator[DisaggLLM]:
    r = DisaggLLM(str(v4_dir), DisaggConfig(prefill_workers=1, decode_workers=1, ready_timeout_s=600), **CONFIG)
    yield r
    r._stop_all()


def test_v4_hand_off_between_worker_processes_equals_a_colocated_engine(router: DisaggLLM, v4_dir: Path) -> None:
    shared = list(range(10, 34))
    prompts = [list(range(40, 45)), [*shared, 50, 51, 52], [*shared, 60, 61, 62, 63, 64, 65, 66]]
    params = [SamplingParams(temperature=0.0, max_tokens=m, n=n, ignore_eos=True) for m, n in [(8, 1), (6, 2), (7, 1)]]
    colocated = LLM(str(v4_dir), **CONFIG)
    try:
        want = reference(colocated, prompts, params)
    finally:
        colocated.shutdown()
    first = run_all(router, prompts[:2], params[:2], prefix="v4a")
    before = len(router.handoffs)
    rest = run_all(router, prompts[2:], params[2:], prefix="v4b")
    assert first + rest == want
    sent = [h.blocks for h in router.handoffs[before:]]
    assert sent and max(sent) < len(shared) // 4, f"window blocks sent {sent}: the shared prefix was sent again"
