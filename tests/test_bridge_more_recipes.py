"""Megatron-Bridge recipes beyond Llama 3, DeepSeek-V3, Qwen3 MoE and gpt-oss (issue 22, bridgemore): Qwen3-Next's
pre-training recipe and DeepSeek-V2's two (with their catalog entries model_zoo/deepseek-v2.yaml,
deepseek-v2-lite.yaml) read as they build (planner/trainers/bridge_moe.py), and the recipes the planner refuses by name
with why: Qwen3-Next's SFT / PEFT, and Llama 4 (no recipe at NVIDIA-NeMo/Megatron-Bridge @dc805f5cf nor at HEAD
067f987df)."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_model
from planner.errors import PlannerError
from planner.schema import GatedDeltaNet, GlobalAttention, LayerKindSpec, layer_mixers_text
from planner.trainers import detect_format, load_trainer_config
from planner.trainers.megatron_bridge import recipe_for

from conftest import assert_one_error

RUN = "scripts/training/run_recipe.py"
RECIPE = "qwen3_next_80b_a3b_pretrain_config"
H100 = ["--hardware", "h100-sxm"]
def _launch(tmp_path, recipe: str, nodes: int, *overrides: str, name: str = "launch.sh"):
    f = tmp_path / name
    f.write_text(f"torchrun --nproc_per_node 8 --nnodes {nodes} {RUN} --recipe {recipe} {' '.join(overrides)}\n")
    return f


def test_qwen3_next_recipe_as_it_ships_prices_its_moe_recompute(cli, tmp_path):
    """qwen3_next.py @dc805f5cf l. 95-96: selective recompute of ["layernorm", "moe", "moe_act"]. Megatron-Core's "moe"
    module checkpoints the whole MoE block (moe_layer.py @905c0e386 l. 494-553: router, permutation, dispatch, experts,
    combine; only its input kept), priced (planner/recompute_modules.py): the recipe reads as it ships, and its
    plan is lighter and slower than the same recipe without "moe" (the block's saves re-run, its forward GEMMs and
    all-to-alls run again in the backward)."""
    f = _launch(tmp_path, RECIPE, 4)
    assert detect_format(f) == "megatron-bridge"
    a = cli("explain", f, *H100, "--format", "json", "-q")
    b = cli("explain", _launch(tmp_path, RECIPE, 4, "model.recompute_modules=[layernorm,moe_act]", name="no_moe.sh"),
            *H100, "--format", "json", "-q")
    assert a.exit_code == 0 and b.exit_code == 0, a.stderr + b.stderr
    pa, pb = json.loads(a.stdout), json.loads(b.stdout)
    assert pa["plan"]["recompute_modules"] == ["layernorm", "moe", "moe_act"]
    assert pa["memory"]["total_bytes"] < pb["memory"]["total_bytes"] and pa["time"]["step_s"] > pb["time"]["step_s"]
    assert pa["moe"]["sac_rerun_s"] > 0.0 == pb["moe"]["sac_rerun_s"]


def test_qwen3_next_recipe_reads_as_it_builds(tmp_path):
    """qwen3_next_80b_a3b_pretrain_config on 4 nodes of 8 H100 (32 GPUs), by hand from qwen3_next.py @dc805f5cf and
    recipes/common.py _pretrain_common: TP 1, PP 4, no VP, CP 1, EP 8, ETP 1, no SP, 4,096 tokens (l. 49-58), so
    DP = 32 / (1 x 4 x 1) = 8 and the 8 expert ranks fold over TP x CP x DP = 8; global batch 32, micro-batch 2
    (common.py l. 66-67): 32 / (8 x 2) = 2 micro-batches a step; 300,000 iterations (l. 65): 300,000 x 32 x 4,096
    tokens; MTP 1 (l. 62); alltoall with the deepep backend (l. 67-68), turned into flex by
    apply_flex_dispatcher_backend (l. 140) on the H100's compute capability 9 (flex_dispatcher_backend.py l. 47-53);
    the permute fusion and grouped GEMM, no router fusion (l. 88-90); native cross-entropy (l. 92: the fusion on, no te
    impl); fp32 optimizer states (l. 112-116) and bf16_mixed (fp32 gradient reduction): no bytes_per_param; the
    distributed optimizer (l. 134). The provider (qwen_provider.py l. 453-454, 392, 394): router dtype fp32,
    global_aux_loss with 1e-3 (priced as the auxiliary-loss rule, planner/imbalance.py), no pre-softmax; no RoPE,
    bias-activation or bias-dropout fusion (Megatron-Core 905c0e386 defaults). The model: the one catalog entry of the
    provider's shape, its 36 Gated DeltaNet and 12 gated-attention layers included."""
    cfg = load_trainer_config(_launch(tmp_path, RECIPE, 4), hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["stack"]) == ("qwen3-next-80b-a3b", 32, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["ep"], j["schedule"]) == (1, 4, 1, 1, 8, "1f1b")
    assert "etp" not in j  # ETP 1 = TP 1: the job's default
    assert (j["sequence_parallel"], j["seq_len"], j["micro_batch"], j["global_batch"]) == (False, 4096, 2, 32)
    assert j["global_batch"] // (32 // (1 * 4 * 1) * j["micro_batch"]) == 2
    assert j["tokens"] == 300_000 * 32 * 4096
    assert (j["mtp_layers"], j["moe_dispatcher"]) == (1, "deepep")
    assert (j["recompute"], j["recompute_modules"]) == ("selective", ["layernorm", "moe", "moe_act"])
    assert (j["moe_permute_fusion"], j["moe_router_fusion"], j["moe_grouped_gemm"]) == (True, False, True)
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"], j["moe_router_pre_softmax"], j["moe_router_dtype"]) == \
        ("aux_loss", 0.001, False, "fp32")
    assert (j["cross_entropy_fusion"], "cross_entropy_fusion_impl" in j) == (True, False)
    assert (j["apply_rope_fusion"], j["bias_activation_fusion"], j["bias_dropout_fusion"]) == (False, False, False)
    assert (j["sharding_mode"], j["precision"], "bytes_per_param" in j) == ("distributed_optimizer", "bf16", False)
    # the Hugging Face tokenizer's size is not transcribed: listed, never silently taken
    assert any("Qwen/Qwen3-Next-80B-A3B-Instruct: its size" in x for x in cfg.not_modelled)


def test_qwen3_next_check_verdicts(cli, tmp_path):
    """The verdict line names the model, the GPU count and type. The recipe's layout (micro-batch 2, selective
    recompute of layernorm, moe and moe_act as shipped) on 32 H100 does not fit; with micro-batch 1 and full uniform
    recompute of each layer it does (the planner's figures; the mesh is the hand-derived one above)."""
    f = _launch(tmp_path, RECIPE, 4)
    r = cli("check", f, *H100)
    assert r.stdout.startswith(f"FAIL {f}: qwen3-next-80b-a3b on 32 x h100-sxm: "), r.stdout + r.stderr
    f = _launch(tmp_path, RECIPE, 4, "train.micro_batch_size=1", "model.recompute_granularity=full",
                "model.recompute_method=uniform", "model.recompute_num_layers=1", name="full.sh")
    r = cli("check", f, *H100)
    assert r.exit_code == 0 and r.stdout.startswith(f"PASS {f}: qwen3-next-80b-a3b on 32 x h100-sxm: "), \
        r.stdout + r.stderr


def test_qwen3_next_layers_are_part_of_the_shape(cli, tmp_path):
    """The provider's layers (Megatron-Core 905c0e386 get_linear_attention_pattern: Gated DeltaNet unless (i + 1) % 4
    == 0) as ModelSpec.layer_mixers: the catalog entry's text, whatever the pattern's length; a model of other layers
    (Llama 4 Scout's chunked / NoPE attention) is not the recipe's model, and --model naming it is refused."""
    gdn = LayerKindSpec(mixer=GatedDeltaNet(kind="gated_deltanet", num_key_heads=16, num_value_heads=32,
                                            key_head_dim=128, value_head_dim=128, conv_kernel=4))
    gated = LayerKindSpec(mixer=GlobalAttention(output_gate=True))
    m = load_model("qwen3-next-80b-a3b")
    assert m.layer_mixers == layer_mixers_text([gated if (i + 1) % 4 == 0 else gdn for i in range(48)])
    assert m.layer_mixers == layer_mixers_text([gdn, gdn, gdn, gated] * 12)  # the period, found whatever its listing
    assert m.layer_mixers != layer_mixers_text([gated if (i + 1) % 2 == 0 else gdn for i in range(48)])
    assert recipe_for(m) == RECIPE
    assert recipe_for(load_model("llama4-scout")) is None
    f = _launch(tmp_path, RECIPE, 4)
    assert_one_error(cli("explain", f, *H100, "--model", "llama4-scout"),
                     f"--recipe {RECIPE} (hidden_size) 2,048 contradicts --model llama4-scout")


def test_qwen3_next_context_parallel_refused(tmp_path):
    """Megatron-Core 905c0e386's GatedDeltaNet has no context parallelism (ssm/gated_delta_net.py l. 37, 288-289):
    CP 2 on the recipe is refused, naming it."""
    f = _launch(tmp_path, RECIPE, 4, "model.context_parallel_size=2", "model.pipeline_model_parallel_size=2")
    with pytest.raises(PlannerError, match="no context parallelism in GatedDeltaNet"):
        load_trainer_config(f, hardware="h100-sxm")


def test_qwen3_next_export_reads_back(cli, tmp_path):
    """`export --format megatron-bridge` of a Qwen3-Next plan writes the Qwen3-Next recipe with the plan's settings
    over it, which reads back as the same model and mesh and passes check."""
    out = tmp_path / "q.sh"
    args = ["--model", "qwen3-next-80b-a3b", "--gpus", "32", "--tp", "1", "--pp", "4", "--ep", "8", "--micro-batch", "1",
            "--global-batch", "32", "--recompute", "full", *H100, "--stack", "megatron-bridge"]
    r = cli("export", "--format", "megatron-bridge", *args, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert f"{RUN} \\\n    --recipe {RECIPE} \\\n" in out.read_text()
    j = load_trainer_config(out, hardware="h100-sxm").job
    assert (j["model"], j["tp"], j["pp"], j["ep"], j["micro_batch"], j["recompute"]) == \
        ("qwen3-next-80b-a3b", 1, 4, 8, 1, "full")
    assert cli("check", out, *H100).stdout.startswith(f"PASS {out}")


def test_deepseek_v2_lite_recipe_reads_as_it_builds(cli, tmp_path):
    """deepseek_v2_lite_pretrain_config (recipes/deepseek/deepseek_v2.py @dc805f5cf l. 24-139) on one node of 8 H100, by
    hand: TP 1, PP 1, CP 1, EP 8, no SP, 4,096 tokens (l. 44-52), so DP = 8 / (1 x 1 x 1) = 8 and the 8 expert ranks
    fold over it; global batch 512, micro-batch 1, 1,000,000 iterations (l. 61-63): 512 / (8 x 1) = 64 micro-batches a
    step, 1e6 x 512 x 4,096 tokens; alltoall: the recipe names deepep (l. 57) but never calls
    apply_flex_dispatcher_backend; full uniform recompute of 1 layer (l. 90-92); TE cross-entropy (l. 86-87); the
    provider's router (deepseek_v2_bridge.py l. 58-62): pre-softmax, seq_aux_loss with the config's aux_loss_alpha
    1e-3 (CONFIG_MAPPING), fp32; no RoPE fusion (l. 65); fp32 optimizer states and bf16_mixed: no bytes_per_param;
    the shared-expert overlap (l. 117-119), priced. The model: the catalog's deepseek-v2-lite (MLA
    without a query latent). The check verdict names the GPU."""
    f = _launch(tmp_path, "deepseek_v2_lite_pretrain_config", 1)
    cfg = load_trainer_config(f, hardware="h100-sxm")
    j = cfg.job
    assert (j["model"], j["gpus"], j["stack"]) == ("deepseek-v2-lite", 8, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["ep"], "etp" in j) == (1, 1, 1, 1, 8, False)
    assert (j["sequence_parallel"], j["seq_len"], j["micro_batch"], j["global_batch"]) == (False, 4096, 1, 512)
    assert j["global_batch"] // (8 // (1 * 1 * 1) * j["micro_batch"]) == 64
    assert j["tokens"] == 1_000_000 * 512 * 4096
    assert (j["moe_dispatcher"], j["recompute"], j["mtp_layers"], j["cross_entropy_fusion_impl"]) == \
        ("alltoall", "full", 0, "te")
    assert (j["moe_load_balancing"], j["moe_aux_loss_coeff"], j["moe_router_pre_softmax"], j["moe_router_dtype"]) == \
        ("aux_loss", 0.001, True, "fp32")
    assert (j["apply_rope_fusion"], "bytes_per_param" in j, j["sharding_mode"]) == (False, False, "distributed_optimizer")
    # the shared-expert overlap (l. 117-119) on the alltoall dispatcher: the job's, priced (step.py [38]; listed as not
    # priced before branch shexpov)
    assert j["moe_shared_expert_overlap"] is True
    assert not any(x.startswith("model.moe_shared_expert_overlap") for x in cfg.not_modelled)
    assert load_model("deepseek-v2-lite").mla.q_lora_rank is None
    r = cli("check", f, *H100)
    assert r.exit_code == 0 and r.stdout.startswith(f"PASS {f}: deepseek-v2-lite on 8 x h100-sxm: "), r.stdout + r.stderr


def test_deepseek_v2_recipe_reads_as_it_builds(cli, tmp_path):
    """deepseek_v2_pretrain_config (deepseek_v2.py l. 142-257) on 16 nodes of 8 H100 (128 GPUs): TP 1, PP 4, CP 1,
    EP 32 (l. 162-168), so DP = 128 / (1 x 4 x 1) = 32, the 32 expert ranks folding over it; 60 layers / 4 stages = 15
    a stage (no account_for_*); 512 / (32 x 1) = 16 micro-batches a step. The model: the catalog's deepseek-v2 (its
    160 experts in 8 groups, 3 a token: the provider's moe_router_num_groups / group_topk from n_group / topk_group)."""
    f = _launch(tmp_path, "deepseek_v2_pretrain_config", 16)
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["model"], j["gpus"], j["tp"], j["pp"], j["cp"], j["ep"]) == ("deepseek-v2", 128, 1, 4, 1, 32)
    assert j["global_batch"] // (128 // (1 * 4 * 1) * j["micro_batch"]) == 16
    assert "account_for_embedding_in_pipeline_split" not in j and 60 % 4 == 0
    m = load_model("deepseek-v2")
    assert (m.moe.expert_groups, m.moe.groups_per_token, m.moe.num_experts, m.mla.q_lora_rank) == (8, 3, 160, 1536)
    r = cli("check", f, *H100)
    assert r.exit_code == 0 and r.stdout.startswith(f"PASS {f}: deepseek-v2 on 128 x h100-sxm: "), r.stdout + r.stderr
    # the other DeepSeek-V2 model named with --model: its shape contradicts the recipe's
    assert_one_error(cli("explain", f, *H100, "--model", "deepseek-v2-lite"),
                     "--recipe deepseek_v2_pretrain_config (num_layers) 60 contradicts --model deepseek-v2-lite")


@pytest.mark.parametrize("recipe,named", [
    ("qwen3_next_80b_a3b_sft_config", "a fine-tuning recipe"),
    ("qwen3_next_80b_a3b_peft_config", "raises NotImplementedError"),
])
def test_untranscribed_recipes_refused_with_why(cli, tmp_path, recipe, named):
    r = cli("explain", _launch(tmp_path, recipe, 4), *H100)
    assert_one_error(r, f"--recipe {recipe}: not a recipe the planner transcribes")
    assert named in r.stderr


def test_llama4_has_no_recipe_at_the_pin(cli, tmp_path):
    """No Llama 4 recipe at Megatron-Bridge @dc805f5cf or 067f987df (recipes/llama/llama4_e16.py, llama4_e128.py removed
    by 5d194b9c1): an unknown recipe's hint says so, and the writer refuses a Llama 4 plan saying so."""
    r = cli("explain", _launch(tmp_path, "llama4_e16_pretrain_config", 4), *H100)
    assert_one_error(r, "--recipe llama4_e16_pretrain_config: not a recipe the planner transcribes")
    assert "no Llama 4 recipe" in r.stderr and "5d194b9c1" in r.stderr
    r = cli("export", "--format", "megatron-bridge", "--model", "llama4-scout", "--gpus", "64", "--tp", "4", "--ep", "16",
            *H100, "--stack", "megatron-bridge")
    assert_one_error(r, "model llama4-scout is none of the transcribed recipes' models")
    assert "no Llama 4 recipe" in r.stderr


@pytest.mark.parametrize("model, repo, gated", [("llama3-8b", "meta-llama/Meta-Llama-3-8B", True),
                                                ("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct", False)])
def test_export_names_a_gated_repository_only_where_it_is(cli, tmp_path, model, repo, gated):
    """The writer's note on the Hugging Face model run_recipe.py downloads says "gated" from the recipe's field
    (megatron_bridge.Recipe.hf_gated: the meta-llama repositories, whose files need the Llama licence's access form),
    not for every recipe: Qwen's (Apache 2.0) is public."""
    args = ["--model", model, "--gpus", "32" if gated is False else "8", *H100, "--stack", "megatron-bridge"]
    if not gated:
        args += ["--tp", "1", "--pp", "4", "--ep", "8", "--micro-batch", "1", "--global-batch", "32", "--recompute", "full"]
    r = cli("export", "--format", "megatron-bridge", *args, "-o", tmp_path / "x.sh")
    assert r.exit_code == 0, r.stderr
    assert f"the Hugging Face config of {repo} " in r.stderr
    assert ("a gated repository" in r.stderr) is gated
