"""NCCL_ALGO, the run's environment variable (job field nccl_algo; issue 22 detmore): read from a launch script's
environment (`export NCCL_ALGO=...`, `NCCL_ALGO=... torchrun`), and the collectives priced with the algorithms it
leaves them (comm.nccl_algo_candidates), as NCCL reads it: NVIDIA/nccl @5067397c src/graph/tuning.cc parseList
l. 36-119 (`;` entries, an optional function prefix, `^` to exclude, case-insensitive names), l. 293-298 (all-gather
and reduce-scatter run ring, PAT, NVLS or CollNetDirect; all-reduce all but PAT), src/enqueue.cc l. 2052-2064 (a
function left no algorithm fails: 'No algorithm/protocol available ...')."""

from __future__ import annotations

import pytest

from planner import comm
from planner.catalog import load_hardware
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

AR, RS, AG = comm.ALL_REDUCE, comm.REDUCE_SCATTER, comm.ALL_GATHER


def test_candidates_as_nccl_parses_the_variable():
    """By hand from parseList and tuning.cc l. 293-298, in the model's codes (AUTO_OK: all-reduce ring, tree, NVLS,
    NVLS-tree, CollNet; reduce-scatter / all-gather ring, PAT): Ring -> ring for all three; ^NVLS -> all-reduce ring,
    tree, NVLS-tree, CollNet, the others ring and PAT; `ring;allreduce:tree,ring` -> all-reduce tree and ring, the
    others ring (case-insensitive); the all-to-all and send/recv keep every candidate (point-to-point)."""
    R, T, N, NT, C, P = comm.RING, comm.TREE, comm.NVLS, comm.NVLS_TREE, comm.COLLNET, comm.PAT
    c = comm.nccl_algo_candidates("Ring")
    assert (c[AR], c[RS], c[AG]) == ((R,), (R,), (R,)) and c[comm.ALL_TO_ALL] == comm.AUTO_CANDIDATES
    c = comm.nccl_algo_candidates("^NVLS")
    assert (set(c[AR]), set(c[RS]), set(c[AG])) == ({R, T, NT, C}, {R, P}, {R, P})
    c = comm.nccl_algo_candidates("ring;allreduce:tree,ring")
    assert (set(c[AR]), c[RS], c[AG]) == ({R, T}, (R,), (R,))


@pytest.mark.parametrize("text, says", [
    ("Tree", "leaves all-gather no algorithm NCCL runs it with"),  # Tree is all-reduce's only
    ("Rings", "unknown algorithm rings"),
    ("Ring;Tree", "every entry but the first needs a function prefix"),
    ("send:Ring", "unknown function 'send'"),
    ("Ring;allreduce:NVLS", "leaves all-reduce only nvls"),  # NVLS exists only inside an NVLink domain
])
def test_values_nccl_or_the_model_cannot_run_are_refused(text, says):
    with pytest.raises(PlannerError, match=says):
        comm.nccl_algo_candidates(text)
    with pytest.raises(PlannerError, match="nccl_algo: NCCL_ALGO="):
        resolve(Job(model="llama3-8b", gpus=8, global_batch=16, seq_len=2048, nccl_algo=text))


def test_ring_all_reduce_priced_by_hand():
    """1 GiB all-reduce over the 8 H100s of one node: NCCL's own choice is NVLS, S / (0.741 x 370 GB/s) + 23 us
    = 2^30 / 274.29e9 + 23e-6 = 3.9377 ms (comm.py NVLS_ALGBW_PER_RING_BUSBW, NVLS_LATENCY_S); under NCCL_ALGO=Ring
    the ring, 2 (n - 1) = 14 steps of 3.4 us + 2 (n - 1) / n S / 370 GB/s = 47.6 us + 1.75 x 2^30 / 370e9 = 5.1261 ms;
    ^NVLS leaves the ring too (the tree's 28 us hops lose at one node). A reduce-scatter under Ring: 7 x 3.4 us
    + 7/8 x 2^30 / 370e9 = 2.5631 ms."""
    p = comm.comm_params(load_hardware("h100-sxm"))
    S = 2.0 ** 30

    def t(op, text):
        cands = comm.nccl_algo_candidates(text)[op] if text else comm.AUTO_CANDIDATES
        return float(comm.auto_collective_times(op, [S], [8], [1], p, 8, cands)[0][0])

    assert t(AR, None) == pytest.approx(S / (370e9 * (480 / 1.75) / 370) + 23e-6, rel=1e-12)
    assert t(AR, None) == pytest.approx(3.9377e-3, abs=1e-7)
    assert t(AR, "Ring") == pytest.approx(14 * 3.4e-6 + 1.75 * S / 370e9, rel=1e-12)
    assert t(AR, "Ring") == pytest.approx(5.1261e-3, abs=1e-7)
    assert t(AR, "^NVLS") == t(AR, "Ring")
    assert t(RS, "Ring") == pytest.approx(7 * 3.4e-6 + 0.875 * S / 370e9, rel=1e-12)


def test_plan_priced_with_the_variable():
    """Llama 3 8B, DDP (sharding none) over 8 H100 of one node: its gradient all-reduce runs NVLS by NCCL's choice and
    the ring under Ring or ^NVLS, so the exposed DP time (and the step) is the same under Ring and ^NVLS and larger
    than without the variable; over 16 GPUs (two nodes) ^NVLS leaves NVLS-tree, NCCL's own choice there, so the step
    is unchanged, while Ring slows it. The plan carries the value (plan_dict)."""
    base = dict(model="llama3-8b", tp=1, pp=1, cp=1, micro_batch=1, global_batch=32, seq_len=4096, sharding="none")

    def step(gpus, algo=None):
        s, p, _ = resolve(Job(**base, gpus=gpus, **({"nccl_algo": algo} if algo else {})))
        e = evaluate(s, p)
        return float(e.step_s), float(e.time["dp_comm_exposed"]), to_json(s, p, e)["plan"].get("nccl_algo")

    free, ring, no_nvls = step(8), step(8, "Ring"), step(8, "^NVLS")
    assert ring[:2] == no_nvls[:2] and ring[1] > free[1] and ring[0] > free[0]
    assert (free[2], ring[2], no_nvls[2]) == (None, "Ring", "^NVLS")
    assert step(16, "^NVLS")[:2] == step(16)[:2] and step(16, "Ring")[0] > step(16)[0]


def _script(tmp_path, env_lines: str, prefix: str = "") -> str:
    p = tmp_path / "run.sh"
    p.write_text("#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" + env_lines
                 + f"{prefix}torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
                 "    --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
                 "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16\n")
    return str(p)


def test_megatron_reader_reads_the_launch_environment(tmp_path):
    """`export NCCL_ALGO=$ALGO` inside a constant if block (evaluated), `NCCL_ALGO=^NVLS torchrun ...` (the line's
    own environment), `NCCL_ALGO=Ring` then `export NCCL_ALGO`: read; an unexported `NCCL_ALGO=Ring` line (bash
    hands it to no child): not read. The export writes the plan's back (`export NCCL_ALGO=Ring`), which reads back as
    the same plan."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    block = "ALGO=Ring\nif [[ $ALGO == Ring ]]; then\n    export NCCL_ALGO=$ALGO\nfi\n"
    cases = [(block, "", "Ring"), ("", "NCCL_ALGO=^NVLS ", "^NVLS"), ("NCCL_ALGO=Ring\nexport NCCL_ALGO\n", "", "Ring"),
             ("NCCL_ALGO=Ring\n", "", None)]
    for env, prefix, want in cases:
        cfg = load_trainer_config(_script(tmp_path, env, prefix), gpus=8)
        assert cfg.job.get("nccl_algo") == want, (env, prefix)
        assert cfg.job["gpus"] == 8
    cfg = load_trainer_config(_script(tmp_path, block), gpus=8)
    s, p, _ = resolve(Job.model_validate(cfg.job))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], "megatron")
    assert "export NCCL_ALGO=Ring" in text.splitlines()
    check_readback(row, "megatron", text)


@pytest.mark.parametrize("env, want", [
    ("export NCCL_ALGO=Ring CUDA_DEVICE_MAX_CONNECTIONS=1\n", "Ring"),  # read as 'Ring CUDA_DEVICE_MAX_...': refused
    ("export CUDA_DEVICE_MAX_CONNECTIONS=1 NCCL_ALGO=^NVLS\n", "^NVLS"),  # dropped: only the first name exported
    ("A=Ring NCCL_ALGO=\"${A},Tree\"\nexport NCCL_ALGO\n", "Ring,Tree"),  # left to right: $A is Ring
    ("export NCCL_ALGO=Tree NCCL_ALGO=Ring\n", "Ring"),  # the last assignment wins
    ("export NCCL_ALGO=Ring FOO=1 # comment NCCL_ALGO=Tree\n", "Ring"),
    ("NCCL_ALGO=Ring FOO=1\n", None),  # assigned, not exported: no child sees it
    ("NCCL_ALGO=Ring; export NCCL_ALGO\n", "Ring"),  # a ; list: was NCCL_ALGO 'Ring; export NCCL_ALGO', unexported
    ("export NCCL_ALGO=Ring;\n", "Ring"),  # was 'Ring;', refused by the field's pattern
    ("export NCCL_ALGO=Tree; unset NCCL_ALGO\n", None),
    ("export NCCL_ALGO='Ring;Tree'\n", "Ring;Tree"),  # one quoted value (which resolve refuses, as NCCL does)
])
def test_several_assignments_on_one_line(tmp_path, env, want):
    """bash assigns (and with `export`, exports) each NAME=value of one line in turn (bash(1), SIMPLE COMMAND
    EXPANSION: 'the variable assignments ... are performed from left to right'; `export name[=word] ...`): the reader
    read `export NCCL_ALGO=Ring CUDA_DEVICE_MAX_CONNECTIONS=1` as one assignment whose value ran to the end of the line
    (NCCL_ALGO 'Ring CUDA_DEVICE_MAX_CONNECTIONS=1', refused by the field's pattern), and dropped a second name's
    value silently (fuzz13, by hand beside the fuzz pass)."""
    cfg = load_trainer_config(_script(tmp_path, env), gpus=8)
    assert cfg.job.get("nccl_algo") == want


def _launch(tmp_path, head: str, mesh: str):
    """A small Megatron launch script: `head`'s lines, then torchrun pretrain_gpt.py with `mesh`'s flags (a 4-layer GPT
    on 8 GPUs), read by the trainer reader."""
    p = tmp_path / "run.sh"
    p.write_text(f"#!/bin/bash\n{head}torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py {mesh} \\\n"
                 "    --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
                 "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16\n")
    return load_trainer_config(str(p), gpus=8)


def test_several_assignments_set_launch_variables(tmp_path):
    """`TP=2 PP=2` on one line: both set before the launch line reads them (was TP '2 PP=2', PP unexpanded)."""
    cfg = _launch(tmp_path, "TP=2 PP=2\n", "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP")
    assert (cfg.job["tp"], cfg.job["pp"]) == (2, 2)


@pytest.mark.parametrize("env, want", [
    ("export NCCL_ALGO=Tree\nunset NCCL_ALGO\n", None),  # was Tree, refused: the run has no NCCL_ALGO
    ("export NCCL_ALGO=Tree\nunset -v FOO NCCL_ALGO\nNCCL_ALGO=Ring\n", None),  # unset drops the export too
    ("export NCCL_ALGO=Ring\nNCCL_ALGO+=,Tree\n", "Ring,Tree"),  # was ',Tree' (the old value lost): refused
    ("NCCL_ALGO+=Ring\nexport NCCL_ALGO\n", "Ring"),  # += on an unset variable: its value alone
])
def test_unset_and_append(tmp_path, env, want):
    """bash's `unset NAME ...` removes the variable and its export, and a scalar `NAME+=value` appends to the string
    (bash(1), PARAMETERS: 'the +=  operator ... value is expanded and appended to the variable's value'); the reader
    ignored `unset` (an unset NCCL_ALGO=Tree still refused the script) and read `+=` as `=` (Megatron-LM's own
    scripts build their flags so: examples/multimodal/nvlm/run_text_generation_qwen20_72b_internvit_6b.sh @d98e8a64
    l. 71 and 76, `EXTRA_ARGS+=" --pixel-shuffle"`, which dropped the earlier flags). Found by hand (fuzz13)."""
    cfg = load_trainer_config(_script(tmp_path, env), gpus=8)
    assert cfg.job.get("nccl_algo") == want


def test_appended_flags_string_keeps_the_earlier_flags(tmp_path):
    """`EXTRA="--tensor-model-parallel-size 2"` then `EXTRA+=" --pipeline-model-parallel-size 2"` (Megatron-LM's
    multimodal scripts' form): both flags reach the launch line (was pp 2 only, tp 1 silently)."""
    cfg = _launch(tmp_path, "EXTRA=\"--tensor-model-parallel-size 2\"\nEXTRA+=\" --pipeline-model-parallel-size 2\"\n",
                  "$EXTRA")
    assert (cfg.job["tp"], cfg.job["pp"]) == (2, 2)


def test_append_is_bounded(tmp_path):
    """A doubling `A+=$A` stops at MAX_EXPANSION characters (200,000), as a doubling assignment does."""
    from planner.trainers.megatron import MAX_EXPANSION

    lines = "A=" + "x" * 1000 + "\n" + "A+=$A\n" * 10
    with pytest.raises(PlannerError, match=f"grows past {MAX_EXPANSION:,}"):
        load_trainer_config(_script(tmp_path, lines), gpus=8)


@pytest.mark.parametrize("body", [
    "setup() {\n    export NCCL_ALGO=Tree\n    TP=4\n}\n",
    "function setup {\n    if [ -n \"$X\" ]; then\n        export NCCL_ALGO=Tree\n    fi\n    TP=4\n}  # done\n",
    "setup() { export NCCL_ALGO=Tree; TP=4; }\n",
    "function setup() {\n    echo \"{\"\n    TP=4; export NCCL_ALGO=Tree\n}\n",
])
def test_function_bodies_are_not_read(tmp_path, body):
    """bash runs a function's body only where it is called (bash(1), FUNCTIONS: 'the body of the function is executed
    whenever name is specified as ... a simple command'): the reader read the body's lines as the script's own, so an
    uncalled `setup() { export NCCL_ALGO=Tree; TP=4; }` refused the script (NCCL_ALGO Tree) and would have set tp 4.
    The body is now skipped and listed (as an if block whose condition is not constant is). Found by hand (fuzz13)."""
    p = tmp_path / "run.sh"
    p.write_text("#!/bin/bash\nTP=2\n" + body + "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
                 "    --tensor-model-parallel-size $TP \\\n"
                 "    --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
                 "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16\n")
    cfg = load_trainer_config(str(p), gpus=8)
    assert cfg.job["tp"] == 2 and "nccl_algo" not in cfg.job
    assert any("are function bodies, not read" in a for a in cfg.assumed)


def test_a_launch_line_inside_a_function_is_still_read(tmp_path):
    """`run() { torchrun ... pretrain_gpt.py ...; }` then `run`: no launch line outside the bodies, so the bodies are
    read as the script's own lines (as before they were skipped), and said so: tp 2 from the script's $TP."""
    p = tmp_path / "run.sh"
    p.write_text("#!/bin/bash\nTP=2\nrun() {\n    torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP "
                 "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
                 "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16\n}\nrun\n")
    cfg = load_trainer_config(str(p), gpus=8)
    assert cfg.job["tp"] == 2
    assert any("read as the script's own lines: the launch line is inside one" in a for a in cfg.assumed)


def test_a_huge_line_of_assignments_is_bounded(tmp_path):
    """A line of 60,000 assignments (240,000 characters, past MAX_EXPANSION) is read as one assignment, whose value
    is refused as over 200,000 characters, not split into 60,000 lines to read one by one."""
    with pytest.raises(PlannerError, match="expand to over 200,000 characters"):
        load_trainer_config(_script(tmp_path, "A=1 " * 60_000 + "\n"), gpus=8)
