"""Issue 24's fit commands, run whole-process from two checkouts: their outputs compared byte for byte
and, with --instructions, each process's instruction count (valgrind cachegrind, PYTHONHASHSEED=0;
the same count to about 0.01% on a rerun, unlike wall time on a shared machine). Not a test: a speed
change is measured, never asserted.

    python benchmarks/fit_commands.py BEFORE_CHECKOUT AFTER_CHECKOUT [--instructions] [--only 1,2]

Each checkout is put first on PYTHONPATH (`python -m planner ...`, run from an empty temporary folder); compile it first
(`python -m compileall -q planner`) and leave PYTHONDONTWRITEBYTECODE unset, as the counts include
the imports. Masked before comparing: the search's own wall time ("in 0.35 s:", "wall_s") and the
checkout's path (the rows' model_file / hardware_file). The branch lbound's figures (5044b51 ->
f4f85b3, instructions): 405B 3.557e9 -> 3.402e9, DeepSeek-V3 8.612e9 -> 8.316e9 (README, speed).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile

COMMANDS = [
    "fit --model llama3-405b --gpus 16384",
    "fit --model llama3-405b --gpus 16384 --format json",
    "fit --model llama3-70b --gpus 4096",
    "fit --model llama3-70b --gpus 4096 --seq-len 32768 --format json",
    "fit --model llama3-8b --gpus 64 --stack torchtitan",
    "fit --model llama3-8b --gpus 8 --seq-len 65536",
    "fit --model llama3-70b --gpus 1024 --stack torchtitan --seq-len 16384 --format json",
    "fit --model llama3-405b --gpus 2048 --stack torchtitan",
    "fit --model llama3-405b --gpus 8",  # nothing fits: the closest plan
    "fit --model llama3-70b --gpus 16,64,512 --format json",
    "fit --model llama3-405b --gpus 131072",
    "fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096",
    # nothing fits (DualPipe among the candidates)
    "fit --model deepseek-v3 --gpus 2560 --hardware h800-sxm --stack deepseek --global-batch 15360 --seq-len 4096 --format json",
    "fit --model mixtral-8x7b --gpus 256 --format json",
    "fit --model qwen3-30b-a3b --gpus 128 --hardware b200 --precision fp8",
    "fit --model llama3-405b --gpus 16384 --seq-len 8192 --step-batch-size-schedule '0:512 252M:1024 2.87T:2048' --tokens 15.6T --top 3",
    "fit --model llama3-70b --gpus 512 --stack llm-foundry --hardware a100-sxm-80gb",
    "fit --model gpt3-175b --gpus 1024 --stack megatron-deepspeed --format json",
    # issue 23's (branch dsfast): the dispatcher pinned and searched elsewhere, a torchtitan MoE fit
    "fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096 --moe-dispatcher alltoall",
    "fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096 --moe-dispatcher deepep --format json",
    "fit --model deepseek-v3 --gpus 2048 --hardware h800-sxm --global-batch 15360 --seq-len 4096 --tp 8 --pp 1 --moe-dispatcher hybridep",
    "fit --model deepseek-v3 --gpus 1024 --hardware a100-sxm-80gb --format json",
    "fit --model qwen3-30b-a3b --gpus 64 --stack torchtitan",
    "fit --model deepseek-v3 --gpus 512 --stack torchtitan --format json",
    "fit --model mixtral-8x22b --gpus 256",
]


def _run(src: str, cmd: str, instructions: bool) -> tuple:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=os.path.abspath(src), PYTHONHASHSEED="0")
    args = [sys.executable, "-m", "planner"] + shlex.split(cmd)
    count = None
    with tempfile.TemporaryDirectory() as tmp:
        if instructions:
            out_file = os.path.join(tmp, "cg.out")
            args = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out_file}",
                    f"--log-file={os.path.join(tmp, 'cg.log')}"] + args
        # run in the empty temporary folder: `python -m` puts the working folder first on sys.path, and the
        # import system lists it (with /tmp, whose entries come and go, the counts moved by up to 0.5% between runs)
        p = subprocess.run(args, env=env, cwd=tmp, capture_output=True, text=True)
        if instructions:
            m = re.search(r"I\s+refs:\s+([\d,]+)", open(os.path.join(tmp, "cg.log")).read())
            count = int(m.group(1).replace(",", "")) if m else None

    def mask(t: str) -> str:
        t = re.sub(r"in [0-9.]+ s:", "in X s:", t)
        t = re.sub(r'"wall_s": [0-9.e-]+', '"wall_s": X', t)
        return t.replace(os.path.abspath(src), "CHECKOUT")
    return mask(p.stdout), mask(p.stderr), p.returncode, count


def main(argv: list[str]) -> int:
    before, after = argv[0], argv[1]
    instructions = "--instructions" in argv
    only = None
    if "--only" in argv:
        only = {int(x) for x in argv[argv.index("--only") + 1].split(",")}
    same = True
    for i, cmd in enumerate(COMMANDS, 1):
        if only and i not in only:
            continue
        a, b = _run(before, cmd, instructions), _run(after, cmd, instructions)
        ok = a[:3] == b[:3]
        same &= ok
        counts = f"  {a[3]:.4g} -> {b[3]:.4g} ({(b[3] - a[3]) / a[3]:+.1%})" if instructions and a[3] and b[3] else ""
        print(f"{i:2d} {'same' if ok else 'DIFFERS'} (exit {a[2]}){counts}  planner {cmd}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
