"""`planner explain`, `models`, `hardware`: output contract and bad input (exit 2, one
`error:` line and a `hint:` line, no traceback)."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_error

STABLE_MEMORY_KEYS = {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                      "other_bytes", "total_bytes", "capacity_bytes", "fits"}


def test_explain_json_contract(cli):
    r = cli("explain", "--model", "llama3-70b", "--gpus", "4096", "--tp", "8", "--sharding", "fsdp",
            "--tokens", "15e12", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert {"plan", "params", "memory", "flops"} <= set(js)
    assert STABLE_MEMORY_KEYS <= set(js["memory"])
    assert {"model_flops_per_token", "hardware_flops_per_token", "total_training_flops"} <= set(js["flops"])
    p = js["plan"]
    assert (p["tp"], p["cp"], p["pp"], p["dp"], p["sharding"]) == (8, 1, 1, 512, "fsdp")
    assert js["memory"]["fits"] is True
    m = js["memory"]
    assert m["total_bytes"] == pytest.approx(m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]
                                             + m["activations_bytes"] + m["other_bytes"])


def test_explain_table_prints_breakdown(cli):
    r = cli("explain", "--model", "llama3-70b-paper", "--gpus", "1", "--global-batch", "1",
            "--activation-model", "korthikanti", "--bytes-per-param", "mixed16")  # the seed's 16 B/param
    assert r.exit_code == 0
    for text in ("model states", "1,128.79", "182.54", "does not fit"):
        assert text in r.stdout


@pytest.mark.parametrize("args,shown", [
    (("--hardware", "h100-sxm"), "attention cudnn"),  # megatron on Hopper: TE's cuDNN (stack attention_kernels)
    (("--hardware", "a100-sxm-80gb"), "attention flash2"),  # sm 8.0: FlashAttention-2
    (("--stack", "torchtitan", "--sharding", "fsdp"), "attention flash2"),  # SDPA's flash backend: no rule
    (("--attention", "eager"), "attention eager (its batched GEMMs, softmax and dropout)"),
])
def test_explain_table_shows_attention_kernel(cli, args, shown):
    """The stack line names the kernel the attention core is timed with (the JSON's
    plan.attention_kernel); eager attention says what its core is timed as (compute.eager_core_terms),
    and the JSON's time carries the eager core's terms."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", *args)
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("stack "))
    assert line.endswith(", " + shown), line
    js = json.loads(cli("explain", "--model", "llama3-8b", "--gpus", "8", *args, "--format", "json").stdout)
    if "eager" in args:
        t = js["time"]
        assert t["eager_core_s"] == pytest.approx(t["eager_core_gemms_s"] + t["eager_core_softmax_s"]
                                                  + t["eager_core_dropout_s"]) and 0 < t["eager_core_s"] < t["compute_s"]
    else:
        assert "attention " + js["plan"]["attention_kernel"] in shown and "eager_core_s" not in js["time"]


def test_explain_job_yaml_equals_options(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 64\ntp: 2\npp: 2\nsharding: zero1\nrecompute: selective\n")
    a = json.loads(cli("explain", str(job), "--format", "json").stdout)
    b = json.loads(cli("explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--pp", "2",
                       "--sharding", "zero1", "--recompute", "selective", "--format", "json").stdout)
    assert a == b


@pytest.mark.parametrize("fmt", ["yaml", "csv"])
def test_explain_other_formats(cli, fmt):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--format", fmt)
    assert r.exit_code == 0
    assert "memory" in r.stdout


def test_hf_config_json(cli, tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
           "tie_word_embeddings": False, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 5e5}
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    # the catalog model trains 8,192-token sequences; a config.json's max_position_embeddings is not
    # its training length (plan.HF_DEFAULT_SEQ, 4,096 without --seq-len: issue 24), so give it
    a = json.loads(cli("explain", "--model", str(d), "--gpus", "8", "--seq-len", "8192", "--format", "json").stdout)
    b = json.loads(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--format", "json").stdout)
    assert a["params"] == b["params"] and a["params"]["total"] == 8_030_261_248  # Llama 3 8B: 8.03e9
    assert a["memory"]["total_bytes"] == b["memory"]["total_bytes"]
    c = json.loads(cli("explain", "--model", str(d), "--gpus", "8", "--format", "json").stdout)
    assert c["plan"]["seq_len"] == 4096 and any(x.startswith("seq_len=4,096") for x in c["assumed"])




def test_unknown_model_did_you_mean(cli):
    assert_one_error(cli("explain", "--model", "llama3-7b", "--gpus", "8"), "unknown model", "did you mean", "llama3-70b")


def test_degrees_do_not_match_gpus(cli):
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "8", "--pp", "2", "--dp", "8"),
               "tp=8", "cp=1", "pp=2", "dp=8", "128", "64")


def test_broken_yaml(cli, tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("model: llama3-8b\ngpus: 8\n  tp: [\n")
    assert_one_error(cli("explain", str(bad)), str(bad), "invalid YAML", "line 3")


@pytest.mark.parametrize("name, text", [
    ("run.sh", "#!/bin/bash\nset -euo pipefail\nGPUS=8\n\nSCRIPT_DIR=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n"),  # invalid YAML
    ("run.sh", "echo hi\n"),                     # YAML's string 'echo hi': was 'expected a mapping of job fields'
    ("launch", "#!/bin/bash\nGPUS=8\n"),         # no suffix: its #! line
])
def test_a_script_no_reader_knows(cli, tmp_path, name, text):
    """A shell script that no trainer reader takes (sniff_format: Megatron-Bridge's MIMO launches, a conversion script)
    is named as that, not read as the job YAML it is not: Megatron-Bridge 067f987df
    examples/megatron_mimo/llava/run_hetero_llava.sh gave 'line 10, column 1: invalid YAML: did not find expected
    <document start>' (fuzz13, the mirrors' launch scripts by hand). A job YAML's own syntax error is still named so
    (test_broken_yaml)."""
    p = tmp_path / name
    p.write_text(text)
    assert_one_error(cli("explain", str(p)), f"{p}: not a trainer config this planner reads", "--config-format")


def test_unknown_job_field(cli, tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("model: llama3-8b\ngpus: 8\ntensor_parallel: 2\n")
    assert_one_error(cli("explain", str(bad)), str(bad), "tensor_parallel")


def test_bad_choice(cli):
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--sharding", "zero4"), "sharding", "fsdp")


def test_broken_model_yaml(cli, tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("name: m\nnum_layers: 2\nhidden: 64\n")
    assert_one_error(cli("explain", "--model", str(bad), "--gpus", "1"), str(bad), "hidden")


def test_no_fp32_master_warns(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--bytes-per-param", "pure-bf16")
    assert r.exit_code == 0
    assert "7.1" in r.stderr and "fp32 master" in r.stderr


def test_models_and_hardware_lists(cli):
    r = cli("models", "--format", "json")
    names = {m["name"] for m in json.loads(r.stdout)}
    assert {"llama3-8b", "llama3-70b", "llama3-405b", "llama2-7b", "llama2-70b", "gpt3-175b"} <= names
    r = cli("hardware", "--format", "json")
    rows = {h["name"]: h for h in json.loads(r.stdout)}
    assert {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb", "b200", "gb200-nvl72", "mi300x"} <= set(rows)
    # the datasheet GB beside the GiB the device reports to CUDA, where measured (null: datasheet only)
    assert (rows["h100-sxm"]["hbm_GB"], rows["h100-sxm"]["hbm_visible_GiB"]) == (80, 79.09)
    assert rows["gb200-nvl72"]["hbm_visible_GiB"] is None


def test_every_model_explains_on_h100(cli, unlisted_stack):
    """Every zoo model explains; one with a layer kind megatron does not build (Jamba's Mamba-1, Llama 4's chunked
    attention; or a form it does not build, Gemma's post-norms: start-up rule STACK_LAYER_KIND) on megatron's figures from a stack file listing no layer kinds."""
    import planner.catalog as cat
    from planner.startup import missing_layer_features, unbuilt_layer_forms

    meg = cat.load_stack("megatron")
    for name in cat.list_models():
        m = cat.load_model(name)
        tp = 8 if m.num_attention_heads % 8 == 0 else 1
        # biased experts (gpt-oss) run with expert TP 1 only on Megatron (startup MEGATRON_MOE_BIAS_ETP)
        etp = ["--etp", "1"] if m.moe is not None and m.linear_bias else []
        stack = ["--stack", unlisted_stack] if (missing_layer_features(m, meg) or unbuilt_layer_forms(m, meg)) else []
        r = cli("explain", "--model", name, "--gpus", str(8 * tp), "--tp", str(tp), "--sharding", "fsdp",
                "--global-batch", "64", "--format", "json", *etp, *stack)
        assert r.exit_code == 0, (name, r.stderr)


@pytest.mark.parametrize("cmd", [("explain",), ("budget", "--tokens", "1T", "--mc-runs", "0"),
                                 ("export", "--format", "megatron")])
def test_row_without_from_fit_is_refused(cli, cmd):
    """--row picks a row of --from-fit (explain, and budget and export, which take explain's options): given without
    it, it is refused (before: `explain --model llama3-8b --gpus 8 --row 3` priced the options' plan, the row dropped
    silently). --row 1, the default, is the same plan either way. Found probing the options beside the cli-options
    fuzz kind."""
    base = ("--model", "llama3-8b", "--gpus", "8")
    assert_one_error(cli(*cmd, *base, "--row", "3"), "--row 3 picks a row of a saved fit, and no --from-fit is given")
    # (budget: llama3-8b's default plan on 8 GPUs does not fit, printed with exit 1)
    assert cli(*cmd, *base, "--row", "1").exit_code == (1 if cmd[0] == "budget" else 0)


@pytest.mark.parametrize("cmd", [("explain",), ("fit", "--top", "1"), ("budget", "--mc-runs", "0")])
@pytest.mark.parametrize("option", ["--tokens", "--global-batch-tokens"])
def test_an_empty_token_count_is_refused(cli, cmd, option):
    """`--tokens ''` and `--global-batch-tokens ''` are bad input, as `--tokens abc` is (before: an empty string is
    falsy, so the option was taken as not given: explain priced the default batch, the value dropped silently).
    Found probing the options beside the cli-options fuzz kind."""
    extra = ("--tokens", "1T") if cmd[0] == "budget" and option != "--tokens" else ()
    assert_one_error(cli(*cmd, "--model", "llama3-8b", "--gpus", "8", *extra, option, ""), f"cannot read {option} ''")


_LLAMA_SH = "tests/data/trainer_configs/train_llama3_8b.sh"
_DS_SH = "tests/data/trainer_configs/run_deepspeed_example.sh"


@pytest.mark.parametrize("src,old,new,line,what", [
    # the launch line (torchrun ... pretrain_gpt.py): before, skipped: 'no pretrain_gpt.py / torchrun line found'
    (_LLAMA_SH, "pretrain_gpt.py \\", 'pretrain_gpt.py --x "y \\', 85, "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py"),
    # an argument array's element line: before, the line kept as one element, read on silently (exit 0)
    (_LLAMA_SH, "    --nproc_per_node $GPUS_PER_NODE\n", '    --nproc_per_node $GPUS_PER_NODE "x\n', 25,
     "--nproc_per_node $GPUS_PER_NODE"),
    # Megatron-DeepSpeed's launch line (deepspeed pretrain_gpt.py): before, skipped as above
    (_DS_SH, "deepspeed pretrain_gpt.py \\", "deepspeed pretrain_gpt.py --foo 'bar \\", 51, "deepspeed pretrain_gpt.py"),
])
@pytest.mark.parametrize("cmd", ["check", "explain", "fit"])
def test_launch_script_with_an_unbalanced_quote_exits_2_naming_the_line(cli, tmp_path, cmd, src, old, new, line, what):
    """A launch script line the Megatron reader reads with a quote it does not close (bash reads the quoted word on
    over the next lines): `error: FILE: line N: cannot split '...': No closing quotation ...` / `hint: close the
    quote on the same line ...`, exit 2 (megatron._quoted_words on the line as written, before the reader expands
    its variables). Before, command_words dropped shlex's ValueError: the launch line skipped (a misleading 'no
    pretrain_gpt.py / torchrun line found'), an array line kept whole and read on (exit 0)."""
    from pathlib import Path

    text = Path(src).read_text()
    assert text.count(old) == 1
    f = tmp_path / Path(src).name
    f.write_text(text.replace(old, new))
    assert_one_error(cli(cmd, str(f), "--gpus", "8"), f"{f}: line {line}: cannot split ", what,
                     "No closing quotation", "hint: close the quote on the same line")
