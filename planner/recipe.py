"""A model's published training recipe as the defaults of a planned job (issue 23).

The rule. A job planned from the command line or a job YAML (`fit`, `explain`, `check`,
`budget`, `export`) that gives no precision, fp8_recipe, moe_dispatcher or another field below takes the value the
model zoo entry's `training:` block gives (the developers' own published recipe, each value
with its source), where the job's stack and hardware run it:

  precision       the hardware has that precision's tensor cores (Hardware.precisions);
  fp8_recipe      the job's precision (its own or the recipe's) is the recipe's, the stack has
                  the recipe (stack_db fp8_recipes) and the hardware runs it
                  (precisions.recipe_unsupported: blockwise is Hopper's);
  moe_dispatcher  the stack lists it among the dispatchers it runs (stack_db
                  runs.moe_dispatchers; a stack that does not say does not take it). It is what
                  `explain`, `check`, `budget` and `export` price; `fit` without --moe-dispatcher
                  searches every dispatcher the stack runs instead (search.dispatcher_settings:
                  DeepSeek published DeepEP as what ran on their own stack, which a Megatron run
                  need not copy; each is tried where it starts and fits, the faster kept per plan,
                  the stack's default kept on an exact tie) and says so in a note.
  bytes_per_param the stack lists the preset among those its optimizer keeps (stack_db
                  runs.bytes_per_param: bf16-moments, Adam's moments in bf16, is Megatron's
                  precision-aware optimizer and DeepSeek's own; torchtitan keeps its
                  parameters' dtype); a stack that does not say does not take it;
  mtp_layers      the stack trains multi-token prediction modules (stack_db runs.mtp) with its
                  default loss: not on torchtitan-0.3, whose MTP runs only with the plain loss and
                  without PP or CP (runs.mtp_chunked_loss false, start-up rule
                  TORCHTITAN_MTP_PP_CP): a job asks it there with --mtp-layers;
  attention_kernel the stack's model code runs it (stack_db runs.attention_kernels: torchtitan flash2
                  and flex, torchtitan-0.3 flex; a stack that does not say does not take it). The
                  models that give one are torchtitan's flavors (planner/torchtitan_registry.py:
                  a flavor whose attn_type is flex, `--model torchtitan:llama3/8B_flex`, plans
                  FlexAttention, as torchtitan builds it); a job's own kernel replaces it and the
                  note says so ("attention_kernel flex not taken: the job gives flash2");
  attention_backend the stack's model code builds it (stack_db runs.attention_backends: torchtitan sdpa,
                  flex and varlen, torchtitan-0.3 flex and varlen): a varlen flavor's attn_type
                  (`--model torchtitan:llama3/8B_varlen`), which the start-up rules read (varlen refuses
                  CP: TORCHTITAN_VARLEN_CP); a job's own replaces it, noted
  moe_aux_loss_coeff  the stack's code computes an auxiliary loss: every stack but those whose
                  runs.router_losses is false (torchtitan, torchtitan-0.3: no auxiliary or z-loss
                  in the code, the expert score bias alone balances); what it keeps for the
                  backward is priced where the stack's routing saves are, planner/layers/moe.py
                  router_saved_terms. A job that gives none and whose model's recipe gives none
                  (or whose stack does not take it) takes Megatron-LM's default 0.0 (planner/plan.py
                  moe_router_settings).

Every value taken is listed as assumed with its source, every value not taken says why, and
the recipe's parts the planner does not price (`not_priced`) are listed beside them. An
option or job field always wins (`--precision bf16` plans bf16). The stack is never taken
from the recipe: a model trained on an in-house stack (DeepSeek's HAI-LLM, stack_db
deepseek.yaml) is planned on the stack the user names, the megatron one by default.

Trainer configs (they say what ran, and the trainer's own defaults fill the rest) and run
records (validate) never take a recipe.

The recipe's `seq_len` (the sequence length of the main phase of pre-training, not the context
the model serves after a long-context extension, its max_seq_len) is not applied here: every
stack and hardware trains any length, so plan._seq_len takes it for any job that gives no
seq_len, the jobs built in code included, and lists it as assumed with its citation (explain's
`assumed` line, a note from fit). Trainer configs still never take it: one without a length
gets the default of a job without a recipe when it is read (trainers.default_trainer_seq), and
a run record states its own. The rule and its default are plan.HF_DEFAULT_SEQ's.
"""

from __future__ import annotations

from .catalog import load_hardware, load_model, load_stack
from .errors import PlannerError
from .precisions import recipe_precision, recipe_unsupported

FIELDS = ("precision", "fp8_recipe", "moe_dispatcher", "bytes_per_param", "mtp_layers", "moe_aux_loss_coeff",
          "attention_kernel", "attention_backend")
MOE_FIELDS = ("moe_dispatcher", "moe_aux_loss_coeff")
NOTED = ("attention_kernel", "attention_backend")  # a job value that replaces the recipe's is named in the note (the others silently)


def _defaults() -> dict:
    from .schema import Job

    return {f: Job.model_fields[f].default for f in ("hardware", "stack", "precision")}


def _why_not(field: str, value, data: dict, stack, hw) -> str | None:
    """Why the job's stack or hardware cannot take the recipe's `value` of `field`; None where it can."""
    if field == "precision":
        if value != "bf16" and value not in hw.precisions():
            return f"{hw.name} has no {value} tensor cores"
        return None
    if field == "fp8_recipe":
        prec = data.get("precision", _defaults()["precision"])
        if recipe_precision(value) != prec:
            return f"the job's precision is {prec}"
        if value not in stack.fp8_recipes:
            return f"stack {stack.name} has no {value} recipe"
        return recipe_unsupported(value, hw)
    runs = stack.runs
    if field == "bytes_per_param":
        if runs is None or runs.bytes_per_param is None:
            return f"stack {stack.name} does not list the optimizer states it keeps"
        if value not in runs.bytes_per_param:
            return f"stack {stack.name} keeps {', '.join(runs.bytes_per_param)}"
        return None
    if field == "moe_aux_loss_coeff":  # where the stack's code computes one (stack_db runs.router_losses)
        if runs is not None and runs.router_losses is False:
            return f"stack {stack.name} computes no auxiliary loss on the router (stack_db runs.router_losses)"
        return None
    if field == "attention_kernel":  # the kernels the stack's model code can run (stack_db runs.attention_kernels)
        if runs is None or runs.attention_kernels is None:
            return f"stack {stack.name} does not list the attention kernels its model code runs"
        if value not in runs.attention_kernels:
            return f"stack {stack.name} runs {', '.join(runs.attention_kernels)}"
        return None
    if field == "attention_backend":  # the modules the stack's model code builds (stack_db runs.attention_backends)
        if runs is None or runs.attention_backends is None:
            return f"stack {stack.name} does not list the attention modules its model code builds"
        if value not in runs.attention_backends:
            return f"stack {stack.name} builds {', '.join(runs.attention_backends)}"
        return None
    if field == "mtp_layers":
        if runs is None or not runs.mtp:
            return f"stack {stack.name} does not train multi-token prediction modules"
        if runs.mtp_chunked_loss is False:  # torchtitan 0.3: MTP only with the plain loss, and without PP or CP
            return (f"stack {stack.name} trains MTP modules only with its plain loss, not its default chunked one "
                    "(runs.mtp_chunked_loss), and without PP or CP (start-up rule TORCHTITAN_MTP_PP_CP): pass "
                    "--mtp-layers to plan them")
        return None
    if runs is None or runs.moe_dispatchers is None:
        return f"stack {stack.name} does not list the dispatchers it runs"
    if value not in runs.moe_dispatchers:
        return f"stack {stack.name} runs {', '.join(runs.moe_dispatchers)}"
    return None


def apply(data: dict) -> tuple[dict, list[str]]:
    """(data with the recipe's settings added where the job gives none and its stack and
    hardware run them, notes: what was taken with its source, what was not and why, what the
    recipe does that is not priced). A model, hardware or stack that does not load leaves the
    data as it is (resolve reports it)."""
    d = _defaults()
    names = [data.get("model"), data.get("hardware") or d["hardware"], data.get("stack") or d["stack"]]
    if not all(isinstance(n, str) for n in names):  # a field of the wrong type: the Job's validation says so
        return data, []
    try:
        model = load_model(names[0])
        if model.training is None:
            return data, []
        hw, stack = load_hardware(names[1]), load_stack(names[2])
    except PlannerError:
        return data, []
    rec, out, notes = model.training, dict(data), []
    for field in FIELDS:
        value = getattr(rec, field)
        if field in NOTED and value is not None and data.get(field) not in (None, value):
            notes.append(f"{field} {value} not taken: the job gives {data[field]}")
        if value is None or data.get(field) is not None or (field in MOE_FIELDS and model.moe is None):
            continue
        why = _why_not(field, value, out, stack, hw)
        if why is None:
            out[field] = value
            notes.append(f"{field} {value} ({_brief(rec.sources[field])})")
        else:
            notes.append(f"{field} {value} not taken: {why}")
    if notes:
        notes += [f"not priced: {_brief(x)}" for x in rec.not_priced]
    return out, notes


def _brief(text: str) -> str:
    """A citation or remark up to its quoted detail or first aside (the model entry's
    `training:` block holds it whole): the note stays a line, not a paragraph."""
    cut = [i for i in (text.find(": '"), text.find(" ("), text.find("): ")) if i > 0]
    quote = text.find("': ")  # a quoted title followed by its detail: keep the closing quote
    cut += [quote + 1] if quote > 0 else []
    return text[:min(cut)] if cut else text
