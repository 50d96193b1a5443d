"""Megatron-Bridge launches as users write them (issue 22): a --config-file YAML merged between the recipe and the
command line (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf training/utils/omegaconf_utils.py process_config_with_overrides
l. 99-154), and Hydra 1.3.2's override forms key=value, +key=value, ++key=value, ~key (hydra/_internal/
config_loader_impl.py @v1.3.2 l. 336-399). The figures are the recipe's (llama3.py llama3_8b_pretrain_config
l. 225-303: TP 1, CP 2, micro-batch 1, global batch 512) and the files' own."""

import re

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config

DATA = "tests/data/bridge_yaml"
HEAD = "torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
QUANT = "torchrun --nproc_per_node=8 examples/quantization/pretrain_quantized_llama3_8b.py "


def _read(tmp_path, text, **files):
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    f = tmp_path / "launch.sh"
    f.write_text(text + "\n")
    return load_trainer_config(f, hardware="h100-sxm")


def test_yaml_between_recipe_and_command_line():
    """recipe < YAML < command line: TP 2 and the global batch 64 from the file, the file's micro-batch 2 replaced by
    the command line's 1, CP the recipe's 2 (the file's dotted key model.context_parallel_size is one OmegaConf key,
    no ConfigContainer field: skipped by Bridge); full recompute from the file."""
    c = load_trainer_config(f"{DATA}/launch_yaml.sh", hardware="h100-sxm")
    j = c.job
    assert (j["tp"], j["cp"], j["micro_batch"], j["global_batch"]) == (2, 2, 1, 64)
    assert (j["sequence_parallel"], j["recompute"], j["model"], j["gpus"]) == (True, "full", "llama3-8b", 8)
    f = f"{DATA}/override.yaml"
    assert any(a.startswith(f"train.micro_batch_size: 2 in {f}, then 1 on the command line") for a in c.assumed)
    # the unknown key and the no-effect key are named with the file, as the command line's are without it
    assert f"{f}: model.foo_unknown=3 (an override the planner does not read: its effect is not priced)" in c.not_modelled
    # 3e-4: a float, as OmegaConf's loader reads it (PyYAML's own safe loader would read the string '3e-4')
    assert f"{f}: optimizer.lr=0.0003 (an Adam hyper-parameter: no effect on a step's memory or time)" in c.ignored
    assert any(i.startswith(f"{f}: model.context_parallel_size (a key with a dot") for i in c.ignored)


def test_yaml_keys_read_as_the_command_line_reads_them():
    """The same keys on the command line give the same job (one table reads both)."""
    a = load_trainer_config(f"{DATA}/launch_yaml.sh", hardware="h100-sxm")
    b = load_trainer_config(f"{DATA}/launch_cli.sh", hardware="h100-sxm")
    assert a.job == b.job
    assert [n.split(": ", 1)[1] for n in a.not_modelled] == b.not_modelled


def test_yaml_written_by_the_launch(tmp_path):
    """A YAML file the launch writes with a heredoc is read from it."""
    c = _read(tmp_path, "cat <<EOF > conf.yaml\ntrain:\n  global_batch_size: 128\nEOF\n" + QUANT + "--config-file conf.yaml")
    assert c.job["global_batch"] == 128


@pytest.mark.parametrize("yaml_text,match", [
    ("train:\n  micro_batch_size: 1\ntrain:\n  micro_batch_size: 2\n", "duplicate key train"),
    ("- model\n", "not a mapping"),
    ("model:\n  seq_length: ${train.x}\n", "interpolation"),
    # comm_overlap None in llama3_8b_pretrain_config: the same refusal as comm_overlap.tp_comm_overlap=true
    ("comm_overlap:\n  tp_comm_overlap: true\n", "has comm_overlap None"),
])
def test_yaml_refused(tmp_path, yaml_text, match):
    with pytest.raises(PlannerError, match=match):
        _read(tmp_path, QUANT + "--config-file c.yaml", **{"c.yaml": yaml_text})


def test_yaml_where_the_script_takes_none(cli, tmp_path):
    """run_recipe.py @dc805f5cf has no --config-file (parse_args l. 92-144): Hydra's parser gets the word and refuses
    it; the error names the scripts that merge a file."""
    f = tmp_path / "launch.sh"
    f.write_text(HEAD + "--config-file c.yaml\n")
    r = cli("explain", f, "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "--config-file" in r.stderr and "takes no YAML file" in r.stderr
    assert "pretrain_quantized_llama3_8b.py" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("words,match", [
    ("", "without --config-file"),  # its default file loads a ModelOpt-quantized checkpoint
    ("--config-file c.yaml --hf-path meta-llama/Meta-Llama-3-8B", "--hf-path"),
])
def test_quantized_script_refusals(tmp_path, words, match):
    with pytest.raises(PlannerError, match=match):
        _read(tmp_path, QUANT + words, **{"c.yaml": "train:\n  global_batch_size: 64\n"})


def test_tutorial_launch_reads():
    """The tutorial's own launch (tutorials/recipes/llama/README.md @dc805f5cf l. 96-100: 02_pretrain_with_yaml.py
    --config-file conf/llama32_1b_pretrain.yaml train.train_iters=5000 train.global_batch_size=512 optimizer.lr=0.0002;
    the YAML a byte copy of Bridge's, tests/data/bridge_yaml/conf/), by hand. The script builds
    llama32_1b_pretrain_config (l. 92; llama3.py l. 42-136), whose model is Llama 3.2 1B (16 layers, 2,048 wide,
    tied): TP 1 (l. 63), PP 1, CP 1 (l. 68), SP off, micro-batch 1 (l. 75; the file's 1 too), the distributed
    optimizer with both DDP overlaps (l. 127-130), fused TE cross-entropy (l. 96-97), bf16_mixed (recipes/common.py
    l. 129), no TP overlap (comm_overlap None, l. 127). The file's sequence_length / seq_length 4096 (l. 23, 54) over
    the recipe's 8,192 (l. 60, 70); the command line's global batch 512 over the file's 8 (l. 28) and 5,000 iterations
    over its 100 (l. 27): 5,000 x 512 x 4,096 = 10,485,760,000 tokens. 2 GPUs (--nproc_per_node=2): DP 2."""
    path = f"{DATA}/launch_tutorial.sh"
    f = f"{DATA}/conf/llama32_1b_pretrain.yaml"
    c = load_trainer_config(path, hardware="h100-sxm")
    j = c.job
    assert (j["model"], j["gpus"], j["stack"]) == ("llama3.2-1b", 2, "megatron-bridge")
    assert (j["tp"], j["pp"], j["cp"], j["vpp"], j["sequence_parallel"]) == (1, 1, 1, 1, False)
    assert (j["seq_len"], j["micro_batch"], j["global_batch"], j["recompute"]) == (4096, 1, 512, "none")
    assert j["tokens"] == 5000 * 512 * 4096 == 10_485_760_000
    assert (j["sharding"], j["sharding_mode"], j["dp_comm_overlap"], j["tp_comm_overlap"]) == (
        "zero1", "distributed_optimizer", True, False)
    assert (j["precision"], j["cross_entropy_fusion"], j["cross_entropy_fusion_impl"]) == ("bf16", True, "te")
    assert any(a.startswith(f"train.global_batch_size: 8 in {f}, then 512 on the command line") for a in c.assumed)
    assert any(a.startswith("recipe llama32_1b_pretrain_config: its values (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf "
                            "src/megatron/bridge/recipes/llama/llama3.py l. 42-136") for a in c.assumed)
    # the file's keys without effect on a step are ignored (validation, schedule, logging, seeds, checkpoint paths),
    # named with the file; the checkpoint interval, which costs time between steps, is not priced: listed as such
    for key in ("train.eval_iters=10", "train.eval_interval=50", "scheduler.lr_warmup_iters=20", "rng.seed=1234",
                "checkpoint.save=./checkpoints/llama32_1b", "optimizer.weight_decay=0.1"):
        assert any(i.startswith(f"{f}: {key} (") for i in c.ignored), key
    assert c.not_modelled == [f"{f}: checkpoint.save_interval=50 (an override the planner does not read: its effect "
                              "is not priced)"]


def test_tutorial_launch_priced(cli):
    """explain on the tutorial's launch: Llama 3.2 1B's 1,235,814,400 parameters, the tied embedding counted once at
    PP 1; bf16 weights 2 B each, fp32 gradients 4 B, the distributed optimizer's fp32 master and Adam m, v over DP 2:
    2,471,628,800 + 4,943,257,600 + 2,471,628,800 + 4,943,257,600 bytes."""
    import json

    r = cli("explain", f"{DATA}/launch_tutorial.sh", "--hardware", "h100-sxm", "--format", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    n = 1_235_814_400
    assert d["params"]["total"] == n
    m = d["memory"]
    assert (m["weights_bytes"], m["gradients_bytes"], m["optimizer_bytes"]) == (2 * n, 4 * n, (4 + 8) * n / 2)


def test_hydra_add_force_delete(tmp_path):
    """++ changes a held key; + fills a null one (model.recompute_granularity None in the recipe); ~ deletes a key,
    so the recipe's value stands (Bridge lays back only the keys the merged dict holds: omegaconf_utils.py l. 452-489).
    model.vocab_size is held (the provider's, the Hugging Face config's 128,256: models/conversion/model_bridge.py
    @dc805f5cf l. 259), so ++ changes it."""
    j = _read(tmp_path, HEAD + "++model.tensor_model_parallel_size=2 +model.recompute_granularity=selective "
                               "++model.vocab_size=131072 model.context_parallel_size=1 ~model.context_parallel_size").job
    assert (j["tp"], j["recompute"], j["padded_vocab_size"], j["cp"]) == (2, "selective", 131072, 2)
    # ~key=value where the value agrees
    assert _read(tmp_path, HEAD + "model.context_parallel_size=4 ~model.context_parallel_size=4").job["cp"] == 2


@pytest.mark.parametrize("word,match", [
    ("+model.tensor_model_parallel_size=2", "refuses \\+ on it"),  # l. 370-385: held, not null
    # the provider's vocab_size, the Hugging Face config's (model_bridge.py @dc805f5cf l. 259): held, not null
    ("+model.vocab_size=131072", "already holds model.vocab_size=128256"),
    ("~model.virtual_pipeline_model_parallel_size", "null or not at all"),  # l. 349-354: null in the recipe
    ("~model.context_parallel_size=4", "holds model.context_parallel_size=2, not 4"),  # l. 355-360
    ("~model.context_parallel_size model.context_parallel_size=1", "deleted by an earlier"),  # l. 388-395
    ("model.tensor_model_parallel_size=1,2", "sweep"),
    ("model.seq_length=${dataset.sequence_length}", "interpolation"),
    ("model.tensor_model_parallel_size=int(2)", "grammar function"),
    ("model@pkg=1", "config group or package"),
    ("~", "not a ConfigContainer dot path"),
])
def test_hydra_forms_refused(cli, tmp_path, word, match):
    f = tmp_path / "launch.sh"
    f.write_text(HEAD + word + "\n")
    r = cli("explain", f, "--hardware", "h100-sxm")
    assert r.exit_code == 2, r.stderr
    assert word.split()[-1] in r.stderr or word.split()[0] in r.stderr
    assert "Traceback" not in r.stderr
    with pytest.raises(PlannerError, match=match):
        load_trainer_config(f, hardware="h100-sxm")


def test_dataset_seq_length_a_property(tmp_path):
    """GPTDatasetConfig.seq_length is a property over sequence_length (training/config.py @dc805f5cf l. 450-457), no
    field of the dict Bridge merges: key=value is refused (Hydra changes no key the struct config lacks), + and the
    YAML file add it, and Bridge lays it after the field, so it wins over dataset.sequence_length."""
    with pytest.raises(PlannerError, match="dataset.seq_length is a property of the dataset config, not a field"):
        _read(tmp_path, HEAD + "model.seq_length=4096 dataset.seq_length=4096")
    c = _read(tmp_path, HEAD + "model.seq_length=4096 +dataset.seq_length=4096 dataset.sequence_length=8192")
    assert c.job["seq_len"] == 4096
    assert any(a.startswith("dataset.sequence_length=4096: dataset.seq_length's") for a in c.assumed)
    c = _read(tmp_path, QUANT + "--config-file c.yaml", **{"c.yaml": "model:\n  seq_length: 4096\ndataset:\n  seq_length: 4096\n"})
    assert c.job["seq_len"] == 4096


def test_one_script_a_launch(tmp_path):
    """The script is the one the launch line runs; a comment naming another is no launch, two launches are refused."""
    c = _read(tmp_path, "# written after scripts/training/run_recipe.py's README\n" + QUANT + "--config-file c.yaml",
              **{"c.yaml": "train:\n  global_batch_size: 32\n"})
    assert c.job["global_batch"] == 32
    with pytest.raises(PlannerError, match="one launch a file"):
        _read(tmp_path, HEAD + "\n" + QUANT + "--config-file c.yaml")


@pytest.mark.parametrize("word,key", [
    ("model.context_parallel_size=" + "1" * 400, "model.context_parallel_size=(400 digits)"),  # overflowed the bucket
    ("train.global_batch_size=" + "1" * 400, "train.global_batch_size=(400 digits)"),  # overflowed the tokens
    ("train.global_batch_size=2147483648", "train.global_batch_size=2,147,483,648"),  # schema.MAX_COUNT + 1
])
def test_counts_above_the_largest_refused(tmp_path, word, key):
    """A local fuzz pass's tracebacks (on main before this branch): a count past schema.MAX_COUNT (2**31 - 1) is an
    error naming the key, not a float overflow."""
    with pytest.raises(PlannerError, match=re.escape(f"{key}: above the planner's largest count")):
        _read(tmp_path, HEAD + word)


def test_comm_overlap_dict_merges_into_the_recipes(tmp_path):
    """llama3_70b_pretrain_config holds a CommOverlapConfig with tp_comm_overlap True (llama3.py l. 737-740): a
    `+comm_overlap={_target_:...}` dict is merged into it (Hydra's update with merge=True and force_add,
    config_loader_impl.py @v1.3.2 l. 374), so its TP overlap stands; the plain form is refused, as struct mode refuses
    the _target_ key the node lacks (omegaconf dictconfig.py @v2.3.0 l. 149-166); on llama3_8b_pretrain_config
    (comm_overlap None) the dict is the whole config and must name tp_comm_overlap (test_bridge_launch)."""
    target = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
    head = "torchrun --nproc_per_node=8 --nnodes=16 scripts/training/run_recipe.py --recipe llama3_70b_pretrain_config "
    j = _read(tmp_path, head + f"'+comm_overlap={{_target_:{target},bucket_size:40000000}}'").job
    assert j["tp_comm_overlap"] is True
    with pytest.raises(PlannerError, match="struct mode refuses its _target_ key"):
        _read(tmp_path, head + f"'comm_overlap={{_target_:{target},bucket_size:40000000}}'")
    c = _read(tmp_path, QUANT + "--config-file c.yaml",
              **{"c.yaml": f"comm_overlap:\n  _target_: {target}\n  tp_comm_overlap: false\n"})
    assert c.job["tp_comm_overlap"] is False


def test_a_dict_into_a_section_is_its_keys(tmp_path):
    """`train={global_batch_size:64,micro_batch_size:2}` merges into the train section key by key (OmegaConf.update
    with merge=True, omegaconf.py @v2.3.0 l. 731-737): read as the two overrides."""
    j = _read(tmp_path, HEAD + "'train={global_batch_size:64,micro_batch_size:2}'").job
    assert (j["global_batch"], j["micro_batch"]) == (64, 2)
