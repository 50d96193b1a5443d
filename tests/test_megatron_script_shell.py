"""The Megatron launch-script reader's bash (planner/trainers/megatron.py command_words, _Shell, _declaration,
_exported_cublas, _unread_substitutions): the shell forms issue 22's fuzz pass and the launch scripts of the
Megatron-LM / Megatron-DeepSpeed / Bridge mirrors use, each read as bash reads it (bash(1): SHELL BUILTIN COMMANDS
for export / declare / typeset / local / readonly; Parameter Expansion for ${X:=w}, ${X:+w}, ${X-w}, ${X=w};
Arrays; Command Substitution and Arithmetic Expansion), and flags beat files where the script sets a flag from a
substitution the reader does not run. Each test failed on the reader before these forms were read.

The scripts are tests/data/trainer_configs/train_llama3_8b.sh with one line changed: Llama 3 8B on one node of 8
(GPUS_PER_NODE=8, NUM_NODES=1), TP_SIZE=2 (line 17), MICRO_BATCH_SIZE=1 (line 19), GLOBAL_BATCH_SIZE=128,
SEQ_LENGTH=8192, --train-iters 1000 (line 52), `export CUDA_DEVICE_MAX_CONNECTIONS=1` (line 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_error
from planner.errors import PlannerError
from planner.trainers import load_trainer_config, megatron
from planner.trainers.rules import megatron_script_errors

SH = Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b.sh"


def _variant(tmp_path: Path, old: str, new: str, name: str = "run.sh") -> Path:
    text = SH.read_text()
    assert old in text, old
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    return p


def _job(tmp_path, old, new, **kw) -> dict:
    return load_trainer_config(_variant(tmp_path, old, new), fmt="megatron", gpus=8, **kw).job


# ------------------------------------------------------------ (a) declarations
@pytest.mark.parametrize("line,tp", [
    ("declare TP_SIZE=4", 4), ("typeset TP_SIZE=4", 4), ("readonly TP_SIZE=4", 4), ("local TP_SIZE=4", 4),
    ("declare -r TP_SIZE=4", 4), ("declare -x TP_SIZE=4", 4), ("declare -i TP_SIZE=2*2", 4),  # -i: 2*2 = 4
    ("readonly TP_SIZE=4 CP_SIZE=1", 4), ("X=1; declare -g TP_SIZE=8", 8),
])
def test_declarations_assign(tmp_path, line, tp):
    """`declare NAME=value` (and typeset / local / readonly, with their options) assigns as `NAME=value` does; the
    reader left such a line unread, and $TP_SIZE unexpanded was an error."""
    assert _job(tmp_path, "TP_SIZE=2", line)["tp"] == tp


def test_declare_x_exports_and_export_n_takes_it_back(tmp_path):
    """`declare -x NCCL_ALGO=Ring` exports it: the job's nccl_algo Ring (megatron.read_nccl_algo). `export -n NAME`
    keeps the variable and drops its export (bash(1) export -n): the launch line's environment has no NCCL_ALGO,
    so the job has none; the reader read `export -n NCCL_ALGO` as no command and kept it exported."""
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "declare -x NCCL_ALGO=Ring")
    assert job["nccl_algo"] == "Ring"
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export NCCL_ALGO=Ring\nexport -n NCCL_ALGO")
    assert "nccl_algo" not in job
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export -n NCCL_ALGO=Ring")
    assert "nccl_algo" not in job  # assigned, not exported
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export -n NCCL_ALGO=Ring\nexport NCCL_ALGO")
    assert job["nccl_algo"] == "Ring"  # the value export -n assigned, exported again
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export NCCL_ALGO=Ring; declare +x NCCL_ALGO")
    assert "nccl_algo" not in job


def test_declare_x_sets_the_environment_megatron_checks():
    """CUDA_DEVICE_MAX_CONNECTIONS exported by `declare -x`: Megatron-LM's rule for TP 2 without FSDP
    (rules.py MAX_CONN: it needs CUDA_DEVICE_MAX_CONNECTIONS=1) holds; the reader did not see the export and
    the rule failed ('tp 2 / cp 1 without FSDP needs CUDA_DEVICE_MAX_CONNECTIONS=1 (got None)')."""
    text = SH.read_text()
    assert "MAX_CONN" not in [k for k, _ in megatron_script_errors(text)]
    declared = text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1", "declare -x CUDA_DEVICE_MAX_CONNECTIONS=1")
    assert "MAX_CONN" not in [k for k, _ in megatron_script_errors(declared)]
    unexported = text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1", "declare +x CUDA_DEVICE_MAX_CONNECTIONS=1")
    assert "MAX_CONN" in [k for k, _ in megatron_script_errors(unexported)]


MAX = "export CUDA_DEVICE_MAX_CONNECTIONS=1"


@pytest.mark.parametrize("line, refused", [
    (MAX, False),
    (MAX + "\nexport -n CUDA_DEVICE_MAX_CONNECTIONS", True),  # the export taken back (bash(1) export -n)
    (MAX + "\nunset CUDA_DEVICE_MAX_CONNECTIONS", True),
    ("DTYPE=bf16\nif [[ $DTYPE == fp8 ]]; then\n    " + MAX + "\nfi", True),  # a branch not taken
    ("DTYPE=fp8\nif [[ $DTYPE == fp8 ]]; then\n    " + MAX + "\nfi", False),  # the branch taken
    ("DTYPE=bf16\nif [[ $DTYPE == fp8 ]]; then\n    :\nelse\n    " + MAX + "\nfi", False),
])
def test_script_errors_take_the_environment_the_reader_evaluates(line, refused):
    """megatron_script_errors reads the launch line's environment only as the reader evaluates the script
    (ScriptWords.env): TP 2 without FSDP needs CUDA_DEVICE_MAX_CONNECTIONS=1 (rules.py MAX_CONN), so a script whose
    export is taken back (`export -n`, `unset`) or sits in an `if` branch not taken is refused, and one whose export
    runs is not. The rule matched `export NAME=value` lines in the text before, and counted the export taken back, unset or in the branch
    not taken as set."""
    text = SH.read_text()
    assert MAX in text
    keys = [k for k, _ in megatron_script_errors(text.replace(MAX, line, 1))]
    assert ("MAX_CONN" in keys) is refused, keys


# ------------------------------------------------------------ (b) parameter expansion
@pytest.mark.parametrize("line,tp", [
    (": ${TP_SIZE:=4}", 4),  # assigns 4 and expands (the `: ${X:=w}` idiom)
    ("TP_SIZE=${TP_SIZE:=4}", 4),
    (": ${TP_SIZE=4}", 4),  # unset: assigned
    ("TP_SIZE=\n: ${TP_SIZE:=4}", 4),  # `:=`: empty counts as unset
    ("ON=1\nTP_SIZE=${ON:+4}", 4),  # `:+`: the alternative where set and not empty
    ("ON=\nTP_SIZE=${ON:+8}4", 4),  # empty: nothing
    ("ON=\nTP_SIZE=${ON+4}", 4),  # `+`: set (even empty)
    ("E=\nTP_SIZE=${E:-4}", 4),  # `:-` on an empty variable gives the default (the reader gave the empty value)
    ("E=8\nTP_SIZE=${E-4}", 8),
    ("TP_SIZE=${NOT_SET-4}", 4),
    ("TWO=2\nTP_SIZE=${NOT_SET:-${TWO}}", 2),  # a default holding ${...}
])
def test_parameter_expansion(tmp_path, line, tp):
    assert _job(tmp_path, "TP_SIZE=2", line)["tp"] == tp


def test_assigned_default_is_soft_for_the_gpu_count(tmp_path):
    """`: ${GPUS_PER_NODE:=8}` is a shell default as ${GPUS_PER_NODE:-8} is: --gpus 16 replaces torchrun's count
    (megatron._soft_launcher) rather than disagreeing with it."""
    p = _variant(tmp_path, "GPUS_PER_NODE=8", ": ${GPUS_PER_NODE:=8}")
    assert load_trainer_config(p, fmt="megatron", gpus=16).job["gpus"] == 16
    assert load_trainer_config(p, fmt="megatron").job["gpus"] == 8  # the default, 8 x NUM_NODES 1


# ------------------------------------------------------------ (c) several assignments after export
def test_cublas_workspace_among_several_exports(tmp_path):
    """`export CUBLAS_WORKSPACE_CONFIG=:4096:8 OTHER=1`: the job's cublas_workspace_config :4096:8 (memory.py [ws]);
    _exported_cublas's own pattern read a lone assignment only and left the job at the GPU's default."""
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1",
               "export CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDA_DEVICE_MAX_CONNECTIONS=1")
    assert job["cublas_workspace_config"] == ":4096:8"
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "declare -x CUBLAS_WORKSPACE_CONFIG=':16:8'")
    assert job["cublas_workspace_config"] == ":16:8"
    # an export taken back is not the launch's environment; a variable exported later is
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1",
               "export CUBLAS_WORKSPACE_CONFIG=:4096:8\nexport -n CUBLAS_WORKSPACE_CONFIG")
    assert "cublas_workspace_config" not in job
    job = _job(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "WS=:4096:8:16:8\nexport CUBLAS_WORKSPACE_CONFIG=$WS")
    assert job["cublas_workspace_config"] == ":4096:8:16:8"


def test_cublas_workspace_without_a_pair_is_listed(tmp_path):
    """A value with no :SIZE:COUNT pair: PyTorch warns and takes its default workspace (CublasHandlePool.cpp
    parseChosenWorkspaceSize), so the job keeps the default and the value is listed as ignored, not dropped."""
    cfg = load_trainer_config(_variant(tmp_path, "export CUDA_DEVICE_MAX_CONNECTIONS=1",
                                       "export CUBLAS_WORKSPACE_CONFIG=4096 X=1"), fmt="megatron", gpus=8)
    assert "cublas_workspace_config" not in cfg.job
    assert [n.entries for n in cfg.ignored if n.head and n.head.startswith("CUBLAS")] == [
        (("CUBLAS_WORKSPACE_CONFIG", 4096),)]


# ------------------------------------------------------------ (d) substitutions and the command line
def test_substitution_error_names_line_flag_and_whole_expression(cli, tmp_path):
    """`MICRO_BATCH_SIZE=$(( GLOBAL_BATCH_SIZE << 7 ))` (a shift: shell_arith leaves it) and `$(nproc)`: the error
    shows the whole expression (it showed '$((', shlex's first word of it), names the file, the line it is written
    on (19) and the flag, and hints the option that replaces it."""
    for expr, what in (("$(( GLOBAL_BATCH_SIZE << 7 ))", "bash arithmetic"), ("$(nproc)", "a command substitution"),
                       ("$(( $(nproc) / 8 ))", "bash arithmetic")):
        p = _variant(tmp_path, "MICRO_BATCH_SIZE=1", f"MICRO_BATCH_SIZE={expr}")
        assert_one_error(cli("check", p, "--gpus", "8"),
                         f"{p}: line 19: --micro-batch-size '{expr}': {what} the reader does not run",
                         "give --micro-batch N on the command line")


def test_command_line_replaces_an_unread_substitution(cli, tmp_path):
    """Flags beat files: `check SCRIPT --micro-batch 2` reads the script with micro-batch 2 where the script's
    --micro-batch-size is a substitution the reader does not run (it exited 2 before the option could replace it),
    with an assumed note naming the script's value; the verdict is the one of the script with MICRO_BATCH_SIZE=2."""
    p = _variant(tmp_path, "MICRO_BATCH_SIZE=1", "MICRO_BATCH_SIZE=$(( GLOBAL_BATCH_SIZE << 7 ))")
    r = cli("check", p, "--gpus", "8", "--micro-batch", "2", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    [res] = json.loads(r.stdout)
    two = cli("check", _variant(tmp_path, "MICRO_BATCH_SIZE=1", "MICRO_BATCH_SIZE=2", "two.sh"), "--gpus", "8",
              "--format", "json")
    [want] = json.loads(two.stdout)
    assert res["plan"]["micro_batch"] == 2
    assert (res["plan"], res["memory"], res["verdict"]) == (want["plan"], want["memory"], want["verdict"])
    assert ("micro_batch=2: the command line's --micro-batch replaces the script's --micro-batch-size "
            "$(( GLOBAL_BATCH_SIZE << 7 )) (line 19: bash arithmetic the reader does not run; flags beat the file)"
            in r.stdout + r.stderr)


def test_command_line_replaces_an_unset_variable(cli, tmp_path):
    """A flag set from a variable the script does not set (`--tensor-model-parallel-size $TP_SIZE` with no TP_SIZE=,
    a condition the reader cannot evaluate in Megatron-DeepSpeed's MoE scripts): --tp 2 replaces it; without the
    option the flag's own reading names it (exit 2), as before."""
    p = _variant(tmp_path, "TP_SIZE=2", "NOT_TP=2")
    assert_one_error(cli("check", p, "--gpus", "8"), "--tensor-model-parallel-size '$TP_SIZE' is not a whole number")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8, overrides={"tp": 2})
    assert cfg.job["tp"] == 2
    assert [n.entries for n in cfg.assumed if n.message and "$TP_SIZE" in n.message] == [(("tp", 2),)]


def test_command_line_tokens_replace_unread_train_iters(tmp_path):
    """--train-iters $((1000 << 1)) with --tokens: the flag is not read (no tokens from the file: load_job lays the
    option's 1e9 over it), the note names the script's value; without the option, an error on line 52."""
    p = _variant(tmp_path, "--train-iters 1000", "--train-iters $((1000 << 1))")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8, overrides={"tokens": 1e9})
    assert "tokens" not in cfg.job
    assert [n.entries for n in cfg.assumed if n.message and "--train-iters $((1000 << 1)) (line 52" in n.message] == [
        (("tokens", 1e9),)]
    with pytest.raises(PlannerError, match=r"line 52: --train-iters '\$\(\(1000 << 1\)\)'"):
        load_trainer_config(p, fmt="megatron", gpus=8)


def test_arithmetic_inside_an_array_element(tmp_path):
    """`--train-iters $((1000 * 2))` inside TRAINING_ARGS=( ... ): the array ends at its own `)`, not at the
    arithmetic's (the reader ended it there and read the rest of the array as commands). tokens = iterations x
    global batch x sequence length = 2,000 x 128 x 8,192 = 2,097,152,000."""
    job = _job(tmp_path, "--train-iters 1000", "--train-iters $((1000 * 2))")
    assert job["tokens"] == 2000 * 128 * 8192 == 2_097_152_000
    assert job["global_batch"] == 128 and job["micro_batch"] == 1  # the lines after it still in the array


def test_megatron_deepspeed_marker_without_config_is_named(cli, tmp_path):
    """A script that is Megatron-DeepSpeed's by `--no-pipeline-parallel` alone (megatron_deepspeed.MDS_MARKERS), with
    no --deepspeed and no --deepspeed_config (Megatron-DeepSpeed's rebase/ds_pretrain_gpt_1.3B_megatron_checkpointing.sh,
    read whole once the `|` inside its $(...) no longer ends the launch line): the error names the flag it has; it
    named a --deepspeed the script does not give."""
    p = _variant(tmp_path, "    --mock-data\n", "    --mock-data\n    --no-pipeline-parallel\n")
    assert_one_error(cli("check", p, "--gpus", "8"), "--no-pipeline-parallel without --deepspeed_config")


# ------------------------------------------------------------ (e) the rest of bash's parameter expansion, declare
# attributes, `$[ ]` and backquotes (GNU Bash Reference Manual 5.2: 3.5.3 Shell Parameter Expansion, 3.5.4 Command
# Substitution, 3.5.5 Arithmetic Expansion, 4.2 declare). Each expected value is bash 5.2.15's: the comment after a
# case is what `bash -c '<the lines>; echo $TP_SIZE'` printed. Each case failed on the reader before (an error naming
# the flag, or a value bash does not give).
@pytest.mark.parametrize("line,tp", [
    ("V=abcd\nTP_SIZE=${#V}", 4),  # bash: 4 (the length)
    ("A=(x y z w)\nTP_SIZE=${#A[@]}", 4),  # bash: 4 (the count)
    ("A=(x yyyy)\nTP_SIZE=${#A[1]}", 4),  # bash: 4 (an element's length)
    ("V=tp8\nTP_SIZE=${V/tp/}", 8),  # bash: 8
    ("V=x4x\nTP_SIZE=${V//x/}", 4),  # bash: 4 (every match)
    ("V=a4a\nTP_SIZE=${V/#a/}\nTP_SIZE=${TP_SIZE/%a/}", 4),  # bash: 4 (anchored at the start, then the end)
    ("V=a-b\nTP_SIZE=${V/a-b/8}", 8),  # bash: 8
    ("V=8192\nTP_SIZE=${V:0:1}", 8),  # bash: 8 (substring)
    ("V=8192\nTP_SIZE=${V: -1}", 2),  # bash: 2 (a negative offset counts from the end)
    ("V=84192\nTP_SIZE=${V:(-4):1}", 4),  # bash: 4
    ("V=482\nTP_SIZE=${V:1:-1}", 8),  # bash: 8 (a negative length ends that far from the end)
    ("K=1\nV=0842\nTP_SIZE=${V:K+1:1}", 4),  # bash: 4 (the offset is arithmetic)
    ("P=run/tp4.cfg\nQ=${P##*tp}\nTP_SIZE=${Q%.*}", 4),  # bash: 4 (longest prefix, shortest suffix)
    ("L=4:8:2\nTP_SIZE=${L%%:*}", 4),  # bash: 4 (longest suffix)
    ("L=4:8:2\nTP_SIZE=${L##*:}", 2),  # bash: 2
    ("L=8x2\nTP_SIZE=${L#[0-9]x}", 2),  # bash: 2 (a bracket expression)
    ("L='a*8'\nTP_SIZE=${L#a\\*}", 8),  # bash: 8 (an escaped `*` is literal)
    ("TP_SIZE=${A:-${B:-${C:-4}}}", 4),  # bash: 4 (defaults nested past one level)
    ("C=8\nTP_SIZE=${A:-${B:-${C:-4}}}", 8),  # bash: 8
    ("TP_SIZE=${A:-${B:-${C:-${D:-8}}}}", 8),  # bash: 8
    ("TP_SIZE=$[ 2 * 2 ]", 4),  # bash: 4 (the old arithmetic form)
    ("N=2\nTP_SIZE=$[N*4]", 8),  # bash: 8
    ("X=1+1\nTP_SIZE=$(( X * 2 ))", 4),  # bash: 4 (X's value is its own sub-expression: (1+1)*2, not 1+1*2 = 3)
    ("declare -n REF=TP_SIZE\nREF=4", 4),  # bash: 4 (assigned through the name reference)
    ("T=8\ndeclare -n REF=T\nTP_SIZE=$REF", 8),  # bash: 8
    ("declare -n REF\nREF=T\nT=4\nTP_SIZE=$REF", 4),  # bash: 4 (a reference's first assignment names its variable)
    ("T=4\nN=T\nTP_SIZE=${!N}", 4),  # bash: 4 (indirection)
    ("declare -i TP_SIZE\nTP_SIZE=2*2", 4),  # bash: 4 (-i holds for later assignments)
    ("declare -i TP_SIZE=2\nTP_SIZE+=2", 4),  # bash: 4 (`+=` of an integer adds)
    ("declare -u D=fp8\nTP_SIZE=2\nif [[ $D == FP8 ]]; then\nTP_SIZE=4\nfi", 4),  # bash: 4 (-u: upper case)
    ("declare -l D\nD=FP8\nTP_SIZE=2\nif [[ $D == fp8 ]]; then\nTP_SIZE=4\nfi", 4),  # bash: 4 (-l: lower case)
    ("declare -lu D=Fp8\nTP_SIZE=2\nif [[ $D == Fp8 ]]; then\nTP_SIZE=4\nfi", 4),  # bash: 4 (-l with -u: neither)
    ("D=fp8\nTP_SIZE=2\nif [[ ${D^^} == FP8 ]] && [[ ${D^} == Fp8 ]]; then\nTP_SIZE=4\nfi", 4),  # bash: 4
    ("D=FP8\nTP_SIZE=2\nif [[ ${D,,} == fp8 ]] && [[ ${D,} == fP8 ]]; then\nTP_SIZE=4\nfi", 4),  # bash: 4
])
def test_more_parameter_expansion(tmp_path, line, tp):
    assert _job(tmp_path, "TP_SIZE=2", line)["tp"] == tp


def test_array_operations_apply_per_element(tmp_path):
    """An operation on ${A[@]} applies to each element (bash: `A=(--tp=4 --cp=1); echo ${A[@]/#--tp=/--tensor-}`
    prints `--tensor-4 --cp=1`; `A=(a b c); echo ${A[@]:1}` prints `b c`), quoted or not."""
    p = _variant(tmp_path, "    --tensor-model-parallel-size $TP_SIZE\n", "    --tp=4\n")
    for use in ("${MODEL_PARALLEL_ARGS[@]/#--tp=/--tensor-model-parallel-size=}",
                '"${MODEL_PARALLEL_ARGS[@]/#--tp=/--tensor-model-parallel-size=}"'):
        p.write_text(_variant(tmp_path, "    --tensor-model-parallel-size $TP_SIZE\n", "    --tp=4\n", "a.sh")
                     .read_text().replace("${MODEL_PARALLEL_ARGS[@]}", use))
        assert load_trainer_config(p, fmt="megatron", gpus=8).job["tp"] == 4, use
    text = SH.read_text().replace("    --tensor-model-parallel-size $TP_SIZE\n", "    --tensor-model-parallel-size 8\n"
                                  "    --tensor-model-parallel-size $TP_SIZE\n")  # the first one dropped by :2
    (tmp_path / "b.sh").write_text(text.replace("${MODEL_PARALLEL_ARGS[@]}", "${MODEL_PARALLEL_ARGS[@]:2}"))
    assert load_trainer_config(tmp_path / "b.sh", fmt="megatron", gpus=8).job["tp"] == 2


def test_nested_default_is_soft_for_the_gpu_count(tmp_path):
    """GPUS_PER_NODE=${G:-${H:-${I:-8}}}: a shell default three levels down is still a default
    (megatron._soft_launcher): --gpus 16 replaces torchrun's count; without it the default, 8 x NUM_NODES 1."""
    p = _variant(tmp_path, "GPUS_PER_NODE=8", "GPUS_PER_NODE=${G:-${H:-${I:-8}}}")
    assert load_trainer_config(p, fmt="megatron", gpus=16).job["gpus"] == 16
    assert load_trainer_config(p, fmt="megatron").job["gpus"] == 8


@pytest.mark.parametrize("lines,expr,what,no", [
    ("MICRO_BATCH_SIZE=`nproc --all`", "`nproc --all`", "a command substitution the reader does not run", 19),
    ("MICRO_BATCH_SIZE=$[ GLOBAL_BATCH_SIZE << 7 ]", "$[ GLOBAL_BATCH_SIZE << 7 ]",
     "bash arithmetic the reader does not run", 19),
    # bash 5.2 puts the match for an unquoted `&` (a[b]c), bash 5.1 a literal & (a&c): which bash runs is not known
    ("V=1\nMICRO_BATCH_SIZE=${V/1/&}", "${V/1/&}", "a parameter expansion the reader does not evaluate", 20),
    ("V=1\nMICRO_BATCH_SIZE=${V@Q}", "${V@Q}", "a parameter expansion the reader does not evaluate", 20),
    # bash: 'V: -9: substring expression < 0', the command not run
    ("V=1\nMICRO_BATCH_SIZE=${V:0:-9}", "${V:0:-9}", "a parameter expansion the reader does not evaluate", 20),
    ("declare -A M=([mbs]=1)\nMICRO_BATCH_SIZE=${M[mbs]}", "${M[mbs]}",  # an associative array (bash: 1)
     "a parameter expansion the reader does not evaluate", 20),
    ("A=(1 2)\nA[5]=3\nMICRO_BATCH_SIZE=${A[0]}", "${A[0]}",  # a sparse array (bash: 1)
     "a parameter expansion the reader does not evaluate", 21),
    ("V=1\nMICRO_BATCH_SIZE=${V/@(1)/2}", "${V/@(1)/2}",  # an extended pattern: shopt extglob not followed
     "a parameter expansion the reader does not evaluate", 20),
])
def test_unreadable_expansion_names_line_flag_and_expression(cli, tmp_path, lines, expr, what, no):
    """What the reader cannot evaluate statically stays one unreadable word, as a `$(...)` does: the error names the
    file, the script line, the flag and the expression, and --micro-batch on the command line replaces it."""
    p = _variant(tmp_path, "MICRO_BATCH_SIZE=1", lines)
    assert_one_error(cli("check", p, "--gpus", "8"), f"{p}: line {no}: --micro-batch-size '{expr}': {what}",
                     "give --micro-batch N on the command line")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8, overrides={"micro_batch": 2})
    assert cfg.job["micro_batch"] == 2


def test_backquoted_words_stay_one_word(tmp_path):
    """`` `date +%s` `` is one word, as bash reads it (shlex split it at its space into `run-`date` and `+%s``), and
    stays unread (no note that bash would split it: the space is inside the substitution); so is a backquote inside a
    default three levels down, ${TB:-tb/${RUN:-${HOST:-`hostname -s`}}}."""
    p = _variant(tmp_path, "    --mock-data\n", "    --mock-data\n    --wandb-exp-name run-`date +%s`\n"
                 "    --tensorboard-dir ${TB:-tb/${RUN:-${HOST:-`hostname -s`}}}\n")
    split = megatron.read_script_words(p, None, "x: ", "")
    k = split.words.index("--wandb-exp-name")
    assert split.words[k:k + 4] == ["--wandb-exp-name", "run-`date +%s`", "--tensorboard-dir", "tb/`hostname -s`"]
    assert split.subs["`date +%s`"] == split.subs["`hostname -s`"] == 78  # DATA_ARGS=( opens on line 78
    cfg = load_trainer_config(p, fmt="megatron", gpus=8)
    assert not [n for n in cfg.assumed if n.message and "read as one value" in n.message]


@pytest.mark.parametrize("lines,expr,want", [
    # each `want` is bash 5.2.15's `printf %s "<expr>"` after the lines
    ("X=a.b.a.b", "${X/a/Z} ${X//a/Z} ${X/#a/Z} ${X/%b/Z} ${X/a} ${X//./}", "Z.b.a.b Z.b.Z.b Z.b.a.b a.b.a.Z .b.a.b abab"),
    ("X=abc", "[${X//x*/Z}] [${X/#/P}] [${X/%/S}] [${X//*/Z}]", "[abc] [Pabc] [abcS] [Z]"),
    ("X=abcabc", "${X#*b} ${X##*b} ${X%b*} ${X%%b*} ${X#[a-b]} ${X#[!a]} ${X%[[:alpha:]]}",
     "cabc c abca a bcabc abcabc abcab"),
    ("X='a b  c'", "${X// /_}", "a_b__c"),
    ("X=hello", "${X^} ${X^^} ${X^^[lo]} ${X,} ${X^^l}", "Hello HELLO heLLO hello heLLo"),
    ("X=HeLLo", "${X,,} ${X,} ${X,,[L]}", "hello heLLo Hello"),
    ("X='a*b'; P='*'", "${X/\\*/S} ${X/'*'/S} ${X/[*]/S} ${X/$P/S} ${X/\"$P\"/S}", "aSb aSb aSb S aSb"),
    ("X=abc", "${X/b/x\\y} ${X/b/'x y'}", "axyc ax yc"),
    ("X=abcdef", "[${X: -10}] [${X:10}] [${X:2:0}] ${X:0:100} ${X:(-3):2} ${X:-1}", "[] [] [] abcdef de abcdef"),
    ("nodelist='n[1-4],m'", "${nodelist%%[*} ${nodelist#*[} ${nodelist%%,*}", "n 1-4],m n[1-4]"),
    ("A=(a b); A=x; A+=y", "${A[*]}", "xy b"),  # `A=x` sets an array's element 0
    ("A=(); B=('' '')", "[${A[@]:-x}] [${A[@]-z}] [${B[*]:+y}]", "[x] [z] [y]"),
    ("ARR=(1 2 3); declare -n AR=ARR", "${AR[1]} ${#AR[@]} ${!AR}", "2 3 ARR"),
    ("declare -n M=T; M=v", "${T-unset} $M", "v v"),
    ("T=keep; declare -n M=T; unset M", "${T-unset}", "unset"),  # unset through the reference
    ("declare -n K=Z; K=1; unset -n K", "${K-unset} $Z", "unset 1"),  # -n: the reference itself
    ("declare -n Q=Y; declare +n Q", "$Q", "Y"),
    ("declare -l D; : ${D:=XYZ}", "$D", "xyz"),
])
def test_expansions_as_bash_gives_them(lines, expr, want):
    """_Shell against bash, form by form (shell_pattern.py's matching included), through the launch line's words."""
    from planner.trainers.megatron import command_words
    _, words, _ = command_words(lines.replace("; ", "\n") + f'\ntorchrun pretrain_gpt.py --v "{expr}"\n', "x: ", [])
    assert words == ["--v", want]


# ------------------------------------------------------------ (f) quoting, conditions, one-line if and && / || lists
# GNU Bash Reference Manual 5.2: 3.1.2.2 Single Quotes, 3.1.2.3 Double Quotes, 3.2.4 Lists of Commands, 3.2.5.2
# Conditional Constructs ([[ ]]: && binds tighter than ||, an unquoted right-hand side of == / != is a pattern), 3.5.8.1
# Pattern Matching, 4.1 test. Each `want` is what bash 5.2.15 prints for `printf '%s\n' WORDS` after the lines (the
# comment says what the reader gave before); test_bash_agrees runs bash on the same cases where bash 5.2 is on PATH.
SHELL_CASES = [
    # (a) single quotes keep $X, ${X}, $(( )), $( ) literal (before: 1, a1b, 3, and $(date) an unread substitution)
    ("X=1", "'$X' \"'$X'\" '\"$X\"' 'a${X}b' '$((1+2))' '$(date)'", ["$X", "'1'", '"$X"', "a${X}b", "$((1+2))", "$(date)"]),
    # a default word's single quotes quote unquoted and are characters in double quotes; \$ in double quotes is $
    ("X=1", "${Z:-'$X'} \"${Z:-'$X'}\" \"\\$X\"", ["$X", "'1'", "$X"]),  # before: 1 '1' \$X
    # (b) && / || inside one [[ ]] (before: the block not evaluated, V 0)
    ("A=x\nB=y\nV=0\nif [[ $A == x && $B == y ]]; then\nV=1\nfi", "$V", ["1"]),
    ("A=x\nV=0\nif [[ $A == x || $A == y && $A == z ]]; then\nV=1\nfi", "$V", ["1"]),  # && binds tighter inside [[ ]]
    ("A=x\nV=0\nif [[ ( $A == y || $A == x ) && ! $A == z ]]; then\nV=1\nfi", "$V", ["1"]),
    ("A=x\nV=5\nif [[ $A == y ]] || [[ $A == x ]] && [[ $A == z ]]; then\nV=1\nfi", "$V", ["5"]),  # lists: left to right
    ("D=fp8\nV=0\nif [[ $D == fp* ]]; then\nV=1\nfi", "$V", ["1"]),  # a pattern (before: 0, compared as a string)
    ("D=fp8\nV=0\nif [[ $D == \"fp*\" ]]; then\nV=1\nfi", "$V", ["0"]),  # quoted: literal
    ("X=\nV=0\nif [ -n $X ]; then\nV=1\nfi", "$V", ["1"]),  # `[ -n ]`: one non-empty word, true (before: 0)
    # (c) a one-line if, elif, else (before: 'no pretrain_gpt.py / torchrun line found', every later line skipped)
    ("D=fp8\nV=0\nif [[ $D == fp8 ]]; then V=1; fi", "$V", ["1"]),
    ("D=fp8\nV=0\nif [[ $D == bf16 ]]; then V=1; elif [[ $D == fp8 ]]; then V=2; else V=3; fi", "$V", ["2"]),
    ("D=fp8\nV=0\nif [[ $D == bf16 ]]; then V=1; else V=3; W=4; fi", "$V $W", ["3", "4"]),
    # a one-line if inside an if the reader does not evaluate, inside one it does: each fi closes its own if (before:
    # the inner if opened a block its fi closed in the outer's place; 'no pretrain_gpt.py / torchrun line found')
    ("A=x\nV=0\nif [[ $A == x ]]; then\nif [[ $UNSET_VAR == y ]]; then\nif [[ $A == x ]]; then V=5; fi\nV=6\nfi\nV=7\nfi",
     "$V", ["7"]),
    # [[ ]] && X=..., || X=..., && X || Y (before: not read, V 0)
    ("D=fp8\nV=0\n[[ $D == fp8 ]] && V=1", "$V", ["1"]),
    ("D=fp8\nV=0\n[[ $D == bf16 ]] || V=1", "$V", ["1"]),
    ("D=fp8\nV=0\n[[ $D == bf16 ]] && V=1 || V=2", "$V", ["2"]),
    ("N=4\nV=0\n[[ $N -eq 2*2 ]] && V=1\n[ $N -gt 3 ] && V=$((V+10))\ntest $N -lt 3 || export V=$((V+100))", "$V", ["111"]),
    # (d) a variable's quote characters are characters in a pattern (before: aSc, a'S'c, aSc, 0 -> 1 swapped)
    ("X=abc\nP=\"'b'\"", "${X/$P/S}", ["abc"]),
    ("X=\"a'b'c\"\nP=\"'b'\"", "${X/$P/S} \"${X/$P/S}\"", ["aSc", "aSc"]),
    ("X=abc\nQ='\"b\"'", "${X/$Q/S} ${X/\"$Q\"/S}", ["abc", "abc"]),
    ("X=abc\nP='\\b'", "${X/$P/S} ${X/\"$P\"/S}", ["aSc", "abc"]),  # its backslash escapes unquoted, not quoted
    ("D=\"'fp8'\"\nV=0\nif [[ \"'fp8'\" == $D ]]; then\nV=1\nfi", "$V", ["1"]),
    # (e) a backquote inside single quotes (or a variable's value) is a character (before: the words joined into one)
    ("X=1", "'a`b' --w x 'c`d'", ["a`b", "--w", "x", "c`d"]),
    ("X='a`b'\nY='c`d'", "\"$X\" --w \"$Y\"", ["a`b", "--w", "c`d"]),
]


def _launch_words(lines: str, words: str) -> list[str]:
    return megatron.command_words(f"{lines}\ntorchrun pretrain_gpt.py {words}\n", "x: ", [])[1]


@pytest.mark.parametrize("lines,words,want", SHELL_CASES)
def test_quotes_and_conditions_as_bash_reads_them(lines, words, want):
    """The launch line's words after the lines, as bash 5.2.15 gives them (SHELL_CASES)."""
    assert _launch_words(lines, words) == want


def _bash_5_2():
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        return False
    v = subprocess.run(["bash", "-c", "echo ${BASH_VERSINFO[0]} ${BASH_VERSINFO[1]}"], capture_output=True, text=True)
    major, minor = (int(x) for x in v.stdout.split())
    return (major, minor) >= (5, 2)


@pytest.mark.skipif(not _bash_5_2(), reason="bash 5.2 or later not on PATH")
@pytest.mark.parametrize("lines,words,want", SHELL_CASES)
def test_bash_agrees(lines, words, want):
    """SHELL_CASES' `want` is what bash itself prints (`bash -c`): the cases are bash's, not the reader's."""
    import subprocess

    out = subprocess.run(["bash", "-c", f"{lines}\nprintf '%s\\n' {words}"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.splitlines() == want, out.stderr


@pytest.mark.parametrize("line,tp", [
    ("DTYPE=fp8\nif [[ $DTYPE == fp8 ]]; then TP_SIZE=4; else TP_SIZE=8; fi", 4),
    ("DTYPE=bf16\nif [[ $DTYPE == fp8 ]]; then TP_SIZE=4; else TP_SIZE=8; fi", 8),
    ("DTYPE=fp8\nTP_SIZE=2\n[[ $DTYPE == fp8 ]] && TP_SIZE=4", 4),
    ("DTYPE=fp8\nNODES=1\nTP_SIZE=2\nif [[ $DTYPE == fp8 && $NODES -eq 1 ]]; then\n    TP_SIZE=4\nfi", 4),
])
def test_constant_if_blocks_set_the_job(tmp_path, line, tp):
    """The issue's case: a launch script's constant `if` (DTYPE=fp8; if [[ $DTYPE == fp8 ]]) evaluated on one line,
    as a `[[ ]] && X=...` list and with && inside the [[ ]]: the job's tp is the branch's TP_SIZE. Before, the one-line
    forms left 'no pretrain_gpt.py / torchrun line found' (the if never closed) or TP_SIZE 2, and the && one was
    skipped (TP_SIZE 2)."""
    job = load_trainer_config(_variant(tmp_path, "TP_SIZE=2", line), fmt="megatron", gpus=8)
    assert job.job["tp"] == tp
    assert any(n.message and "conditions on the script's constants evaluated" in n.message for n in job.assumed)


def test_one_line_loop_and_unknown_list_are_listed_not_read(tmp_path):
    """A `for ...; do ...; done` on one line is one block the reader does not run (listed; before it never closed and
    no launch line was found), and a `[[ ]] && X=...` whose test names a variable the script does not set is not
    evaluated (listed; bash would read the environment's): TP_SIZE stays 2."""
    p = _variant(tmp_path, "TP_SIZE=2", "TP_SIZE=2\nfor i in 1 2; do TP_SIZE=$i; done\n[[ $FROM_ENV == x ]] && TP_SIZE=8")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8)
    assert cfg.job["tp"] == 2
    msgs = [n.message for n in cfg.assumed if n.message]
    assert any("script lines 18 inside if/case/for/while blocks whose conditions are not constant" in m for m in msgs)
    assert any("script lines 19: && / || lists whose tests are not constant were not evaluated" in m for m in msgs)
