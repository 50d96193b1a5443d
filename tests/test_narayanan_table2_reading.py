"""How the six ZeRO-3 records of Narayanan et al. 2021 (arXiv:2104.04473) Table 2 are read (tests/data/
published_runs.yaml, stack megatron-deepspeed-2021): what the table measured and which predicted quantity it is
compared with (the z3 audit of the group's error, README "megatron-deepspeed-2021 (6)").

Table 2 reports "Achieved teraFLOP/s per GPU" counted with the paper's eq. (3), F = 96 B s l h^2 (1 + s / (6 h) +
V / (16 l h)) an iteration (sec. 5.1: hardware FLOPs, the full-recompute forward included), and "Training time for
300B tokens (days)". The records store tokens/s per GPU = TFLOP/s / eq. (3)'s FLOPs a token, and `planner validate`
compares that with the predicted tokens/s per GPU (the step time's, no FLOP convention). The days column, which the
records keep only in their notes, is a second measurement of the same throughput: it pins the convention. Under a
model-FLOPs reading (no recompute forward: 72 in place of 96) each record's tokens/s would be 4/3 of the stored
figure and the days 3/4 of the paper's; under eq. (4)'s 8 T P / (n X) approximation 2-3% off. The table's days,
hand-copied here from Table 2 (the records' notes say the same): 174.6B on 384 / 768 / 1,536 GPUs 90 / 74 / 74,
529.6B on 640 / 1,120 / 2,240 GPUs 169 / 137 / 140."""
from pathlib import Path

import pytest

from planner import validate as V

DATA = Path(__file__).parent / "data" / "published_runs.yaml"

# id -> (Table 2 TFLOP/s per GPU, Table 2 days for 300B tokens)
TABLE2_ZERO3 = {
    "narayanan2021-t2-zero3-174.6B-384gpu": (144, 90),
    "narayanan2021-t2-zero3-174.6B-768gpu": (88, 74),
    "narayanan2021-t2-zero3-174.6B-1536gpu": (44, 74),
    "narayanan2021-t2-zero3-529.6B-640gpu": (138, 169),
    "narayanan2021-t2-zero3-529.6B-1120gpu": (98, 137),
    "narayanan2021-t2-zero3-529.6B-2240gpu": (48, 140),
}
PARAMS = {96: 174.6e9, 105: 529.6e9}  # Table 2's model sizes by layer count (eq. (4)'s P)


def _records():
    runs = {r.id: r for r in V.load_runs(DATA)}
    return [runs[i] for i in TABLE2_ZERO3]


def _eq3_per_token(r, coeff=96):
    """Narayanan et al. 2021 eq. (3) per token (divided by B s); coeff 72 is the same count without the
    recompute forward (model FLOPs)."""
    l, h, s, v = r.num_layers, r.hidden_size, r.seq_length, r.vocab_size
    return coeff * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))


def test_the_six_records_are_the_zero3_rows():
    recs = _records()
    assert [(r.num_gpus, r.tp, r.pp, r.dp, r.micro_batch_size, r.global_batch_size) for r in recs] == [
        (384, 1, 1, 384, 4, 1536), (768, 1, 1, 768, 2, 1536), (1536, 1, 1, 1536, 1, 1536),
        (640, 1, 1, 640, 4, 2560), (1120, 1, 1, 1120, 2, 2240), (2240, 1, 1, 2240, 1, 2240)]
    # one micro-batch a step on every row: global batch = dp x micro-batch
    assert all(r.global_batch_size == r.dp * r.micro_batch_size for r in recs)
    assert {r.stack for r in recs} == {"megatron-deepspeed-2021"}
    assert {r.recompute for r in recs} == {"full"}


@pytest.mark.parametrize("rid", list(TABLE2_ZERO3))
def test_tokens_per_s_is_table2_tflops_over_eq3(rid):
    """The stored tokens/s per GPU is the table's TFLOP/s over eq. (3)'s FLOPs a token, to the four significant
    figures stored: 174.6B 1.4340e12 FLOPs a token, 529.6B 4.3046e12."""
    r = next(x for x in _records() if x.id == rid)
    tflops, _ = TABLE2_ZERO3[rid]
    assert r.tflops_per_gpu == tflops
    assert f"{r.tokens_per_sec_per_gpu:.4g}" == f"{tflops * 1e12 / _eq3_per_token(r):.4g}"


@pytest.mark.parametrize("rid", list(TABLE2_ZERO3))
def test_days_column_pins_the_flop_convention(rid):
    """300e9 tokens / (tokens/s per GPU x GPUs) matches Table 2's days within the rounding of its two
    columns (TFLOP/s to 1, days to 1); the model-FLOPs reading (72 for 96) misses by 25%, eq. (4)'s
    8 T P / (n X) by more than the rounding on the rows where it differs most."""
    r = next(x for x in _records() if x.id == rid)
    tflops, days = TABLE2_ZERO3[rid]
    tol = 0.5 / tflops + 0.5 / days
    ours = 300e9 / (r.tokens_per_sec_per_gpu * r.num_gpus) / 86400
    assert abs(ours / days - 1) <= tol
    model_flops = 300e9 / (tflops * 1e12 / _eq3_per_token(r, 72) * r.num_gpus) / 86400
    assert model_flops / days == pytest.approx(0.75, abs=tol)
    eq4 = 8 * 300e9 * PARAMS[r.num_layers] / (r.num_gpus * tflops * 1e12) / 86400
    assert eq4 < days  # eq. (4) leaves out the attention and logit terms
    if r.num_gpus in (384, 768, 640):
        assert abs(eq4 / days - 1) > tol


def test_predicted_steps_price_the_full_recompute_forward():
    """The prediction side: each record is planned with full recompute (the re-run forward priced, so the
    predicted tokens/s is the like of the published one, which eq. (3) measured with it) and one micro-batch a
    step; its hardware FLOPs a token within 1.5% of eq. (3)'s (174.6B 1.4162e12 against 1.4340e12: the same layer
    GEMMs, the attention and embedding terms counted apart)."""
    import tempfile

    from planner.explain import evaluate, to_json

    for r in _records():
        with tempfile.TemporaryDirectory() as d:
            s, p = V.prepare_record(r, V.new_row(r), Path(d), DATA.parent, str(DATA))
            js = to_json(s, p, evaluate(s, p))
        assert js["plan"]["recompute"] == "full"
        assert js["plan"]["microbatches_per_step"] == 1
        hw = js["flops"]["hardware_flops_per_token"]
        assert hw / _eq3_per_token(r) == pytest.approx(1.0, abs=0.015)
        assert js["flops"]["recompute_flops_per_token"] > 0
