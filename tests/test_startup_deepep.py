"""Start-up rule MEGATRON_DEEPEP_GROUP (planner/startup.py): Megatron's flex dispatcher with the
DeepEP backend builds one DeepEP Buffer over the expert-TP x EP group and sizes it from DeepEP's
config tables at the group's size (NVIDIA/Megatron-LM @d98e8a64 moe/fused_a2a.py get_buffer
l. 47-50, token_dispatcher.py MoEFlexTokenDispatcher's tp_ep group), which list 2, 4, 8, 16, 24,
32, 64, 128, 144 and 160 ranks and assert on any other (deepseek-ai/DeepEP @94a9f8f
deep_ep/buffer.py l. 252, 280; csrc/deep_ep.cpp l. 152: at most 8 NVLink x 20 RDMA peers = 160
in normal mode). A job over it is refused (exit 2, the rule and its source, the hint); `fit`
never ranks one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, DEEPEP_GROUP_SIZES

ROOT = Path(__file__).resolve().parents[1]
# DeepSeek-V3 on DeepSeek's 2,048 H800 (arXiv:2412.19437 sec. 3.1), TP 2 (dp 1,024 divides the
# batch of 15,360), expert TP 1, ZeRO-1, one pipeline stage
V3 = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096, tp=2, etp=1,
          sequence_parallel=True, pp=1, sharding="zero1", micro_batch=1)


def _v3(**kw) -> Job:
    return Job(**{**V3, **kw})


def test_the_table_is_deepeps():
    """DeepEP @94a9f8f deep_ep/buffer.py get_dispatch_config's keys (get_combine_config has the
    same): 160 = NUM_MAX_NVL_PEERS 8 x NUM_MAX_RDMA_PEERS 20 is the largest; every size above 8 a
    multiple of 8 (Buffer::Buffer's other assert)."""
    assert tuple(DEEPEP_GROUP_SIZES) == (2, 4, 8, 16, 24, 32, 64, 128, 144, 160)
    assert max(DEEPEP_GROUP_SIZES) == 8 * 20 and all(g <= 8 or g % 8 == 0 for g in DEEPEP_GROUP_SIZES)


def test_ep256_with_deepep_is_refused_ep128_accepted():
    """EP 256 (etp 1: a 256-rank group) breaks DeepEP's tables; so does EP 128 with expert TP 2
    (the group is etp x ep = 256, MoEFlexTokenDispatcher's tp_ep group); EP 128 at etp 1 runs."""
    for kw in (dict(ep=256), dict(ep=128, etp=2)):
        with pytest.raises(PlannerError) as e:
            resolve(_v3(moe_dispatcher="deepep", **kw))
        assert "breaks start-up rule MEGATRON_DEEPEP_GROUP of megatron" in e.value.message
        assert "deep_ep/buffer.py get_dispatch_config" in e.value.message and "fused_a2a.py get_buffer" in e.value.message
        assert e.value.hint.startswith("lower ep") and "hybridep or alltoall" in e.value.hint
    settings, plan, _ = resolve(_v3(moe_dispatcher="deepep", ep=128))
    assert settings.moe_dispatcher == "deepep" and int(plan.ep) == 128
    resolve(_v3(moe_dispatcher="deepep", ep=64, etp=2))  # group 128


def test_other_dispatchers_and_stacks_take_ep256():
    """The rule is the DeepEP backend's: alltoall and hybridep run EP 256 on Megatron."""
    for d in ("alltoall", "hybridep"):
        settings, plan, _ = resolve(_v3(moe_dispatcher=d, ep=256))
        assert settings.moe_dispatcher == d and int(plan.ep) == 256


def _model_with_experts(tmp_path, n: int) -> str:
    """DeepSeek-V3 with n routed experts (a 160-expert model, DeepSeek-V2's count, to reach a
    160-rank group with etp 1)."""
    m = yaml.safe_load((ROOT / "model_zoo" / "deepseek-v3.yaml").read_text(encoding="utf-8"))
    m["name"] = f"deepseek-v3-{n}e"
    m["moe"]["num_experts"] = n
    m.pop("training", None)
    p = tmp_path / f"v3-{n}.yaml"
    p.write_text(yaml.safe_dump(m), encoding="utf-8")
    return str(p)


def test_group_sizes_in_and_out_of_the_table(tmp_path):
    """160 experts on 320 GPUs: EP 160 (the largest listed size) and 32 run; EP 40 and 80 (within
    160 ranks and multiples of 8, but not in the config tables: DeepEP asserts 'Unsupported number
    of EP ranks') are refused."""
    model = _model_with_experts(tmp_path, 160)
    base = dict(model=model, gpus=320, global_batch=640, seq_len=4096, tp=1, pp=1, sharding="zero1", micro_batch=1,
                moe_dispatcher="deepep")
    for ep in (160, 32):
        _, plan, _ = resolve(Job(**base, ep=ep))
        assert int(plan.ep) == ep
    for ep in (40, 80):
        with pytest.raises(PlannerError, match="MEGATRON_DEEPEP_GROUP"):
            resolve(Job(**base, ep=ep))


def test_cli_refuses_with_exit_2(cli):
    """The model's recipe sets moe_dispatcher deepep: explain at EP 256 exits 2 naming the rule,
    its sources and the hint, without a traceback."""
    r = cli("explain", "--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--global-batch", "15360",
            "--seq-len", "4096", "--tp", "2", "--pp", "1", "--ep", "256", "--etp", "1", "--sharding", "zero1")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "breaks start-up rule MEGATRON_DEEPEP_GROUP of megatron" in r.stderr and "@94a9f8f" in r.stderr
    assert "\nhint: lower ep" in r.stderr


def test_fit_never_ranks_a_group_deepep_refuses():
    """fit at EP 256 pinned finds nothing, the rule counted among the reasons; unpinned, every
    ranked row's etp x ep is a listed size and the rule is counted."""
    job = _v3(moe_dispatcher="deepep")
    text = "Megatron's DeepEP dispatcher runs over the expert-TP x EP group"
    with pytest.raises(PlannerError) as e:
        fit(job, opts=SpaceOptions(tp=(2,), pp=(1,), ep=(256,), sharding=("zero1",)), top=1)
    assert text in e.value.message
    res = fit(job, opts=SpaceOptions(tp=(2, 4), pp=(1,)), top=5)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        assert (p.get("etp") or p["tp"]) * p["ep"] in DEEPEP_GROUP_SIZES, p
    assert any(k.startswith(text) and n > 0 for k, n in res.counts.reasons.items())
    assert CODES["MEGATRON_DEEPEP_GROUP"] > 0


def test_argument_rule_deepep_group():
    """rules.py's transcription on Megatron's own argument names: flex with the DeepEP backend (the
    default backend, or --moe-enable-deepep) at etp x ep = 256 fails, at 128 starts; alltoall and
    hybridep at 256 start."""
    from planner.trainers.rules import megatron_errors

    base = {"--num-layers": "4", "--hidden-size": "7168", "--num-attention-heads": "128", "--seq-length": "4096",
            "--max-position-embeddings": "4096", "--micro-batch-size": "1", "--global-batch-size": "2048",
            "--num-experts": "256", "--expert-tensor-parallel-size": "1", "--disable-bias-linear": True}
    keys = lambda ep, **f: [k for k, _ in megatron_errors({**base, "--expert-model-parallel-size": str(ep), **f}, 2048)]  # noqa: E731
    flex = {"--moe-token-dispatcher-type": "flex"}
    assert keys(256, **flex) == ["DEEPEP_GROUP"]
    assert keys(256, **{"--moe-enable-deepep": True}) == ["DEEPEP_GROUP"]
    assert keys(128, **flex) == []
    assert keys(128, **flex, **{"--expert-tensor-parallel-size": "2"}) == ["DEEPEP_GROUP"]
    assert keys(256, **flex, **{"--moe-flex-dispatcher-backend": "hybridep"}) == []
    assert keys(256, **{"--moe-token-dispatcher-type": "alltoall"}) == []
