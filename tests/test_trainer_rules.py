"""Exported Megatron-LM launch scripts pass Megatron's own start-up checks, transcribed on the
argument list at NVIDIA/Megatron-LM @d98e8a64 (planner/trainers/rules.py): every sharding
mode, the rank orders, CP, the pipeline split's three spellings, virtual stages, MoE with
expert TP, MLA. Each check also fires on an argument list built to break it, and where the
planner's own vectorized rule (planner/startup.py) covers the same assertion, both refuse."""

from __future__ import annotations

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.trainers.export import export_plan
from planner.trainers.rules import megatron_errors, megatron_script_errors

JOBS = [  # (what it exercises, job fields on the megatron stack)
    ("ddp", dict(model="llama3-8b", gpus=8, sharding="none", global_batch=64)),
    ("distributed optimizer, tp + SP + TP overlap", dict(model="llama3-8b", gpus=16, tp=2, sharding="zero1",
                                                          sequence_parallel=True, tp_comm_overlap=True, global_batch=64)),
    ("megatron_fsdp_optim", dict(model="llama3-8b", gpus=16, sharding="zero1", sharding_mode="megatron_fsdp_optim",
                                 global_batch=64)),
    ("megatron_fsdp_optim_grads", dict(model="llama3-8b", gpus=16, sharding="zero2", global_batch=64)),
    ("megatron_fsdp_optim_grads_params, pp 2", dict(model="llama3-70b", gpus=64, tp=8, pp=2, sharding="fsdp",
                                                    global_batch=64, recompute="full")),
    ("torch_fsdp2", dict(model="llama3-8b", gpus=16, sharding="fsdp", sharding_mode="torch_fsdp2", global_batch=64)),
    ("hsdp: Megatron-FSDP with optimizer instances", dict(model="llama3-8b", gpus=64, sharding="hsdp", shard_group=16,
                                                          global_batch=128)),
    ("cp 2 under Megatron's order, pp 4 x vpp 2", dict(model="llama3-70b", gpus=128, tp=8, cp=2, pp=4, vpp=2,
                                                       sharding="zero1", global_batch=64, recompute="selective")),
    ("--use-tp-pp-dp-mapping, pp 4", dict(model="llama3-70b", gpus=128, tp=8, pp=4, sharding="zero1", global_batch=64,
                                          rank_order="tp-cp-pp-dp", recompute="full")),
    ("--decoder-first/last-pipeline-num-layers", dict(model="llama3-70b", gpus=96, tp=8, pp=6, sharding="zero1",
                                                      global_batch=96, recompute="full")),
    ("--account-for-*, pp 16 x vpp 8", dict(model="llama3-405b", gpus=2048, tp=8, pp=16, vpp=8, sharding="zero1",
                                            global_batch=2048, account_for_embedding_in_pipeline_split=True,
                                            account_for_loss_in_pipeline_split=True)),
    ("--pipeline-model-parallel-layout, MLA and shared experts, EP 64", dict(
        model="deepseek-v3", gpus=256, pp=4, vpp=4, ep=64, sharding="zero1", global_batch=2048, hardware="gb200-nvl72")),
    ("MoE, expert TP 1 under tp 2, capacity factor, fp8", dict(
        model="mixtral-8x7b", gpus=64, tp=2, ep=8, etp=1, sharding="zero1", global_batch=256, moe_capacity_factor=1.25,
        precision="fp8")),
    ("MoE with --use-tp-pp-dp-mapping: etp x ep = tp x cp", dict(
        model="mixtral-8x7b", gpus=64, cp=8, pp=2, ep=8, tp=1, sharding="zero1", global_batch=64, rank_order="tp-cp-pp-dp")),
    ("--microbatch-group-size-per-virtual-pipeline-stage 6, m 12 on pp 4 x vpp 2", dict(
        model="llama3-8b", gpus=16, pp=4, vpp=2, micro_batch=1, global_batch=48, sharding="zero1", microbatch_group=6)),
]


@pytest.mark.parametrize("what,job", JOBS, ids=[w for w, _ in JOBS])
def test_exported_megatron_scripts_pass_megatrons_startup_checks(what, job):
    plan = resolved_plan(Job(stack="megatron", **job))
    text, _ = export_plan(plan, "megatron")
    assert megatron_script_errors(text) == [], text


def test_every_sharding_mode_of_the_stack_is_exported_and_checked():
    from planner.catalog import load_stack

    modes = {m.name for m in load_stack("megatron").runs.sharding}
    got = {resolved_plan(Job(stack="megatron", **job))["sharding_mode"] for _, job in JOBS}
    assert got == modes


BASE = {"--num-layers": "32", "--hidden-size": "4096", "--num-attention-heads": "32", "--seq-length": "8192",
        "--max-position-embeddings": "8192", "--micro-batch-size": "1", "--global-batch-size": "64"}


def _keys(world=8, env=None, **flags):
    f = dict(BASE)
    for k, v in flags.items():
        name = "--" + k.replace("_", "-")
        if v is None:
            f.pop(name, None)
        else:
            f[name] = v
    return [k for k, _ in megatron_errors(f, world, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if env is None else env)]


@pytest.mark.parametrize("key,world,flags,env", [
    ("WORLD", 12, dict(tensor_model_parallel_size="8"), None),
    ("EXPERT_GRID", 16, dict(expert_model_parallel_size="32", num_experts="64"), None),
    ("TP_PP_DP_MAP", 32, dict(tensor_model_parallel_size="2", context_parallel_size="2", pipeline_model_parallel_size="2",
                              use_tp_pp_dp_mapping=True), None),
    ("HEADS", 8, dict(tensor_model_parallel_size="8", num_attention_heads="12"), None),
    ("CP_SEQ", 8, dict(context_parallel_size="8", seq_length="1000", max_position_embeddings="1000"), None),
    ("MAX_POSITIONS", 8, dict(max_position_embeddings="4096"), None),
    ("BATCH", 8, dict(global_batch_size="60"), None),
    ("TP_OVERLAP", 8, dict(tensor_model_parallel_size="2", tp_comm_overlap=True), None),
    ("PARAM_GATHER", 8, dict(overlap_param_gather=True, overlap_grad_reduce=True), None),
    ("TORCH_FSDP2", 8, dict(use_torch_fsdp2=True, pipeline_model_parallel_size="2"), {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    ("MEGATRON_FSDP", 8, dict(use_megatron_fsdp=True), {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    ("DISTOPT_INST", 8, dict(use_megatron_fsdp=True, ckpt_format="fsdp_dtensor", num_distributed_optimizer_instances="3"),
     {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    ("MAX_CONN", 8, dict(tensor_model_parallel_size="2"), {}),
    ("EXPERTS", 8, dict(expert_model_parallel_size="8", num_experts="12"), None),
    ("EXPERT_GRID", 32, dict(tensor_model_parallel_size="2", expert_model_parallel_size="32", num_experts="64",
                             sequence_parallel=True), None),  # etp defaults to tp: 2 x 32 > 32 ranks
    ("MOE_SP", 8, dict(tensor_model_parallel_size="2", num_experts="8"), None),
    ("VPP_ARGS", 8, dict(num_virtual_stages_per_pipeline_rank="2"), None),
    ("SPLIT", 24, dict(pipeline_model_parallel_size="3", num_layers="32"), None),
    ("SPLIT", 8, dict(pipeline_model_parallel_size="4", decoder_first_pipeline_num_layers="7",
                      account_for_loss_in_pipeline_split=True), None),
    ("LAYOUT", 8, dict(pipeline_model_parallel_size="2", pipeline_model_parallel_layout="Et*15|t*16L"), None),
    ("INTERLEAVED", 8, dict(pipeline_model_parallel_size="4", num_virtual_stages_per_pipeline_rank="2",
                            global_batch_size="6", micro_batch_size="1"), None),
    ("MTP_POSITION", 8, dict(mtp_num_layers="1"), None),  # --position-embedding-type's default: learned_absolute
    ("FP8_PARAMS", 8, dict(fp8_format="hybrid", fp8_param_gather=True), None),
    ("FP4", 8, dict(fp4_format="e2m1", fp8_format="hybrid"), None),
    ("FP4", 8, dict(fp4_param_gather=True), None),
    ("RECOMPUTE", 8, dict(tensor_model_parallel_size="2", sequence_parallel=True, distribute_saved_activations=True,
                          recompute_granularity="full"), None),
    ("RECOMPUTE", 8, dict(recompute_activations=True, recompute_method="uniform"), None),
    ("KV_CHANNELS", 8, dict(hidden_size="4100"), None),
    ("TORCH_DCP", 8, dict(ckpt_format="torch_dcp"), None),
    ("CE_TE", 8, dict(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te"), None),
    ("MLA_GQA", 8, dict(multi_latent_attention=True, group_query_attention=True, num_query_groups="8"), None),
    ("ATTN_LOCAL", 8, dict(attention_backend="local"), None),
    ("MOE_BIAS_ETP", 8, dict(tensor_model_parallel_size="2", sequence_parallel=True, num_experts="8",
                             add_bias_linear=True), None),  # etp defaults to tp 2
])
def test_each_check_fires_on_arguments_that_break_it(key, world, flags, env):
    assert key in _keys(world, env, **flags)
    assert _keys() == []  # the base arguments pass


def test_each_option_check_passes_where_megatron_does():
    """The option checks fire only as validate_args does: MTP with rotary embeddings, fp8 parameters
    under the distributed optimizer or torch FSDP2, NVFP4 parameters with --fp4-format, the
    distributed saved activations with tp > 1, full recompute and a method, an explicit
    --kv-channels, torch_dcp under torch FSDP2 at tp 1 and pp 1, the native fused loss."""
    fsdp2 = dict(use_torch_fsdp2=True, no_gradient_accumulation_fusion=True, untie_embeddings_and_output_weights=True)
    no_conn = {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    assert _keys(mtp_num_layers="1", position_embedding_type="rope") == []
    assert _keys(fp8_format="hybrid", fp8_param_gather=True, use_distributed_optimizer=True) == []
    assert _keys(8, no_conn, fp8_format="hybrid", fp8_param_gather=True, **fsdp2) == []
    assert _keys(fp4_format="e2m1", fp4_param_gather=True, use_distributed_optimizer=True) == []
    assert _keys(tensor_model_parallel_size="2", sequence_parallel=True, distribute_saved_activations=True,
                 recompute_granularity="full", recompute_method="uniform") == []
    assert _keys(hidden_size="4100", kv_channels="128") == []
    assert _keys(8, no_conn, ckpt_format="torch_dcp", **fsdp2) == []
    assert _keys(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native") == []
    assert _keys(attention_backend="local", spec="local") == []
    # and --use-torch-fsdp2 with --fp16 (l. 1046-1047), named among TORCH_FSDP2's reasons
    errs = megatron_errors({**BASE, **{"--" + k.replace("_", "-"): True for k in fsdp2}, "--fp16": True}, 8, no_conn)
    assert [k for k, _ in errs] == ["TORCH_FSDP2"] and "--use-torch-fsdp2 with --fp16" in errs[0][1]


def test_the_planner_and_megatron_refuse_the_mapping_with_cp_alike():
    """Megatron's --use-tp-pp-dp-mapping with pp > 1 and cp > 1 on a dense model: the planner's
    MEGATRON_TP_PP_DP_MAPPING (resolve) and the argument-level check (the exported script with the
    flag added) name the same parallel_state assertion."""
    job = dict(model="llama3-70b", gpus=128, tp=8, cp=2, pp=4, sharding="zero1", global_batch=64, stack="megatron")
    with pytest.raises(PlannerError, match="MEGATRON_TP_PP_DP_MAPPING") as e:
        resolve(Job(rank_order="tp-cp-pp-dp", **job))
    assert "parallel_state.py" in e.value.message
    text, _ = export_plan(resolved_plan(Job(**job)), "megatron")
    assert "--use-tp-pp-dp-mapping" not in text and megatron_script_errors(text) == []
    broken = text.replace("    --bf16", "    --use-tp-pp-dp-mapping \\\n    --bf16")
    assert [k for k, _ in megatron_script_errors(broken)] == ["TP_PP_DP_MAP"]


def test_the_planner_refuses_a_split_that_places_no_model():
    """40 layers on pp 16: the planner's split would price 1 + 14 x 3 + 1 = 44 layers; Megatron
    counts exactly --num-layers (MEGATRON_PP_SPLIT), and the export has no spelling for it."""
    with pytest.raises(PlannerError, match="MEGATRON_PP_SPLIT"):
        resolve(Job(model="llama2-13b", gpus=1024, tp=8, pp=16, sharding="zero1", global_batch=1024, stack="megatron"))


def test_the_planner_and_megatron_agree_on_the_micro_batch_group():
    """--microbatch-group-size-per-virtual-pipeline-stage N on pp 4 x vpp 2 with m 12 (schedules.py
    @d98e8a64 l. 1160-1180): the planner's INTERLEAVED_M (resolve) and the argument-level check
    refuse the same N (3 and 13 out of [pp, m]; 5, 9, 10, 11 leave a last group below pp), and the
    exported script carries the flag."""
    refused = []
    for n in range(3, 14):
        job = Job(model="llama3-8b", gpus=16, pp=4, vpp=2, micro_batch=1, global_batch=48, sharding="zero1",
                  microbatch_group=n, stack="megatron")
        try:
            resolve(job)
        except PlannerError as e:
            assert "INTERLEAVED" not in e.message and f"microbatch_group N={n}" in e.message
            refused.append(n)
        flags = dict(pipeline_model_parallel_size="4", num_virtual_stages_per_pipeline_rank="2",
                     global_batch_size="48", microbatch_group_size_per_virtual_pipeline_stage=str(n))
        assert ("INTERLEAVED" in _keys(16, None, **flags)) == (n in refused), n
    assert refused == [3, 5, 9, 10, 11, 13]
    text, _ = export_plan(resolved_plan(Job(model="llama3-8b", gpus=16, pp=4, vpp=2, micro_batch=1, global_batch=48,
                                            sharding="zero1", microbatch_group=7)), "megatron")
    assert "--microbatch-group-size-per-virtual-pipeline-stage 7 " in text


def test_megatron_script_errors_refuses_an_unsplittable_script():
    """megatron_script_errors splits the script with megatron.read_script_words, as the Megatron reader does: an
    unbalanced quote (before: shlex's ValueError 'No closing quotation' as a traceback, from an argument file) and
    a launch without torchrun's counts (before: a bare ValueError) are PlannerErrors naming the file and line."""
    with pytest.raises(PlannerError, match=r"^run.sh: line 2: cannot split .*No closing quotation") as e:
        megatron_script_errors("--tensor-model-parallel-size 2\n--seq-length '8192\n", "run.sh: ")
    assert e.value.hint.startswith("close the quote on the same line")
    with pytest.raises(PlannerError, match="^run.sh: no torchrun --nproc_per_node/--nnodes to give the world size"):
        megatron_script_errors("--tensor-model-parallel-size 2\n", "run.sh: ")
