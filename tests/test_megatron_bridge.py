"""Stack megatron-bridge (issue 22 plans you can run, issue 23 MoE): Megatron-Bridge as the megatron entry plus
what Bridge's code adds, Llama 4's chunked attention (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
src/megatron/bridge/models/llama/llama4_utils.py Llama4SelfAttention: chunkify folds the chunks into the batch and
Transformer Engine's causal kernel runs each as a sequence of its own), written with the catalog's `extends:`
(planner/catalog.py stack_data). Figures derived by hand below."""

import json
from pathlib import Path

import pytest

from planner.catalog import load_stack, stack_data
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES, layer_gaps

from conftest import assert_one_error

ROOT = Path(__file__).resolve().parent.parent
SCOUT_HF = ROOT / "tests" / "data" / "arch" / "llama-4-scout-17b-16e-instruct" / "config.json"
# what the megatron-bridge file states itself; every other field is megatron's
OWN = {"name", "description", "version", "uncertain", "sources", "export_format", "chunked_attention",
       "vocab_padding"}  # Bridge's provider pads no vocabulary by default (stack_db megatron-bridge vocab_padding)


def test_megatron_bridge_is_megatron_plus_chunked_attention():
    bridge, mega = load_stack("megatron-bridge").model_dump(), load_stack("megatron").model_dump()
    # --moe-shared-expert-overlap's dispatchers (step.py [38]): Bridge's pinned Megatron-Core 905c0e386 runs it with the
    # alltoall dispatcher only (transformer_config.py l. 1213-1218), Megatron-LM @d98e8a64 with flex too (l. 1820-1826)
    assert (bridge.pop("moe_shared_expert_overlap_dispatchers"), mega.pop("moe_shared_expert_overlap_dispatchers")) == (
        ["alltoall"], ["alltoall", "deepep", "hybridep"])
    # checkpoint: megatron's section (what Megatron-Core's dist-ckpt writes) with Bridge's save path as one source more
    ck_b, ck_m = bridge.pop("checkpoint"), mega.pop("checkpoint")
    assert ck_b["sources"][:-1] == ck_m["sources"] and "Megatron-Bridge" in ck_b["sources"][-1]
    assert {**ck_b, "sources": ck_m["sources"]} == ck_m
    assert {k for k in bridge if bridge[k] != mega[k]} == OWN | {"runs"}
    kinds_b, kinds_m = bridge["runs"].pop("layer_kinds"), mega["runs"].pop("layer_kinds")
    # runs.sharding: megatron's modes, the Megatron-FSDP ones as Bridge runs them on Megatron-Core 905c0e386 (fp32 main
    # gradients, main_grads_bytes; the gradient-accumulation fusion off: training/config.py l. 1554-1557), one source more
    modes_b, modes_m = bridge["runs"].pop("sharding"), mega["runs"].pop("sharding")
    # runs.low_precision_moments: megatron's, plus the Megatron-FSDP modes that never set decoupled_grad on 905c0e386
    # (start-up rule PRECISION_AWARE_MFSDP, tests/test_precision_aware_mfsdp.py) and the source saying so
    lb, lm = bridge["runs"].pop("low_precision_moments"), mega["runs"].pop("low_precision_moments")
    assert (lb.pop("no_decoupled_grad_modes"), lm.pop("no_decoupled_grad_modes")) == (
        ["megatron_fsdp_optim", "megatron_fsdp_optim_grads", "megatron_fsdp_optim_grads_params", "megatron_fsdp_hsdp"], [])
    sb_, sm_ = lb.pop("sources"), lm.pop("sources")
    assert sb_[:-1] == sm_ and "@905c0e386" in sb_[-1] and lb == lm
    # runs.optimizers: adam and muon on both (the Bridge reader and export carry optimizer.optimizer muon / dist_muon:
    # tests/test_bridge_muon.py), its sources at Bridge's pin (training/optim.py, Megatron-Core 905c0e386's muon.py)
    ob, om = bridge["runs"].pop("optimizers"), mega["runs"].pop("optimizers")
    assert (ob["optimizers"], om["optimizers"]) == (["adam", "muon"], ["adam", "muon"])
    assert "@dc805f5cf" in ob["sources"][0] and "@905c0e386" in ob["sources"][0]
    # Muon's layer-wise parameter layout: Megatron-LM @d98e8a64's, not 905c0e386's (tests/test_bridge_muon.py)
    assert (ob["muon_param_layout"], om["muon_param_layout"]) == (False, True)
    # Newton-Schulz steps a multiple of 5 under 905c0e386's Emerging-Optimizers v0.1.0, any under d98e8a64's v0.3.0
    # (tests/test_deterministic_nccl_muon_leftovers.py), its source the last of Bridge's
    assert (ob["muon_ns_steps_multiple"], om["muon_ns_steps_multiple"]) == (5, None)
    assert ob["sources"][-1].startswith("muon_ns_steps_multiple: ") and "v0.1.0" in ob["sources"][-1]
    # runs.deterministic_cublas_workspace: Megatron-LM @d98e8a64's --deterministic-mode sets :4096:8 (determinism.py,
    # from 3ab71eeb3e, 2026-07-08); Bridge's pinned 905c0e386 has no determinism.py and Bridge sets none
    # (training/config.py l. 1445-1469)
    cb, cm = bridge["runs"].pop("deterministic_cublas_workspace"), mega["runs"].pop("deterministic_cublas_workspace")
    assert cb is None and (cm["value"], cm["since"]) == (":4096:8", "2026-07-08") and "l. 27-31" in cm["source"]
    # runs.deterministic_nccl_algo: likewise, determinism.py's NCCL_ALGO Ring (from 3ab71eeb3e, 2026-07-08); none on Bridge
    nb, nm = bridge["runs"].pop("deterministic_nccl_algo"), mega["runs"].pop("deterministic_nccl_algo")
    assert nb is None and (nm["value"], nm["since"]) == ("Ring", "2026-07-08") and "determinism.py l. 27-31" in nm["source"]
    # runs.deterministic_refuses: Bridge's own checks (training/config.py @dc805f5cf l. 1454-1466: the FlashAttention
    # backend, the fused cross-entropy, NCCL_ALGO one of five), not Megatron-LM @d98e8a64's (determinism.py l. 24: TP
    # overlap, fused CE; l. 87-93: NCCL_ALGO's tokens) nor its older commits' (dated until: --use-flash-attn, an MoE
    # model, NCCL_ALGO one of five; tests/test_startup_deterministic.py, test_deterministic_nccl_muon_leftovers.py)
    db, dm = bridge["runs"].pop("deterministic_refuses"), mega["runs"].pop("deterministic_refuses")
    assert ([d["setting"] for d in db], [d["setting"] for d in dm]) == (
        ["flash_attention", "cross_entropy_fusion", "nccl_algo_choice"],
        ["tp_comm_overlap", "cross_entropy_fusion", "use_flash_attn", "moe", "nccl_algo_tokens", "nccl_algo_choice"])
    assert all("@dc805f5cf" in d["source"] for d in db) and all("@d98e8a64" in d["source"] for d in dm[:2])
    assert [d["until"] for d in dm] == [None, None, "2026-07-08", "2024-08-02", None, "2026-07-08"]
    assert bridge["runs"] == mega["runs"]
    assert [m["name"] for m in modes_b] == [m["name"] for m in modes_m]
    for b, m in zip(modes_b, modes_m):
        if not m["name"].startswith("megatron_fsdp"):
            # the distributed optimizer's instances: megatron's (--num-distributed-optimizer-instances), not read by
            # the Bridge reader outside Megatron-FSDP (listed as not modelled there)
            assert (b.pop("optimizer_instances"), m.pop("optimizer_instances")) == (
                (False, True) if m["name"] == "distributed_optimizer" else (False, False))
            assert b == m
            continue
        assert (b.pop("main_grads_bytes"), m.pop("main_grads_bytes")) == (4.0, None)
        assert (b.pop("tp_pp_dp_mapping"), m.pop("tp_pp_dp_mapping")) == (False, True)  # STACK_MODE_TP_PP_DP
        # Megatron-FSDP v2 (memory.py [v2]): d98e8a64's optim_grads_params runs it (mcore_fsdp_adapter.py l. 666-668);
        # 905c0e386, Bridge's pin, has no megatron_fsdp_version (git grep: none under megatron/)
        v2 = m["name"] == "megatron_fsdp_optim_grads_params"
        assert (b.pop("mfsdp_v2"), m.pop("mfsdp_v2")) == (False, v2)
        # the embedding gradient all-reduce's shard (step.py [20]): 905c0e386 sets param.grad under the precision-aware
        # optimizer too (update_main_grads l. 2845, 2872), d98e8a64 leaves it None (decoupled_grad): no all-reduce
        eb, em = b.pop("embedding_grad_shard"), m.pop("embedding_grad_shard")
        assert (eb["skipped_decoupled"], em["skipped_decoupled"]) == (False, True)
        assert "@905c0e386" in eb["sources"][0] and "@d98e8a64" in em["sources"][0]
        # the step's gradient copy (memory.py [mg]): 905c0e386 never sets the decoupled flag (update_main_grads l. 2845,
        # 2872), so the precision-aware optimizer does not spare the copy there (tests/test_bridge_step_grads.py)
        sb, sm = b.pop("step_grads"), m.pop("step_grads")
        assert (sb.pop("fp32_decoupled"), sm.pop("fp32_decoupled")) == (None, "precision_aware")
        assert "@905c0e386" in sb.pop("sources")[0] and "@d98e8a64" in sm.pop("sources")[0]
        assert sb == sm
        assert b.pop("sources")[:-1] == m.pop("sources")
        (fusion,) = b.pop("job_settings")
        assert (fusion["setting"], fusion["value"], fusion["other"]) == ("gradient_accumulation_fusion", False,
                                                                         "overridden" if m["level"] in ("fsdp", "hsdp") else "refused")
        assert m.pop("job_settings") == [] and b == m
    # megatron's kinds, less its global not_built post_norms (Bridge's gemma3_layer_spec builds Gemma's post-norms; the
    # 2026-12-07 pins task), its sources plus that one
    g_b, g_m = kinds_b[0], kinds_m[0]
    assert [f["form"] for f in g_m["not_built"]] == ["alibi_positions", "embedding_norm", "post_norms"]
    assert g_b["not_built"] == g_m["not_built"][:2]
    assert g_b["sources"][0] == g_m["sources"][0] and "gemma3_layer_spec" in g_b["sources"][1]
    assert kinds_b[1:-1] == kinds_m[1:] and kinds_b[-1]["kind"] == "chunked"
    assert "@dc805f5cf" in kinds_b[-1]["sources"][0] and "chunkify" in kinds_b[-1]["sources"][0]
    # the base's sources and uncertainties kept, Bridge's appended (sources+, uncertain+)
    assert bridge["sources"][:len(mega["sources"])] == mega["sources"] and len(bridge["sources"]) == len(mega["sources"]) + 3
    assert bridge["uncertain"][:len(mega["uncertain"])] == mega["uncertain"]
    assert bridge["export_format"] == "megatron" and mega["export_format"] is None
    assert bridge["chunked_attention"]["chunks_every_layer"] and mega["chunked_attention"] is None
    assert bridge["runs"]["startup_rules"] == "megatron"


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(text)
    return p


def test_extends_merges_appends_and_replaces(tmp_path):
    """A user's file may extend a catalog stack: a mapping merges key by key (overlap.tp_comm_overlap_efficiency
    replaced, the rest of overlap kept), `name+` appends to the base's list, any other value replaces."""
    mega = stack_data(ROOT / "stack_db" / "megatron.yaml")
    p = _write(tmp_path, "mine.yaml", "extends: megatron\nname: mine\nversion: mine\nattention_speed: 0.5\n"
                                      "uncertain+: [\"mine: a test\"]\nruns:\n  max_cp: 2\n")
    st = load_stack(str(p))
    assert st.name == "mine" and st.attention_speed == 0.5 and st.runs.max_cp == 2
    assert st.uncertain == [*mega["uncertain"], "mine: a test"]
    assert st.runs.sharding == load_stack("megatron").runs.sharding  # the rest of runs kept
    assert st.kernels == load_stack("megatron").kernels


@pytest.mark.parametrize("text, needle", [
    ("extends: nosuch\nname: x\nversion: mine\n", "extends 'nosuch' is not a catalog stack"),
    ("extends: ./megatron.yaml\nname: x\nversion: mine\n", "is not a catalog stack"),
    ("extends: megatron\nname: x\nversion: mine\nsources: [a]\nsources+: [b]\n", "`sources` and `sources+` are both given"),
    ("extends: megatron\nname: x\nversion: mine\nkernels+: [a]\n", "`kernels+` appends a list to the base stack's list `kernels`, but the base has no list"),
    ("extends: megatron\nname: x\nversion: mine\nsources+: a\n", "its value is not a list"),
])
def test_bad_extends_is_an_error_with_a_hint(tmp_path, cli, text, needle):
    p = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(PlannerError, match="bad.yaml"):
        load_stack(str(p))
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(p))
    assert_one_error(r, needle)


def test_extends_cycle_is_refused(tmp_path, monkeypatch):
    import planner.catalog as catalog

    _write(tmp_path, "a.yaml", "extends: b\nname: a\nversion: mine\n")
    _write(tmp_path, "b.yaml", "extends: a\nname: b\nversion: mine\n")
    monkeypatch.setattr(catalog, "stack_dir", lambda: tmp_path)
    with pytest.raises(PlannerError, match=r"extends 'a' extends itself \(a -> b -> a\)"):
        stack_data(tmp_path / "a.yaml", ("a",))


def test_megatron_still_refuses_llama4_and_bridge_accepts_it():
    """Start-up rule STACK_LAYER_KIND (code 73): Megatron-LM @d98e8a64 has no chunked attention; megatron-bridge
    builds it, and every other layer of Scout (NoPE global attention, MoE with a shared expert, sigmoid router)
    is megatron's."""
    assert CODES["STACK_LAYER_KIND"] == 73
    job = dict(model="llama4-scout", gpus=64, tp=8, ep=8, global_batch=64, seq_len=8192, hardware="h100-sxm")
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
        resolve(Job(**job))
    assert "chunked layers (36 of 48" in str(e.value) and "stack megatron," in str(e.value)
    assert "shipped stacks that build chunked: megatron-bridge, torchtitan" in str(e.value)
    settings, _, _ = resolve(Job(**job, stack="megatron-bridge"))
    assert settings.stack.name == "megatron-bridge"
    from planner.catalog import load_model

    assert layer_gaps(load_model(str(SCOUT_HF)), load_stack("megatron")) and \
        not layer_gaps(load_model(str(SCOUT_HF)), load_stack("megatron-bridge"))


# Llama 4 Scout (tests/data/arch/llama-4-scout-17b-16e-instruct/config.json): 48 layers, 40 query heads of 128,
# attention_chunk_size 8,192; layers 3, 7, ..., 47 (12) NoPE global in the model, the other 36 chunked. Forward core
# FLOPs per token and key 4 a d = 4 x 40 x 128 = 20,480; forward + backward 3 x that = 61,440 (layers/attention.py).
# Bridge's get_llama4_layer_spec puts Llama4SelfAttention, with the chunk, on every layer, the NoPE ones too
# (stack chunked_attention): at s > c all 48 run chunked. The model's own code (torchtitan's _irope flavors) runs
# the 12 NoPE layers global.
#   model FLOPs (non-causal convention: the keys a query's block spans, s global, min(s, c) chunked):
#     s = 8,192:  61,440 x 48 x 8,192                      = 24,159,191,040 a token (chunk = sequence: all alike)
#     s = 16,384, Bridge: 61,440 x 48 x 8,192              = 24,159,191,040
#     s = 16,384, the model's layers: 61,440 x (36 x 8,192 + 12 x 16,384) = 30,198,988,800
#   causal (hardware) FLOPs: mean keys s/2 global; chunked (n c^2 + r^2) / (2 s), n = s / c whole chunks, r = 0
#     (what chunkify runs: n chunks of c, each c^2/2 keys: 2 x 8,192^2 / 2 / 16,384 = 4,096 a query):
#     s = 8,192:  61,440 x 48 x 4,096                      = 12,079,595,520
#     s = 16,384, Bridge: 61,440 x 48 x 4,096              = 12,079,595,520 (global everywhere: 24,159,191,040)
#     s = 16,384, the model's layers: 61,440 x (36 x 4,096 + 12 x 8,192) = 15,099,494,400
@pytest.mark.parametrize("seq, stack, model_attn, causal_attn, nope_kind", [
    (8192, "megatron-bridge", 24_159_191_040, 12_079_595_520, "global nope"),
    (16384, "megatron-bridge", 24_159_191_040, 12_079_595_520, "chunked(8192) nope"),
    (16384, "torchtitan", 30_198_988_800, 15_099_494_400, "global nope"),
])
def test_chunked_attention_flops_by_hand(explain, seq, stack, model_attn, causal_attn, nope_kind):
    on = {"tp": 8} if stack == "megatron-bridge" else {"sharding": "fsdp"}  # torchtitan: FSDP, TP 1
    settings, plan, est, res = explain(model=str(SCOUT_HF), gpus=64, ep=8, global_batch=64, seq_len=seq, stack=stack, **on)
    f = res["flops"]
    assert f["attention_flops_per_token"] == pytest.approx(model_attn, rel=1e-12)
    assert f["recompute_flops_per_token"] == 0.0
    assert f["hardware_flops_per_token"] - f["flops_per_token_6n"] == pytest.approx(causal_attn, rel=1e-9)
    kinds = {row["kind"].split(" + ")[0]: row["count"] for row in res["layers"]}
    assert kinds == {"chunked(8192)": 36, nope_kind: 12}


def test_bridge_chunking_the_nope_layers_is_a_warning():
    """Past the chunk, resolve says the NoPE layers are priced chunked, as Bridge builds them; at the chunk, and on
    torchtitan, nothing is said and the model is the model's."""
    job = dict(model=str(SCOUT_HF), gpus=64, tp=8, ep=8, global_batch=64, stack="megatron-bridge")
    settings, _, warnings = resolve(Job(**job, seq_len=16384))
    assert [w for w in warnings if "priced chunked at 8,192 tokens" in w] == [
        "llama-4-scout-17b-16e-instruct's global attention layers (global_nope_moe) priced chunked at 8,192 tokens: "
        "stack megatron-bridge's code chunks every attention layer of a chunked model (stack_db megatron-bridge "
        "chunked_attention), so at seq 16,384 > 8,192 it trains those layers within chunks, where "
        "llama-4-scout-17b-16e-instruct's own code attends over the whole sequence (under cp > 1 where seq / cp > "
        "8,192: at seq / cp <= 8,192 it chunks no layer, priced global)"]
    assert settings.model.layer_kinds["global_nope_moe"].mixer.kind == "chunked"
    assert settings.model.layer_kinds["global_nope_moe"].mixer.position == "nope"
    settings, _, warnings = resolve(Job(**job, seq_len=8192))
    assert not any("priced chunked" in w for w in warnings)
    assert settings.model.layer_kinds["global_nope_moe"].mixer.kind == "global"
    assert load_stack("megatron").chunked_attention is None and load_stack("torchtitan").chunked_attention is None


def test_doubling_the_sequence_past_the_chunk():
    """On Bridge at s = 16,384 every layer's causal keys stay 4,096 (two chunks of 8,192): the attention FLOPs a
    token do not grow; with the model's global NoPE layers they grow by 15,099,494,400 / 12,079,595,520 = 1.25."""
    assert 15_099_494_400 / 12_079_595_520 == 1.25
    assert 61_440 * (36 * 8192 ** 2 * 2 / 32768 + 12 * 8192) == 15_099_494_400
    assert 61_440 * 48 * (2 * 8192 ** 2 / 2 / 16384) == 12_079_595_520


def test_fit_ranks_llama4_plans_on_bridge(cli):
    r = cli("fit", "--model", str(SCOUT_HF), "--gpus", "64", "--stack", "megatron-bridge", "--seq-len", "8192",
            "--top", "3", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    rows = rows["plans"] if isinstance(rows, dict) else rows
    assert len(rows) == 3 and all(row["plan"]["stack"] == "megatron-bridge" for row in rows)
    assert all(row["memory"]["fits"] for row in rows)
    steps = [row["time"]["step_s"] for row in rows]
    assert steps == sorted(steps)
    r = cli("fit", "--model", str(SCOUT_HF), "--gpus", "64", "--seq-len", "8192", "--top", "1")
    assert r.exit_code == 2 and "STACK_LAYER_KIND" in r.stderr and "megatron-bridge, torchtitan (--stack)" in r.stderr


def test_export_writes_megatron_flags_or_refuses_chunked(cli):
    """export --format megatron: a plan on megatron-bridge of a model Megatron-LM builds is Megatron-LM's script,
    byte for byte the megatron plan's, with a note; Llama 4 is refused, naming the chunked layers (Megatron-LM
    @d98e8a64 has none, and the planner writes no Bridge recipe)."""
    args = ["export", "--format", "megatron", "--model", "llama3-8b", "--gpus", "8", "--tp", "2"]
    a, b = cli(*args, "--stack", "megatron-bridge"), cli(*args, "--stack", "megatron")
    assert a.exit_code == b.exit_code == 0, a.stderr
    assert a.stdout == b.stdout
    assert "stack megatron-bridge: written as" in a.stderr and "extends megatron" in a.stderr
    r = cli("export", "--format", "megatron", "--model", str(SCOUT_HF), "--gpus", "64", "--tp", "8", "--ep", "8",
            "--global-batch", "64", "--seq-len", "8192", "--stack", "megatron-bridge")
    assert_one_error(r, "export megatron: the plan was priced on stack megatron-bridge", "chunked layers (36 of 48",
                     "on stack megatron, whose code builds", "the planner writes no megatron-bridge config")
    r = cli("export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge")
    assert_one_error(r, "not torchtitan")


def test_bridges_scout_recipe_layout_runs_and_fits(explain):
    """The layout of Megatron-Bridge's Llama 4 Scout recipe (recipes/llama/llama4_e16.py @5d194b9c1^ = a5d7c58bd,
    pretrain_config: TP 4, PP 1, CP 1, sequence parallel, ETP 4, EP 16, global batch 512, micro-batch 1, sequence
    8,192, the distributed optimizer) on 64 H100: expert grid etp x ep = 64 = tp x dp, so dp 16; no start-up rule
    breaks and it fits in 80 GB."""
    settings, plan, est, res = explain(model=str(SCOUT_HF), gpus=64, tp=4, ep=16, etp=4, global_batch=512, micro_batch=1,
                                       seq_len=8192, sharding="zero1", sequence_parallel=True, stack="megatron-bridge")
    assert (res["plan"]["tp"], res["plan"]["pp"], res["plan"]["cp"], res["plan"]["dp"]) == (4, 1, 1, 16)
    assert res["memory"]["fits"]


def test_fit_and_explain_agree_past_the_chunk(cli):
    """fit at 16,384 tokens (the NoPE layers chunked as Bridge builds them) and explain of each row's reproduce
    line give the same time and memory terms and FLOPs: the model transformed once, in resolve, for both."""
    from conftest import explain_each_row

    args = ["--model", str(SCOUT_HF), "--gpus", "64", "--stack", "megatron-bridge", "--seq-len", "16384",
            "--global-batch", "256", "--tp", "8", "--top", "3"]
    r = cli("fit", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 3
    job = Job(model=str(SCOUT_HF), gpus=64, stack="megatron-bridge", seq_len=16384, global_batch=256)
    for row, one in explain_each_row(cli, job, rows):
        assert one["time"] == row["time"] and one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
        assert one["flops"] == row["flops"] and one["flops"]["attention_flops_per_token"] == 24_159_191_040


# A sequence that is not a multiple of the chunk (issue 22/23, bridgepad): Scout at s = 10,000, chunk 8,192.
# Bridge's chunkify (llama4_utils.py @dc805f5cf l. 95-122) pads q, k, v to ceil(10,000 / 8,192) = 2 whole chunks and
# Transformer Engine's causal kernel runs both whole (stack chunked_attention.pads_last_chunk; layers/attention.py
# [13]); torchtitan's FlexAttention mask (get_fixed_block_mask_mod) runs the real part only:
#   mean keys a token, padded:    2 x 8,192^2 / 2 / 10,000            = 6,710.8864
#   mean keys a token, real part: (8,192^2 + 1,808^2) / 2 / 10,000    = 3,518.8864
#   hardware attention FLOPs a token, Bridge (48 chunked layers): 61,440 x 48 x 6,710.8864 = 19,791,209,299.968
#     (priced before this change at the real part: 61,440 x 48 x 3,518.8864 = 10,377,618,259.968, 1.907x less)
#   torchtitan (36 chunked, 12 global NoPE at s/2 = 5,000): 61,440 x (36 x 3,518.8864 + 12 x 5,000) = 11,469,613,694.976
#   model FLOPs (the non-causal convention, MFU's): 61,440 x 48 x min(s, c) = 24,159,191,040 on Bridge, padding or not
@pytest.mark.parametrize("stack, hw_attn, model_attn", [
    ("megatron-bridge", 19_791_209_299.968, 24_159_191_040),
    ("torchtitan", 11_469_613_694.976, 61_440 * (36 * 8192 + 12 * 10_000)),
])
def test_partial_chunk_is_run_whole_on_bridge_only(explain, stack, hw_attn, model_attn):
    on = {"tp": 4, "ep": 16, "micro_batch": 1} if stack == "megatron-bridge" else {"sharding": "fsdp", "ep": 8}
    settings, plan, est, res = explain(model=str(SCOUT_HF), gpus=64, global_batch=64, seq_len=10_000, stack=stack, **on)
    f = res["flops"]
    assert f["hardware_flops_per_token"] - f["flops_per_token_6n"] == pytest.approx(hw_attn, rel=1e-12)
    assert f["attention_flops_per_token"] == pytest.approx(model_attn, rel=1e-12)


def test_padded_chunk_keys_and_factor():
    from planner.layers.attention import chunk_pad_factor, mean_causal_keys

    s = [4096, 8192, 10_000, 16_384, 20_000]
    # at s <= c no chunkify (one chunk: s/2, the global layer's); a whole multiple pads nothing
    assert mean_causal_keys(s, chunk=8192, padded=True).tolist() == pytest.approx(
        [2048, 4096, 8192 ** 2 / 10_000, 4096, 3 * 8192 ** 2 / 2 / 20_000], rel=1e-15)
    assert mean_causal_keys(s, chunk=8192).tolist() == pytest.approx(
        [2048, 4096, (8192 ** 2 + 1808 ** 2) / 20_000, 4096, (2 * 8192 ** 2 + 3616 ** 2) / 40_000], rel=1e-15)
    assert chunk_pad_factor(s, 8192, True).tolist() == pytest.approx([1, 1, 1.6384, 1, 24_576 / 20_000], rel=1e-15)
    assert chunk_pad_factor(s, 8192, False).tolist() == [1, 1, 1, 1, 1]


def _unpadded(tmp_path) -> str:
    p = tmp_path / "bridge-unpadded.yaml"
    p.write_text("extends: megatron-bridge\nname: bridge-unpadded\nversion: mine\nchunked_attention:\n  pads_last_chunk: false\n")
    return str(p)


# Saved tensors at s = 10,000 on one GPU (TP 4 with sequence parallel, micro-batch 1, PP 1: one micro-batch in flight,
# bf16, no recompute). p = 16,384 / 10,000 = 1.6384. Per token per layer: q 2 a d / t = 2 x 40 x 128 / 4 = 2,560 B,
# the core output 2,560 B, k and v 2 k d / min(t, k) = 2 x 8 x 128 / 4 = 512 B each; chunkify's padded copies (TE's
# FusedAttnFunc saves the q, k, v it is given and its output, backends.py @4329ff84 l. 1535-1569): p times each,
# (p - 1) x 6,144 = 3,922.3296 B more; the output folded back (llama4_utils.py l. 417-426: a copy, the output
# projection's saved input) beside TE's output: p x 2,560 = 4,194.304 B; and TE's fp32 softmax statistics over the
# padded chunks (cuDNN Stats [n' b, h, c, 1], planner/layers/attention.py [ls]): (p - 1) x 40 / 4 heads x 4 B =
# 25.536 B. Sum 8,142.1696 B a token a layer, x 10,000 tokens x 48 layers = 3,908,241,408 B.
def test_padded_chunk_saved_tensors_by_hand(explain, tmp_path):
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, pp=1, ep=16, micro_batch=1, global_batch=64, seq_len=10_000,
               sequence_parallel=True, precision="bf16")
    _, _, _, padded = explain(**job, stack="megatron-bridge")
    _, _, _, real = explain(**job, stack=_unpadded(tmp_path))
    assert padded["plan"]["recompute"] == real["plan"]["recompute"] == "none"
    extra = padded["memory"]["terms"]["layer_activations"] - real["memory"]["terms"]["layer_activations"]
    assert extra == pytest.approx(3_908_241_408, rel=1e-12)
    # at a whole number of chunks nothing is padded: only the fold-back copy, 2,560 B a token a layer
    job.update(seq_len=16_384)
    _, _, _, padded = explain(**job, stack="megatron-bridge")
    _, _, _, real = explain(**job, stack=_unpadded(tmp_path))
    extra = padded["memory"]["terms"]["layer_activations"] - real["memory"]["terms"]["layer_activations"]
    assert extra == pytest.approx(2560 * 16_384 * 48, rel=1e-12)
    assert padded["flops"] == real["flops"]


def test_stack_versions_read_right_in_messages(cli):
    """megatron's version names the Megatron-Core its figures are read at (Megatron-LM @d98e8a64
    megatron/core/package_info.py: MAJOR 0, MINOR 20, PATCH 0), quoted whole in export's refusal (the text before
    the first ';'); Bridge's names the Megatron-Core 0.16.0rc0 its 905c0e386 pins (package_info.py there)."""
    mega, bridge = load_stack("megatron").version, load_stack("megatron-bridge").version
    assert mega.split(";")[0] == "Megatron-Core 0.20.0 (Megatron-LM @d98e8a64, 2026-08-22) with Transformer Engine 2.17.1"
    assert bridge.split(";")[0] == ("Megatron-Bridge @dc805f5cf (2026-03-16, pinning Megatron-LM 905c0e386, "
                                    "Megatron-Core 0.16.0rc0) for the chunked attention")
    r = cli("export", "--format", "megatron", "--model", str(SCOUT_HF), "--gpus", "64", "--tp", "8", "--ep", "8",
            "--global-batch", "64", "--seq-len", "8192", "--stack", "megatron-bridge")
    assert_one_error(r, "(stack megatron, Megatron-Core 0.20.0 (Megatron-LM @d98e8a64, 2026-08-22) with Transformer "
                        "Engine 2.17.1) does not all build")


# At s = 10,240 (p = 16,384 / 10,240 = 1.6; fp8 needs the rows a multiple of 8, 10,240 / 4 = 2,560) per token per
# layer beyond the unpadded stack's, q, k and v (p - 1) x 3,584 = 2,150.4 B everywhere but full recompute (Megatron's
# selective policy re-runs the core from its saved q, k, v), and of the output (memory.py [pc]):
#   bf16, no recompute: TE's padded output and the fold-back copy beside the projection's 2 B input, (2p - 1) x 2,560
#   bf16, selective (the core re-run, TE's output unsaved): the copy's padding, (p - 1) x 2,560
#   fp8, no recompute: TE's padded output beside the projection's quantized input of the 10,240 real tokens,
#     (p - 1) x 2,560; fp8, selective: 0
# and, where the core's state is kept (no recompute), its fp32 softmax statistics' padding, (p - 1) x 10 heads x 4 B
# (planner/layers/attention.py [ls]; the core re-run under selective keeps none);
# each x 10,240 tokens x 48 layers; full recompute: one layer's (the bf16 no-recompute figure) as the buffer.
@pytest.mark.parametrize("precision, recompute, out_bytes", [
    ("bf16", "none", (2 * 1.6 - 1) * 2560 + 0.6 * 40), ("bf16", "selective", 0.6 * 2560),
    ("fp8", "none", 0.6 * 2560 + 0.6 * 40), ("fp8", "selective", 0.0),
])
def test_padded_chunk_saved_tensors_by_precision_and_recompute(explain, tmp_path, precision, recompute, out_bytes):
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, pp=1, ep=16, micro_batch=1, global_batch=64, seq_len=10_240,
               sequence_parallel=True, precision=precision, recompute=recompute)
    _, _, _, padded = explain(**job, stack="megatron-bridge")
    _, _, _, real = explain(**job, stack=_unpadded(tmp_path))
    extra = padded["memory"]["terms"]["layer_activations"] - real["memory"]["terms"]["layer_activations"]
    assert extra == pytest.approx((0.6 * 3584 + out_bytes) * 10_240 * 48, rel=1e-12)


def test_padded_chunk_under_full_recompute(explain, tmp_path):
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, pp=1, ep=16, micro_batch=1, global_batch=64, seq_len=10_240,
               sequence_parallel=True, precision="bf16", recompute="full")
    _, _, _, padded = explain(**job, stack="megatron-bridge")
    _, _, _, real = explain(**job, stack=_unpadded(tmp_path))
    t, u = padded["memory"]["terms"], real["memory"]["terms"]
    assert t["layer_activations"] == u["layer_activations"]  # the layer inputs only
    assert t["recompute_buffer"] - u["recompute_buffer"] == pytest.approx((0.6 * 3584 + 2.2 * 2560 + 0.6 * 40) * 10_240,
                                                                          rel=1e-12)


def test_padding_is_a_warning():
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, ep=16, global_batch=64, stack="megatron-bridge")
    _, _, warnings = resolve(Job(**job, seq_len=10_000))
    assert [w for w in warnings if "not a multiple of the attention chunk" in w] == [
        "seq 10,000 is not a multiple of the attention chunk 8,192: stack megatron-bridge's code pads it to 2 chunks "
        "(16,384 tokens) and runs the last chunk whole, its 6,384 padded tokens too (stack_db megatron-bridge "
        "chunked_attention.pads_last_chunk): priced as it runs, 1.64x the chunked layers' saved q, k, v and output; "
        "choose a multiple of 8,192 to run none"]
    for seq in (8192, 16_384):
        assert not any("not a multiple" in w for w in resolve(Job(**job, seq_len=seq))[2])
    assert not any("not a multiple" in w for w in resolve(Job(**{**job, "stack": "torchtitan", "tp": 1,
                                                                  "sharding": "fsdp", "ep": 8}, seq_len=10_000))[2])


# Context parallelism on Bridge's chunked layers (issue 22, bridgecp). Megatron-Bridge @dc805f5cf llama4_utils.py
# Llama4SelfAttention.forward l. 294-307 tests original_seq_len = query.shape[0], the CP rank's L = s / cp tokens,
# against the chunk c: at cp > 1 and L <= c it chunkifies nothing, and Transformer Engine's causal CP attention runs
# every layer over the whole sequence (global; stack chunked_attention.cp_local_sequence, layers/attention.py [14]);
# at L > c it asserts L % (2 cp) == 0 and (L // (2 cp)) % c == 0 (start-up rule BRIDGE_CHUNK_CP, code 81).
# Scout at s = 16,384, c = 8,192 (4 a d = 20,480 forward FLOPs a key, 61,440 forward + backward; 48 layers):
#   cp 1: chunked (two chunks)          model (non-causal) 61,440 x 48 x 8,192  = 24,159,191,040 a token
#                                       hardware (causal)  61,440 x 48 x 4,096  = 12,079,595,520
#   cp 2, 4 (L = 8,192, 4,096 <= c): global  model 61,440 x 48 x 16,384 = 48,318,382,080, hardware x 8,192 = 24,159,191,040
#   (12 a d s L = 12 x 40 x 128 x 16,384 x 48: the global formula)
def _cp_global_off(tmp_path) -> str:
    p = tmp_path / "bridge-cp-whole.yaml"
    p.write_text("extends: megatron-bridge\nname: bridge-cp-whole\nversion: mine\nchunked_attention:\n  cp_local_sequence: false\n")
    return str(p)


def test_cp_local_sequence_is_read_from_the_code():
    run = load_stack("megatron-bridge").chunked_attention
    assert run.cp_local_sequence and load_stack("megatron").chunked_attention is None
    said = " ".join(s for s in run.sources if s.startswith("cp_local_sequence:"))
    for cite in ("@dc805f5cf", "l. 294-307", "original_seq_len = query.shape[0] (l. 295)",
                 "assert original_seq_len % (cp x 2) == 0", "assert cp_chunk_len % self.attention_chunk_size == 0"):
        assert cite in said, cite
    assert CODES["BRIDGE_CHUNK_CP"] == 81


def test_chunk_by_cp_rank_by_hand():
    """Attention.chunk_at: the sequence where the stack chunks by the CP rank's sequence and s / cp <= c at cp > 1,
    so the keys, reach and ring sends are the global layer's; the model's chunk elsewhere."""
    import numpy as np

    from planner.layers.attention import Attention, mean_causal_keys, span_keys

    local = Attention(h=5120, a=40, k=8, d=128, norm=5120, chunk=8192, chunk_local=True)
    whole = Attention(h=5120, a=40, k=8, d=128, norm=5120, chunk=8192)
    cp = np.array([1.0, 2.0, 4.0, 2.0, 4.0])
    s = np.array([16_384.0, 16_384.0, 16_384.0, 65_536.0, 65_536.0])
    c = local.chunk_at(s, cp)
    # L = s / cp: 16,384 (cp 1: not CP), 8,192 and 4,096 (<= c: global, the chunk is s), 32,768 and 16,384 (> c: chunked;
    # the rule passes cp 2 at 65,536, 32,768 // 4 = 8,192, and refuses cp 4, 16,384 // 8 = 2,048)
    assert c.tolist() == [8192, 16_384, 16_384, 8192, 8192]
    assert whole.chunk_at(s, cp) == 8192
    assert mean_causal_keys(s, chunk=c).tolist() == [4096, 8192, 8192, 4096, 4096]  # s / 2 global, c / 2 chunked
    assert span_keys(s, chunk=c).tolist() == [8192, 16_384, 16_384, 8192, 8192]
    # ring sends forward: global cp - 1; chunked min(cp - 1, ceil((c - 1) / (s / cp))): cp 4 at 16,384 reaches
    # ceil(8,191 / 4,096) = 2 ranks chunked, 3 global
    assert local.cp_sends(cp, s).tolist() == [0, 1, 3, 1, 1]
    assert whole.cp_sends(cp, s).tolist() == [0, 1, 2, 1, 1]
    assert float(local.core_model_flops(16_384, False, 2)) == 61_440 * 16_384
    assert float(local.core_model_flops(16_384, True, 1)) == 61_440 * 4096


@pytest.mark.parametrize("cp, model_attn, hw_attn", [
    (1, 24_159_191_040, 12_079_595_520),
    (2, 48_318_382_080, 24_159_191_040),
    (4, 48_318_382_080, 24_159_191_040),
])
def test_cp_at_or_under_the_chunk_prices_global_attention(explain, tmp_path, cp, model_attn, hw_attn):
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, cp=cp, ep=16, micro_batch=1, global_batch=64, seq_len=16_384,
               sequence_parallel=True, precision="bf16")
    _, _, _, res = explain(**job, stack="megatron-bridge")
    f = res["flops"]
    assert f["attention_flops_per_token"] == pytest.approx(model_attn, rel=1e-12)
    assert f["hardware_flops_per_token"] - f["flops_per_token_6n"] == pytest.approx(hw_attn, rel=1e-12)
    assert 12 * 40 * 128 * 16_384 * 48 == 48_318_382_080  # 12 a d s L, the global formula
    # a stack that chunked by the whole sequence (cp_local_sequence false) would run chunkify at every cp: chunked
    # FLOPs, and the fold-back copy of the output (2 a d / t = 2,560 B a token a layer, memory.py [pc]) on the rank's
    # 16,384 / cp tokens, which Bridge at cp > 1 does not make
    _, _, _, whole = explain(**job, stack=_cp_global_off(tmp_path))
    assert whole["flops"]["attention_flops_per_token"] == pytest.approx(24_159_191_040, rel=1e-12)
    extra = whole["memory"]["terms"]["layer_activations"] - res["memory"]["terms"]["layer_activations"]
    assert extra == pytest.approx(0.0 if cp == 1 else 2560 * 16_384 / cp * 48, abs=1e-3)
    if cp > 1:  # the attention core runs twice the FLOPs: the step is longer
        assert res["time"]["step_s"] > whole["time"]["step_s"]
    else:
        assert res["time"] == whole["time"] and res["flops"] == whole["flops"]


def test_cp_global_is_a_warning():
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, ep=16, global_batch=64, stack="megatron-bridge", seq_len=16_384)
    _, _, warnings = resolve(Job(**job, cp=2))
    assert [w for w in warnings if "priced as global attention" in w] == [
        "llama-4-scout-17b-16e-instruct's attention layers priced as global attention at cp 2: stack megatron-bridge's "
        "code tests the CP rank's 8,192 tokens (seq 16,384 / cp 2) against the chunk 8,192 and chunks no layer at or "
        "under it (stack_db megatron-bridge chunked_attention.cp_local_sequence), so every layer attends over the whole "
        "sequence through the context-parallel kernel, where llama-4-scout-17b-16e-instruct's own code chunks its "
        "chunked layers; cp 1 (or seq / cp > 8,192) trains them chunked"]
    assert not any("priced chunked" in w for w in warnings)  # nothing is chunked at cp 2
    assert not any("priced as global" in w for w in resolve(Job(**job))[2])


# BRIDGE_CHUNK_CP by hand (c = 8,192): L = s / cp > c needs L % 2 cp == 0 and (L // 2 cp) % c == 0, s a multiple of
# 2 cp^2 c (65,536 at cp 2, 262,144 at cp 4):
#   s 32,768 cp 2: L 16,384, 16,384 // 4 = 4,096: refused     s 65,536 cp 2: L 32,768 // 4 = 8,192: runs
#   s 65,536 cp 4: L 16,384 // 8 = 2,048: refused              s 262,144 cp 4: L 65,536 // 8 = 8,192: runs
#   s 16,384 cp 2 / s 32,768 cp 4: L 8,192 <= c: no assert (global)     s 32,768 cp 1: no CP
def test_bridge_chunk_cp_rule_by_hand(cli):
    from types import SimpleNamespace

    import numpy as np

    from planner.catalog import load_model
    from planner.plan import _stack_chunks
    from planner.startup import BY_CODE

    rule, stack = BY_CODE[81], load_stack("megatron-bridge")
    assert rule.key == "BRIDGE_CHUNK_CP"
    cp = np.array([2, 2, 4, 4, 2, 4, 1])
    seq = np.array([32_768, 65_536, 65_536, 262_144, 16_384, 32_768, 32_768])
    for model in (load_model(str(SCOUT_HF)), _stack_chunks(load_model(str(SCOUT_HF)), stack, 32_768, [])):
        assert rule.broken(model, stack, SimpleNamespace(cp=cp, seq=seq)).tolist() == [
            True, False, True, False, False, False, False]
        # torchtitan's entry has no chunked_attention: never broken
        assert not rule.broken(model, load_stack("torchtitan"), SimpleNamespace(cp=cp, seq=seq)).any()
    args = ["explain", "--model", str(SCOUT_HF), "--gpus", "64", "--tp", "4", "--ep", "16", "--global-batch", "64",
            "--stack", "megatron-bridge"]
    assert_one_error(cli(*args, "--cp", "2", "--seq-len", "32768"), "BRIDGE_CHUNK_CP",
                     "seq 32,768 / cp 2 = 16,384 tokens a CP rank", "16,384 // 4 = 4,096 a multiple of 8,192",
                     "llama4_utils.py Llama4SelfAttention.forward l. 294-307", "use cp 1")
    for seq, cp_ in ((65_536, 2), (16_384, 2), (32_768, 4)):
        resolve(Job(model=str(SCOUT_HF), gpus=64, tp=4, ep=16, global_batch=64, stack="megatron-bridge", seq_len=seq,
                    cp=cp_))


def test_fit_masks_bridge_chunk_cp_and_agrees_with_explain(cli):
    """fit at 32,768 tokens counts the cp 2 candidates under BRIDGE_CHUNK_CP and ranks none; at 16,384 with cp 2
    pinned every row is priced global, and explain of each row's reproduce line agrees term by term."""
    from conftest import explain_each_row
    from planner.search import fit

    res = fit(Job(model=str(SCOUT_HF), gpus=64, stack="megatron-bridge", seq_len=32_768, global_batch=64, tp=4), top=5)
    assert next(v for k, v in res.counts.reasons.items() if "BRIDGE_CHUNK_CP" in k) > 0
    assert all(row["plan"]["cp"] != 2 for row in res.rows)
    args = ["--model", str(SCOUT_HF), "--gpus", "64", "--stack", "megatron-bridge", "--seq-len", "16384",
            "--global-batch", "256", "--tp", "4", "--cp", "2", "--top", "2"]
    r = cli("fit", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 2
    job = Job(model=str(SCOUT_HF), gpus=64, stack="megatron-bridge", seq_len=16_384, global_batch=256)
    for row, one in explain_each_row(cli, job, rows):
        assert one["time"] == row["time"] and one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
        assert one["flops"] == row["flops"] and one["flops"]["attention_flops_per_token"] == 48_318_382_080
        assert any("priced as global attention at cp 2" in w for w in row["warnings"])


@pytest.mark.parametrize("cp, label", [(1, "chunked(8192)"), (2, "chunked(8192; run global at cp 2)")])
def test_layer_list_labels_the_chunked_layers_as_priced(explain, cli, cp, label):
    """explain's layer list (LayerList.described at the plan's seq and cp, Attention.label_at from the same chunk_at
    that prices them): at cp 2, s / cp = 8,192 <= c, Bridge chunks no layer (the warning above) and the label says the
    chunked layers run global; at cp 1 they run chunked. Scout: 36 RoPE layers, 12 NoPE (every fourth), all MoE."""
    job = dict(model=str(SCOUT_HF), gpus=64, tp=4, cp=cp, ep=16, micro_batch=1, global_batch=64, seq_len=16_384,
               sequence_parallel=True, precision="bf16", stack="megatron-bridge")
    _, _, _, res = explain(**job)
    moe = "moe(16 x 8192, top-1 + 1 shared)"
    assert [(r["kind"], r["count"]) for r in res["layers"]] == [(f"{label} + {moe}", 36), (f"{label} nope + {moe}", 12)]
    r = cli("explain", "--model", SCOUT_HF, "--gpus", 64, "--tp", 4, "--cp", cp, "--ep", 16, "--micro-batch", 1,
            "--global-batch", 64, "--seq-len", 16_384, "--sequence-parallel", "--stack", "megatron-bridge",
            "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.stderr
    assert f"36 x {label} + {moe}: 0-2, 4-6," in r.stdout and f"12 x {label} nope + {moe}: 3, 7," in r.stdout
    assert ("run global" in r.stdout) == (cp == 2)
