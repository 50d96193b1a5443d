"""A batch-size ramp (the job's batch_size_schedule; Megatron-LM --step-batch-size-schedule):
the run steps at each phase's global batch from its threshold of consumed tokens until the
next phase's [1]. This module reads Megatron's spelling, checks a schedule as Megatron does,
and counts the steps each phase runs; explain.batch_ramp prices them (each phase's step at
its own batch, the micro-batch fixed).

Megatron's rules, cited at NVIDIA/Megatron-LM @d98e8a64:
  - the string is "THRESHOLD:BATCH ..." (commas read as spaces), each value an int(float(x) x
    suffix) with K, M, B, T = 1e3, 1e6, 1e9, 1e12, case-insensitive; the entries are sorted by
    threshold [1] _parse_numeric_value, _parse_schedule;
  - with a sequence length (pretrain_gpt always passes --seq-length [3]) the thresholds are
    tokens, turned into samples by floor division [1] _parse_schedule;
  - the first threshold is 0, the thresholds (in samples) strictly increase, every batch is
    positive [1] _validate_schedule;
  - every batch divides by micro-batch x data-parallel size, checked when its phase starts [1]
    update (consistency_check), called each step by train() [2] l. 4627;
  - the micro-batches per step never decrease [2] l. 4612-4615 ("Number of microbatches should
    not decrease"): with a fixed micro-batch and DP, a batch never decreases;
  - --step-batch-size-schedule with --global-batch-size is refused [4] l. 698-701.
Steps: train() updates the batch before each step from the samples consumed so far, so a
phase runs whole steps until the consumed samples reach the next threshold (they may pass
it): update_train_iters' loop [2] l. 2155-2170. The phase in which the run's tokens end runs
the rest as a fraction of a step, as the planner counts a constant batch's steps (tokens /
(batch x sequence), explain.to_json).

References
[1] megatron/core/num_microbatches_calculator.py @d98e8a64 l. 233-280 (the builder), 399-600
    (StepBatchsizeNumMicroBatchesCalculator).
[2] megatron/training/training.py @d98e8a64 l. 2155-2170 (update_train_iters), 4595-4627.
[3] megatron/training/global_vars.py @d98e8a64 l. 148-157 (seq_length=args.seq_length).
[4] megatron/training/arguments.py @d98e8a64 l. 693-701 (validate_args).
[5] bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/microbatches.py l. 91-160
    (RampupBatchsizeNumMicroBatches; microsoft/Megatron-DeepSpeed @f4157bea the same class).
[6] NVIDIA/Megatron-LM 532ad926b4^ megatron/core/num_microbatches_calculator.py l. 360-500
    (RampupBatchsizeNumMicroBatchesCalculator), removed by 532ad926b4 (2026-04-21, "Replace
    rampup batch size scheduler with custom step batch size schedules"): at d98e8a64 --rampup-batch-size
    is parsed (training_config.py l. 20-29, "Deprecated. Use step_batch_size_schedule instead.")
    and passed to nothing (global_vars.py l. 148-157): Megatron-LM trains at --global-batch-size.
[7] the same rule in both forks of [5]: _rampup in planner/trainers/megatron_deepspeed.py reads it.
"""

from __future__ import annotations

import math
import re

from .errors import PlannerError

SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}  # [1] _parse_numeric_value
HINT = 'e.g. "0:16 2.4B:320 12B:1536" (THRESHOLD_TOKENS:GLOBAL_BATCH, the first at 0)'


def _number(text: str) -> int:
    """Megatron's _parse_numeric_value [1]: int(float(x) x suffix)."""
    s = text.strip().upper()
    mult = SUFFIXES.get(s[-1:], 1.0)
    if s[-1:] in SUFFIXES:
        s = s[:-1]
    if not re.fullmatch(r"[0-9]*\.?[0-9]+(E[+-]?[0-9]+)?", s) or not math.isfinite(float(s) * mult):
        raise ValueError(text)
    return int(float(s) * mult)


def parse_megatron(text: str, where: str = "") -> list[list[int]]:
    """[[from_tokens, global_batch], ...] of a --step-batch-size-schedule string, sorted by
    threshold as Megatron sorts them [1] _parse_schedule."""
    out = []
    for entry in str(text).strip().replace(",", " ").split():
        if ":" not in entry:
            raise PlannerError(f"{where}--step-batch-size-schedule entry {entry!r} is not THRESHOLD:BATCH_SIZE "
                               "(Megatron's parser refuses it: num_microbatches_calculator.py @d98e8a64)", HINT)
        a, b = entry.split(":", 1)
        try:
            out.append([_number(a), _number(b)])
        except ValueError:
            raise PlannerError(f"{where}--step-batch-size-schedule entry {entry!r}: not a number with an optional "
                               "K/M/B/T suffix", HINT) from None
    if not out:
        raise PlannerError(f"{where}--step-batch-size-schedule {text!r} has no entry", HINT)
    return sorted(out, key=lambda e: e[0])


def to_megatron(schedule) -> str:
    """The schedule in Megatron's spelling, thresholds as plain token counts."""
    return " ".join(f"{int(t)}:{int(b)}" for t, b in schedule)


def schedule_error(schedule) -> str | None:
    """What Megatron refuses of a schedule before it knows the sequence length (None: nothing)."""
    src = "num_microbatches_calculator.py @d98e8a64 _validate_schedule"
    if int(schedule[0][0]) != 0:
        return f"its first threshold is {schedule[0][0]:,.0f} tokens, not 0 ('first schedule entry must have threshold 0', {src})"
    for (t0, b0), (t1, b1) in zip(schedule, schedule[1:]):
        if not t1 > t0:
            return f"its thresholds do not strictly increase ({t0:,.0f} then {t1:,.0f} tokens; {src})"
        if b1 < b0:
            return (f"its batch decreases ({b0} then {b1}): Megatron asserts the micro-batches per step never decrease "
                    "(training.py @d98e8a64 l. 4612-4615)")
    return None


def sample_thresholds(schedule, seq: int) -> list[int]:
    """Each phase's threshold in samples: tokens // sequence length [1] _parse_schedule."""
    return [int(t) // int(seq) for t, _ in schedule]


def phase_steps(schedule, seq: int, tokens: float) -> list[float]:
    """Steps each phase runs in a run of `tokens` (update_train_iters' loop [2], in closed form:
    whole steps until the consumed samples reach the next threshold; the phase in which the run
    ends runs the rest, a fraction of a step as a constant batch's steps are counted)."""
    thr = sample_thresholds(schedule, seq) + [math.inf]
    total = float(tokens) / seq
    consumed, out = 0.0, []
    for k, (_, b) in enumerate(schedule):
        end = thr[k + 1]
        if consumed >= total:
            n = 0.0
        elif end >= total:
            n = (total - consumed) / b
        else:
            n = float(max(0, math.ceil((end - consumed) / b)))
        consumed += n * b
        out.append(n)
    return out


def iters_samples(schedule, seq: int, iters: int) -> int:
    """Samples consumed by `iters` steps (Megatron's --train-iters with the schedule: the batch of
    each step is the phase's at the samples consumed before it [2])."""
    thr = sample_thresholds(schedule, seq) + [math.inf]
    consumed, left = 0, int(iters)
    for k, (_, b) in enumerate(schedule):
        n = left if thr[k + 1] == math.inf else min(left, max(0, math.ceil((thr[k + 1] - consumed) / b)))
        consumed += n * int(b)
        left -= n
    return consumed


def phase_weights(schedule, gbs: int, seq: int, tokens: float) -> tuple:
    """((batch, weight), ...) of each phase, for the search (search.step_times): weight = the
    phase's steps (phase_steps) x gbs x seq / tokens, so that sum(weight x step time at that
    batch) is the run's time (explain.batch_ramp's sum) per `gbs`-sequence step of the run's
    tokens: the time a constant-batch step of `gbs` (the last phase's batch) would need for the
    same run, which fit ranks on and divides by gbs x seq for its cost objective."""
    steps = phase_steps(schedule, seq, tokens)
    scale = float(gbs) * float(seq) / float(tokens)
    return tuple((int(b), n * scale) for (_, b), n in zip(schedule, steps))


def rampup_phases(start: int, inc: int, samples: int, global_batch: int) -> list[tuple[int, int]]:
    """[(from_samples, batch), ...] of a --rampup-batch-size START INCREMENT SAMPLES ramp to
    `global_batch`: the phases a step-batch schedule needs to run the same batches. The one rule,
    the same in the three codebases that ran it [5][6][7]: n = (global - START) / INCREMENT
    increments, per = SAMPLES / n (a Python float), and before each step at c consumed samples
    the batch is START + int(c / per) x INCREMENT while c <= SAMPLES, the global batch beyond.
    Phase k (k = 1..n) starts at the least whole c with int(c / per) >= k, the last at that or
    SAMPLES + 1, whichever is first. The callers check START, INCREMENT, SAMPLES > 0 and
    global - START > 0 a multiple of INCREMENT (the three assert diff % INCREMENT == 0; diff == 0
    passes their assert and divides by zero increments, SAMPLES 0 makes per 0, which their first
    update divides by: [5] l. 144, [6] l. 456). Megatron-LM's class also took --decrease-batch-size-if-needed (each
    batch rounded down to a multiple of micro-batch x dp [6] l. 485-490), BigScience's has no
    such option [5]: the planner refuses a phase that does not divide (batch_ramp's check), as
    both do with the option off. O(n) in the phases, as the schedule it returns."""
    n = (global_batch - start) // inc
    per = samples / n  # rampup_samples_per_increment [5] l. 133, [6] l. 436
    phases = [(0, start)]
    for k in range(1, n + 1):
        c = int(k * per)
        while int(c / per) < k:
            c += 1
        while c > 0 and int((c - 1) / per) >= k:
            c -= 1
        if k == n:
            c = min(c, samples + 1)  # beyond SAMPLES: the global batch [5] l. 141, [6] l. 453
        phases.append((c, start + k * inc))
    return phases


def phase_name(k: int, schedule) -> str:
    """'phase 2 (batch 1,024 from 252M tokens)': the k-th phase (from 0) as the messages name it."""
    t, b = schedule[k]
    return f"phase {k + 1} (batch {int(b):,} from {tokens_text(t)} tokens)"


def tokens_text(t: float) -> str:
    """A threshold in Megatron's suffixes where it is a whole number of them: 252M, 2.87T, 0."""
    for s, f in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if t >= f:
            v = t / f
            return f"{v:.4g}{s}" if float(f"{v:.4g}") * f == t else f"{t:,.0f}"
    return f"{t:,.0f}"

