"""Issue 22: Llama 3.1's RoPE scaling and NVFP4 through `fit --export` and the read-back.

Rope scaling costs nothing (the rotary tables are computed once: the same kernel and bytes); it
matters for the round trip being the same model. Megatron-LM @d98e8a64 spells Llama 3.1's
scaling --use-rope-scaling (factor 8, low_freq_factor 1, high_freq_factor 4, original 8192, fixed
in rotary_pos_embedding.py _apply_scaling; gpt_config_from_args passes no --rope-scaling-factor);
torchtitan @e347b1e5e applies the same four numbers in every llama3 flavor (RoPEScalingArgs), with
no TOML key. NVFP4: Megatron --fp4-format e2m1 --fp4-recipe nvfp4; torchtitan has no NVFP4
converter (its quantize converters are float8 and mx), so that export is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_model
from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers import MEGATRON_LLAMA3_ROPE, TORCHTITAN_LLAMA3_ROPE
from planner.trainers.export import export_plan, plan_signature

LLAMA31 = (8.0, 1.0, 4.0, 8192)  # Llama-3.1-405B config.json rope_scaling: factor, low, high, original


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**kw))
    return to_json(settings, plan, evaluate(settings, plan))


def _read(tmp_path, text: str, fmt: str, name: str, **kw):
    path = tmp_path / name
    path.write_text(text)
    return load_trainer_config(path, fmt=fmt, **kw)


# ------------------------------------------------------------------ the zoo and config.json


def test_llama31_405b_states_llama31_rope_scaling_and_the_llama3_entries_none():
    """llama3-405b is only released as Llama 3.1 (config.json rope_scaling llama3 8 / 1 / 4 / 8192);
    llama3-8b and llama3-70b are the Llama 3 release (Meta-Llama-3 config.json: no rope_scaling)."""
    assert load_model("llama3-405b").rope_scaling == "llama3"
    assert load_model("llama3-405b").llama3_rope_scaling == LLAMA31
    for name in ("llama3-8b", "llama3-70b"):
        assert load_model(name).rope_scaling is None and load_model(name).llama3_rope_scaling is None
    # both trainers' numbers are Llama 3.1's
    assert MEGATRON_LLAMA3_ROPE == LLAMA31 and TORCHTITAN_LLAMA3_ROPE == LLAMA31


def test_hf_config_reads_the_llama3_numbers():
    """config.json rope_scaling {rope_type llama3, ...} -> rope_scaling llama3 and its four numbers;
    Llama 4 Scout's (factor 16, high_freq_factor 1) are read as stated, matching the zoo entry."""
    from planner.hf_config import read

    base = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=512, intermediate_size=1024,
                num_attention_heads=8, num_key_value_heads=8, num_hidden_layers=2, vocab_size=1000,
                max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                hidden_act="silu", rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"})
    data, _ = read(base, "config.json")
    assert data["rope_scaling"] == "llama3"
    assert data["rope_scaling_params"] == dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                               original_max_position_embeddings=8192)
    bad = dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(PlannerError, match="low_freq_factor"):
        read(bad, "config.json")
    cfg = json.loads((Path(__file__).parent / "data" / "arch" / "llama-4-scout-17b-16e-instruct" / "config.json").read_text())
    data, _ = read(cfg, "config.json")
    assert data["rope_scaling_params"] == dict(factor=16.0, low_freq_factor=1.0, high_freq_factor=1.0,
                                               original_max_position_embeddings=8192)
    assert load_model("llama4-scout").llama3_rope_scaling == (16.0, 1.0, 1.0, 8192)


def test_rope_scaling_params_only_with_llama3(tmp_path):
    from planner.schema import ModelSpec

    spec = load_model("llama3-8b").model_dump(exclude_none=True)
    with pytest.raises(ValueError, match="rope_scaling_params are a llama3"):
        ModelSpec.model_validate(dict(spec, rope_scaling_params=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                                     original_max_position_embeddings=8192)))


def test_rope_scaling_costs_nothing():
    """The same plan of llama3-405b with and without its rope_scaling: the same memory and step time."""
    job = dict(gpus=1024, tp=8, pp=16, hardware="h100-sxm", stack="megatron", global_batch=1024, seq_len=8192)
    a = _row(model="llama3-405b", **job)
    spec = load_model("llama3-405b").model_dump(exclude_none=True)
    spec.pop("rope_scaling"), spec.pop("rope_scaling_params")
    from planner.trainers import write_model_file

    b = _row(model=write_model_file(spec, "plain-rope"), **job)
    assert a["memory"]["total_bytes"] == b["memory"]["total_bytes"]
    assert a["time"]["step_s"] == b["time"]["step_s"]


# ------------------------------------------------------------------ Megatron-LM: --use-rope-scaling


MEG_405B = dict(model="llama3-405b", gpus=1024, tp=8, pp=16, hardware="h100-sxm", stack="megatron",
                global_batch=1024, seq_len=8192)


def test_megatron_export_writes_use_rope_scaling_and_reads_back_the_same_model(tmp_path):
    """llama3-405b -> --use-rope-scaling (no --rope-scaling-factor: Megatron's 8 is the model's); read
    back without --model it is llama3-405b again (the one catalog model with that shape and scaling),
    and with --model the plan's signature and memory are the priced ones (check_readback)."""
    row = _row(**MEG_405B)
    text, _ = export_plan(row["plan"], "megatron")
    assert "--use-rope-scaling" in text.split() and "--rope-scaling-factor" not in text
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "llama31.sh", gpus=1024)
    assert cfg.job["model"] == "llama3-405b"
    back = _row(**cfg.job)
    assert plan_signature(back["plan"]) == plan_signature(row["plan"])
    # Llama 3 (no scaling): nothing written, and read back as llama3-70b
    row = _row(model="llama3-70b", gpus=64, tp=8, pp=4, hardware="h100-sxm", stack="megatron", global_batch=256)
    text, _ = export_plan(row["plan"], "megatron")
    assert "rope-scaling" not in text
    assert _read(tmp_path, text, "megatron", "llama3.sh", gpus=64).job["model"] == "llama3-70b"


def test_megatron_reader_lists_a_rope_scaling_mismatch(tmp_path):
    """A llama3-405b script without --use-rope-scaling trains plain RoPE: not matched to llama3-405b (the
    model the flags define instead, the mismatch named); with --model llama3-405b the model wins and the
    contradiction is listed. --use-rope-scaling on the Llama 3 70B shape likewise is not llama3-70b."""
    row = _row(**MEG_405B)
    text, _ = export_plan(row["plan"], "megatron")
    plain = text.replace(" --use-rope-scaling", "")
    assert plain != text
    cfg = _read(tmp_path, plain, "megatron", "plain.sh", gpus=1024)
    assert cfg.job["model"] != "llama3-405b"
    rule = next(a for a in cfg.assumed if a.startswith("model="))
    assert "llama3-405b, differs ((no --use-rope-scaling) None contradicts --model llama3-405b" in rule
    assert load_model(cfg.job["model"]).rope_scaling is None
    cfg = _read(tmp_path, plain, "megatron", "plain.sh", gpus=1024, model="llama3-405b")
    assert cfg.job["model"] == "llama3-405b"
    assert any("--model replaces the arguments' shape ((no --use-rope-scaling) None contradicts" in a for a in cfg.assumed)
    row = _row(model="llama3-70b", gpus=64, tp=8, pp=4, hardware="h100-sxm", stack="megatron", global_batch=256)
    text, _ = export_plan(row["plan"], "megatron")
    scaled = text.replace(" --position-embedding-type rope", " --position-embedding-type rope --use-rope-scaling")
    cfg = _read(tmp_path, scaled, "megatron", "scaled.sh", gpus=64)
    assert cfg.job["model"] != "llama3-70b"
    assert load_model(cfg.job["model"]).llama3_rope_scaling == LLAMA31  # the model the flags define: Megatron's scaling


def test_megatron_rope_scaling_factor_is_listed_as_not_passed(tmp_path):
    """--rope-scaling-factor is parsed but not passed to the model by pretrain_gpt.py @d98e8a64: ignored, saying so."""
    row = _row(**MEG_405B)
    text, _ = export_plan(row["plan"], "megatron")
    cfg = _read(tmp_path, text.replace("--use-rope-scaling", "--use-rope-scaling --rope-scaling-factor 32"),
                "megatron", "f32.sh", gpus=1024)
    assert cfg.job["model"] == "llama3-405b"
    assert any(i.startswith("--rope-scaling-factor=32 (pretrain_gpt.py @d98e8a64 does not pass it") for i in cfg.ignored)


def test_megatron_export_refuses_llama3_scaling_of_other_numbers(tmp_path):
    """Llama 4 Scout's llama3 scaling (factor 16, high_freq_factor 1) and one with unstated numbers:
    --use-rope-scaling would train Megatron's 8 / 1 / 4 / 8192, another model: refused."""
    from planner.trainers import write_model_file

    spec = load_model("llama3-405b").model_dump(exclude_none=True)
    other = write_model_file(dict(spec, rope_scaling_params=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                                 original_max_position_embeddings=8192)), "llama32-rope")
    unstated = dict(spec)
    unstated.pop("rope_scaling_params")
    unstated = write_model_file(unstated, "llama3-rope-unstated")
    for model, what in ((other, "factor 32, low_freq_factor 1"), (unstated, "llama3, numbers not stated")):
        row = _row(**dict(MEG_405B, model=model))
        with pytest.raises(PlannerError, match="applies factor 8, low_freq_factor 1, high_freq_factor 4") as e:
            export_plan(row["plan"], "megatron")
        assert what in e.value.message


# ------------------------------------------------------------------ torchtitan: the flavor decides


def test_torchtitan_export_writes_no_rope_key_and_notes_the_flavors_scaling(tmp_path):
    """llama3-405b's scaling is the 405B flavor's own: no note, nothing written, read back as llama3-405b
    with no rope line. llama3-8b (Llama 3, none): the 8B flavor trains Llama 3.1's frequencies, noted
    at export and at read-back (the same cost)."""
    row = _row(model="llama3-405b", gpus=512, tp=8, pp=8, hardware="h100-sxm", stack="torchtitan", sharding="fsdp",
               global_batch=512)
    text, notes = export_plan(row["plan"], "torchtitan")
    assert "rope" not in text and not any("rope" in n for n in notes)
    check_readback(row, "torchtitan", text)
    cfg = _read(tmp_path, text, "torchtitan", "405b.toml", gpus=512)
    assert cfg.job["model"] == "llama3-405b" and not any("rope" in a for a in cfg.assumed)
    row = _row(model="llama3-8b", gpus=8, hardware="h100-sxm", stack="torchtitan", sharding="fsdp", global_batch=64)
    text, notes = export_plan(row["plan"], "torchtitan")
    assert "rope" not in text
    assert any(n.startswith("model llama3-8b: rope_scaling none, but torchtitan's llama3 8B flavor always applies "
                            "Llama 3.1's (factor 8, low_freq_factor 1, high_freq_factor 4") for n in notes)
    cfg = _read(tmp_path, text, "torchtitan", "8b.toml", gpus=8)
    assert cfg.job["model"] == "llama3-8b"
    assert any(a.startswith("model=llama3-8b: rope_scaling none, but torchtitan's [model] llama3 8B") for a in cfg.assumed)


# ------------------------------------------------------------------ NVFP4


NVFP4 = dict(model="llama3-70b", gpus=64, tp=4, pp=4, hardware="b200", stack="megatron", global_batch=256,
             precision="nvfp4")


def test_nvfp4_megatron_round_trip(tmp_path):
    """An nvfp4 plan exports as --fp4-format e2m1 --fp4-recipe nvfp4 (transformer_config.py @d98e8a64: fp4
    'e2m1', fp4_recipe 'nvfp4'), no --fp8-format beside it (arguments.py l. 1100-1101 refuses both), the
    script passes Megatron's start-up checks, and it reads back as the same plan (precision nvfp4,
    fp8_recipe nvfp4), with and without --fp4-param-gather."""
    from planner.trainers.rules import megatron_script_errors

    for extra in ({}, {"fp4_param_gather": True, "sharding": "zero1"}):
        row = _row(**NVFP4, **extra)
        text, _ = export_plan(row["plan"], "megatron")
        words = text.split()
        assert words[words.index("--fp4-format") + 1] == "e2m1" and words[words.index("--fp4-recipe") + 1] == "nvfp4"
        assert "--fp8-format" not in words and ("--fp4-param-gather" in words) == bool(extra)
        assert not megatron_script_errors(text)
        check_readback(row, "megatron", text)
        cfg = _read(tmp_path, text, "megatron", "nvfp4.sh", gpus=64, hardware="b200")
        assert cfg.job["precision"] == "nvfp4" and cfg.job["fp8_recipe"] == "nvfp4"
        assert cfg.job.get("fp4_param_gather", False) == bool(extra)
        back = _row(**cfg.job)
        assert plan_signature(back["plan"]) == plan_signature(row["plan"])
        assert back["memory"]["total_bytes"] == row["memory"]["total_bytes"]


def test_nvfp4_megatron_script_refusals_name_their_rule():
    """Megatron's fp4 start-up checks on a script (rules.py FP4: arguments.py l. 1100-1105)."""
    from planner.trainers.rules import megatron_script_errors

    text, _ = export_plan(_row(**NVFP4)["plan"], "megatron")
    both = text.replace("--fp4-format e2m1", "--fp4-format e2m1 --fp8-format hybrid")
    assert "FP4" in [k for k, _ in megatron_script_errors(both)]
    bf16 = text.replace("--fp4-format e2m1 \\\n    --fp4-recipe nvfp4", "--fp4-param-gather")
    assert bf16 != text
    assert "FP4" in [k for k, _ in megatron_script_errors(bf16)]
    # TE's NVFP4 rows (start-up rule 64's transcription), tp 4 with SP: 8,200-token sequences at micro-batch 8 are
    # 16,400 rows a rank (16 x 1,025), at 2 4,100 (4,100 % 16 = 4): refused
    odd = export_plan(_row(**dict(NVFP4, seq_len=8200, micro_batch=8))["plan"], "megatron")[0]
    assert "--sequence-parallel" in odd.split() and not megatron_script_errors(odd)
    errs = megatron_script_errors(odd.replace("--micro-batch-size 8", "--micro-batch-size 2"))
    assert [k for k, _ in errs] == ["NVFP4_TOKENS"] and "2 x 8200 / cp 1 / tp 4 rows" in errs[0][1]


def test_nvfp4_torchtitan_is_refused_naming_what_is_missing():
    """torchtitan @e347b1e5e registers float8 and mx converters only (components/quantization): no NVFP4.
    The stack has no nvfp4 recipe, so the plan is refused before pricing (fit --export never ranks one);
    a plan dict set to nvfp4 and handed to the writer is refused by the same stack check (export resolves the
    plan's job again before writing)."""
    with pytest.raises(PlannerError, match="stack torchtitan has no nvfp4 training recipe"):
        _row(**dict(NVFP4, stack="torchtitan", sharding="fsdp", tp=1, pp=1, global_batch=64))
    plan = dict(_row(**dict(NVFP4, stack="torchtitan", precision="fp8", fp8_recipe="mxfp8", tp=1, pp=1,
                            sharding="fsdp", global_batch=64))["plan"], precision="nvfp4", fp8_recipe="nvfp4")
    with pytest.raises(PlannerError, match="fp8_recipe 'nvfp4' is not a nvfp4 recipe of stack torchtitan"):
        export_plan(plan, "torchtitan")


# ------------------------------------------------------------------ start-up rule 64: TE's NVFP4 rows


def test_nvfp4_rows_rule_is_appended_last_and_refuses_a_plan():
    """MEGATRON_NVFP4_TOKENS, code 64 (after TORCHTITAN_FP8_GROUPED_MM_PP_CP, 63): 8,200-token sequences at
    micro-batch 1 are 8,200 rows, 8,200 % 16 = 8: refused naming the rule and the figures; micro-batch 2
    (16,400 = 16 x 1,025) starts. Under SP the local shard counts: 4,104 / (cp 2 x tp 2) = 1,026 rows
    (1,026 % 16 = 2) fail, 4,096 / 4 = 1,024 rows pass; fp8 plans are not checked by it."""
    from planner.startup import CODES

    assert CODES["MEGATRON_NVFP4_TOKENS"] == 64
    assert CODES["TORCHTITAN_FP8_GROUPED_MM_PP_CP"] == 63
    job = dict(model="llama3-8b", gpus=8, hardware="b200", precision="nvfp4", seq_len=8200, global_batch=64)
    with pytest.raises(PlannerError, match="MEGATRON_NVFP4_TOKENS") as e:
        resolve(Job(micro_batch=1, **job))
    assert "micro_batch 1 x seq 8,200 / cp 1 = 8200 rows" in e.value.message
    resolve(Job(micro_batch=2, **job))
    # the rule is nvfp4's only (8,200 % 8 = 0 passes fp8's rule 65; under mxfp8, rule 66, 8,200 % 32 = 8 would not)
    resolve(Job(**dict(job, precision="fp8", fp8_recipe="delayed"), micro_batch=1))
    sp = dict(model="llama3-70b", gpus=64, hardware="b200", precision="nvfp4", global_batch=64, micro_batch=1,
              tp=2, cp=2, pp=4, sequence_parallel=True)
    with pytest.raises(PlannerError, match="MEGATRON_NVFP4_TOKENS") as e:
        resolve(Job(seq_len=4104, **sp))
    assert "micro_batch 1 x seq 4,104 / cp 2 / tp 2 (SP) = 1026 rows" in e.value.message
    resolve(Job(seq_len=4096, **sp))


def test_fit_masks_the_nvfp4_rows_rule_and_searches_the_micro_batch():
    """fit at 8,200 tokens a sequence: every ranked row's rows divide by 16 (micro-batch even), and the rule is
    among the reasons counted (the probe plan does not refuse the job for its micro-batch 1)."""
    from planner.search import fit

    res = fit(Job(model="llama3-70b", gpus=64, hardware="b200", precision="nvfp4", seq_len=8200, global_batch=256),
              top=10)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        rows = p["micro_batch"] * 8200 // p["cp"] // (p["tp"] if p["sequence_parallel"] else 1)
        assert p["micro_batch"] * 8200 % (p["cp"] * (p["tp"] if p["sequence_parallel"] else 1) * 16) == 0, (p, rows)
    assert any(k.startswith("Transformer Engine's NVFP4 quantizer") and n > 0 for k, n in res.counts.reasons.items())


# ------------------------------------------------------------------ start-up rules 69-70: TE's FP8 / MXFP8 rows


def test_fp8_rows_rules_follow_nvfp4s_and_refuse_at_the_boundary():
    """MEGATRON_FP8_ROWS (69, TE utils.py assert_dim_for_fp8_exec: rows % 8) and MEGATRON_MXFP8_ROWS (70, TE
    quantizer.cpp MXFP8Quantizer::create_tensor: rows % 32), appended after rule 64. llama3-8b at micro-batch 1:
    8,196 rows (8,196 % 8 = 4) refused under delayed scaling, 8,200 (= 8 x 1,025) starts, and at micro-batch 2
    16,392 rows (= 8 x 2,049) start. Under mxfp8 8,200 rows (8,200 % 32 = 8) are refused by 70 only, 8,192
    (= 32 x 256) start, and micro-batch 4 makes 8,200-token sequences 32,800 rows (= 32 x 1,025). Under SP the local
    shard counts (cp 2 x tp 2): 4,100 / 4 = 1,025 rows fail rule 69; 4,128 / 4 = 1,032 (= 8 x 129) pass it but not
    70 (1,032 % 32 = 8); 4,160 / 4 = 1,040 (% 32 = 16) fail 70 with SP, and without SP 4,160 / cp 2 = 2,080
    (= 32 x 65) rows pass. bf16 plans are checked by neither."""
    from planner.startup import CODES

    assert (CODES["MEGATRON_FP8_ROWS"], CODES["MEGATRON_MXFP8_ROWS"]) == (69, 70)
    assert CODES["MEGATRON_FP8_WIDTHS"] == 71  # rule 71 appended after them
    assert CODES["MEGATRON_CP_SLIDING_WINDOW"] == 72  # and 72 after it
    assert CODES["STACK_LAYER_KIND"] == 73  # and 73 after that (then STACK_SEQUENCE_PARALLEL 74, STACK_RECOMPUTE 75)
    assert CODES["STACK_RECOMPUTE"] == 75
    assert CODES["DEEPSPEED_PP_SPLIT_ENDS"] == 76 and CODES["DEEPSPEED_MOE"] == 77  # mdsexport2
    assert CODES["DEEPSPEED_MOE_SP"] == 78 and CODES["TORCHTITAN_MTP_PP_CP"] == 79  # mdsmoefit; tt03disp
    assert CODES["STACK_SP_NORM_GRADS"] == 80  # mdscheck
    assert CODES["BRIDGE_CHUNK_CP"] == 81 and CODES["TORCHTITAN_HYBRIDEP"] == 82  # bridgecp, tt03ep
    assert CODES["STACK_MODE_TP_PP_DP"] == 83  # bridgefsdp
    assert CODES["PRECISION_AWARE_MFSDP"] == 84 and CODES["TORCHTITAN_SEQ_SP_CP"] == 85 and CODES["TORCHTITAN_VARLEN_CP"] == 86  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # rule87: 87-89 follow, ttchecks: 90  # pamfsdp, rule85
    job = dict(model="llama3-8b", gpus=8, hardware="b200", precision="fp8", global_batch=64)
    with pytest.raises(PlannerError, match="MEGATRON_FP8_ROWS") as e:
        resolve(Job(seq_len=8196, micro_batch=1, fp8_recipe="delayed", **job))
    assert "micro_batch 1 x seq 8,196 / cp 1 = 8196 rows" in e.value.message
    assert "divisible by 8" in e.value.message and "MEGATRON_MXFP8_ROWS" not in e.value.message
    resolve(Job(seq_len=8200, micro_batch=1, fp8_recipe="delayed", **job))
    resolve(Job(seq_len=8196, micro_batch=2, fp8_recipe="tensorwise", **job))
    with pytest.raises(PlannerError, match="MEGATRON_MXFP8_ROWS") as e:
        resolve(Job(seq_len=8200, micro_batch=1, fp8_recipe="mxfp8", **job))
    assert "micro_batch 1 x seq 8,200 / cp 1 = 8200 rows" in e.value.message
    assert "MEGATRON_FP8_ROWS" not in e.value.message
    resolve(Job(seq_len=8192, micro_batch=1, fp8_recipe="mxfp8", **job))
    resolve(Job(seq_len=8200, micro_batch=4, fp8_recipe="mxfp8", **job))
    resolve(Job(**dict(job, precision="bf16"), seq_len=8196, micro_batch=1))  # neither rule at bf16
    sp = dict(model="llama3-70b", gpus=64, hardware="b200", precision="fp8", global_batch=64, micro_batch=1,
              tp=2, cp=2, pp=4, sequence_parallel=True, fp8_recipe="delayed")
    with pytest.raises(PlannerError, match="MEGATRON_FP8_ROWS") as e:  # 4,100 / 4 = 1,025 rows, odd
        resolve(Job(seq_len=4100, **sp))
    assert "micro_batch 1 x seq 4,100 / cp 2 / tp 2 (SP) = 1025 rows" in e.value.message
    resolve(Job(seq_len=4128, **sp))  # 4,128 / 4 = 1,032 = 8 x 129 rows
    with pytest.raises(PlannerError, match="MEGATRON_MXFP8_ROWS") as e:  # 1,032 % 32 = 8
        resolve(Job(seq_len=4128, **dict(sp, fp8_recipe="mxfp8")))
    assert "micro_batch 1 x seq 4,128 / cp 2 / tp 2 (SP) = 1032 rows" in e.value.message
    with pytest.raises(PlannerError, match="MEGATRON_MXFP8_ROWS"):  # 1,040 % 32 = 16
        resolve(Job(seq_len=4160, **dict(sp, fp8_recipe="mxfp8")))
    resolve(Job(seq_len=4160, **dict(sp, fp8_recipe="mxfp8", sequence_parallel=False)))  # 2,080 = 32 x 65 rows


# ------------------------------------------------------------------ start-up rule 71: TE's FP8 / MXFP8 / NVFP4 widths


def _wide_heads_model(tmp_path) -> str:
    """llama3-8b with 40 query heads of 72 (8 KV heads): the attention proj input 40 x 72 = 2,880 = 16 x 180 =
    32 x 90 wide, the QKV out (40 + 16) x 72 = 4,032 = 32 x 126 wide (hand-made: no catalogue model breaks a dense
    width at tp <= 8)."""
    import yaml

    m = load_model("llama3-8b").model_copy(update=dict(name="wide-heads", num_attention_heads=40, num_kv_heads=8,
                                                         head_dim=72))
    path = tmp_path / "wide-heads.yaml"
    path.write_text(yaml.safe_dump(m.model_dump(exclude_none=True)))
    return str(path)


def test_fp8_widths_rule_refuses_a_tp_whose_shard_breaks_the_block(tmp_path):
    """MEGATRON_FP8_WIDTHS (71, TE utils.py assert_dim_for_fp8_exec: input last dim % 16, weight out % 8; MXFP8
    quantizer: every dim % 32). The proj input 2,880 / tp 8 = 360 (% 16 = 8) is refused under delayed scaling, and
    its refusal names the width and the tp values that work (2,880 / 16 = 180 = 2^2 x 45: tp 1, 2, 4); tp 4 (720 =
    16 x 45; QKV 4,032 / 4 = 1,008 = 8 x 126) starts. Under mxfp8 tp 4 is refused (720 % 32 = 16, 1,008 % 32 = 16)
    and tp 2 (1,440 = 32 x 45, 2,016 = 32 x 63) starts; bf16 at tp 8 is checked by no width."""
    path = _wide_heads_model(tmp_path)
    job = dict(model=path, gpus=8, hardware="b200", precision="fp8", global_batch=64, seq_len=8192, micro_batch=1,
               pp=1, cp=1)
    with pytest.raises(PlannerError, match="MEGATRON_FP8_WIDTHS") as e:
        resolve(Job(tp=8, fp8_recipe="delayed", **job))
    assert ("attention proj input heads x head_dim 2,880 / tp 8 = 360, not a multiple of 16 (tp 1, 2, 4 give one)"
            in e.value.message)
    assert "QKV out" not in e.value.message  # 4,032 / 8 = 504 = 8 x 63: the weight's out dim passes at 8
    resolve(Job(tp=4, fp8_recipe="delayed", **job))
    with pytest.raises(PlannerError, match="MEGATRON_FP8_WIDTHS") as e:
        resolve(Job(tp=4, fp8_recipe="mxfp8", **job))
    assert "2,880 / tp 4 = 720, not a multiple of 32 (tp 1, 2 give one)" in e.value.message
    assert "(heads + 2 kv_heads) x head_dim 4,032 / tp 4 = 1008, not a multiple of 32" in e.value.message
    resolve(Job(tp=2, fp8_recipe="mxfp8", **job))
    resolve(Job(tp=8, **dict(job, precision="bf16")))


def test_fp8_widths_rule_reads_the_experts_width_over_etp_under_block_quantizers():
    """gpt-oss's routed experts' ffn 2,880 over expert TP (TE GroupedLinear quantizes each expert's weight shard,
    so MXFP8's and NVFP4's create_tensor checks hold; assert_dim_for_fp8_exec is not called there): mxfp8 breaks at
    etp 4 (720 % 32 = 16) and 8 (360 % 32 = 8), not at 1 or 2 (1,440 = 32 x 45); nvfp4 only at etp 8 (360 % 16 = 8);
    delayed scaling at none (the grouped experts are unchecked, every dense width divides). Vectorized over etp at
    tp 1 (gpt-oss's proj input 64 x 64 = 4,096 and hidden 2,880 = 32 x 90 pass everywhere)."""
    from types import SimpleNamespace

    import numpy as np

    from planner.precisions import FP8, FP8_RECIPE_CODES, PRECISION_CODES
    from planner.startup import BY_CODE, CODES

    rule = BY_CODE[CODES["MEGATRON_FP8_WIDTHS"]]
    model = load_model("gpt-oss-120b")
    etp = np.array([1, 2, 4, 8])

    def broken(precision, recipe):
        p = SimpleNamespace(tp=np.ones(4, dtype=np.int64), etp=etp, precision=np.full(4, precision),
                            f8r=np.full(4, FP8_RECIPE_CODES[recipe]))
        return rule.broken(model, None, p).tolist()

    assert broken(FP8, "mxfp8") == [False, False, True, True]
    assert broken(PRECISION_CODES["nvfp4"], "delayed") == [False, False, False, True]
    assert broken(FP8, "delayed") == [False, False, False, False]
    assert broken(PRECISION_CODES["bf16"], "mxfp8") == [False, False, False, False]


def test_fp8_rows_megatron_script_refusals_name_their_rule():
    """rules.py FP8_ROWS / MXFP8_ROWS (rules 69 / 70 on a script): an mxfp8 plan at tp 2 with SP and 8,192-token
    sequences (4,096 rows a rank, 32 x 128) passes; at 8,200 tokens 4,100 rows (4,100 % 32 = 4, % 8 = 4) break both,
    at 8,208 4,104 rows (= 8 x 513, % 32 = 8) MXFP8_ROWS only; under --fp8-recipe delayed 8,208 passes, and
    without --fp8-recipe (Megatron's default, delayed) too."""
    from planner.trainers.rules import megatron_script_errors

    text, _ = export_plan(_row(model="llama3-8b", gpus=8, hardware="b200", precision="fp8", fp8_recipe="mxfp8",
                               seq_len=8192, micro_batch=1, global_batch=64, tp=2, sequence_parallel=True)["plan"],
                          "megatron")
    assert "--fp8-recipe mxfp8" in text and "--seq-length 8192" in text and "--sequence-parallel" in text.split()
    assert "--max-position-embeddings 8192" in text
    text = text.replace("--max-position-embeddings 8192", "--max-position-embeddings 16384")  # room for longer seqs
    keys = lambda t: [k for k, _ in megatron_script_errors(t)]  # noqa: E731
    assert not keys(text)
    errs = megatron_script_errors(text.replace("--seq-length 8192", "--seq-length 8200"))
    assert [k for k, _ in errs] == ["FP8_ROWS", "MXFP8_ROWS"]
    assert "1 x 8200 / cp 1 / tp 2 rows, not a multiple of 8" in errs[0][1]
    assert "1 x 8200 / cp 1 / tp 2 rows, not a multiple of 32" in errs[1][1]
    odd = text.replace("--seq-length 8192", "--seq-length 8208")
    assert keys(odd) == ["MXFP8_ROWS"]
    assert not keys(odd.replace("--fp8-recipe mxfp8", "--fp8-recipe delayed"))
    default = odd.replace("--fp8-recipe mxfp8", "")
    assert "--fp8-recipe" not in default and "--fp8-format" in default and not keys(default)


def test_fit_masks_the_fp8_rows_rules_and_keeps_ranking():
    """fit of an fp8 job on B200 at 8,196 tokens a sequence (8,196 % 8 = 4), the recipe left to the search
    (delayed, tensorwise, mxfp8 on Blackwell): rows are still ranked, each one's local rows divide by 8, and by 32
    where it runs mxfp8; rule 69 is among the reasons counted (the probe plan runs micro-batch 2: 16,392 rows)."""
    from planner.search import fit

    res = fit(Job(model="llama3-70b", gpus=64, hardware="b200", precision="fp8", seq_len=8196, global_batch=256),
              top=10)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        div = p["cp"] * (p["tp"] if p["sequence_parallel"] else 1) * (32 if p["fp8_recipe"] == "mxfp8" else 8)
        assert p["micro_batch"] * 8196 % div == 0, p
    assert any(k.startswith("Transformer Engine's FP8 GEMMs") and n > 0 for k, n in res.counts.reasons.items())


def test_fit_export_and_check_pass_on_the_exported_scripts(cli, tmp_path):
    """`fit --export megatron` (its read-back check, cli/export.py check_readback) for an nvfp4 job and for
    llama3-405b, then `planner check` on the written scripts: exit 0 (they fit), read as nvfp4 / llama3-405b."""
    cases = [(["--model", "llama3-70b", "--gpus", 64, "--hardware", "b200", "--precision", "nvfp4", "--tp", 4, "--pp", 4,
               "--global-batch", 256], "nvfp4", "llama3-70b"),
             (["--model", "llama3-405b", "--gpus", 1024, "--hardware", "h100-sxm", "--tp", 8, "--pp", 16,
               "--global-batch", 1024], "bf16", "llama3-405b")]
    for args, precision, model in cases:
        r = cli("fit", *args, "--stack", "megatron", "--export", "megatron")
        assert r.exit_code == 0, r.stderr
        assert "exporting row 1" in r.stderr
        script = tmp_path / f"{model}.sh"
        script.write_text(r.stdout)
        hw = args[args.index("--hardware") + 1]
        r = cli("check", script, "--gpus", args[args.index("--gpus") + 1], "--hardware", hw, "--format", "json")
        assert r.exit_code == 0, r.stderr
        out = json.loads(r.stdout)
        row = out[0] if isinstance(out, list) else out
        text = json.dumps(row)
        assert f'"precision": "{precision}"' in text and f'"model": "{model}"' in text
