"""Megatron-Core --recompute-modules as the job's recompute_modules (issue 23,
planner/recompute_modules.py): the selective policy the modules make, what it re-runs (time)
and what it frees (memory), by hand from the stack's kernel bytes and the models' shapes;
the jobs it refuses; the run records that state it (Megatron-Bridge gpt-oss presets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_model, load_stack
from planner.layers import context, layer_list
from planner.memory import layer_memory
from planner.plan import resolve
from planner.recompute_modules import block_drops, block_rerun_times, modules_policy, norm_drops, rerun_kernel_bytes
from planner.schema import Job
from planner.stacks import kernel_bytes

ROOT = Path(__file__).resolve().parent.parent
MEGATRON_KEEPS = ["input", "norm1_out", "q", "k", "v", "attn_out", "norm2_in", "norm2_out", "gate", "up", "act_out",
                  "dropout_masks"]


def test_policy_of_each_module():
    """core_attn is Megatron's default policy (the stack's); layernorm and moe_act re-run no
    attention core and name the norms and the experts' activation output; mla_up_proj drops
    the up-projections' outputs q, k, v and re-runs those projections."""
    base = load_stack("megatron").selective
    assert base.keeps == MEGATRON_KEEPS and base.recompute_attention_core
    core = modules_policy(["core_attn"], base)
    assert core.recompute_attention_core and core.keeps == base.keeps and core.recomputes == []
    assert core.recompute_norm_outputs == [] and not core.recompute_elementwise and core.recompute_projections == []
    gpt_oss = modules_policy(["layernorm", "moe_act"], base)
    assert not gpt_oss.recompute_attention_core and gpt_oss.keeps == MEGATRON_KEEPS
    assert gpt_oss.recomputes == ["moe_expert_act_out"]
    assert gpt_oss.recompute_norm_outputs == ["mla_input", "moe_pre_mlp"]
    mla = modules_policy(["mla_up_proj"], base)
    assert mla.keeps == [t for t in MEGATRON_KEEPS if t not in ("q", "k", "v")]
    assert mla.recompute_projections == ["q", "k", "v"] and not mla.recompute_attention_core


def test_which_norms_each_kind_reruns():
    """Standard attention's input norm is fused into linear_qkv (not re-run); an MoE layer's
    pre-MLP norm is a module of its own (re-run); MLA's input norm is a TENorm (re-run)."""
    pol = modules_policy(["layernorm"], load_stack("megatron").selective)
    gpt = layer_list(load_model("gpt-oss-120b")).kinds
    assert all(norm_drops(pol, k) == ("norm2_out",) for k in gpt)
    ds = layer_list(load_model("deepseek-v3")).kinds
    assert {norm_drops(pol, k) for k in ds} == {("norm1_out",), ("norm1_out", "norm2_out")}  # dense first layers, MoE
    dense = layer_list(load_model("llama3-8b")).kinds
    assert all(norm_drops(pol, k) == () for k in dense)


def _gpt_oss_ctx():
    from planner.plan import PlanArrays

    return context(PlanArrays(tp=1, cp=1, pp=1, vpp=1, dp=64, mbs=4, gbs=1280, seq=4096, sharding=1, shard=1,
                              recompute=1, sp=0, schedule=0, precision=0, ep=64))


def test_rerun_bytes_by_hand():
    """gpt-oss-120b, a micro-batch of 4 x 4096 = 16,384 tokens, EP 64: layernorm + moe_act
    re-run per token the pre-MLP norm over h = 2880 (4 B per element: stack_db/megatron.yaml
    norm) and, on each of the top-4 expert rows, the clamped SwiGLU: the activation over
    f_e = 2880 outputs (6 B) and the clamp over the 2 x 2880 gate+up elements (8 B)."""
    kb = kernel_bytes(load_stack("megatron"), 0)
    assert (kb["norm"], kb["mlp_activation_gated"], kb["activation_clamp"]) == (4, 6, 8)
    kind = layer_list(load_model("gpt-oss-120b")).kinds[0]
    ctx = _gpt_oss_ctx()
    base = load_stack("megatron").selective
    per_token = 4 * 2880 + 4 * (6 * 2880 + 8 * 2 * 2880)
    both = rerun_kernel_bytes(modules_policy(["layernorm", "moe_act"], base), kind, ctx, kb)
    assert float(both) == pytest.approx(16384 * per_token, rel=1e-12)
    assert float(rerun_kernel_bytes(modules_policy(["layernorm"], base), kind, ctx, kb)) == pytest.approx(
        16384 * 4 * 2880, rel=1e-12)
    # Megatron's default policy re-runs no memory-bound kernel (the attention core only)
    assert float(rerun_kernel_bytes(base, kind, ctx, kb)) == 0.0


def _job(**kw):
    base = dict(model="qwen3-30b-a3b", hardware="h100-sxm", gpus=16, tp=1, pp=1, dp=16, ep=16, etp=1, micro_batch=1,
                global_batch=1024, seq_len=4096, sharding="zero1", recompute="selective", stack="megatron",
                moe_grouped_gemm=True)  # (moe_act needs it: startup.MEGATRON_MOE_ACT_GROUPED_GEMM)
    return Job(**{**base, **kw})


def test_memory_freed_by_hand():
    """Qwen3-30B-A3B (h 2048, 128 experts of width 768, top-8), one micro-batch of 4,096
    tokens, EP 16: layernorm + moe_act keep per layer, per token, 2h = 4,096 B (the pre-MLP
    norm output) and the 8 rows' activation outputs, 8 x 2 x 768 = 12,288 B, fewer than
    Megatron's default selective policy; the recompute buffer holds them for one layer."""
    s0, p0, _ = resolve(_job())
    s1, p1, _ = resolve(_job(recompute_modules=["core_attn", "layernorm", "moe_act"]))
    ll = layer_list(s0.model)
    st0, buf0, _ = layer_memory(s0, p0, context(p0, s0.moe_capacity_factor), ll)
    st1, buf1, _ = layer_memory(s1, p1, context(p1, s1.moe_capacity_factor), ll)
    freed = 4096 * (2 * 2048 + 8 * 2 * 768)
    assert float(st0[0] - st1[0]) == pytest.approx(freed, rel=1e-12)
    assert float(buf1[0] - buf0[0]) == pytest.approx(freed, rel=1e-12)


def test_step_slower_by_the_reruns(cli, tmp_path):
    """The same plan with layernorm + moe_act is slower than without recompute by more than
    their kernels cost; the default policy's attention-core re-run is not priced under them."""
    common = dict(model="gpt-oss-120b", hardware="h100-sxm", gpus=64, tp=1, pp=4, dp=16, ep=8, etp=1, micro_batch=1,
                  global_batch=1280, seq_len=4096, sharding="zero1", stack="megatron", moe_grouped_gemm=True)
    steps = {}
    for name, extra in (("none", dict(recompute="none")), ("mods", dict(recompute="selective",
                                                                         recompute_modules=["layernorm", "moe_act"])),
                        ("core", dict(recompute="selective", recompute_modules=["core_attn", "layernorm", "moe_act"]))):
        p = tmp_path / f"{name}.yaml"
        p.write_text(json.dumps({**common, **extra}))
        r = cli("explain", str(p), "--format", "json", "-q")
        assert r.exit_code == 0, r.stderr
        out = json.loads(r.stdout)
        steps[name] = out["time"]["step_s"]
        if name != "none":
            assert out["plan"]["recompute_modules"] == extra["recompute_modules"]
    assert steps["none"] < steps["mods"] < steps["core"]
    r = cli("explain", str(tmp_path / "mods.yaml"))
    assert r.exit_code == 0, r.stderr
    assert "recompute selective (layernorm moe_act)," in r.stdout


@pytest.mark.parametrize("extra, needle", [
    (dict(stack="torchtitan"), "has no option that names the modules"),
    (dict(recompute_modules=["mla_up_proj"]), "needs multi-latent attention"),
    (dict(recompute_modules=["mhc"]), "recompute_modules"),
])
def test_refused(cli, tmp_path, extra, needle):
    job = dict(model="qwen3-30b-a3b", hardware="h100-sxm", gpus=16, tp=1, pp=1, dp=16, ep=16, micro_batch=1,
               global_batch=1024, seq_len=4096, recompute="selective", recompute_modules=["layernorm"], stack="megatron")
    p = tmp_path / "job.yaml"
    p.write_text(json.dumps({**job, **extra}))
    r = cli("explain", str(p))
    assert r.exit_code == 2
    assert "error:" in r.stderr and needle in r.stderr and "Traceback" not in r.stderr


def test_records_price_their_modules(cli):
    """The records that state recompute_modules (six Megatron-Bridge gpt-oss rows, whose
    presets set layernorm + moe_act; three DeepSeek-V3 rows, two 25.11 ones and the GB200 BF16
    row of Bridge commit 00b7660be, whose presets set mla_up_proj) state selective recompute (Bridge sets it with them) and run them: their plan
    carries the modules and their assumed list no longer names recompute_modules as not priced."""
    import yaml

    path = ROOT / "tests/data/published_runs_moe.yaml"
    recs = {r["id"]: r for r in yaml.safe_load(path.read_text()) if r.get("recompute_modules")}
    assert len(recs) == 9 and all(r["recompute"] == "selective" for r in recs.values())
    assert sum(r["model"] == "deepseek-v3" for r in recs.values()) == 3
    r = cli("validate", str(path), "--ids", ",".join(recs), "--format", "json")
    assert r.exit_code == 0, r.stderr
    runs = json.loads(r.stdout)["runs"]
    assert len(runs) == 9
    for run in runs:
        want = ["mla_up_proj"] if recs[run["id"]]["model"] == "deepseek-v3" else ["layernorm", "moe_act"]
        assert recs[run["id"]]["recompute_modules"] == want
        assert run["plan"]["recompute"] == "selective" and run["plan"]["recompute_modules"] == want
        assert not any("recompute_modules" in json.dumps(a) for a in run["assumed"])


def test_megatron_export_and_reader_round_trip(cli, tmp_path):
    """export --format megatron writes --recompute-modules after --recompute-granularity
    selective; the Megatron reader reads them back into the job field, same prediction."""
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(dict(model="gpt-oss-120b", hardware="gb200-nvl72", gpus=64, tp=1, pp=1, dp=64, ep=64, etp=1,
                                   micro_batch=4, global_batch=1280, seq_len=4096, sharding="zero1",
                                   recompute="selective", recompute_modules=["layernorm", "moe_act"], stack="megatron",
                                   moe_grouped_gemm=True)))
    r = cli("export", str(job), "--format", "megatron")
    assert r.exit_code == 0, r.stderr
    assert "--recompute-granularity selective" in r.stdout and "--recompute-modules layernorm moe_act" in r.stdout
    script = tmp_path / "train.sh"
    script.write_text(r.stdout)
    a = cli("explain", str(job), "--format", "json", "-q")
    b = cli("explain", str(script), "--model", "gpt-oss-120b", "--hardware", "gb200-nvl72", "--format", "json", "-q")
    assert a.exit_code == 0 and b.exit_code == 0, b.stderr
    pa, pb = json.loads(a.stdout), json.loads(b.stdout)
    assert pb["plan"]["recompute_modules"] == ["layernorm", "moe_act"]
    assert pb["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(pa["throughput"]["tokens_per_s_per_gpu"], rel=1e-12)
    assert pb["memory"]["total_bytes"] == pytest.approx(pa["memory"]["total_bytes"], rel=1e-12)


def test_command_line_stack_drops_the_files_modules(tmp_path):
    """--recompute-modules is Megatron's: a command-line --stack without the option chooses its
    own selective policy, and the file's modules are named as not kept (cli/core.load_job)."""
    from planner.cli.core import load_job

    p = tmp_path / "rm.args"
    p.write_text("--num-layers 4 --hidden-size 512 --ffn-hidden-size 2048 --num-attention-heads 8 --seq-length 1024 "
                 "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --recompute-granularity "
                 "selective --recompute-modules core_attn layernorm --vocab-size 32000 --bf16\n")
    job, _ = load_job(p, {"gpus": 8})
    assert list(job.recompute_modules) == ["core_attn", "layernorm"]
    job, _ = load_job(p, {"gpus": 8, "stack": "torchtitan"})
    assert not job.recompute_modules


def _v2_lite(**kw):
    base = dict(model="deepseek-v2-lite", hardware="h100-sxm", gpus=8, tp=1, pp=1, dp=8, ep=8, etp=1, micro_batch=1,
                global_batch=64, seq_len=4096, sharding="zero1", recompute="selective", stack="megatron",
                moe_grouped_gemm=True)
    return Job(**{**base, **kw})


def _layer_bytes(job):
    s, p, _ = resolve(job)
    stored, buffers, _ = layer_memory(s, p, context(p, s.moe_capacity_factor), layer_list(s.model))
    return [float(x) for x in stored], [float(x) for x in buffers]


def test_block_modules_policy_and_drops():
    """mlp, moe, shared_experts checkpoint whole blocks (transformer_layer.py @d98e8a64 l. 537-539, moe_layer.py
    l. 247-255): the policy names them, keeps Megatron's standard list (the block inputs are the checkpoints'),
    and each kind drops what its block holds: mlp a dense layer's fused norm output, gate, up and activation output
    (an MoE layer ignores mlp: l. 537-539 is_moe_layer), moe an MoE layer's own tensors, shared_experts the shared
    experts' two."""
    base = load_stack("megatron").selective
    pol = modules_policy(["core_attn", "mlp", "moe", "shared_experts"], base)
    assert pol.recompute_blocks == ["mlp", "moe", "shared_experts"] and pol.keeps == MEGATRON_KEEPS
    dense, moe = layer_list(load_model("deepseek-v2-lite")).kinds
    assert block_drops(pol, dense) == ("norm2_out", "gate", "up", "act_out")
    assert set(block_drops(pol, moe)) == {"moe_router_logits", "moe_expert_in", "moe_expert_out", "moe_expert_gate_up",
                                          "moe_expert_act_out", "moe_shared_gate_up", "moe_shared_act_out"}
    shared = modules_policy(["shared_experts"], base)
    assert block_drops(shared, dense) == () and block_drops(shared, moe) == ("moe_shared_gate_up", "moe_shared_act_out")
    assert block_drops(modules_policy(["mlp"], base), moe) == () and block_drops(base, dense) == ()


def test_block_memory_freed_by_hand():
    """DeepSeek-V2-Lite (h 2048; the dense first layer's MLP 10,944 wide, SwiGLU; 64 experts of 1,408, top-6, 2
    shared experts of 1,408), TP 1, EP 8, one micro-batch of 4,096 tokens, bf16, per layer and token against
    Megatron's default policy [core_attn]:
      mlp (dense layer): norm2_out 2h = 4,096 + gate, up, act_out 3 x 2 x 10,944 = 65,664: 69,760 B; MoE layer 0;
      shared_experts (MoE layer): gate+up 2 x 2 x (2 x 1,408) = 11,264 + act 2 x 2,816 = 5,632: 16,896 B;
      moe (MoE layer): the 6 routed rows' inputs 6 x 2h = 24,576, gate+up 6 x 2 x 2 x 1,408 = 33,792, activation
      6 x 2 x 1,408 = 16,896, the shared experts' 16,896, and the routing saves (layers/moe.py routing_saved_bytes
      on the unfused alltoall path: the top-k's int64 indices 8 x 6 = 48 and the softmax-after-top-k's fp32 output
      4 x 6 = 24; the unfused permutation's int64 argsort and sorted indices 8 (64 + 6) = 560; the permuted bf16
      probabilities 2 x 6 = 12): 644; 92,804 B (the experts' outputs moe_expert_out and the router logits no
      mode keeps on this stack). Each re-run tensor joins the one-layer recompute buffer: the buffer grows by the
      same bytes."""
    st0, buf0 = _layer_bytes(_v2_lite())
    for mods, freed in ((["core_attn", "mlp"], (69760, 0)), (["core_attn", "shared_experts"], (0, 16896)),
                        (["core_attn", "moe"], (0, 92804)), (["core_attn", "mlp", "moe", "shared_experts"], (69760, 92804))):
        st1, buf1 = _layer_bytes(_v2_lite(recompute_modules=mods))
        for i in (0, 1):
            assert st0[i] - st1[i] == pytest.approx(4096 * freed[i], rel=1e-12, abs=1e-6), (mods, i)
            assert buf1[i] - buf0[i] == pytest.approx(4096 * freed[i], rel=1e-12, abs=1e-6), (mods, i)


def test_block_rerun_kernel_bytes_by_hand():
    """block_rerun_times with no GEMM seconds, unit speed and bandwidth and no permutation: the bytes of the
    memory-bound kernels inside each checkpoint, DeepSeek-V2-Lite, 4,096 tokens (stack_db/megatron.yaml: norm 4 B,
    SwiGLU 6 B per element of its output):
      mlp, dense layer: the fused pre-MLP norm over h and the activation over f: 4,096 (4 x 2,048 + 6 x 10,944);
      moe, MoE layer: the activation over the 6 routed rows' and the shared experts' outputs (the pre-MLP norm is the
      checkpoint's input, outside it): 4,096 x 6 x (6 x 1,408 + 2 x 1,408);
      shared_experts: its two GEMMs only (0 here)."""
    kb = kernel_bytes(load_stack("megatron"), 0)
    assert (kb["norm"], kb["mlp_activation_gated"]) == (4, 6)
    s, p, _ = resolve(_v2_lite())
    ctx = context(p, s.moe_capacity_factor)
    dense, moe = layer_list(s.model).kinds
    base = load_stack("megatron").selective

    def run(mods, kind):
        return float(block_rerun_times(modules_policy(mods, base), kind, ctx, kb, {}, 1.0, 1.0, 0.0))
    assert run(["mlp"], dense) == pytest.approx(4096 * (4 * 2048 + 6 * 10944), rel=1e-12)
    assert run(["mlp"], moe) == 0.0 and run(["moe"], dense) == 0.0
    assert run(["moe"], moe) == pytest.approx(4096 * 6 * (6 * 1408 + 2 * 1408), rel=1e-12)
    assert run(["shared_experts"], moe) == 0.0
    # the GEMM seconds as given, over the stack's speed
    times = {"mlp_up": 3.0, "mlp_down": 1.0, "router": 0.5, "shared_up": 2.0, "shared_down": 1.0, "expert_up": 4.0,
             "expert_down": 2.0}
    pol = modules_policy(["shared_experts"], base)
    assert float(block_rerun_times(pol, moe, ctx, kb, times, 2.0, 1.0, 0.0)) == pytest.approx(1.5, rel=1e-12)


def test_block_modules_step_and_exchange(cli, tmp_path):
    """Each block module makes the step slower than Megatron's default policy alone (its re-run forward GEMMs);
    moe re-runs the dispatch and combine all-to-alls inside its checkpoint (moe_layer.py @d98e8a64 l. 658-719:
    sac_rerun_s > 0, which the default policy leaves at 0)."""
    common = dict(model="deepseek-v2-lite", hardware="h100-sxm", gpus=16, tp=1, pp=1, dp=16, ep=16, etp=1,
                  micro_batch=1, global_batch=64, seq_len=4096, sharding="zero1", stack="megatron", moe_grouped_gemm=True,
                  recompute="selective")
    out = {}
    for name, mods in (("core", ["core_attn"]), ("mlp", ["core_attn", "mlp"]), ("shared", ["core_attn", "shared_experts"]),
                       ("moe", ["core_attn", "moe"])):
        p = tmp_path / f"{name}.yaml"
        p.write_text(json.dumps({**common, "recompute_modules": mods}))
        r = cli("explain", str(p), "--format", "json", "-q")
        assert r.exit_code == 0, r.stderr
        out[name] = json.loads(r.stdout)
    step = {k: v["time"]["step_s"] for k, v in out.items()}
    assert step["core"] < step["mlp"] and step["core"] < step["shared"] < step["moe"]
    assert out["core"]["moe"]["sac_rerun_s"] == 0.0 and out["moe"]["moe"]["sac_rerun_s"] > 0.0
    assert out["moe"]["memory"]["total_bytes"] < out["core"]["memory"]["total_bytes"]


def test_megatron_args_shared_experts_recompute(cli, tmp_path):
    """A Megatron-LM argument file with shared experts (Megatron-LM CI's gpt3_moe tp4 ep2 etp2 pp2 test,
    --moe-shared-expert-intermediate-size) takes --recompute-granularity selective --recompute-modules shared_experts
    moe into the job (priced), and with --moe-shared-expert-overlap is refused as Megatron-Core refuses it
    (transformer_config.py @d98e8a64 l. 1991-1998)."""
    src = ROOT / "tests/data/megatron_ci/args/moe__gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer__dev_dgx_h100.args"
    base = src.read_text().strip() + " --recompute-granularity selective --recompute-modules shared_experts moe"
    ok, bad = tmp_path / "ok.args", tmp_path / "bad.args"
    ok.write_text(base + "\n")
    bad.write_text(base + " --moe-shared-expert-overlap\n")
    r = cli("explain", str(ok), "--gpus", "8", "--hardware", "h100-sxm", "--format", "json", "-q")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["recompute_modules"] == ["shared_experts", "moe"]
    r = cli("explain", str(bad), "--gpus", "8", "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "--recompute-modules shared_experts with --moe-shared-expert-overlap: Megatron-Core refuses it" in r.stderr
