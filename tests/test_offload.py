"""CPU offload (planner/offload.py; job fields offload_optimizer / offload_param; stack_db cpu_offload): what leaves
the GPU, the host bytes and their gate, the CPU step and the host link's copies, the DeepSpeed JSON and torchtitan
readers and exporters. Figures derived by hand from the sources the module cites.

Llama 3 8B (model_zoo llama3-8b): 8,030,261,248 parameters, untied, the embedding and the output layer
128,256 x 4,096 = 525,336,576 each (the largest parameters). On 8 GPUs at ZeRO-2 a rank's optimizer partition
L = 8,030,261,248 / 8 = 1,003,782,656 elements.
"""

import json

import pytest
import yaml

from conftest import assert_one_error

P = 8_030_261_248
L = P // 8
EMB = 128_256 * 4_096
DS2 = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="zero2", micro_batch=1, global_batch=8,
           seq_len=4096)


def _explain(cli, tmp_path, job: dict, name="job.yaml"):
    f = tmp_path / name
    f.write_text(yaml.safe_dump(job))
    r = cli("explain", str(f), "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_zero2_offload_optimizer_memory_by_hand(cli, tmp_path):
    """ZeRO-Offload at stage 2 (stage_1_and_2.py @38327e07): the fp32 master partition (4 B x L) and Adam's m, v
    (8 B x L) leave the GPU, and the 16-bit gradient partition (grads_in_partition, 2 B x L) is never allocated; the
    GPU keeps temp_grad_buffer_for_gpu_offload, the largest parameter in bf16 (the embedding, 2 B x 525,336,576).
    Every other term unchanged."""
    plain = _explain(cli, tmp_path, DS2)
    off = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu"), "off.yaml")
    a, b = plain["memory"]["terms"], off["memory"]["terms"]
    assert a["master_weights"] == 4 * L and b["master_weights"] == 0
    assert a["adam"] == 8 * L and b["adam"] == 0
    assert a["gradients"] == 2 * L and b["gradients"] == 2 * EMB
    assert {k for k in a if a[k] != b[k]} == {"master_weights", "adam", "gradients"}
    assert plain["memory"]["total_bytes"] - off["memory"]["total_bytes"] == 4 * L + 8 * L + 2 * L - 2 * EMB
    assert off["plan"]["offload_optimizer"] == "cpu" and "offload_optimizer" not in plain["plan"]
    # the host: L x (4 master + 8 Adam + 4 fp32 gradient) a rank (one micro-batch: no accumulation buffers), x 8 a node
    host = off["memory"]["host"]
    assert host["bytes_per_rank"] == 16 * L == 16_060_522_496
    assert host["bytes_per_node"] == 8 * 16 * L and host["ranks_per_node"] == 8
    assert host["capacity_bytes_per_node"] == 2048e9 and host["fits"] is True  # DGX H100: 2 TB
    assert "host" not in plain["memory"]


def test_zero2_offload_step_by_hand(cli, tmp_path):
    """The optimizer term: the host's Adam over L, shared by the node's 8 ranks, memory-bound on the node's DRAM
    (offload.py [cpu-adam]: DeepSpeed's Step_AVX reads master, m, v and the fp32 gradient, 16 B, and writes master, m,
    v, 12 B: 28 B an element) at DGX H100's 2 x 8 DDR5 channels x 4,400 MT/s x 8 B = 563.2 GB/s x the assumed 0.5
    (offload.HOST_MEMORY_EFFICIENCY): 8 x L x 28 / 281.6e9 = 0.798 s; plus the host link at 64 GB/s (PCIe Gen5 x16):
    the gradient partition down in fp32 (4 B x L) beside the backward and the updated partition up after the CPU step,
    in fp32 (4 B x L: stage_1_and_2.py l. 1879-1882 copies fp32_partition.to(device), converted on the GPU). Without overlap_comm (megatron-deepspeed's ZeRO-2 default) both exposed; with it the
    gradient copies hide behind the backward (one micro-batch's backward, over 0.06 s here), the parameter copy stays."""
    off = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu"))
    t = off["time"]
    adam = L * 8 * 28 / (563.2e9 * 0.5)
    assert adam == pytest.approx(0.79847, rel=1e-4)
    assert t["offload_cpu_adam_s"] == pytest.approx(adam, rel=1e-12)
    assert t["offload_link_s"] == pytest.approx((4 * L + 4 * L) / 64e9, rel=1e-12)
    assert t["offload_link_exposed_s"] == pytest.approx(t["offload_link_s"], rel=1e-12)
    assert t["optimizer_s"] == pytest.approx(adam + 8 * L / 64e9, rel=1e-12)
    over = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu", dp_comm_overlap=True), "over.yaml")["time"]
    assert over["offload_link_exposed_s"] == pytest.approx(4 * L / 64e9, rel=1e-12)
    # the rest of the step is the plan's without offload
    plain = _explain(cli, tmp_path, DS2, "plain.yaml")["time"]
    assert t["step_s"] - t["optimizer_s"] == pytest.approx(plain["step_s"] - plain["optimizer_s"], rel=1e-12)


def test_zero2_offload_copy_back_moment_by_hand(cli, tmp_path):
    """The step's copy of the updated partition back to the GPU (memory.py [ocb]; stage_1_and_2.py @38327e07
    l. 1879-1882: bit16_partitions[partition_id].data.copy_(fp32_partition.to(device).data), one parameter group at a
    time). Llama 3 8B, ZeRO-2 offload on 8 H100s, seq 1,024, micro-batch 1, full recompute. At that statement the GPU
    holds the bf16 weights whole (2 B x P), the staging buffer (2 B x EMB), the GEMM workspaces and the group's fp32
    partition, 4 B x L = 4,015,130,624 B (no gradient: the hooks set param.grad = None, l. 1284; the IPG buffers and
    the activations are freed). The backward's peak held, beside the same tensors, the layers' inputs (32 x 2 B x
    1,024 x 4,096 = 268,435,456), the output layer's tensors, one layer's recompute buffer and the IPG buffer
    (reduce_bucket_size 5e8 x 2 B): 4 L less those is 1,816,083,968 B above the peak. Before the step, though, the
    reduction's hooks took each parameter piece's norm in fp64 on the GPU (memory.py [onf]: copy_grads_in_partition
    l. 1329-1340 -> set_norm_for_param_grad_in_gpu l. 1253-1266, accumulated_grad.data.double().norm(2)) beside the
    IPG buffer: the embedding's, flushed by the epilogue after the backward (rank 0's partition holds it whole,
    L > EMB), 8 B x EMB = 4,202,692,608 B + the 1e9-B buffer, 1,187,561,984 B above the copy-back's moment: that
    moment is the step's peak (offload_norm_fp64 = 8 EMB + IPG - held = 3,003,645,952 B), the copy-back below it
    (term 0)."""
    job = dict(DS2, seq_len=1024, recompute="full", offload_optimizer="cpu")
    off = _explain(cli, tmp_path, job)
    t, m = off["memory"]["terms"], off["memory"]
    assert t["layer_activations"] == 32 * 2 * 1024 * 4096
    assert t["zero12_ipg_bucket"] == 5e8 * 2
    held = t["layer_activations"] + t["output_activations"] + t["recompute_buffer"] + t["zero12_ipg_bucket"]
    assert 4 * L - held == 1_816_083_968
    assert t["offload_norm_fp64"] == 8 * EMB + 5e8 * 2 - held == 3_003_645_952
    assert t["offload_copy_back"] == 0 and 8 * EMB + 5e8 * 2 - 4 * L == 1_187_561_984
    assert m["allocated_bytes"] == 2 * P + 2 * EMB + t["workspaces"] + 5e8 * 2 + 8 * EMB
    # the step's other terms add nothing here (its temporaries and gradient copies are the host's)
    assert t["optimizer_step"] == t["step_grad_copies"] == t["zero12_grad_partition"] == 0
    # without offload no such copy: the step's moment is [sg]'s (the copies of the GPU's own partition)
    plain = _explain(cli, tmp_path, dict(job, offload_optimizer="none"), "plain.yaml")["memory"]["terms"]
    assert plain["offload_copy_back"] == plain["offload_norm_fp64"] == 0


def test_moe_offload_copy_back_one_group_at_a_time(cli, tmp_path):
    """DeepSpeed MoE under offload (memory.py [ocb], [sg]): Mixtral 8x7B, ZeRO-2 on 8 H200s, EP 8, seq 256, full
    recompute, reduce_bucket_size 1e7 (so that the IPG buffer, 2e7 B, does not hide the step). The groups are stepped
    and copied back one at a time: the dense partition L_d = (46,702,792,704 - 45,097,156,608) / 8 = 200,704,512
    above any expert group (at most 178,956,971 elements a rank): 4 B x L_d = 802,818,048 B on the GPU, less the
    peak's activations, output layer, recompute buffer and IPG buffer; not 4 B x (L_d + the rank's 5.64e9 experts).
    The step's gradient copies are the host's: none on the GPU (before this change an expert group's 6 B x
    178,956,971 was priced there, +603,108,098 B over the peak). Since [onf] the reduction's fp64 norm piece of the
    largest dense parameter (8 B x 131,072,000 = 1,048,576,000 B beside the IPG buffer) comes before and is the larger
    moment, so the copy-back adds nothing beyond it (a whole-partition copy-back, 4 B x (L_d + 5.64e9), would)."""
    job = dict(model="mixtral-8x7b", gpus=8, stack="megatron-deepspeed", sharding="zero2", ep=8, recompute="full",
               micro_batch=1, global_batch=8, seq_len=256, hardware="h200-sxm", offload_optimizer="cpu",
               deepspeed_zero3={"reduce_bucket_size": 10**7})
    t = _explain(cli, tmp_path, job)["memory"]["terms"]
    dense = (46_702_792_704 - 45_097_156_608) // 8
    assert dense == 200_704_512 and t["zero12_ipg_bucket"] == 2e7
    held = t["layer_activations"] + t["output_activations"] + t["recompute_buffer"] + t["zero12_ipg_bucket"]
    # the fp64 norm piece before the step ([onf]): the largest dense parameter, the embedding or the output layer
    # (32,000 x 4,096 = 131,072,000 < L_d), 8 B each, beside the 2e7-B IPG buffer: above the copy-back's moment
    emb = 32_000 * 4_096
    assert t["offload_norm_fp64"] == 8 * emb + 2e7 - held and 8 * emb + 2e7 > 4 * dense
    assert t["offload_copy_back"] == 0
    assert t["step_grad_copies"] == 0


def test_zero1_offload_copy_back_frees_the_gradients(cli, tmp_path):
    """ZeRO-1 offload keeps its whole bf16 gradients to the reduction after the backward, whose epilogue frees them
    (stage_1_and_2.py l. 807) before the step: the copy-back's moment is the kept tensors less 2 B x P plus 4 B x L.
    On 8 GPUs 4 L = P / 2 < 2 P: below the peak, no term. On 1 GPU (L = P) the moment is the kept tensors + 2 P:
    2 P - (the activations, the output layer's tensors, the recompute buffer and the reduction's IPG buffer) above the
    backward's peak, or above the reduction's moment after it where that is the larger ([zb]: its IPG buffer 1e9 B,
    the activations freed), which one GPU's 2 P dwarfs."""
    job = dict(DS2, sharding="zero1", seq_len=1024, recompute="full", offload_optimizer="cpu")
    assert _explain(cli, tmp_path, job)["memory"]["terms"]["offload_copy_back"] == 0
    one = _explain(cli, tmp_path, dict(job, gpus=1, global_batch=1), "one.yaml")["memory"]
    t = one["terms"]
    peak = (t["layer_activations"] + t["output_activations"] + t["recompute_buffer"] + t["zero12_ipg_bucket"]
            + t["zero12_grad_partition"])
    # the reduction's fp64 norm piece first ([onf]: the embedding whole, beside the whole gradients and the 1e9-B
    # IPG buffer), then the copy-back's 2 P above it
    assert t["offload_norm_fp64"] == 8 * EMB + 1e9 - peak
    assert t["offload_copy_back"] == 4 * P - 2 * P - (8 * EMB + 1e9)
    # the allocated peak: the weights, the staging buffer, the workspaces and the fp32 partition (P elements)
    assert one["allocated_bytes"] == 2 * P + 2 * EMB + t["workspaces"] + 4 * P


def test_zero3_offload_has_no_gpu_copy_back(cli, tmp_path):
    """ZeRO-3 copies the host's fp32 sub-group into the 16-bit partition, converted on the CPU (stage3.py l. 2069-2072;
    torch's Copy.cu converts a CPU-GPU copy's dtype on the CPU): no fp32 temporary on the GPU, no term."""
    job = dict(DS2, sharding="fsdp", seq_len=1024, recompute="full", offload_optimizer="cpu")
    assert _explain(cli, tmp_path, job)["memory"]["terms"]["offload_copy_back"] == 0


def test_gradient_accumulation_host_buffers_and_copies(cli, tmp_path):
    """Four micro-batches at ZeRO-2: DeepSpeed's accumulated_grads_in_cpu, bf16 (2 B x L on the host), the first
    micro-batch's gradient down and each later one's accumulated one up (3 x 2 B x L) beside the fp32 copy down."""
    off = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu", global_batch=32))
    assert off["memory"]["host"]["bytes_per_rank"] == 16 * L + 2 * L
    down, up = 4 * L + 2 * L, 3 * 2 * L
    assert off["time"]["offload_link_s"] == pytest.approx((max(down, up) + 4 * L) / 64e9, rel=1e-12)


def test_host_memory_gate(cli, tmp_path):
    """A node with less host memory than the offload's (here 100 GB against 8 x 16.06 GB): check fails, naming it."""
    from planner.catalog import hardware_source

    hw = yaml.safe_load(hardware_source("h100-sxm").read_text())
    hw.update(name="h100-small-host", host_memory_GB=100)
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(hw))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(dict(DS2, offload_optimizer="cpu", hardware=str(tmp_path / "hw.yaml"))))
    r = cli("check", str(job), "--format", "json")
    assert r.exit_code == 1, r.stderr
    (res,) = json.loads(r.stdout)
    host = [f for f in res["failures"] if f["kind"] == "host_memory"]
    assert host and host[0]["overflow_bytes"] == 8 * 16 * L - 100e9
    text = cli("check", str(job))
    assert "host memory: CPU offload holds" in text.stdout


def test_no_gate_without_host_memory(cli, tmp_path):
    """A node that gives its link and host bandwidth but no host memory size: the host bytes reported, not gated."""
    from planner.catalog import hardware_source

    hw = yaml.safe_load(hardware_source("h100-sxm").read_text())
    hw.pop("host_memory_GB")
    hw.update(name="h100-no-host-size")
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(hw))
    off = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu", hardware=str(tmp_path / "hw.yaml")))
    assert off["memory"]["host"]["fits"] is None and off["memory"]["host"]["capacity_bytes_per_node"] is None


def test_torchtitan_cpu_offload_policy(cli, tmp_path):
    """FSDP2's CPUOffloadPolicy: the fp32 sharded parameter (the master) and Adam's moments on the host, the sharded
    gradient fp32 there (FSDP2 frees it before the backward anyway: memory.py [7]); the host L x 16 B; each
    all-gather's fp32 shard up and each reduce-scatter's fp32 gradient down (one micro-batch, reshard after forward:
    2 gathers, 1 reduction), hidden behind the step's compute (dp overlap on); torch's fused CPU Adam, the same 28 B
    an element as DeepSpeed's (FusedAdamKernel.cpp adam_fused_step_impl) over 563.2 GB/s x 0.5."""
    tt = dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", global_batch=8, seq_len=4096)
    plain = _explain(cli, tmp_path, tt)
    off = _explain(cli, tmp_path, dict(tt, offload_optimizer="cpu", offload_param="cpu"), "off.yaml")
    a, b = plain["memory"]["terms"], off["memory"]["terms"]
    assert (b["master_weights"], b["adam"]) == (0, 0) and (a["master_weights"], a["adam"]) == (4 * L, 8 * L)
    assert {k for k in a if a[k] != b[k]} == {"master_weights", "adam"}
    assert off["memory"]["host"]["bytes_per_rank"] == 16 * L
    assert off["time"]["offload_cpu_adam_s"] == pytest.approx(L * 8 * 28 / (563.2e9 * 0.5), rel=1e-12)
    assert off["time"]["offload_link_s"] == pytest.approx(2 * 4 * L / 64e9, rel=1e-12)
    assert off["time"]["offload_link_exposed_s"] == 0


@pytest.mark.parametrize("job, needle", [
    (dict(DS2, stack="llm-foundry", sharding="fsdp"), "does not offload"),
    (dict(DS2, sharding="none"), "sharding none"),
    (dict(DS2, hardware="h800-sxm"), "pcie_GBps"),
    (dict(DS2, hardware="h100-pcie"), "host_memory_GBps"),
    (dict(DS2, hardware="b200"), "host_memory_GBps"),
    # no cited host figures (each entry's uncertain list says what was searched; issue 21)
    (dict(DS2, hardware="gb300-nvl72"), "pcie_GBps"),
    (dict(DS2, hardware="h100-sxm-96gb-hbm2e"), "pcie_GBps"),
    (dict(DS2, offload_param="cpu"), "offload_param cpu with sharding zero2"),
    (dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp"), "together"),
])
def test_refusals(cli, tmp_path, job, needle):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(dict(job, offload_optimizer="cpu")))
    assert_one_error(cli("explain", str(f)), needle)


def test_fit_does_not_search_offload(cli):
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed",
                         "--offload-optimizer", "cpu"), "fit does not search CPU offload")


def _ds(tmp_path, zero_extra: dict, name="ds.json"):
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2, **zero_extra}}
    f = tmp_path / name
    f.write_text(json.dumps(cfg))
    return f


def _read(cli, f, *extra):
    r = cli("explain", str(f), "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", *extra, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_deepspeed_reader(cli, tmp_path):
    got, err = _read(cli, _ds(tmp_path, {"offload_optimizer": {"device": "cpu", "pin_memory": True}}))
    assert got["plan"]["offload_optimizer"] == "cpu" and "offload_param" not in got["plan"]
    assert "offload not modelled" not in err and "offload_optimizer" not in err
    # pin_memory left out: DeepSpeed's default false, pageable buffers: listed as not modelled
    got, err = _read(cli, _ds(tmp_path, {"offload_optimizer": {"device": "cpu"}}, "b.json"))
    assert got["plan"]["offload_optimizer"] == "cpu" and "pin_memory absent" in err
    # nvme: not modelled, priced on the GPU
    got, err = _read(cli, _ds(tmp_path, {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}, "c.json"))
    assert "offload_optimizer" not in got["plan"] and "NVMe offload not modelled" in err
    # offload_param below stage 3: DeepSpeed does not read it
    from planner.trainers import deepspeed

    f = _ds(tmp_path, {"offload_optimizer": {"device": "cpu", "pin_memory": True}, "offload_param": {"device": "cpu"}},
            "d.json")
    got, _ = _read(cli, f)
    assert "offload_param" not in got["plan"]
    cfg = deepspeed.read(f, model="llama3-8b", gpus=8)
    assert any("read at ZeRO stage 3 only" in x for x in cfg.ignored) and "offload_param" not in cfg.job
    none = deepspeed.read(_ds(tmp_path, {"offload_optimizer": {"device": "none"}}, "e.json"), model="llama3-8b", gpus=8)
    assert "offload_optimizer" not in none.job and any("(no offload)" in x for x in none.ignored)


@pytest.mark.parametrize("zero, needle", [
    ({"offload_optimizer": {"device": "tape"}}, "zero_optimization.offload_optimizer.device"),
    ({"offload_param": {"device": 3}}, "zero_optimization.offload_param.device"),
    ({"offload_optimizer": "cpu"}, "zero_optimization.offload_optimizer"),
])
def test_deepspeed_bad_offload(cli, tmp_path, zero, needle):
    r = cli("explain", str(_ds(tmp_path, zero)), "--model", "llama3-8b", "--gpus", "8")
    assert_one_error(r, needle)


def test_deepspeed_round_trip(cli, tmp_path):
    """export writes offload_optimizer {device: cpu, pin_memory: true} (and offload_param at ZeRO-3); read back, the
    same plan and figures. (attention flash: a DeepSpeed JSON names no core attention and its reader assumes a fused
    one; the stack's own default, Megatron-DeepSpeed's CoreAttention, is eager, which the export notes it cannot write.)"""
    f = tmp_path / "eager.yaml"
    f.write_text(yaml.safe_dump(dict(DS2, offload_optimizer="cpu")))
    r = cli("export", str(f), "--format", "deepspeed")
    assert r.exit_code == 0 and "attention eager: set in the model code" in r.stderr, r.stderr
    for job in (dict(DS2, offload_optimizer="cpu", attention="flash"),
                dict(DS2, sharding="fsdp", offload_optimizer="cpu", offload_param="cpu", attention="flash")):
        f = tmp_path / "job.yaml"
        f.write_text(yaml.safe_dump(job))
        r = cli("export", str(f), "--format", "deepspeed")
        assert r.exit_code == 0, r.stderr
        cfg = json.loads(r.stdout)
        assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
        if job.get("offload_param"):
            assert cfg["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": True}
        back = tmp_path / "back.json"
        back.write_text(r.stdout)
        got, _ = _read(cli, back)
        want = _explain(cli, tmp_path, job, "want.yaml")
        for k in ("offload_optimizer", "offload_param", "sharding"):
            assert got["plan"].get(k) == want["plan"].get(k)
        assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
        assert got["time"]["step_s"] == pytest.approx(want["time"]["step_s"], rel=1e-12)


def test_torchtitan_reader_and_round_trip(cli, tmp_path):
    """[training] enable_cpu_offload = true under FSDP: both fields cpu; written back by export; without a shard
    degree torchtitan applies no policy: ignored."""
    from pathlib import Path

    base = Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml"
    text = base.read_text().replace("compile = false", "compile = false\nenable_cpu_offload = true")
    f = tmp_path / "off.toml"
    f.write_text(text)
    r = cli("explain", str(f), "--gpus", "8", "--format", "json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["plan"]["offload_optimizer"], got["plan"]["offload_param"]) == ("cpu", "cpu")
    e = cli("export", str(f), "--gpus", "8", "--format", "torchtitan")
    assert e.exit_code == 0, e.stderr
    assert "enable_cpu_offload = true" in e.stdout
    back = tmp_path / "back.toml"
    back.write_text(e.stdout)
    r2 = cli("explain", str(back), "--gpus", "8", "--format", "json")
    assert r2.exit_code == 0, r2.stderr
    again = json.loads(r2.stdout)
    assert again["plan"]["offload_optimizer"] == "cpu" and again["memory"]["total_bytes"] == got["memory"]["total_bytes"]
    ddp = text.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1").replace(
        "data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 8")
    f2 = tmp_path / "ddp.toml"
    f2.write_text(ddp)
    r3 = cli("explain", str(f2), "--gpus", "8", "--format", "json")
    assert r3.exit_code == 0, r3.stderr
    assert "offload_optimizer" not in json.loads(r3.stdout)["plan"]
    from planner.trainers import torchtitan

    cfg = torchtitan.read(f2, gpus=8)
    assert "offload_optimizer" not in cfg.job and any("training.enable_cpu_offload" in x for x in cfg.ignored)
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("enable_cpu_offload = true", 'enable_cpu_offload = "yes"'))
    assert_one_error(cli("explain", str(bad), "--gpus", "8"), "enable_cpu_offload")


def test_megatron_deepspeed_round_trip(cli, tmp_path):
    """The Megatron-DeepSpeed launch script: the ds_config heredoc with offload_optimizer and --cpu-optimizer
    (microsoft/Megatron-DeepSpeed @f4157bea megatron/optimizer/__init__.py l. 83-94: DeepSpeedCPUAdam, the host Adam
    priced); read back, the same plan and figures. The JSON's offload without --cpu-optimizer is listed as not
    modelled (the engine would step the host partition with the GPU's apex FusedAdam)."""
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(dict(DS2, offload_optimizer="cpu")))
    r = cli("export", str(f), "--format", "megatron-deepspeed")
    assert r.exit_code == 0, r.stderr
    assert "--cpu-optimizer" in r.stdout and '"offload_optimizer"' in r.stdout
    script = tmp_path / "run.sh"
    script.write_text(r.stdout)
    back = cli("explain", str(script), "--format", "json")
    assert back.exit_code == 0, back.stderr
    got, want = json.loads(back.stdout), _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu"), "want.yaml")
    assert got["plan"]["offload_optimizer"] == "cpu"
    assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert got["time"]["optimizer_s"] == pytest.approx(want["time"]["optimizer_s"], rel=1e-12)
    plain = tmp_path / "plain.sh"
    plain.write_text(r.stdout.replace("    --cpu-optimizer \\\n", ""))
    assert "--cpu-optimizer" not in plain.read_text()
    r2 = cli("explain", str(plain), "--format", "json")
    assert r2.exit_code == 0, r2.stderr
    assert json.loads(r2.stdout)["plan"]["offload_optimizer"] == "cpu" and "without --cpu-optimizer" in r2.stderr


@pytest.mark.parametrize("hw, link, bw, cap, ranks", [
    # DGX A100 640GB: PCIe Gen4 x16 32 GB/s a direction, 2 x EPYC 7742 at 8 x DDR4-3200 = 409.6 GB/s, 2 TB
    ("a100-sxm-80gb", 32e9, 409.6e9, 2048e9, 8),
    # DGX A100 320GB: the same link and CPUs, 1 TB
    ("a100-sxm-40gb", 32e9, 409.6e9, 1024e9, 8),
    # DGX H200: as DGX H100 (2 x Xeon 8480C, 16 x DDR5-4400), 2 TB
    ("h200-sxm", 64e9, 563.2e9, 2048e9, 8),
    # GB200 NVL72 compute tray (4 GPUs): NVLink-C2C 900 GB/s a superchip / 2 GPUs / 2 directions = 225, 2 Grace x
    # 384 GB/s LPDDR5X (the GH200 datasheet's rate at 480 GB a Grace; rack 36 x 384 = 13,824 GB/s, '14 TB/s'), 2 x 480 GB
    ("gb200-nvl72", 225e9, 2 * 384e9, 960e9, 4),
    # MI300X, AMD's MLPerf node (issue 21): PCIe Gen5 x16 64 GB/s a direction, 2 x EPYC 9374F at 12 x DDR5-4800 =
    # 2 x 12 x 4,800e6 x 8 B = 921.6 GB/s, 24 x 64 GB = 1,536 GB
    ("mi300x", 64e9, 2 * 12 * 4800e6 * 8, 1536e9, 8),
])
def test_offload_on_other_nodes(cli, tmp_path, hw, link, bw, cap, ranks):
    """The host fields of each node that gives them (hardware_db sources): the host's Adam is the node's ranks'
    partitions x 28 B over the DRAM bandwidth x 0.5, the link the fp32 gradient down and the fp32 partition up (no
    overlap: both exposed), the host gated at the node's memory."""
    gpus = 8 if ranks == 8 else 4
    local = P // gpus
    off = _explain(cli, tmp_path, dict(DS2, hardware=hw, gpus=gpus, global_batch=gpus, offload_optimizer="cpu"))
    t, host = off["time"], off["memory"]["host"]
    assert t["offload_cpu_adam_s"] == pytest.approx(local * ranks * 28 / (bw * 0.5), rel=1e-12)
    assert t["offload_link_s"] == pytest.approx((4 + 4) * local / link, rel=1e-12)
    assert host["capacity_bytes_per_node"] == cap and host["ranks_per_node"] == ranks
    assert host["bytes_per_node"] == ranks * 16 * local


def test_gb300_tray_host_figures_by_hand(cli, tmp_path):
    """GB300 NVL72 compute tray (hardware_db/gb300-nvl72.yaml, issue 21): NVIDIA's GB300 NVL72 spec table gives the
    rack's CPU memory as '17 TB LPDDR5X | 14 TB/s' over 36 Grace; the GH200 datasheet pairs a Grace's 480 GB of
    LPDDR5X with 'up to 384 GB/s' (512 only at 120 / 240 GB). 36 x 480 = 17,280 GB rounds to the rack's 17 TB and
    36 x 384 = 13,824 GB/s to its 14 TB/s; a tray of 2 Grace: 2 x 480 = 960 GB, 2 x 384 = 768 GB/s. The entry gives
    no host link (no GB300 NVLink-C2C figure at hand), so the job names one: pcie_gbps 100, a value of the test's
    choosing. The host's Adam: 4 ranks' partitions x 28 B over 768 GB/s x 0.5; the link: the fp32 gradient down
    and the fp32 partition up, 8 B an element over 100 GB/s; the gate: 960 GB."""
    per_grace_gb, per_grace_gbps = 480, 384
    assert round(36 * per_grace_gb / 1000) == 17 and round(36 * per_grace_gbps / 1000) == 14
    local = P // 4
    off = _explain(cli, tmp_path, dict(DS2, hardware="gb300-nvl72", gpus=4, global_batch=4, offload_optimizer="cpu",
                                       pcie_gbps=100))
    t, host = off["time"], off["memory"]["host"]
    assert t["offload_cpu_adam_s"] == pytest.approx(local * 4 * 28 / (2 * per_grace_gbps * 1e9 * 0.5), rel=1e-12)
    assert t["offload_link_s"] == pytest.approx((4 + 4) * local / 100e9, rel=1e-12)
    assert host["capacity_bytes_per_node"] == 2 * per_grace_gb * 1e9 and host["ranks_per_node"] == 4


# Megatron-LM's optimizer CPU offload (HybridDeviceOptimizer, planner/offload.py hybrid_device): the distributed
# optimizer's partition L split, f on the host (fp32 master copy, torch AdamW's fp32 moments, a pinned fp32 gradient:
# 16 B), 1 - f on the GPU
MG = dict(model="llama3-8b", gpus=8, stack="megatron", sharding="zero1", micro_batch=1, global_batch=8, seq_len=4096)


@pytest.mark.parametrize("overlap", [False, True])
def test_megatron_hybrid_device_by_hand(cli, tmp_path, overlap):
    """f = 0.5: the GPU keeps half the master (4 B) and Adam (8 B) partition; the host holds 0.5 L x 16 B a rank. At
    step(): the main gradients (fp32 buffer) down, 0.5 L x 4 B, and after the CPU step the bf16 parameters up,
    0.5 L x 2 B, at 64 GB/s; the host's Adam over 0.5 L x 8 ranks x 28 B at 563.2 GB/s x 0.5; the GPU's Adam over the
    other half, half the plan's optimizer step without offload. Without --overlap-cpu-optimizer-d2h-h2d: down, the
    longer step, up; with it the longest of the four."""
    plain = _explain(cli, tmp_path, MG)
    job = dict(MG, offload_optimizer="cpu", offload_fraction=0.5, **({"offload_overlap": True} if overlap else {}))
    off = _explain(cli, tmp_path, job, "off.yaml")
    a, b = plain["memory"]["terms"], off["memory"]["terms"]
    assert (a["master_weights"], a["adam"]) == (4 * L, 8 * L)
    assert (b["master_weights"], b["adam"]) == (2 * L, 4 * L)
    assert b["gradients"] == a["gradients"]  # the grad buffer stays on the GPU
    assert off["memory"]["host"]["bytes_per_rank"] == 8 * L
    t = off["time"]
    cpu = 0.5 * L * 8 * 28 / (563.2e9 * 0.5)
    gpu = 0.5 * plain["time"]["optimizer_s"]
    down, up = 0.5 * L * 4 / 64e9, 0.5 * L * 2 / 64e9
    assert t["offload_cpu_adam_s"] == pytest.approx(cpu, rel=1e-12) and cpu == pytest.approx(0.39923, rel=1e-4)
    assert t["offload_gpu_adam_s"] == pytest.approx(gpu, rel=1e-12)
    assert t["offload_link_s"] == pytest.approx(down + up, rel=1e-12)
    want = max(cpu, gpu, down, up) if overlap else down + max(cpu, gpu) + up
    assert t["optimizer_s"] == pytest.approx(want, rel=1e-12)
    assert off["plan"]["offload_fraction"] == 0.5 and off["plan"].get("offload_overlap", False) is overlap


def test_megatron_round_trip(cli, tmp_path):
    """export writes --use-precision-aware-optimizer --optimizer-cpu-offload --optimizer-offload-fraction 0.5
    --overlap-cpu-optimizer-d2h-h2d; read back, the same plan and figures."""
    job = dict(MG, offload_optimizer="cpu", offload_fraction=0.5, offload_overlap=True)
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job))
    r = cli("export", str(f), "--format", "megatron")
    assert r.exit_code == 0, r.stderr
    for flag in ("--use-precision-aware-optimizer", "--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5",
                 "--overlap-cpu-optimizer-d2h-h2d", "--use-distributed-optimizer"):
        assert flag in r.stdout
    script = tmp_path / "run.sh"
    script.write_text(r.stdout)
    back = cli("explain", str(script), "--format", "json")
    assert back.exit_code == 0, back.stderr
    got, want = json.loads(back.stdout), _explain(cli, tmp_path, job, "want.yaml")
    for k in ("offload_optimizer", "offload_fraction", "offload_overlap"):
        assert got["plan"][k] == want["plan"][k]
    assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert got["time"]["optimizer_s"] == pytest.approx(want["time"]["optimizer_s"], rel=1e-12)
    # the argparse default fraction 1.0: the whole partition on the host, noted as assumed
    whole = tmp_path / "whole.sh"
    whole.write_text(r.stdout.replace("    --optimizer-offload-fraction 0.5 \\\n", ""))
    r2 = cli("explain", str(whole), "--format", "json")
    assert r2.exit_code == 0, r2.stderr
    plan = json.loads(r2.stdout)["plan"]
    assert plan["offload_optimizer"] == "cpu" and "offload_fraction" not in plan and "default 1.0" in r2.stderr
    # fraction 0: nothing offloaded
    zero = tmp_path / "zero.sh"
    zero.write_text(r.stdout.replace("--optimizer-offload-fraction 0.5", "--optimizer-offload-fraction 0"))
    r3 = cli("explain", str(zero), "--format", "json")
    assert r3.exit_code == 0, r3.stderr
    assert "offload_optimizer" not in json.loads(r3.stdout)["plan"] and "offloads nothing" in r3.stderr


@pytest.mark.parametrize("edit, needle", [
    (("    --use-precision-aware-optimizer \\\n", ""), "without --use-precision-aware-optimizer"),
    (("--optimizer-offload-fraction 0.5", "--optimizer-offload-fraction 1.5"), "outside 0 .. 1"),
    (("--optimizer-offload-fraction 0.5", "--optimizer-offload-fraction -0.1"), "outside 0 .. 1"),
    (("--optimizer-offload-fraction 0.5", "--optimizer-offload-fraction half"), "--optimizer-offload-fraction: invalid float value: 'half'"),  # argparse (megatron_argparse.py)
])
def test_megatron_reader_refusals(cli, tmp_path, edit, needle):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(dict(MG, offload_optimizer="cpu", offload_fraction=0.5)))
    r = cli("export", str(f), "--format", "megatron")
    assert r.exit_code == 0, r.stderr
    assert edit[0] in r.stdout
    script = tmp_path / "run.sh"
    script.write_text(r.stdout.replace(*edit))
    assert_one_error(cli("explain", str(script)), needle)


def test_megatron_reader_state_dtypes_ignored(cli, tmp_path):
    """--exp-avg-dtype bf16 with the offload: HybridDeviceOptimizer's torch Adam keeps fp32 moments (the dtypes are
    not handed to it): said in the assumed list, priced fp32 (bytes_per_param megatron)."""
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(dict(MG, offload_optimizer="cpu")))
    r = cli("export", str(f), "--format", "megatron")
    script = tmp_path / "run.sh"
    script.write_text(r.stdout.replace("    --optimizer-cpu-offload \\\n",
                                       "    --optimizer-cpu-offload \\\n    --exp-avg-dtype bf16 \\\n    --exp-avg-sq-dtype bf16 \\\n"))
    back = cli("explain", str(script), "--format", "json")
    assert back.exit_code == 0, back.stderr
    assert json.loads(back.stdout)["memory"]["host"]["bytes_per_rank"] == 16 * L
    assert "--exp-avg-dtype bf16, --exp-avg-sq-dtype bf16 not handed to --optimizer-cpu-offload" in back.stderr


@pytest.mark.parametrize("job, needle", [
    (dict(DS2, offload_optimizer="cpu", offload_fraction=0.5), "Twin-Flow"),
    (dict(DS2, offload_optimizer="cpu", offload_overlap=True), "offload_overlap on stack megatron-deepspeed"),
    (dict(MG, offload_fraction=0.5), "without offload_optimizer cpu"),
    (dict(MG, offload_optimizer="cpu", sharding="none"), "sharding none"),
    (dict(MG, offload_optimizer="cpu", offload_param="cpu", sharding="fsdp"), "optimizer states only"),
    (dict(MG, offload_optimizer="cpu", bytes_per_param="bf16-moments"), "fp32 master copies"),
    (dict(MG, offload_optimizer="cpu", offload_fraction=1.5), "offload_fraction"),
    (dict(MG, offload_optimizer="cpu", offload_fraction=0), "offload_fraction"),
])
def test_megatron_offload_refusals(cli, tmp_path, job, needle):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job))
    assert_one_error(cli("explain", str(f)), needle)


# ------------------------------------------------------------------ one plan or many: the same figures
def _stacked(plans):
    """The 0-d plans as one 1-d PlanArrays (element j: plans[j]), as search and the batch ramp price many at once."""
    import dataclasses

    import numpy as np

    return dataclasses.replace(plans[0], **{f.name: np.stack([np.asarray(getattr(p, f.name)) for p in plans])
                                            for f in dataclasses.fields(plans[0])})


@pytest.mark.parametrize("base, variants", [
    # ZeRO-1 / ZeRO-2, one micro-batch or four (the accumulation copies' np.where), pp 1 or 2 (the staging buffer's
    # stage: plan.pp == 1 is an array over the plans)
    (dict(DS2, offload_optimizer="cpu"), [{}, {"global_batch": 32}, {"sharding": "zero1", "global_batch": 32},
                                          {"micro_batch": 2, "global_batch": 32},
                                          {"sharding": "zero1", "pp": 2, "global_batch": 32}]),
    (dict(MG, offload_optimizer="cpu", offload_fraction=0.5), [{}, {"global_batch": 32}, {"pp": 2, "global_batch": 32}]),
    (dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", micro_batch=1, global_batch=8, seq_len=4096,
          offload_optimizer="cpu", offload_param="cpu"), [{}, {"global_batch": 32}]),
])
def test_offload_priced_alike_one_plan_or_many(base, variants):
    """The offload terms are vectorised over the plans: each plan priced alone (explain's 0-d plan) and the same plans
    priced together as one 1-d PlanArrays (what search and explain's batch ramp evaluate) give the same JSON, every
    memory and time term. Before review5, _offload_staging combined plan.pp == 1 with Python `or`: a 1-d plan raised
    'truth value of an array ... is ambiguous' (explain with a batch_size_schedule crashed with a traceback)."""
    from planner.explain import evaluate, to_json
    from planner.plan import resolve
    from planner.schema import Job

    resolved = [resolve(Job(**dict(base, **v))) for v in variants]
    settings = resolved[0][0]
    assert all(repr(s) == repr(settings) for s, _, _ in resolved)  # the variants differ in the plan only
    plans = [p for _, p, _ in resolved]
    many = _stacked(plans)
    est = evaluate(settings, many)
    for i, p in enumerate(plans):
        alone = to_json(settings, p, evaluate(settings, p))
        assert alone["time"]["offload_link_s"] > 0 and "host" in alone["memory"]
        assert to_json(settings, many, est, i) == alone, variants[i]


def test_offload_with_a_batch_ramp(cli, tmp_path):
    """explain with a batch_size_schedule prices every phase at once (explain.ramp_estimates: a 1-d plan): each
    phase's step is the plan's at that batch, as explain prices it alone."""
    job = dict(DS2, offload_optimizer="cpu", tokens=1e10,
               batch_size_schedule=[{"from_tokens": 0, "global_batch": 8}, {"from_tokens": 1e9, "global_batch": 32}])
    del job["global_batch"]
    got = _explain(cli, tmp_path, job)["throughput"]["batch_ramp"]
    for phase in got:
        alone = _explain(cli, tmp_path, dict(DS2, offload_optimizer="cpu", global_batch=phase["global_batch"]),
                         f"gb{phase['global_batch']}.yaml")
        assert phase["step_s"] == alone["time"]["step_s"]
        assert phase["memory_bytes"] == alone["memory"]["total_bytes"]
