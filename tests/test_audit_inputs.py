"""The 2026-12-07 audit of three standards (settings from explicit fields, nothing silently
dropped or clamped, bad input named with file / field / valid values and exit 2): one test per
defect it found, each failing before its fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner import memory_rows as mr
from planner.catalog import model_dir
from planner.errors import PlannerError
from conftest import assert_one_error

DATA = Path(__file__).parent / "data" / "memory"
ORACLE = DATA / "oracle_torchtitan_0.3.0.yaml"


def _model(tmp_path, **fields):
    spec = yaml.safe_load((model_dir() / "llama3-8b.yaml").read_text(encoding="utf-8"))
    spec.update(fields)
    p = tmp_path / "model.yaml"
    p.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return p


# ------------------------------------------------------------ a count given as a boolean
@pytest.mark.parametrize("field,value", [("num_layers", True), ("hidden_size", True), ("vocab_size", True),
                                         ("num_kv_heads", False), ("head_dim", True),
                                         ("rope_theta", True)])
def test_a_count_given_as_a_boolean_is_refused(cli, tmp_path, field, value):
    # before: pydantic's lax mode read `num_layers: true` as 1 layer and `hidden_size: true` as a width of 1
    # (explain exit 0, "parameters: 1.96 million" for the 8B shape); schema.Count refuses a bool
    r = cli("explain", "--model", _model(tmp_path, **{field: value}), "--gpus", "8", "--tp", "2")
    assert_one_error(r, "model.yaml", f"`{field}`", "not the boolean " + str(value).lower())


@pytest.mark.parametrize("field", ["tp", "loss_logit_chunks"])
def test_a_count_in_a_job_file_given_as_a_boolean_is_refused(cli, tmp_path, field):
    # loss_logit_chunks (branch memskip, merged after audit): Optional[Count] like every count of the job
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "llama3-8b", "gpus": 8, "stack": "torchtitan", field: True}),
                   encoding="utf-8")
    r = cli("explain", job)
    assert_one_error(r, "job.yaml", field, "boolean true")


@pytest.mark.parametrize("field", ["reserve_gib", "tokens", "headroom", "global_batch_tokens"])
def test_a_float_field_of_a_job_given_as_a_boolean_is_refused(cli, tmp_path, field):
    # before: `reserve_gib: true` priced a 1 GiB reserve, `tokens: true` one training token (exit 0); schema.Real
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "llama3-8b", "gpus": 8, field: True}), encoding="utf-8")
    r = cli("explain", job)
    assert_one_error(r, "job.yaml", "not the boolean true")


def test_a_float_field_of_a_hardware_file_given_as_a_boolean_is_refused(cli, tmp_path):
    from planner.catalog import hardware_source

    hw = yaml.safe_load(hardware_source("h100-sxm").read_text(encoding="utf-8"))
    hw["hbm_TBps"] = True  # before: 1 TB/s
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(hw), encoding="utf-8")
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p)
    assert_one_error(r, "hw.yaml", "`hbm_TBps`", "not the boolean true")


def test_counts_still_read_whole_numbers(cli, tmp_path):
    r = cli("explain", "--model", _model(tmp_path, num_layers=2), "--gpus", "8", "--tp", "2")
    assert r.exit_code == 0, r.stderr


# ------------------------------------------------------------ oracle duplicates from a field, not the id
def _oracle_copy(tmp_path, edit):
    data = yaml.safe_load(ORACLE.read_text(encoding="utf-8"))
    edit(data["oracle_rows"])
    p = tmp_path / "oracle.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


def _skip_of(path, rid):
    parsed = mr.load(path)
    parsed.oracle_rows[:] = [r for r in parsed.oracle_rows if r.id == rid]
    (res,) = mr.evaluate_rows(parsed)
    return res.skipped


def test_the_repeated_oracle_row_names_what_it_repeats():
    rows = {r.id: r for r in mr.load(ORACLE).oracle_rows}
    assert rows["oracle_8b_fsdp8_bs1_selective_ce_cudalike_run2"].repeat_of == "oracle_8b_fsdp8_bs1_selective_ce_cudalike"
    assert sum(r.repeat_of is not None for r in rows.values()) == 1


def test_an_oracle_row_is_a_duplicate_by_its_repeat_of_field_not_by_its_id(tmp_path):
    rid = "oracle_8b_fsdp8_bs1_selective_ce_cudalike_run2"

    def rename(rows):  # the same row without its field, under an id that looks like a second run
        for r in rows:
            if r["id"] == rid:
                del r["repeat_of"]

    skipped = _skip_of(_oracle_copy(tmp_path, rename), rid)
    # before: re.search(r"_run\d+$", row.id) skipped it for its id alone
    assert skipped is None or "duplicate" not in skipped

    def mark(rows):  # a row with a plain id that repeats another: skipped by the field
        for r in rows:
            if r["id"] == "oracle_8b_fsdp8_bs2_selective_ce_cudalike":
                r["repeat_of"] = "oracle_8b_fsdp8_bs1_selective_ce_cudalike"

    skipped = _skip_of(_oracle_copy(tmp_path, mark), "oracle_8b_fsdp8_bs2_selective_ce_cudalike")
    assert skipped is not None and "duplicate" in skipped


def test_repeat_of_must_name_another_row(tmp_path):
    def bad(rows):
        rows[0]["repeat_of"] = "no_such_row"

    with pytest.raises(PlannerError) as e:
        mr.load(_oracle_copy(tmp_path, bad))
    assert "repeat_of 'no_such_row'" in e.value.message and "oracle.yaml" in e.value.message


@pytest.mark.parametrize("field", ["tflops_per_gpu", "mfu", "tp"])
def test_a_number_of_a_run_record_given_as_a_boolean_is_refused(tmp_path, field):
    # before: validate.RunRecord read `mfu: true` as an MFU of 1.0 (100%), `tp: true` as TP 1
    from planner.validate import load_runs

    rec = yaml.safe_load((Path(__file__).parent / "data" / "published_runs.yaml").read_text(encoding="utf-8"))[0]
    rec[field] = True
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([rec]), encoding="utf-8")
    with pytest.raises(PlannerError) as e:
        load_runs(p)
    assert "runs.yaml" in e.value.message and field in e.value.message and "boolean true" in e.value.message


# ------------------------------------------------------------ GPU lists beyond the largest count
BIG = 99999999999999999999  # > 2**63


@pytest.mark.parametrize("args,needle", [
    # before: budget.parse_gpu_list took 1e20 as a GPU count: OverflowError traceback in the sweep (exit 1)
    (["budget", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1T", "--sweep-gpus", str(BIG)], "--sweep-gpus"),
    (["budget", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1T", "--sweep-gpus", "8,2147483648"], "--sweep-gpus"),
    (["budget", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1T", "--sweep-gpus", f"1..{BIG}"], "--sweep-gpus"),
    (["fit", "--model", "llama3-8b", "--gpus", f"1..{BIG}"], "--gpus"),
])
def test_gpu_lists_beyond_the_largest_count_exit_2(cli, args, needle):
    r = cli(*args)
    assert_one_error(r, needle, "2147483647")


# ------------------------------------------------------------ rule 9c reads source_year, not the source's text
def _run_record(id, **kw):
    r = dict(id=id, model_name="GPT tiny", num_layers=4, hidden_size=1024, ffn_hidden_size=4096,
             num_attention_heads=8, num_kv_heads=8, vocab_size=32000, seq_length=2048, global_batch_size=64,
             micro_batch_size=1, gpu_type="H100-SXM-80GB", hardware="h100-sxm", num_gpus=8, tp=1, pp=1, vpp=1, cp=1,
             sharding="none", recompute="none", sequence_parallel=False, precision="bf16",
             tokens_per_sec_per_gpu=1000.0, stack="megatron")
    r.update(kw)
    return r


def test_attention_date_rule_reads_the_source_year_field_not_the_source_text(cli, tmp_path):
    import json

    recs = [_run_record("text-2021", source="Example et al. 2021, a training report"),
            _run_record("field-2021", source="Example et al., a training report", source_year=2021),
            _run_record("field-2023", source="Example et al. 2021 (cited), a 2023 report", source_year=2023)]
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump(recs), encoding="utf-8")
    r = cli("validate", p, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    # before: the year 2021 in the source's text made text-2021 eager; undated now, so flash, said so
    assert rows["text-2021"]["plan"]["attention"] == "flash"
    assert "attention=flash (not published; rule 9c: source undated: FlashAttention)" in rows["text-2021"]["assumed"]
    assert rows["field-2021"]["plan"]["attention"] == "eager"
    assert rows["field-2023"]["plan"]["attention"] == "flash"


def test_the_catalog_records_carry_their_source_year():
    from planner.validate import load_runs

    recs = {r.id: r for f in ("published_runs.yaml", "published_runs_moe.yaml")
            for r in load_runs(Path(__file__).parent / "data" / f)}
    assert recs["narayanan2021-t1-1.7B"].source_year == 2021  # Narayanan et al. 2021 (SC'21)
    assert recs["deepseek-v3-pretraining"].source_year == 2025  # arXiv:2412.19437 (2024, v2 2025-02-18)
    assert sum(r.source_year is not None for r in recs.values()) == 139
    # 22 dated 2021 or before; 16 of them leave attention to rule 9c (eager), 6 state it or take their stack's
    assert sum(r.source_year is not None and r.source_year <= 2021 for r in recs.values()) == 22


# ------------------------------------------------------------ a Hugging Face config.json's values read as absent
HF = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
          num_key_value_heads=8, vocab_size=128256, hidden_act="silu", max_position_embeddings=8192,
          rms_norm_eps=1e-5, rope_theta=5e5, tie_word_embeddings=False, model_type="llama")


@pytest.mark.parametrize("key,value,needle", [
    # before: 0 fell through `or` to num_attention_heads (MHA) / to 4,096 positions, exit 0
    ("num_key_value_heads", 0, "whole number > 0"),
    ("max_position_embeddings", 0, "whole number > 0"),
    # before: a negative dropout probability read as no dropout, exit 0
    ("attention_dropout", -0.1, "dropout probability"),
])
def test_a_hf_config_value_that_is_no_value_is_refused(cli, tmp_path, key, value, needle):
    import json

    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HF, key: value}), encoding="utf-8")
    r = cli("explain", "--model", p, "--gpus", "8")
    assert_one_error(r, "config.json", f"`{key}`", needle)


def test_a_hf_config_with_null_kv_heads_is_still_mha(tmp_path):
    import json

    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HF, "num_key_value_heads": None}), encoding="utf-8")
    from planner.catalog import load_model

    assert load_model(str(p)).kv_heads == 32  # transformers: None -> num_attention_heads


def test_a_calibration_profile_number_given_as_a_boolean_is_refused(cli, tmp_path):
    # before: profile.GemmRow read `tflops: true` as a measured 1 TFLOP/s GEMM
    csv = tmp_path / "g.csv"
    csv.write_text("M,N,K,dtype,tflops\n8192,8192,8192,bf16,600\n", encoding="utf-8")
    prof = tmp_path / "p.yaml"
    r = cli("calibrate", "gemm", "--from", csv, "--hardware", "h100-sxm", "--sustained", "-o", prof)
    assert r.exit_code == 0, r.stderr
    data = yaml.safe_load(prof.read_text(encoding="utf-8"))
    data["gemm"]["rows"][0]["tflops"] = True
    prof.write_text(yaml.safe_dump(data), encoding="utf-8")
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--calibration", prof)
    assert_one_error(r, "p.yaml", "tflops", "not the boolean true")


# ------------------------------------------------------------ rule 2b reads family, not model_name
def test_architecture_family_comes_from_the_family_field_not_the_model_name():
    from planner.validate import RunRecord, _Assumed, infer_architecture

    # a shape no catalog model has: rule 2b or 2c
    rec = _run_record("x", model_name="Llama-ish 1B", ffn_hidden_size=4096)
    a = _Assumed()
    arch = infer_architecture(RunRecord(**rec), a)
    # before: "llama" in the name gave Llama-style (gated, RMSNorm) though ffn = 4h; now rule 2c
    assert arch["gated_mlp"] is False and arch["norm"] == "layernorm"
    assert all("unknown family" in s for s in a.items)
    a = _Assumed()
    arch = infer_architecture(RunRecord(**dict(rec, model_name="anything", family="llama")), a)
    assert arch["gated_mlp"] is True and arch["norm"] == "rmsnorm"
    assert all("family llama: Llama-style" in s for s in a.items)


def test_the_catalog_records_name_their_family():
    from planner.validate import load_runs

    recs = {r.id: r for r in load_runs(Path(__file__).parent / "data" / "published_runs.yaml")}
    assert recs["narayanan2021-t2-zero3-174.6B-384gpu"].family == "gpt"  # GPT-3 175B
    assert sum(r.family is not None for r in recs.values()) == 24


# ------------------------------------------------------------ audit2: a switch given as a number
@pytest.mark.parametrize("field,value", [("gated_mlp", 0), ("tied_embeddings", 1), ("linear_bias", 0.0)])
def test_a_switch_of_a_model_given_as_a_number_is_refused(cli, tmp_path, field, value):
    # before: pydantic's lax mode read `gated_mlp: 0` as false (a GELU MLP priced for Llama 3 8B, exit 0);
    # schema.Bool refuses a number
    r = cli("explain", "--model", _model(tmp_path, **{field: value}), "--gpus", "8", "--tp", "2")
    assert_one_error(r, "model.yaml", f"`{field}`", f"not the number {value}")


def test_a_switch_of_a_hardware_file_given_as_a_number_is_refused(cli, tmp_path):
    from planner.catalog import hardware_source

    hw = yaml.safe_load(hardware_source("h100-sxm").read_text(encoding="utf-8"))
    hw["nvls"] = 1  # before: NVLink SHARP on, silently
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(hw), encoding="utf-8")
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p)
    assert_one_error(r, "hw.yaml", "`nvls`", "not the number 1")


@pytest.mark.parametrize("field", ["torch_compile", "sequence_parallel"])
def test_a_switch_of_a_job_file_given_as_a_number_is_refused(cli, tmp_path, field):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "llama3-8b", "gpus": 8, "tp": 2, "stack": "torchtitan", "sharding": "fsdp", field: 1}),
                   encoding="utf-8")
    assert_one_error(cli("explain", job), "job.yaml", field, "not the number 1")
    job.write_text(yaml.safe_dump({"model": "llama3-8b", "gpus": 8, "tp": 2, "stack": "torchtitan", "sharding": "fsdp", field: True}),
                   encoding="utf-8")
    assert cli("explain", job).exit_code == 0  # true / false still read


def test_a_switch_of_a_run_record_given_as_a_number_is_refused(cli, tmp_path):
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([_run_record("r", sequence_parallel=0)]), encoding="utf-8")
    r = cli("validate", p)
    assert r.exit_code == 2 and "sequence_parallel" in r.stderr and "not the number 0" in r.stderr


# ------------------------------------------------------------ audit2: a pinned degree no plan can use is bad input
@pytest.mark.parametrize("args,needles", [
    (["--dp", "3"], ["--dp 3 does not divide --gpus 8", "1, 2, 4, 8"]),
    (["--tp", "16"], ["--tp 16 does not divide --gpus 8"]),
    (["--cp", "16"], ["--cp 16 does not divide --gpus 8"]),
    (["--pp", "3"], ["--pp 3 does not divide --gpus 8"]),
    (["--ep", "2"], ["--ep 2 on llama3-8b, which has no experts", "--ep 1"]),
    (["--tp", "2", "--dp", "8"], ["--tp 2 x --dp 8 = 16 does not divide --gpus 8"]),
    (["--tp", "2", "--cp", "2", "--pp", "2", "--dp", "2"], ["--tp 2 x --cp 2 x --pp 2 x --dp 2 = 16, not --gpus 8"]),
    (["--pp", "1", "--vpp", "2"], ["--vpp 2 with --pp 1", "pp >= 2"]),
    (["--micro-batch", "3"], ["--micro-batch 3 does not divide the global batch of 2,048 sequences", "--global-batch"]),
    (["--dp", "2", "--micro-batch", "3"], ["--dp 2 x --micro-batch 3 does not divide"]),
])
def test_fit_refuses_a_pinned_degree_no_plan_can_use(cli, args, needles):
    # before: exit 1, "no plan for llama3-8b on 8 x h100-sxm satisfies the constraints" (as if plans were searched
    # and none fitted); explain refuses the same values as bad input (plan.rule_codes MESH, BATCH, EP_EXPERTS)
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", *args), *needles)


def test_fit_ep_must_divide_the_routed_experts(cli):
    assert_one_error(cli("fit", "--model", "mixtral-8x7b", "--gpus", "16", "--ep", "16"),
                     "--ep 16 does not divide the 8 routed experts of mixtral-8x7b", "valid: 1, 2, 4, 8")


def test_fit_pins_that_divide_one_of_the_gpu_counts_search(cli):
    # a range: --dp 3 divides 24 of 8..24 (exit 0 or 1 by what fits, never the pin error); nothing fits: exit 1
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8,24", "--dp", "3", "--top", "1")
    assert r.exit_code in (0, 1) and "does not divide --gpus" not in r.stderr, r.stderr
    r = cli("fit", "--model", "llama3-405b", "--gpus", "8", "--tp", "8")
    assert r.exit_code == 1 and "nothing fits" in r.stderr
