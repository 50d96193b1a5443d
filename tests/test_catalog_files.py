"""The shipped catalogs: model_zoo/*.yaml (ModelSpec) and hardware_db/*.yaml (Hardware).

Every file must load with yaml.safe_load, validate against planner.schema (unknown keys are
errors), carry its name as its file stem, and cite sources. Beyond schema validity, the shapes
are checked against published numbers with an independent parameter count written out here
(so a wrong layer count, width, vocabulary, tying or bias flag in a YAML file fails a test):

References
1. Llama Team, AI @ Meta, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 3.
2. Released Hugging Face checkpoints: parameter totals from model.safetensors.index.json
   (metadata.total_size / 2 bytes per bf16/fp16 parameter) or the published parameter count.
3. Seed chapter "Distributed Training", sec. 1.2: the 70B shape with vocab 128,000 prints
   "parameters: 70.5 billion" (its formula counts Q, K, V, output, gate/up/down and two
   embedding tables; no norms).
4. Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
   Megatron-LM", arXiv:2104.04473, Table 1 (parameter column, billions, one decimal).
5. MosaicML llm-foundry scripts/train/benchmarking/README.md (tables from commit 5e85bd62d,
   2024-01-06), NumParams column at sequence length 2048.
6. Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: GPT-3 175.0B.
7. Datasheet figures as copied into hardware_db/*.yaml (H100 SXM 80 GB, 3.35 TB/s, 989 / 1979
   dense TFLOP/s, 700 W; H200 141 GB, 4.8 TB/s).
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import yaml

from planner.catalog import stack_data
from planner.schema import Hardware, ModelSpec, Stack

ROOT = Path(__file__).parent.parent
ZOO = ROOT / "model_zoo"
HWDB = ROOT / "hardware_db"
STACKDB = ROOT / "stack_db"


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


MODEL_FILES = _yaml_files(ZOO)
HW_FILES = _yaml_files(HWDB)
STACK_FILES = _yaml_files(STACKDB)


def _load(path: Path) -> dict:
    with path.open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, dict), f"{path.name}: top level must be a mapping"
    return data


def model(name: str) -> ModelSpec:
    return ModelSpec(**_load(ZOO / f"{name}.yaml"))


def hardware(name: str) -> Hardware:
    return Hardware(**_load(HWDB / f"{name}.yaml"))


# --- every file ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name)
def test_model_file_validates(path: Path) -> None:
    assert path.suffix == ".yaml", f"{path.name}: use the .yaml extension"
    spec = ModelSpec(**_load(path))
    assert spec.name == path.stem
    assert spec.sources and all(isinstance(s, str) and s.strip() for s in spec.sources)
    assert spec.description.strip()


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_stack_file_validates(path: Path) -> None:
    """Every stack_db entry (torchtitan-0.3 among them): the schema, its name, its sources, and the start-up
    rules it lists as absent are rules of its trainer's set (planner/startup.py rules_for raises otherwise)."""
    from planner.startup import RULES, rules_for

    assert path.suffix == ".yaml", f"{path.name}: use the .yaml extension"
    st = Stack(**stack_data(path))  # its `extends:` resolved (megatron-bridge)
    assert st.name == path.stem
    assert st.sources and all(isinstance(s, str) and s.strip() for s in st.sources)
    assert st.version.strip() and st.description.strip()
    if st.runs is not None:
        keys = {r.key for _, r in rules_for(st)}
        for a in st.runs.startup_rules_absent:
            assert a.rule not in keys and any(r.key == a.rule and r.trainer == st.runs.startup_rules for r in RULES)
            assert a.source.strip()


def test_required_stacks_present() -> None:
    assert {"megatron", "torchtitan", "torchtitan-0.3", "llm-foundry", "megatron-deepspeed"} <= {p.stem for p in STACK_FILES}


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.name)
def test_hardware_file_validates(path: Path) -> None:
    assert path.suffix == ".yaml", f"{path.name}: use the .yaml extension"
    hw = Hardware(**_load(path))
    assert hw.name == path.stem
    assert hw.sources and all(isinstance(s, str) and s.strip() for s in hw.sources)
    assert hw.fabric.sources and all(s.strip() for s in hw.fabric.sources)
    # the scale-up domain is a whole number of nodes or lies within one node (PCIe pairs)
    assert hw.nvlink_domain % hw.gpus_per_node == 0 or hw.gpus_per_node % hw.nvlink_domain == 0
    if hw.fp8_TFLOPS is not None:
        assert hw.fp8_TFLOPS >= hw.bf16_TFLOPS


def test_required_entries_present() -> None:
    models = {p.stem for p in MODEL_FILES}
    required_models = {
        "llama3-8b", "llama3-70b", "llama3-405b", "llama3-70b-paper", "llama3-405b-paper",
        "llama2-7b", "llama2-13b", "llama2-70b", "gpt3-175b",
        "mpt-7b", "mpt-13b", "mpt-30b", "mpt-70b",
    } | {f"megatron-gpt-{s}" for s in MEGATRON_TABLE1}
    assert required_models <= models, sorted(required_models - models)
    hws = {p.stem for p in HW_FILES}
    required_hw = {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb",
                   "b200", "gb200-nvl72", "mi300x"}
    assert required_hw <= hws, sorted(required_hw - hws)


# --- strictness ----------------------------------------------------------------------------


def test_unknown_model_key_is_rejected() -> None:
    data = _load(ZOO / "llama3-70b.yaml")
    data["hidden"] = 8192  # typo for hidden_size
    with pytest.raises(pydantic.ValidationError) as exc:
        ModelSpec(**data)
    assert "hidden" in str(exc.value)


def test_unknown_hardware_key_is_rejected() -> None:
    data = _load(HWDB / "h100-sxm.yaml")
    data["hbm_gb"] = 80  # wrong case: the key is hbm_GB
    with pytest.raises(pydantic.ValidationError):
        Hardware(**data)


def test_missing_sources_is_rejected() -> None:
    data = _load(ZOO / "llama2-7b.yaml")
    data["sources"] = []
    with pytest.raises(pydantic.ValidationError):
        ModelSpec(**data)


# --- hand-checkable model facts ------------------------------------------------------------


def param_count(m: ModelSpec) -> int:
    """Parameters of a dense decoder from its catalog fields (written out independently here).

    Per layer: Q and output h x (H dh), K and V h x (kv dh); MLP 2 (plain) or 3 (gated)
    h x ffn matrices; biases on those linears when linear_bias; norms: RMSNorm a weight
    (h), LayerNorm weight and bias (2h), two per layer plus a final one. Embeddings: V h,
    twice when untied; learned positions add max_seq_len x h.
    """
    h, f, dh = m.hidden_size, m.ffn_hidden_size, m.dhead
    q = m.num_attention_heads * dh
    kv = m.kv_heads * dh
    n_mlp = 3 if m.gated_mlp else 2
    layer = 2 * h * q + 2 * h * kv + n_mlp * h * f
    if m.linear_bias:
        layer += q + 2 * kv + h + (n_mlp - 1) * f + h
    norm = h if m.norm == "rmsnorm" else 2 * h
    total = m.num_layers * (layer + 2 * norm) + norm
    total += m.vocab_size * h * (1 if m.tied_embeddings else 2)
    if m.position_embedding == "learned":
        total += m.max_seq_len * h
    return total


# Ref. 2: parameter totals of the released checkpoints.
RELEASED_PARAMS = {
    "llama3-8b": 8_030_261_248,      # safetensors total_size 16,060,522,496 B (bf16)
    "llama3-70b": 70_553_706_496,    # total_size 141,107,412,992 B
    "llama3-405b": 405_853_388_800,  # total_size 811,706,777,600 B
    "llama2-7b": 6_738_415_616,      # total_size 13,476,839,424 B (fp16)
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
}


@pytest.mark.parametrize("name", sorted(RELEASED_PARAMS))
def test_released_llama_parameter_counts(name: str) -> None:
    assert param_count(model(name)) == RELEASED_PARAMS[name]


def test_llama3_70b_released_shape() -> None:
    m = model("llama3-70b")
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size) == (80, 8192, 28672)
    assert (m.num_attention_heads, m.kv_heads, m.dhead) == (64, 8, 128)
    assert m.vocab_size == 128256
    assert m.gated_mlp and m.norm == "rmsnorm" and not m.tied_embeddings
    assert m.position_embedding == "rope" and m.max_seq_len == 8192
    assert not m.linear_bias and not m.dropout


@pytest.mark.parametrize("size", ["70b", "405b"])
def test_paper_variants_differ_only_in_vocab(size: str) -> None:
    released = model(f"llama3-{size}").model_dump(exclude={"name", "description", "sources"})
    paper = model(f"llama3-{size}-paper").model_dump(exclude={"name", "description", "sources"})
    assert released.pop("vocab_size") == 128256
    assert paper.pop("vocab_size") == 128000
    assert paper == released
    desc = model(f"llama3-{size}-paper").description
    assert "128,000" in desc and "128,256" in desc and "seed" in desc


def test_seed_sec_1_2_parameter_count() -> None:
    # Ref. 3: the seed's own formula on llama3-70b-paper prints 70.5 billion.
    m = model("llama3-70b-paper")
    h, dh = m.hidden_size, m.dhead
    attn = h * h + 2 * h * (m.kv_heads * dh) + h * h
    mlp = 3 * h * m.ffn_hidden_size
    n = m.num_layers * (attn + mlp) + 2 * m.vocab_size * h
    assert f"{n / 1e9:.1f}" == "70.5"
    # With norms the full count is 70.55e9 -> the released vocab adds 2 * 256 * 8192 rows.
    assert param_count(model("llama3-70b")) - param_count(m) == 2 * 256 * 8192


# Ref. 4, Table 1: label -> (catalog suffix, layers, hidden, heads)
MEGATRON_TABLE1 = {
    "1.7b": ("1.7", 24, 2304, 24),
    "3.6b": ("3.6", 30, 3072, 32),
    "7.5b": ("7.5", 36, 4096, 32),
    "18.4b": ("18.4", 40, 6144, 48),
    "39.1b": ("39.1", 48, 8192, 64),
    "76.1b": ("76.1", 60, 10240, 80),
    "145.6b": ("145.6", 80, 12288, 96),
    "310.1b": ("310.1", 96, 16384, 128),
    "529.6b": ("529.6", 105, 20480, 128),
    "1t": ("1008.0", 128, 25600, 160),
}


@pytest.mark.parametrize("suffix", list(MEGATRON_TABLE1))
def test_megatron_table1_shapes(suffix: str) -> None:
    label, layers, hidden, heads = MEGATRON_TABLE1[suffix]
    m = model(f"megatron-gpt-{suffix}")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (layers, hidden, heads)
    assert m.ffn_hidden_size == 4 * hidden and m.vocab_size == 51200 and m.max_seq_len == 2048
    assert m.tied_embeddings and m.linear_bias and m.dropout and m.position_embedding == "learned"
    # the paper's parameter column, rounded to one decimal of a billion
    assert f"{param_count(m) / 1e9:.1f}" == label


# Ref. 5: NumParams at seq 2048 (learned positions, biases, tied embedding: exact match).
MPT_NUMPARAMS = {
    "mpt-7b": 6_658_859_008,
    "mpt-13b": 12_853_954_560,
    "mpt-30b": 29_975_214_080,
    "mpt-70b": 64_862_437_376,
}


@pytest.mark.parametrize("name", sorted(MPT_NUMPARAMS))
def test_mpt_benchmark_parameter_counts(name: str) -> None:
    m = model(name)
    assert m.vocab_size == 50368 and m.ffn_hidden_size == 4 * m.hidden_size and not m.gated_mlp
    assert param_count(m) == MPT_NUMPARAMS[name]


def test_gpt3_175b() -> None:
    m = model("gpt3-175b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.dhead) == (96, 12288, 96, 128)
    assert m.ffn_hidden_size == 4 * 12288 and m.vocab_size == 50257 and m.max_seq_len == 2048
    # Table 2.1 says 175.0B; the dense count with GPT-2 layout is 174.6B (0.2 % low).
    assert abs(param_count(m) / 175.0e9 - 1) < 0.005


# --- hand-checkable hardware facts ---------------------------------------------------------


def test_h100_sxm_datasheet() -> None:
    hw = hardware("h100-sxm")
    assert (hw.hbm_GB, hw.hbm_TBps, hw.bf16_TFLOPS, hw.fp8_TFLOPS, hw.tdp_W) == (80, 3.35, 989, 1979, 700)
    assert (hw.gpus_per_node, hw.nvlink_domain, hw.nvlink_GBps, hw.network_Gbps) == (8, 8, 450, 400)
    assert (hw.fabric.pod_gpus, hw.fabric.oversubscription) == (3072, 7)
    # SI views: 80e9 bytes on the datasheet; the gate's capacity is what CUDA reports,
    # 79.09 GiB (torchtitan #1789: 73.32 GiB = 92.70%); 3.35e12 B/s, 400 Gb/s = 50e9 B/s
    assert hw.hbm_datasheet_bytes == 80e9 and hw.hbm_bandwidth == pytest.approx(3.35e12)
    assert hw.hbm_visible_GiB == 79.09 and hw.hbm_bytes == 79.09 * 2**30 and hw.hbm_capacity_source == "measured"
    assert hw.network_bandwidth == 50e9 and hw.peak_flops("fp8") == 1979e12


def test_h200_sxm_datasheet() -> None:
    hw = hardware("h200-sxm")
    assert (hw.hbm_GB, hw.hbm_TBps) == (141, 4.8)
    assert (hw.bf16_TFLOPS, hw.fp8_TFLOPS, hw.tdp_W) == (989, 1979, 700)


# The HBM each entry's device reports to CUDA (hbm_visible_GiB), as its sources measured it;
# the entries not listed have no public measurement the catalog could cite and keep the
# datasheet figure for the gate (hbm_bytes = hbm_GB x 1e9).
VISIBLE_GIB = {
    "h100-sxm": 73.32 / 0.9270,  # torchtitan #1789: 'memory: 73.32GiB(92.70%)' -> 79.09
    "h100-pcie": 84942979072 / 2**30,  # XLA gpu_specs h100_pcie.txtpb device_memory_size -> 79.109
    "a100-sxm-80gb": 85100068864 / 2**30,  # a100_sxm_80.txtpb -> 79.256
    "a100-sxm-40gb": 42331013120 / 2**30,  # a100_sxm_40.txtpb -> 39.424
    "h100-sxm-96gb-hbm2e": 49.58 / 0.5220,  # torchtitan PR #996: 'memory: 49.58GiB(52.20%)' -> 94.98
    "h200-sxm": 143156 / 1024,  # torch's 'total_memory=143156MB' (MiB) -> 139.80
    "b200": 178.35,  # pytorch/ao #4002: 'Total Global Memory: 178.35 GB' (GiB)
    "h800-sxm": 73.32 / 0.9270,  # the H100 SXM5's (hbm_visible_measured_on: the same 80 GB HBM3 package)
}
DATASHEET_ONLY = {"gb200-nvl72", "gb300-nvl72", "mi300x"}


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.name)
def test_visible_hbm_is_measured_or_absent(path: Path) -> None:
    """Every entry either cites its device-reported capacity (within 0.01 GiB of its source's
    figure, rounded down: never more than the device reports) or has none and gates on the
    datasheet; the reported figure is the DRAM less what the driver keeps, so it lies between
    the datasheet's GB read as 1e9 bytes less 10% and the same number read as GiB (80 GB HBM3:
    80 GiB of DRAM) -- a figure outside is a unit slip (bytes, GB for GiB)."""
    hw = Hardware(**_load(path))
    name = path.stem
    assert name in VISIBLE_GIB or name in DATASHEET_ONLY, f"{name}: list it in VISIBLE_GIB or DATASHEET_ONLY"
    if name in DATASHEET_ONLY:
        assert hw.hbm_visible_GiB is None and hw.hbm_capacity_source == "datasheet"
        assert hw.hbm_bytes == hw.hbm_GB * 1e9
        return
    assert 0 <= VISIBLE_GIB[name] - hw.hbm_visible_GiB < 0.01
    on = hw.hbm_visible_measured_on
    assert hw.hbm_capacity_source == ("measured" if on is None else f"measured on {on}")
    assert hw.hbm_bytes == hw.hbm_visible_GiB * 2**30
    if on is not None:  # taken from a catalog GPU with the same memory: the same datasheet HBM and figure
        other = Hardware(**_load(path.with_name(f"{on}.yaml")))
        assert other.hbm_visible_measured_on is None
        assert (other.hbm_GB, other.hbm_visible_GiB) == (hw.hbm_GB, hw.hbm_visible_GiB)
    assert 0.9 * hw.hbm_GB * 1e9 < hw.hbm_bytes <= hw.hbm_GB * 2**30
    assert any(s.startswith(f"hbm_visible_GiB {hw.hbm_visible_GiB:.2f}") for s in hw.sources)


def test_a100_has_no_fp8() -> None:
    for name in ("a100-sxm-40gb", "a100-sxm-80gb"):
        hw = hardware(name)
        assert hw.fp8_TFLOPS is None and hw.bf16_TFLOPS == 312 and hw.network_Gbps == 200
    assert hardware("a100-sxm-40gb").hbm_TBps == 1.555
    assert hardware("a100-sxm-80gb").hbm_TBps == 2.039


def test_a100_sxm_parts_share_the_best_shape_gemm() -> None:
    # Same GA100 die, 108 SMs, 1410 MHz boost, 400 W: one best-shape GEMM figure, the MAMF
    # "A100 SXM" row (271.2 TFLOP/s at 1024x10240x5120, gemm_measurements.yaml). Its operands and
    # output, 2 B x (1024x5120 + 5120x10240 + 1024x10240) = 136.3 MB, take 87.6 us at the 40 GB
    # part's 1.555 TB/s against 396 us of tensor-core time at 271.2 TFLOP/s: compute-bound on both.
    rows = (1024 * 5120 + 5120 * 10240 + 1024 * 10240) * 2
    assert rows / 1.555e12 < 0.25 * (2 * 1024 * 10240 * 5120 / 271.2e12)
    for name in ("a100-sxm-40gb", "a100-sxm-80gb"):
        assert hardware(name).compute.gemm_bf16_TFLOPS == 271.2


def test_gb200_nvl72_domain_spans_trays() -> None:
    hw = hardware("gb200-nvl72")
    assert (hw.gpus_per_node, hw.nvlink_domain, hw.nvlink_GBps) == (4, 72, 900)


def test_h100_pcie_assumptions_are_flagged() -> None:
    hw = hardware("h100-pcie")
    assert (hw.nvlink_domain, hw.nvlink_GBps, hw.gpus_per_node) == (2, 300, 8)
    assert any("gpus_per_node" in u for u in hw.uncertain)


@pytest.mark.parametrize("name", ["a100-sxm-40gb", "a100-sxm-80gb", "b200", "gb200-nvl72", "mi300x", "h100-pcie"])
def test_borrowed_fabric_is_labelled(name: str) -> None:
    # No source gives these a pod: the Meta-style default must say it is an assumption.
    hw = hardware(name)
    assert (hw.fabric.pod_gpus, hw.fabric.oversubscription) == (3072, 7)
    assert "assumption" in hw.fabric.sources[0] and "Meta" in hw.fabric.sources[0]


HOST_FIELDS = ("pcie_GBps", "host_memory_GBps", "host_memory_GB")


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.name)
def test_missing_host_figures_are_stated(path: Path) -> None:
    """CPU offload reads pcie_GBps, host_memory_GBps and host_memory_GB (planner/offload.py; issue 21). An entry
    that leaves one out says so: an `uncertain` line naming the field as 'not given', with the rule that follows
    (offload refused without the link or the DRAM rate, planner/plan.py _check_offload; the host bytes ungated without
    the capacity). An entry that gives one cites it in `sources` by name."""
    hw = Hardware(**_load(path))
    for field in HOST_FIELDS:
        if getattr(hw, field) is None:
            assert any(field in u and "not given" in u for u in hw.uncertain), f"{path.name}: {field} left out silently"
        else:
            assert any(field in s for s in hw.sources), f"{path.name}: {field} has no source line naming it"
