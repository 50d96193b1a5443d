"""Megatron-Bridge's MoE recipes (planner/trainers/bridge_moe.py, issue 22): DeepSeek-V3's and Qwen3 MoE's
pre-training recipes at NVIDIA-NeMo/Megatron-Bridge @dc805f5cf read into the job as the recipe builds them, and
fit --export of a MoE plan written as the recipe plus overrides that read back as the priced plan."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.trainers import detect_format, load_trainer_config
from planner.trainers.export import plan_signature

from conftest import assert_one_error, fit_exports

RUN = "scripts/training/run_recipe.py"


def _launch(tmp_path, recipe: str, nodes: int, *overrides: str):
    f = tmp_path / "launch.sh"
    f.write_text(f"torchrun --nproc_per_node 8 --nnodes {nodes} {RUN} --recipe {recipe} {' '.join(overrides)}\n")
    return f


def test_deepseek_v3_recipe_reads_as_it_builds(tmp_path):
    """deepseek_v3_pretrain_config (recipes/deepseek/deepseek_v3.py @dc805f5cf l. 52-198) on 1,024 H800 (compute
    capability 9.0), by hand: TP 2, PP 16, no VP, CP 1, EP 64, ETP 1, SP on, 4,096 tokens (l. 72-81); MTP 1 (l. 84);
    the (16, 1) layout E+4 | 4 x 14 | 1+mtp+loss (l. 42): 61 decoder layers with the 3 units of the last chunk's end,
    64 / 16 = 4 a chunk (loss_layers_in_pipeline_split 3); alltoall with backend hybridep (l. 105-106) turned into flex
    by apply_flex_dispatcher_backend on major 9 (flex_dispatcher_backend.py l. 54-69); global batch 4,096, micro-batch
    1, 1,000,000 iterations (l. 110-112); selective recompute (l. 138); the permute fusion and grouped GEMM, no router
    fusion (l. 131-133); TE cross-entropy (l. 134-135); MixedPrecisionConfig(bf16, grad_reduce_in_fp32=False)
    (l. 146-152): bf16 gradients; the precision-aware optimizer with fp32 main weights and bf16 main gradients and
    moments (l. 161-165): 2 + 2 + 4 + 4 B; the provider's router (deepseek_v3_bridge.py l. 62-72): pre-softmax,
    fp32, seq_aux_loss 1e-4 with the expert bias (aux-loss-free balancing), no RoPE fusion."""
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 128)
    assert detect_format(f) == "megatron-bridge"
    cfg = load_trainer_config(f, hardware="h800-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["stack"]) == ("deepseek-v3", 1024, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["ep"], j["etp"], j["schedule"]) == (2, 16, 1, 1, 64, 1, "1f1b")
    assert (j["sequence_parallel"], j["seq_len"], j["micro_batch"], j["global_batch"]) == (True, 4096, 1, 4096)
    assert j["tokens"] == 1_000_000 * 4096 * 4096
    assert (j["mtp_layers"], j["loss_layers_in_pipeline_split"]) == (1, 3)
    assert j["account_for_embedding_in_pipeline_split"] is False
    assert (j["moe_dispatcher"], j["recompute"], j["precision"]) == ("hybridep", "selective", "bf16")
    assert (j["moe_permute_fusion"], j["moe_router_fusion"], j["moe_grouped_gemm"]) == (True, False, True)
    assert (j["moe_router_pre_softmax"], j["moe_router_dtype"]) == (True, "fp32")
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"]) == ("aux_loss_free", 0.0001)
    assert j["bytes_per_param"] == {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 4.0}
    assert (j["apply_rope_fusion"], j["cross_entropy_fusion_impl"], j["sharding_mode"]) == (False, "te",
                                                                                          "distributed_optimizer")
    assert "ep_comm_overlap" not in j and j["tp_comm_overlap"] is False  # deepseek_v3.py l. 168-170


def test_deepseek_v3_32nodes_recipe(tmp_path):
    """deepseek_v3_pretrain_config_32nodes (deepseek_v3.py l. 201-340) on 256 GPUs: PP 8, EP 32 (l. 223, 228), full
    uniform recompute of 1 layer (l. 288-290), the (8, 1) layout E+8 | 8 x 6 | 5+mtp+loss (l. 40): 61 + 3 = 64
    units, 8 a chunk."""
    j = load_trainer_config(_launch(tmp_path, "deepseek_v3_pretrain_config_32nodes", 32), hardware="h800-sxm").job
    assert (j["tp"], j["pp"], j["ep"], j["recompute"], j["loss_layers_in_pipeline_split"]) == (2, 8, 32, "full", 3)
    assert "recompute_layers" not in j  # uniform, 1 layer a chunk: every layer's input saved


def test_qwen3_30b_a3b_recipe(tmp_path):
    """qwen3_30b_a3b_pretrain_config (recipes/qwen/qwen3_moe.py l. 26-130): TP 4, PP 2, EP 4, ETP 1, SP, 4,096 tokens
    (l. 44-53), full uniform recompute (l. 83-85), over _pretrain_common's global batch 32, micro-batch 2, 300,000
    iterations (recipes/common.py l. 64-67); the provider's aux_loss 1e-3 without pre-softmax (qwen3_moe_bridge.py
    l. 57-60); alltoall with backend deepep (l. 58-59), flex on the H100's major 9 (flex_dispatcher_backend.py
    l. 47-53); the gradients fp32 (bf16_mixed): no bytes_per_param. On a GPU whose entry gives no compute capability
    the recipe's dispatcher is not read."""
    f = _launch(tmp_path, "qwen3_30b_a3b_pretrain_config", 1)
    with pytest.raises(PlannerError, match="picks its MoE dispatcher by the GPU's compute capability"):
        load_trainer_config(f, hardware="mi300x")
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["model"], j["tp"], j["pp"], j["ep"], j["etp"]) == ("qwen3-30b-a3b", 4, 2, 4, 1)
    assert (j["micro_batch"], j["global_batch"], j["tokens"]) == (2, 32, 300000 * 32 * 4096)
    assert (j["recompute"], j["moe_dispatcher"]) == ("full", "deepep")
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"], j["moe_router_pre_softmax"]) == ("aux_loss", 0.001, False)
    assert "bytes_per_param" not in j and "moe_router_dtype" not in j and j["mtp_layers"] == 0


def test_qwen3_235b_recipe_account_for(tmp_path):
    """qwen3_235b_a22b_pretrain_config (qwen3_moe.py l. 133-240): TP 4, PP 16, CP 2, EP 8, account_for_* true
    (l. 166-167): 94 + 2 = 96 units, 6 a stage; no recompute (l. 198)."""
    j = load_trainer_config(_launch(tmp_path, "qwen3_235b_a22b_pretrain_config", 64), hardware="h100-sxm").job
    assert (j["model"], j["tp"], j["pp"], j["cp"], j["ep"], j["recompute"]) == ("qwen3-235b-a22b", 4, 16, 2, 8, "none")
    assert j["account_for_embedding_in_pipeline_split"] and j["account_for_loss_in_pipeline_split"]


def test_deepep_on_compute_capability_10_is_decided_by_name(tmp_path):
    """apply_flex_dispatcher_backend takes deepep on major 10 only on a B200 / B300, by the device's name
    (flex_dispatcher_backend.py l. 47-53): the launch must name its dispatcher; named, it is read."""
    f = _launch(tmp_path, "qwen3_30b_a3b_pretrain_config", 1)
    with pytest.raises(PlannerError, match="by the device's name"):
        load_trainer_config(f, hardware="b200")
    f = _launch(tmp_path, "qwen3_30b_a3b_pretrain_config", 1, "model.moe_token_dispatcher_type=alltoall")
    assert load_trainer_config(f, hardware="b200").job["moe_dispatcher"] == "alltoall"


def test_gpt_oss_20b_recipe_reads_as_it_builds(tmp_path):
    """gpt_oss_20b_pretrain_config (recipes/gpt_oss/gpt_oss.py @dc805f5cf l. 33-151) on 32 H100, by hand: TP 2, PP 4,
    no VP, CP 1, EP 4, ETP 1, SP, 4,096 tokens (l. 50, 54-63); global batch 512, micro-batch 1, 1,000,000 iterations
    (l. 81-83); no recompute (l. 108); the dispatcher alltoall (l. 76): the recipe names deepep (l. 77) but never calls
    apply_flex_dispatcher_backend, so alltoall runs even on the H100 that takes deepep; grouped GEMM and the permute
    fusion, no router fusion (l. 101-103), native cross-entropy (l. 105); fp32 optimizer states (l. 122-126), bf16_mixed
    (fp32 gradient reduction): no bytes_per_param; the provider's (gpt_oss_bridge.py l. 76-83): no pre-softmax, the
    "none" balancing (no auxiliary loss: coefficient 0), no bias-dropout fusion. The model: the one catalog entry of the
    provider's shape, per-layer windows included (128 keys on the even layers). cp_comm_type a2a (l. 66) is ignored at
    CP 1; the per-token loss (l. 73) and the learnable softmax (gpt_oss_bridge.py l. 95) are listed as not priced."""
    f = _launch(tmp_path, "gpt_oss_20b_pretrain_config", 4)
    cfg = load_trainer_config(f, hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["stack"]) == ("gpt-oss-20b", 32, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["ep"], j["etp"], j["schedule"]) == (2, 4, 1, 1, 4, 1, "1f1b")
    assert (j["sequence_parallel"], j["seq_len"], j["micro_batch"], j["global_batch"]) == (True, 4096, 1, 512)
    assert j["tokens"] == 1_000_000 * 512 * 4096
    assert (j["moe_dispatcher"], j["recompute"], j["precision"], j["mtp_layers"]) == ("alltoall", "none", "bf16", 0)
    assert (j["moe_permute_fusion"], j["moe_router_fusion"], j["moe_grouped_gemm"]) == (True, False, True)
    assert (j["moe_aux_loss_coeff"], j["moe_router_pre_softmax"], j["bias_dropout_fusion"]) == (0.0, False, False)
    assert "cross_entropy_fusion_impl" not in j and j["cross_entropy_fusion"] is True  # native
    assert "bytes_per_param" not in j and "cp_comm_type" not in j and "moe_router_dtype" not in j
    assert j["sharding_mode"] == "distributed_optimizer"
    assert "model.cp_comm_type=a2a (context_parallel_size 1: no context parallelism)" in cfg.ignored
    assert [x.split(" ")[0] for x in cfg.not_modelled] == ["model.calculate_per_token_loss=true",
                                                         "model.softmax_type=learnable"]


def test_gpt_oss_120b_recipe_cp_comm_type(cli, tmp_path):
    """gpt_oss_120b_pretrain_config (gpt_oss.py l. 154-262): EP 16 (l. 181); with CP 2 its cp_comm_type a2a (l. 187)
    is the job's (planner/cp_comm_type.py); model.cp_comm_type=p2p (None too: transformer_engine.py @905c0e386
    l. 1445-1446) is the stack's default, which check refuses on the windowed layers (TE asserts a window only with
    a2a or all_gather: start-up rule MEGATRON_CP_SLIDING_WINDOW); a list, or a2a+p2p without its sizes, is refused,
    named."""
    f = _launch(tmp_path, "gpt_oss_120b_pretrain_config", 16, "model.context_parallel_size=2")
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["model"], j["tp"], j["pp"], j["cp"], j["ep"], j["cp_comm_type"]) == ("gpt-oss-120b", 2, 4, 2, 16, "a2a")
    f = _launch(tmp_path, "gpt_oss_120b_pretrain_config", 16, "model.context_parallel_size=2",
                "model.cp_comm_type=p2p")
    assert "cp_comm_type" not in load_trainer_config(f, hardware="h100-sxm").job
    r = cli("check", f, "--hardware", "h100-sxm")  # after the reader's not-modelled warning, the start-up rule
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "error: " in r.stderr and "breaks start-up rule MEGATRON_CP_SLIDING_WINDOW" in r.stderr
    f = _launch(tmp_path, "gpt_oss_120b_pretrain_config", 16, "model.context_parallel_size=2",
                "model.cp_comm_type=a2a+p2p")
    with pytest.raises(PlannerError, match=r"model.cp_comm_type=a2a\+p2p without model.hierarchical_context_parallel_sizes"):
        load_trainer_config(f, hardware="h100-sxm")


def test_gpt_oss_recipe_model_is_matched_by_fields(tmp_path):
    """The recipe's model is found by its fields, the per-layer windows among them (no name read): --model of another
    shape (gpt-oss-120b's 36 layers for the 20B recipe) is refused, naming the field."""
    f = _launch(tmp_path, "gpt_oss_20b_pretrain_config", 4)
    with pytest.raises(PlannerError, match="num_layers = 36"):
        load_trainer_config(f, model="gpt-oss-120b", hardware="h100-sxm")
    from planner.catalog import load_model
    from planner.trainers.megatron_bridge import recipe_for

    assert recipe_for(load_model("gpt-oss-20b")) == "gpt_oss_20b_pretrain_config"
    assert recipe_for(load_model("gpt-oss-120b")) == "gpt_oss_120b_pretrain_config"
    assert recipe_for(load_model("mistral-7b")) is None  # a window on every layer (layer_pattern [swa]): no recipe


H800 = ["--hardware", "h800-sxm", "--stack", "megatron-bridge"]
H100 = ["--hardware", "h100-sxm", "--stack", "megatron-bridge"]
ROUND_TRIPS = [
    # the task's case: the search's top plan for DeepSeek-V3 on 2,048 H800
    ("dsv3-2048-h800", "deepseek_v3_pretrain_config", ["--model", "deepseek-v3", "--gpus", "2048", *H800]),
    # PP 16: the split the search places (the embedding counted) written as Megatron-Core's layout string
    ("dsv3-1024-pp16", "deepseek_v3_pretrain_config", ["--model", "deepseek-v3", "--gpus", "1024", "--pp", "16", *H800]),
    ("qwen3-30b-8", "qwen3_30b_a3b_pretrain_config", ["--model", "qwen3-30b-a3b", "--gpus", "8", *H100]),
    ("qwen3-235b-512-vpp", "qwen3_235b_a22b_pretrain_config",
     ["--model", "qwen3-235b-a22b", "--gpus", "512", "--pp", "8", "--vpp", "2", *H100]),
    ("gpt-oss-20b-32", "gpt_oss_20b_pretrain_config", ["--model", "gpt-oss-20b", "--gpus", "32", *H100]),
    # DeepSeek-V2 / V2-Lite (bridgemore): MLA with and without the query latent, group-limited softmax routing
    ("dsv2-lite-8", "deepseek_v2_lite_pretrain_config", ["--model", "deepseek-v2-lite", "--gpus", "8", *H100]),
    ("dsv2-128", "deepseek_v2_pretrain_config", ["--model", "deepseek-v2", "--gpus", "128", *H100]),
    # Qwen3-Next (bridgemore): its Gated DeltaNet / gated-attention layers matched by ModelSpec.layer_mixers
    ("qwen3-next-32", "qwen3_next_80b_a3b_pretrain_config", ["--model", "qwen3-next-80b-a3b", "--gpus", "32", *H100]),
    # PP 4 (36 layers, 9 a stage) and CP 2 with the recipe's a2a (the windowed layers need a2a or all_gather)
    ("gpt-oss-120b-128-cp2", "gpt_oss_120b_pretrain_config",
     ["--model", "gpt-oss-120b", "--gpus", "128", "--pp", "4", "--cp", "2", "--cp-comm-type", "a2a", *H100]),
    ("gpt-oss-20b-16-allgather", "gpt_oss_20b_pretrain_config",
     ["--model", "gpt-oss-20b", "--gpus", "16", "--cp", "2", "--cp-comm-type", "all_gather", *H100]),
]


@pytest.fixture(scope="module")
def fit_export(tmp_path_factory):
    """conftest.fit_exports for megatron-bridge: each round trip's fit --export and its row 1 run once a module
    (test_the_deepseek_v3_top_plan_on_2048_h800_as_written runs the dsv3-2048-h800 round trip's command)."""
    return fit_exports(tmp_path_factory.mktemp("bridge-moe-exports"), "megatron-bridge")


@pytest.mark.parametrize("name,recipe,args", ROUND_TRIPS, ids=[c[0] for c in ROUND_TRIPS])
def test_moe_fit_export_reads_back_as_the_priced_plan(cli, fit_export, name, recipe, args):
    r, out, row = fit_export(name, args)
    assert r.exit_code == 0, r.stderr  # fit --export read the file back: same plan, same memory
    text = out.read_text()
    assert f"{RUN} \\\n    --recipe {recipe} \\\n" in text
    hw = args[args.index("--hardware") + 1]
    assert row is not None  # the row of `fit ARGS --top 1 --format json` (fit_export)
    back = json.loads(cli("explain", out, "--hardware", hw, "--format", "json").stdout)
    assert plan_signature(back["plan"]) == plan_signature(row["plan"])
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-9)
    assert back["time"]["step_s"] == pytest.approx(row["time"]["step_s"], rel=1e-9)
    checked = cli("check", out, "--hardware", hw)  # the start-up rules (EP x ETP in tp x dp x cp, ...) and memory
    assert checked.exit_code == 0 and checked.stdout.startswith(f"PASS {out}"), checked.stdout + checked.stderr
    p = row["plan"]
    disp = {"alltoall": ("alltoall", None), "allgather": ("allgather", None), "deepep": ("flex", "deepep"),
            "hybridep": ("flex", "hybridep")}[p["moe_dispatcher"] or "alltoall"]
    moments = "bfloat16" if p["bytes_per_param"] == "bf16-moments" else "float32"
    for key, value in (("model.expert_model_parallel_size", p["ep"]),
                       ("model.expert_tensor_parallel_size", p["etp"] or p["tp"]),
                       ("model.moe_token_dispatcher_type", disp[0]),
                       ("model.mtp_num_layers", p["mtp_layers"] or "null"),
                       ("model.overlap_moe_expert_parallel_comm", str(bool(p["ep_comm_overlap"])).lower()),
                       ("optimizer.exp_avg_dtype", moments), ("optimizer.exp_avg_sq_dtype", moments),
                       ("model.moe_expert_capacity_factor", p["moe_capacity_factor"] or "null")):
        assert f"    {key}={value} \\\n" in text
    if p["cp"] > 1 and "gpt_oss" in recipe:  # the plan's CP variant over the recipe's a2a
        assert f"    model.cp_comm_type={p.get('cp_comm_type') or 'p2p'} \\\n" in text
        assert back["plan"].get("cp_comm_type") == p.get("cp_comm_type")
    if disp[1]:
        assert f"    model.moe_flex_dispatcher_backend={disp[1]} \\\n" in text
        # CUDA_DEVICE_MAX_CONNECTIONS 32 under a flex backend (recipes/run_plugins.py l. 573-575), on Hopper 1 only
        # where TP runs without the EP a2a overlap (l. 584-592)
        want = 1 if p["tp"] > 1 and not p["ep_comm_overlap"] else 32
        assert f"export CUDA_DEVICE_MAX_CONNECTIONS={want}\n" in text


def test_the_deepseek_v3_top_plan_on_2048_h800_as_written(fit_export):
    """What the 2,048-H800 export holds beyond the round trip: the recipe's own layout cleared where the plan runs
    another pipeline (pp 1: null), its recompute and dispatcher written over, the fp8 recipe in its MixedPrecisionConfig
    fields (deepseek_v3.py l. 146-152 holds an object)."""
    r, out, row = fit_export("dsv3-2048-h800", ["--model", "deepseek-v3", "--gpus", "2048", *H800])  # as the round trip
    assert r.exit_code == 0, r.stderr
    row = row["plan"]  # of `fit ... --top 1 --format json` (fit_export)
    text = out.read_text()
    layout = "null" if row["pp"] == 1 else None
    if layout:
        assert "    model.pipeline_model_parallel_layout=null \\\n" in text
    assert f"    mixed_precision.fp8_recipe={row['fp8_recipe']} \\\n" in text
    assert "    optimizer.use_precision_aware_optimizer=true \\\n" in text  # bf16 moments need it
    assert "    model.moe_shared_expert_overlap=false \\\n" in text


def test_moe_reader_refusals(tmp_path):
    # the EP overlap on the 32-node recipe: Bridge asserts vpp where pp > 1 and no full recompute (comm_overlap.py
    # l. 468-502)
    f = _launch(tmp_path, "deepseek_v3_pretrain_config_32nodes", 32, "comm_overlap.overlap_moe_expert_parallel_comm=true")
    with pytest.raises(PlannerError, match="virtual_pipeline_model_parallel_size.*no full recompute"):
        load_trainer_config(f, hardware="h800-sxm")
    # a layout beside account_for_*: Megatron-Core refuses them together (transformer_config.py @905c0e386 l. 1430-1447)
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 128, "model.account_for_loss_in_pipeline_split=true")
    with pytest.raises(PlannerError, match="Megatron-Core refuses them together"):
        load_trainer_config(f, hardware="h800-sxm")
    # the recipe's (16, 1) layout at another pp it does not divide into (16 chunks on pp 5)
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 80, "model.pipeline_model_parallel_size=5")
    with pytest.raises(PlannerError, match="not a multiple of"):
        load_trainer_config(f, hardware="h800-sxm")
    # an optimizer state dtype the planner does not price
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 128, "optimizer.exp_avg_dtype=uint8")
    with pytest.raises(PlannerError, match="optimizer.exp_avg_dtype=uint8"):
        load_trainer_config(f, hardware="h800-sxm")
    # a dispatcher the planner does not price
    f = _launch(tmp_path, "qwen3_30b_a3b_pretrain_config", 1, "model.moe_token_dispatcher_type=flex",
                "model.moe_flex_dispatcher_backend=ncclep")
    with pytest.raises(PlannerError, match="not a dispatcher the planner prices"):
        load_trainer_config(f, hardware="h100-sxm")


def test_moe_start_up_rules_and_untranscribed_recipes(cli, tmp_path):
    # ETP 2 x EP 64 = 128 expert ranks in TP 2 x DP 32 = 64: Megatron-Core's expert grid does not fold (start-up rule)
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 128, "model.expert_tensor_parallel_size=2")
    r = cli("check", f, "--hardware", "h800-sxm")  # after the reader's warning (the recipe's DDP bucket), the error
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "error: " in r.stderr and "etp=2 x ep=64 does not divide the tp x dp x cp ranks (64)" in r.stderr
    # Qwen3-Next's SFT recipe and gpt-oss's SFT one: recipes not transcribed (DeepSeek-V2's are since bridgemore:
    # tests/test_bridge_more_recipes.py; gpt-oss's fp8 and MXFP8 pre-training variants since bridgecp:
    # tests/test_bridge_gpt_oss_lowprec.py)
    for name in ("qwen3_next_80b_a3b_sft_config", "gpt_oss_20b_sft_config"):
        f = _launch(tmp_path, name, 32)
        assert_one_error(cli("explain", f, "--hardware", "h800-sxm"), "not a recipe the planner transcribes")
    # a layer_pattern model no recipe builds (Gemma 3's 5:1 windows)
    assert_one_error(cli("export", "--format", "megatron-bridge", "--model", "gemma3-27b", "--gpus", "8", *H100),
                     "model gemma3-27b is none of the transcribed recipes' models")
    # a CP variant at cp 1: the layers ignore model.cp_comm_type without CP, so the plan lists none (plan.plan_dict,
    # planner/cp_comm_type.py) and the file writes none (the recipe's a2a stands, which the reader ignores at cp 1)
    r = cli("export", "--format", "megatron-bridge", "--model", "gpt-oss-20b", "--gpus", "8", "--cp-comm-type", "a2a",
            *H100)
    assert r.exit_code == 0, r.stderr
    assert "model.cp_comm_type" not in r.stdout
    assert "warning: export megatron-bridge: cp_comm_type a2a at cp 1: without context" in r.stderr


def test_moe_writer_balancing(cli, tmp_path):
    """Forced balancing (moe_rank_imbalance 1.0) is model.moe_router_force_load_balancing=true and reads back so; a
    stated imbalance other than 1.0 has no ConfigContainer key: refused, named. The plan's PP 16 split (the embedding
    counted as 2 layers, the search's own) is written as Megatron-Core's layout string over the recipe's (16, 1) one."""
    args = ["--model", "deepseek-v3", "--gpus", "1024", "--tp", "2", "--pp", "16", "--ep", "64", "--etp", "1", *H800]
    assert_one_error(cli("export", "--format", "megatron-bridge", *args, "--moe-rank-imbalance", "1.3"),
                     "moe_rank_imbalance 1.3")
    out = tmp_path / "forced.sh"
    assert cli("export", "--format", "megatron-bridge", *args, "--moe-rank-imbalance", "1.0", "-o", out).exit_code == 0
    text = out.read_text()
    assert "    model.moe_router_force_load_balancing=true \\\n" in text
    row = json.loads(cli("explain", *args, "--moe-rank-imbalance", "1.0", "--format", "json").stdout)
    back = json.loads(cli("explain", out, "--hardware", "h800-sxm", "--format", "json").stdout)
    assert back["plan"]["moe_rank_imbalance"] == 1.0
    assert plan_signature(back["plan"]) == plan_signature(row["plan"])
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-9)
    # 61 layers on 16 stages: neither even nor account_for_* (61, 62, 63 are no multiples of 16), so a layout
    assert "    model.pipeline_model_parallel_layout='\"E" in text and "mL\"' \\\n" in text


def test_vocab_rows_checked_against_the_recipes_tokenizer(tmp_path):
    """model.vocab_size is checked against the tokenizer the recipe builds (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
    training/setup.py l. 175-181, _validate_and_set_vocab_size l. 467-498: fewer rows than the tokenizer's vocab_size
    raise ValueError; at least as many are built unpadded). The Qwen3 MoE recipes build the Hugging Face tokenizer of
    their model (qwen3_moe.py l. 36-37; recipes/common.py l. 111-114), vocab_size len(tokenizer) (Megatron-Core
    905c0e386 huggingface_tokenizer.py l. 291-293): Qwen3's 151,643 BPE tokens + 26 added (ids 151,643-151,668) =
    151,669, not the Llama recipes' 32,000-token NullTokenizer (llama3.py l. 234-236), which was the only figure
    checked. model.vocab_size=null builds the tokenizer's size padded to make_vocab_size_divisible_by x tp
    (gpt_provider.py l. 244-250, vocab_utils.py l. 57-71; the provider's divisor 128, the largest power of 2 up to
    128 dividing 151,936 = 128 x 1,187: model_bridge.py l. 1092-1120): at the recipe's TP 4, 151,669 up to a
    multiple of 512, 297 x 512 = 152,064 rows."""
    q = "qwen3_30b_a3b_pretrain_config"
    for rows in (40000, 151668):  # >= 32,000, below Qwen3's 151,669 tokens: Bridge's ValueError
        with pytest.raises(PlannerError, match="fewer rows than the Hugging Face tokenizer Qwen/Qwen3-30B-A3B's "
                                               "151,669 tokens"):
            load_trainer_config(_launch(tmp_path, q, 1, f"model.vocab_size={rows}"), hardware="h100-sxm")
    j = load_trainer_config(_launch(tmp_path, q, 1, "model.vocab_size=152064"), hardware="h100-sxm").job
    assert j["padded_vocab_size"] == 152064
    assert "padded_vocab_size" not in load_trainer_config(_launch(tmp_path, q, 1), hardware="h100-sxm").job
    cfg = load_trainer_config(_launch(tmp_path, q, 1, "model.vocab_size=null"), hardware="h100-sxm")
    assert (cfg.job["tp"], cfg.job["padded_vocab_size"]) == (4, 297 * 512)
    assert any("padded_vocab_size 152,064: model.vocab_size=null" in a for a in cfg.assumed)
    # the Hugging Face tokenizer is read whole: tokenizer.vocab_size is not read (tokenizer.py l. 58-66)
    cfg = load_trainer_config(_launch(tmp_path, q, 1, "tokenizer.vocab_size=1000"), hardware="h100-sxm")
    assert any(i.startswith("tokenizer.vocab_size=1000 (a HuggingFaceTokenizer is read whole") for i in cfg.ignored)
    # a tokenizer whose size the planner does not know: the check is listed as not made; null rows refused
    cfg = load_trainer_config(_launch(tmp_path, q, 1, "tokenizer.tokenizer_model=Qwen/Qwen2.5-7B"), hardware="h100-sxm")
    assert any("tokenizer HuggingFaceTokenizer Qwen/Qwen2.5-7B: its size" in n for n in cfg.not_modelled)
    with pytest.raises(PlannerError, match="which the planner does not know"):
        load_trainer_config(_launch(tmp_path, q, 1, "tokenizer.tokenizer_model=Qwen/Qwen2.5-7B", "model.vocab_size=null"),
                            hardware="h100-sxm")
    # the Llama recipes' NullTokenizer: its tokenizer.vocab_size override is the figure (null_tokenizer.py l. 14-16,
    # 50-52: vocab_size - 1 passed, + 1 returned); null rows pad 32,000 to 32,000 (128 x tp 1), fewer than the model's
    l8 = "llama3_8b_pretrain_config"
    assert load_trainer_config(_launch(tmp_path, l8, 1, "model.vocab_size=128512"),
                               hardware="h100-sxm").job["padded_vocab_size"] == 128512
    with pytest.raises(PlannerError, match="fewer rows than the NullTokenizer's 129,000 tokens"):
        load_trainer_config(_launch(tmp_path, l8, 1, "tokenizer.vocab_size=129000", "model.vocab_size=128512"),
                            hardware="h100-sxm")
    with pytest.raises(PlannerError, match="32,000 rows .* fewer than the recipe's model's 128,256"):
        load_trainer_config(_launch(tmp_path, l8, 1, "model.vocab_size=null"), hardware="h100-sxm")


def test_qwen3_rows_between_its_tokens_and_its_padded_rows_are_priced(cli, tmp_path):
    """Bridge builds model.vocab_size=V rows unpadded for any V of at least the tokenizer's 151,669 tokens
    (training/setup.py @dc805f5cf _validate_and_set_vocab_size l. 467-498), so 151,669 <= V < 151,936 (the Hugging
    Face config's padded rows, the catalog's vocab_size) is a run Bridge accepts: the model then has V rows, every
    token with one (the catalog entry's tokenizer_vocab_size 151,669, tokenizer_config.json added_tokens_decoder).
    The planner priced nothing below 151,936 (plan.with_padded_vocab's floor was vocab_size); now its floor is the
    tokens. V = 151,672 (a multiple of the recipe's TP 4, which the vocab-parallel embedding needs): 264 rows fewer
    than 151,936, untied, so 2 x 264 x 2,048 = 1,081,344 parameters fewer, the embedding 151,672 x 2,048 =
    310,624,256. model.vocab_size=null at TP 2: 151,669 padded to a multiple of 128 x 2, 593 x 256 = 151,808 rows
    (gpt_provider.py l. 244-250), below 151,936, also priced now. Below 151,669 stays refused (Bridge's ValueError)."""
    q = "qwen3_30b_a3b_pretrain_config"

    def params(*o):
        r = cli("explain", _launch(tmp_path, q, 1, *o), "--hardware", "h100-sxm", "--format", "json")
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["params"]

    own, fewer = params(), params("model.vocab_size=151672")
    assert (own["embedding"], own["output"]) == (151936 * 2048, 151936 * 2048)
    assert (fewer["embedding"], fewer["output"]) == (310_624_256, 310_624_256)
    assert own["total"] - fewer["total"] == 1_081_344
    cfg = load_trainer_config(_launch(tmp_path, q, 1, "model.vocab_size=null", "model.tensor_model_parallel_size=2"),
                              hardware="h100-sxm")
    assert (cfg.job["tp"], cfg.job["padded_vocab_size"]) == (2, 593 * 256)
    assert params("model.vocab_size=null", "model.tensor_model_parallel_size=2")["embedding"] == 151808 * 2048
    # the job file's padded_vocab_size, below the tokens: refused by the plan
    from planner.catalog import load_model
    from planner.plan import with_padded_vocab

    m = load_model("qwen3-30b-a3b")
    assert with_padded_vocab(m, 151672, 4).vocab_size == 151672
    with pytest.raises(PlannerError, match="below qwen3-30b-a3b's tokenizer's 151,669 tokens"):
        with_padded_vocab(m, 151668, 1)


def test_balancing_type_and_coefficient_lists(cli, tmp_path):
    """Megatron-Core 905c0e386 takes a list of load-balancing types with a list of coefficients of the same length
    (transformer_config.py l. 636, 727-730; asserted l. 1220-1226). Its router computes each auxiliary loss with the
    coefficient of the type's first entry (router.py get_aux_loss_coeff l. 262-275) on one set of scores for them all
    (l. 639-665) after the same top-k routing, so [aux_loss, seq_aux_loss] with [1e-3, 1e-4] routes as one auxiliary
    loss: moe_load_balancing aux_loss (imbalance.py's rule), moe_aux_loss_coeff 1e-3 (the largest; any above 0 keeps
    the router's scores, layers/moe.py router_saved_terms), priced as the recipe's own aux_loss 1e-3 (qwen3_moe_bridge.py
    l. 43-63). [none, global_aux_loss] with [0.5, 0]: no loss computed (none's coefficient is never read,
    is_aux_loss_enabled l. 277-282), moe_aux_loss_coeff 0. Refused by name: sinkhorn in a list (router.py l. 611
    applies it only as the string), a coefficient list beside one type or of another length, quantile_balancing
    (no type at 905c0e386: Megatron-LM's later router)."""
    q = "qwen3_30b_a3b_pretrain_config"

    def read(*o):
        return load_trainer_config(_launch(tmp_path, q, 1, *o), hardware="h100-sxm")

    both = read("model.moe_router_load_balancing_type=[aux_loss,seq_aux_loss]", "model.moe_aux_loss_coeff=[0.001,0.0001]")
    assert (both.job["moe_load_balancing"], both.job["moe_aux_loss_coeff"]) == ("aux_loss", 0.001)
    assert any(a.startswith("model.moe_router_load_balancing_type=[aux_loss,seq_aux_loss] with") for a in both.assumed)
    j = read("model.moe_router_load_balancing_type=[none,global_aux_loss,none]", "model.moe_aux_loss_coeff=[0.5,0,0.7]").job
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"]) == ("aux_loss", 0.0)
    # the first entry of a type is its coefficient (list.index): seq_aux_loss 0 then 0.01 -> 0
    j = read("model.moe_router_load_balancing_type=[seq_aux_loss,seq_aux_loss]", "model.moe_aux_loss_coeff=[0,0.01]").job
    assert j["moe_aux_loss_coeff"] == 0.0
    # the expert bias still decides the rule (moe_job: force, then the bias, then the types)
    j = read("model.moe_router_load_balancing_type=[aux_loss]", "model.moe_aux_loss_coeff=[0.001]",
             "model.moe_router_enable_expert_bias=true").job
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"]) == ("aux_loss_free", 0.001)
    # one type `none` with a list of coefficients: get_aux_loss_coeff never reads it (router.py l. 262-275), no loss
    r = read("model.moe_router_load_balancing_type=none", "model.moe_aux_loss_coeff=[0,0.01]")
    assert (r.job["moe_load_balancing"], r.job["moe_aux_loss_coeff"]) == ("aux_loss", 0.0)
    assert any(a.startswith("model.moe_aux_loss_coeff=[0,0.01] beside model.moe_router_load_balancing_type=none: never "
                            "read") for a in r.assumed)
    f = _launch(tmp_path, q, 1, "model.moe_router_load_balancing_type=[aux_loss,seq_aux_loss]",
                "model.moe_aux_loss_coeff=[0.001,0.0001]")
    listed = json.loads(cli("explain", f, "--hardware", "h100-sxm", "--format", "json").stdout)
    own = json.loads(cli("explain", _launch(tmp_path, q, 1), "--hardware", "h100-sxm", "--format", "json").stdout)
    assert (listed["time"], listed["memory"]) == (own["time"], own["memory"])
    for o, match in [(("model.moe_router_load_balancing_type=[aux_loss,sinkhorn]", "model.moe_aux_loss_coeff=[0.001,0]"),
                      "sinkhorn in a list"),
                     (("model.moe_router_load_balancing_type=[aux_loss,seq_aux_loss]",), "of the same length"),
                     (("model.moe_router_load_balancing_type=[aux_loss,seq_aux_loss]", "model.moe_aux_loss_coeff=[0.001]"),
                      "of the same length"),
                     (("model.moe_aux_loss_coeff=[0.001]",), "beside the one type aux_loss: a list of coefficients goes "
                                                             "with a list of types"),
                     (("model.moe_router_load_balancing_type=sinkhorn", "model.moe_aux_loss_coeff=0.001"),
                      "asserts a coefficient of 0 under Sinkhorn"),
                     (("model.moe_router_load_balancing_type=[aux_loss,quantile_balancing]", "model.moe_aux_loss_coeff=[0,0]"),
                      "quantile_balancing is not a type a list"),
                     (("model.moe_router_load_balancing_type=quantile_balancing",), "not a type of Megatron-Core 905c0e386"),
                     (("model.moe_router_load_balancing_type=[]", "model.moe_aux_loss_coeff=[]"), "an empty list"),
                     (("model.moe_router_load_balancing_type=[aux_loss]", "model.moe_aux_loss_coeff=[-1]"),
                      "not coefficients >= 0")]:
        with pytest.raises(PlannerError, match=match):
            read(*o)


def test_shared_experts_recompute_with_shared_expert_overlap_refused(cli, tmp_path):
    """Megatron-Core refuses --recompute-modules shared_experts with --moe-shared-expert-overlap on a model with shared
    experts ('shared_experts recompute cannot work with --moe-shared-expert-overlap.', transformer_config.py @905c0e386
    l. 1355-1362): DeepSeek-V3's recipe with the overlap set back on over apply_flex_dispatcher_backend's false is
    refused, naming both; without the overlap it reads with the module (planner/recompute_modules.py)."""
    sel = ("model.recompute_granularity=selective", "model.recompute_modules=[mla_up_proj,shared_experts]")
    f = _launch(tmp_path, "deepseek_v3_pretrain_config", 128, *sel, "model.moe_shared_expert_overlap=true")
    r = cli("check", f, "--hardware", "h800-sxm")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "model.recompute_modules with shared_experts and model.moe_shared_expert_overlap=true" in r.stderr
    assert "hint: set model.moe_shared_expert_overlap=false, or leave shared_experts out" in r.stderr
    j = load_trainer_config(_launch(tmp_path, "deepseek_v3_pretrain_config", 128, *sel), hardware="h800-sxm").job
    assert (j["recompute"], j["recompute_modules"]) == ("selective", ["mla_up_proj", "shared_experts"])
