"""The start-up rules that read the hardware (planner/startup.py, StartupRule.reads_cluster: a
Cluster of the GPU entry, its NVLink domains and the job's GPU count; issues 22, 23).

Hybrid-EP (deepseek-ai/DeepEP @94a9f8f, hybrid-ep branch; Megatron's flex dispatcher, backend
hybridep, over the expert-TP x EP group):
  MEGATRON_HYBRIDEP_DOMAIN  deep_ep/hybrid_ep_buffer.py l. 74-76: group % (its members in the rank's
                            NVLink domain) == 0
  MEGATRON_HYBRIDEP_EXPERTS csrc/hybrid_ep/config.cuh l. 91: (experts per rank x ranks per domain) % 4
  MEGATRON_HYBRIDEP_TOKENS  config.cuh l. 18-50: across domains 3 x tokens + 1 < 65,536, tokens =
                            max(T, 512) rounded up to 64 (l. 385-387): (65,536 - 2) // 3 = 21,844, so
                            21,824 tokens (341 chunks of 64) pass and 21,888 (342) do not
  MEGATRON_HYBRIDEP_GPU     TMA bulk copies: compute capability 9.0+
DeepEP (@567632d README l. 43-49, setup.py l. 57-66, csrc/deep_ep.cpp l. 166-168): SM80 builds have
no NVSHMEM, so num_rdma_ranks = max(1, group // 8) must be 1: on A100 a group of 16 or more ranks
is refused, 8 runs; a GPU with no CUDA compute capability (MI300X) runs none."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_hardware
from planner.comm import comm_params, domain_pieces
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.startup import (CODES, DISPATCHER_RULES, HYBRIDEP_MAX_TOKENS, LATER_FIRST_CODE, RULES, cluster_of,
                             hybridep_tokens)

V3 = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=2048, seq_len=4096, tp=1, etp=1,
          sequence_parallel=False, pp=1, sharding="zero1", micro_batch=1)


def _refused(rule: str, **kw) -> PlannerError:
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**V3, **kw}))
    assert f"breaks start-up rule {rule} of " in e.value.message, e.value.message
    return e.value


def _runs(**kw):
    settings, plan, _ = resolve(Job(**{**V3, **kw}))
    return settings, plan


def test_codes_are_appended():
    """The new rules take the codes after TORCHTITAN_MX_TP_COMPILE (53): every older code stays."""
    assert CODES["TORCHTITAN_MX_TP_COMPILE"] == LATER_FIRST_CODE + 5 == 53
    new = ["MEGATRON_DEEPEP_GPU", "TORCHTITAN_DEEPEP_GPU", "DEEPSEEK_DEEPEP_GPU", "MEGATRON_HYBRIDEP_GPU",
           "MEGATRON_HYBRIDEP_DOMAIN", "MEGATRON_HYBRIDEP_EXPERTS", "MEGATRON_HYBRIDEP_TOKENS"]
    assert [CODES[k] for k in new] == list(range(55, 62))
    assert all(k in DISPATCHER_RULES for k in new)
    # and torchtitan 0.3.0's symmetric-memory FSDP on the GPU's compute capability (code 87, rule87)
    assert {r.key for r in RULES if r.reads_cluster} == set(new) | {"TORCHTITAN_FSDP_SYMM_MEM_SM90"}


def test_domain_pieces_by_hand():
    """Blocks of g consecutive ranks on GB200 NVL72 (72-GPU domains; 288 GPUs = 72 nodes run in
    72-GPU segments): g 32 falls in pieces 32 (ranks 0-31, 32-63), 8 + 24 (64-95), ... 32 % 24 != 0;
    g 16: 16 or 8 + 8, every piece divides 16; g 72: one domain each. H800 (8-GPU domains): 4 ranks
    4 apart (span 16) put 2 in each domain; 2 ranks 4 apart (span 8) sit in one."""
    gb = comm_params(load_hardware("gb200-nvl72"))
    div, gcd, spans = domain_pieces(np.array([32, 16, 72, 64]), 1, gb, 288)
    assert div.tolist() == [False, True, True, False] and gcd.tolist() == [8, 8, 72, 8]
    assert spans.tolist() == [True, True, False, True]
    div, gcd, spans = domain_pieces(np.array([64, 32]), 1, gb, 256)  # 64 nodes: 16-node (64-GPU) segments
    assert div.tolist() == [True, True] and gcd.tolist() == [64, 32] and spans.tolist() == [False, False]
    h800 = comm_params(load_hardware("h800-sxm"))
    div, gcd, spans = domain_pieces(np.array([4, 2, 256]), np.array([4, 4, 1]), h800, 2048)
    assert div.tolist() == [True, True, True] and gcd.tolist() == [2, 2, 8] and spans.tolist() == [True, False, True]


def test_hybridep_tokens_limit():
    """DeepSeek-V3, EP 64 over 8 H800 domains, tp 1: the rank's tokens are the sequence. 21,824
    runs (3 x 21,824 + 1 = 65,473 < 65,536), 21,888 is refused (65,665); inside one domain (EP 8)
    32,768 runs: the limit is the IB QP's."""
    assert HYBRIDEP_MAX_TOKENS == 21844
    _, plan = _runs(moe_dispatcher="hybridep", ep=64, seq_len=21824)
    assert int(hybridep_tokens(plan)) == 21824
    e = _refused("MEGATRON_HYBRIDEP_TOKENS", moe_dispatcher="hybridep", ep=64, seq_len=21888)
    assert "21,844 tokens per rank" in e.message and "config.cuh hybrid_ep_token_capacity_is_valid" in e.message
    assert "(21,888 tokens per rank as padded: 3 x 21,888 + 1 = 65,665)" in e.message
    _runs(moe_dispatcher="hybridep", ep=8, seq_len=32768)
    # tp 2 with SP halves the rank's tokens: 43,776 / 2 = 21,888 refused, 43,648 / 2 = 21,824 runs
    _refused("MEGATRON_HYBRIDEP_TOKENS", moe_dispatcher="hybridep", ep=64, seq_len=43776, tp=2, sequence_parallel=True)
    _runs(moe_dispatcher="hybridep", ep=64, seq_len=43648, tp=2, sequence_parallel=True)
    # the other dispatchers take any count
    _runs(moe_dispatcher="alltoall", ep=64, seq_len=21888)


def test_hybridep_experts_times_domain_ranks():
    """Mixtral 8x7B (8 experts) on H100 PCIe (NVLink pairs): EP 8 puts 1 expert on a rank and 2 ranks
    in a domain, 1 x 2 = 2 not a multiple of 4: refused; EP 4 (2 x 2 = 4) runs."""
    base = dict(model="mixtral-8x7b", hardware="h100-pcie", gpus=64, seq_len=4096, global_batch=64, tp=1, etp=None,
                moe_dispatcher="hybridep")
    e = _refused("MEGATRON_HYBRIDEP_EXPERTS", **base, ep=8)
    assert "(num_of_experts_per_rank * num_of_ranks_per_node) % 4 == 0" in e.message
    assert "(1 experts per rank x 2 ranks per NVLink domain; hidden size 4096)" in e.message
    _runs(**base, ep=4)


def test_hybridep_group_divisible_by_domain_ranks():
    """GB200 NVL72, 288 GPUs (72-GPU racks): EP 32 straddles a rack as 8 + 24 ranks (32 % 24 != 0):
    refused; EP 16 runs; on 256 GPUs (64-GPU segments) EP 64 and 32 run."""
    base = dict(hardware="gb200-nvl72", moe_dispatcher="hybridep")
    e = _refused("MEGATRON_HYBRIDEP_DOMAIN", **base, gpus=288, global_batch=288, ep=32)
    assert "hybrid_ep_buffer.py HybridEPBuffer.__init__ l. 61-76" in e.message
    # blocks 64-95 (8 + 24) and 128-159 (16 + 16) straddle racks at 72 and 144
    assert "its 32 ranks meet 8 or 16 or 24 or 32 of their group in an NVLink domain of 72 GPUs on 288" in e.message
    _runs(**base, gpus=288, global_batch=288, ep=16)
    for ep in (64, 32):
        _runs(**base, gpus=256, global_batch=256, ep=ep)


def test_hybridep_needs_hopper():
    _refused("MEGATRON_HYBRIDEP_GPU", moe_dispatcher="hybridep", ep=8, hardware="a100-sxm-80gb")
    _runs(moe_dispatcher="hybridep", ep=8, hardware="h100-sxm")


def test_deepep_by_gpu_generation():
    """A100 (SM80): EP 8 (one DeepEP node, no RDMA ranks) runs, EP 16 and 64 are refused; H800
    runs EP 64; MI300X (no CUDA compute capability) runs no DeepEP group."""
    _runs(moe_dispatcher="deepep", ep=8, hardware="a100-sxm-80gb")
    for ep in (16, 64):
        e = _refused("MEGATRON_DEEPEP_GPU", moe_dispatcher="deepep", ep=ep, hardware="a100-sxm-80gb")
        assert f"(a100-sxm-80gb: compute capability 8.0, a group of {ep} ranks)" in e.message
        assert "deep_ep.cpp Buffer::Buffer l. 166-168" in e.message and e.hint.startswith("use a Hopper")
    _runs(moe_dispatcher="deepep", ep=64)
    _refused("MEGATRON_DEEPEP_GPU", moe_dispatcher="deepep", ep=8, hardware="mi300x")
    # the expert-TP x EP group: etp 2 x ep 8 = 16 ranks on A100
    _refused("MEGATRON_DEEPEP_GPU", moe_dispatcher="deepep", ep=8, tp=2, etp=2, sequence_parallel=True,
             hardware="a100-sxm-80gb")


def test_torchtitan_deepep_by_gpu_generation():
    base = dict(stack="torchtitan", moe_dispatcher="deepep", hardware="a100-sxm-80gb", sharding="fsdp")
    _refused("TORCHTITAN_DEEPEP_GPU", **base, ep=16)
    _runs(**base, ep=8)


def test_rules_need_the_cluster():
    """A rule that reads the hardware is never skipped: without a Cluster it raises."""
    settings, plan = _runs(moe_dispatcher="hybridep", ep=8)
    r = next(r for r in RULES if r.key == "MEGATRON_HYBRIDEP_EXPERTS")
    with pytest.raises(ValueError, match="reads the hardware"):
        r.check(settings.model, settings.stack, plan, None)
    assert not bool(r.check(settings.model, settings.stack, plan, cluster_of(settings.hardware, settings.gpus)))


def test_cli_exit_2_names_the_rule(cli, tmp_path):
    """DeepSeek-V3's recipe sets deepep: explain on A100 at EP 64 exits 2 naming the rule; check
    marks the job invalid (exit 2) with the same message."""
    r = cli("explain", "--model", "deepseek-v3", "--gpus", "1024", "--hardware", "a100-sxm-80gb", "--tp", "8",
            "--pp", "16", "--ep", "64", "--etp", "1", "--global-batch", "1024")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "breaks start-up rule MEGATRON_DEEPEP_GPU of megatron" in r.stderr and "\nhint: use a Hopper" in r.stderr
    job = tmp_path / "job.yaml"
    job.write_text("model: mixtral-8x7b\ngpus: 64\nhardware: h100-pcie\nseq_len: 4096\nglobal_batch: 64\nep: 8\n"
                   "moe_dispatcher: hybridep\n", encoding="utf-8")
    r = cli("check", str(job))
    assert r.exit_code == 2 and "MEGATRON_HYBRIDEP_EXPERTS" in r.stderr


def test_fit_skips_the_dispatchers_the_gpu_refuses():
    """fit's dispatcher search on A100 (DeepSeek-V3, 1,024 GPUs): no hybridep row and no deepep
    row with a group over 8 (before these rules the top rows were deepep at EP 128 and hybridep)."""
    res = fit(Job(model="deepseek-v3", gpus=1024, hardware="a100-sxm-80gb"), top=10, search_dispatchers=True)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        assert p["moe_dispatcher"] != "hybridep", p
        assert p["moe_dispatcher"] != "deepep" or (p.get("etp") or p["tp"]) * p["ep"] <= 8, p


def test_fit_skips_hybridep_where_the_buffer_config_is_invalid():
    """Mixtral 8x7B on 64 H100 PCIe: hybridep is searched, never at EP 8 (MEGATRON_HYBRIDEP_EXPERTS)."""
    res = fit(Job(model="mixtral-8x7b", gpus=64, hardware="h100-pcie", seq_len=4096, global_batch=64), top=40,
              search_dispatchers=True)
    hybrid = [r["plan"] for r in res.rows if r["plan"]["moe_dispatcher"] == "hybridep"]
    assert hybrid and all(p["ep"] != 8 for p in hybrid)
    assert "hybridep" in res.counts.dispatchers


def test_fit_pinned_hybridep_masks_the_token_limit():
    """fit --moe-dispatcher hybridep at 32,768 tokens a sequence (DeepSeek-V3, 2,048 H800): the rule
    reads the micro-batch size (space.mode_rule_fields keys on it); every ranked row whose
    expert-TP x EP group spans H800 domains (> 8 ranks here) has at most 21,824 tokens per rank, and
    the rule is counted among the reasons."""
    from planner.space import SpaceOptions

    job = Job(**{**V3, "seq_len": 32768, "moe_dispatcher": "hybridep", "global_batch": 1024})
    job = job.model_copy(update=dict(tp=1, etp=None, sequence_parallel=None, micro_batch=None))
    res = fit(job, opts=SpaceOptions(tp=(1, 2, 4), pp=(4,)), top=10)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        group = (p.get("etp") or p["tp"]) * p["ep"]
        tokens = p["micro_batch"] * 32768 // p["cp"] // (p["tp"] if p["sequence_parallel"] else 1)
        assert group <= 8 or tokens <= 21824, p
    assert any(k.startswith("Megatron's Hybrid-EP dispatcher across NVLink domains") and n > 0
               for k, n in res.counts.reasons.items())


def test_argument_transcription():
    """planner/trainers/rules.py on Megatron's own flags (the hardware given as the caller's
    gpus_per_domain and capability): the same cases as the plan rules above."""
    from planner.trainers.rules import megatron_errors

    base = {"--num-layers": "4", "--hidden-size": "7168", "--num-attention-heads": "128", "--seq-length": "4096",
            "--max-position-embeddings": "32768", "--micro-batch-size": "1", "--global-batch-size": "18432",
            "--num-experts": "256", "--expert-tensor-parallel-size": "1", "--moe-token-dispatcher-type": "flex",
            "--moe-flex-dispatcher-backend": "hybridep"}

    def keys(world, ep, domain=8, cc=(9, 0), **f):
        flags = {**base, "--expert-model-parallel-size": str(ep), **f}
        return [k for k, _ in megatron_errors(flags, world, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, gpus_per_domain=domain,
                                              capability=cc)]

    assert keys(288, 32, domain=72) == ["HYBRIDEP_DOMAIN"] and keys(288, 16, domain=72) == []
    assert keys(2048, 64, **{"--seq-length": "21888"}) == ["HYBRIDEP_TOKENS"]
    assert keys(2048, 64, **{"--seq-length": "21824"}) == [] and keys(2048, 8, **{"--seq-length": "32768"}) == []
    assert keys(64, 8, domain=2, **{"--num-experts": "8"}) == ["HYBRIDEP_EXPERTS"]
    assert keys(64, 4, domain=2, **{"--num-experts": "8"}) == []
    assert keys(64, 8, cc=(8, 0)) == ["HYBRIDEP_GPU"]
    assert keys(64, 8, **{"--hidden-size": "7176", "--num-attention-heads": "8"}) == ["HYBRIDEP_EXPERTS"]  # 7,176 % 16 = 8
    deepep = {"--moe-flex-dispatcher-backend": "deepep"}
    assert keys(64, 16, cc=(8, 0), **deepep) == ["DEEPEP_GPU"] and keys(64, 8, cc=(8, 0), **deepep) == []
    assert keys(64, 16, **deepep) == []
    # without the hardware only the hidden size is checked
    assert [k for k, _ in megatron_errors({**base, "--expert-model-parallel-size": "32"}, 288,
                                          {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})] == []


def test_exported_script_passes_the_transcription():
    """A hybridep plan resolve accepts (DeepSeek-V3, EP 64 on 2,048 H800) exports a Megatron script
    the transcription passes with H800's 8-GPU domains and SM90, and fails HYBRIDEP_GPU on SM80."""
    from planner.trainers.export import export_plan
    from planner.trainers.rules import megatron_script_errors
    from tests.test_startup_transformer_config import resolved_plan

    plan = resolved_plan(Job(**{**V3, "moe_dispatcher": "hybridep", "ep": 64}))
    text, _ = export_plan(plan, "megatron")
    assert "--moe-flex-dispatcher-backend hybridep" in text
    assert megatron_script_errors(text, gpus_per_domain=8, capability=(9, 0)) == []
    assert [k for k, _ in megatron_script_errors(text, gpus_per_domain=8, capability=(8, 0))] == ["HYBRIDEP_GPU"]


def test_deepseek_stack_deepep_by_gpu_generation():
    """The deepseek stack runs DeepEP only (stack_db moe_dispatchers [deepep]): its published layout
    (EP 64, PP 16 on 2,048 GPUs) runs on H800 and is refused on A100 (a 64-rank group below SM90)."""
    job = dict(model="deepseek-v3", gpus=2048, stack="deepseek", ep=64, pp=16, global_batch=15360)
    resolve(Job(**job, hardware="h800-sxm"))
    with pytest.raises(PlannerError, match="breaks start-up rule DEEPSEEK_DEEPEP_GPU of deepseek"):
        resolve(Job(**job, hardware="a100-sxm-80gb"))
