"""Issue qwen30: does Megatron's interleaved schedule itself lose time on the two Qwen3-30B-A3B H100 PP 2 records
(megatron-bridge-25.11-dgx-h100-qwen3-30b-a3b: PP 2, VP 24, 32 micro-batches; 26.02: PP 2, VP 12, 128) that the
planner's critical-stage sum does not show? docs/qwen3_pp_gap.md "Re-checked (branch qwen30)". Nothing here is
imported by the planner and nothing is fitted.

A dependency replay of forward_backward_pipelining_with_interleaving (Megatron-LM @d98e8a64 schedules.py, as
scripts/pp_schedule_replay.py megatron: the rank's warm-up count, steady forward / backward pairs, cool-down
backwards, groups of N = p micro-batches through each chunk), but with a cost per (rank, chunk): the last rank's last
chunk carries the output layer and the loss, which the planner adds to the critical (last) stage. With N = p = 2 a
forward of chunk c + 1 on rank 0 needs rank 1's forward of chunk c of the same micro-batch, issued one op before:
the schedule has no slack beyond the paired backward, so a heavy chunk or a p2p hop could in principle stall both
ranks. The replay says by how much: step / the busiest rank's op time; each case also with the p2p rendezvous
(a transfer waits for the receiver's early-posted irecv, the sender for its previous send: interleaved_step).

Per-chunk costs from `planner explain` of the 25.11 record (validate.prepare_record; main 5d87914e): compute 6.39 s,
MoE host 3.53 s (forward issue), EP all-to-all 2.07 s, permutation 0.87 s over m v = 768 layer passes a stage,
split forward 1/3 of compute + host + half the exchanges, backward the rest; the head (output layer 151,936 x 2,048
and TE's fused loss over 8,192 tokens) 8 ms forward / 17 ms backward a micro-batch (docs/moe_accuracy.md: 25 ms).
The split is approximate; the head is also run at twice that, and the p2p hop at 0, 0.7 ms (33.5 MB on one
400 Gb/s NIC, the PP 2 hop crosses the nodes) and 2.8 ms (a quarter of that rate).

    PYTHONPATH=. python scripts/qwen3_pp_replay.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pp_schedule_replay import _chunk_table, _source  # noqa: E402


def interleaved_step(p, v, m, n, fc, bc, s, x=0.0, rendezvous=False):
    """(step, per-rank busy time) of the interleaved schedule; fc(r, c) / bc(r, c): rank r's forward / backward of
    model chunk c; s: a p2p hop (a forward waits its input s after the producing op ends); warm-up / cool-down sends
    waited whole on the sender (no --overlap-p2p-communication-warmup-flush), steady ones at the share x.

    rendezvous: a transfer also waits for the receiver's irecv, which Megatron posts right after the receiver's
    previous op of the same kind (send_forward_recv_forward / send_backward_recv_backward with overlap_p2p_comm,
    schedules.py @0d8e0714 l. 1605-1622, 1668-1685) and NCCL starts when the receiver's compute stream reaches it; and
    a steady op's sender waits (on its stream) for its previous send of that kind to complete once it posts the next
    (send_next_wait_handle / send_prev_wait_handle .wait(), l. 1613-1614, 1676-1677)."""
    table, total, ops = _chunk_table(m, v, n), m * v, []
    for r in range(p):
        w = min(2 * (p - r - 1) + (v - 1) * n, total)
        seq = [("F", k, True) for k in range(w)]
        for k in range(total - w):
            seq += [("F", k + w, False), ("B", k, False)]
        ops.append(seq + [("B", k, True) for k in range(total - w, total)])
    keys = [[] for _ in range(p)]  # each rank's op keys in its order, filled as they run
    for r in range(p):
        for kind, k, _ in ops[r]:
            mb, c = table[k]
            keys[r].append((kind, r, mb, _source(kind, r, mb, c, p, v)[0]))
    where = {key: (r, i) for r in range(p) for i, key in enumerate(keys[r])}
    # op key -> the op whose end posts its input's irecv on its rank (that rank's previous op of its kind)
    posted = {}
    for r in range(p):
        last = {}
        for key in keys[r]:
            posted[key] = last.get(key[0])
            last[key[0]] = key
    consumer = {}  # producing op key -> the op that takes its output
    for r in range(p):
        for key in keys[r]:
            kind, _, mb, c = key
            src = _source(kind, r, mb, c if kind == "F" else v - 1 - c, p, v)[1]
            if src is not None:
                consumer[src] = key
    done, arrive, t, idx, busy, moved = {}, {}, [0.0] * p, [0] * p, [0.0] * p, True
    last_send = [{"F": None, "B": None} for _ in range(p)]

    def arrival(src):
        """when src's output is at its consumer, or None while the consumer's irecv is not yet posted."""
        if src in arrive:
            return arrive[src]
        if not rendezvous:
            arrive[src] = done[src] + s
            return arrive[src]
        post = posted[consumer[src]]
        if post is not None and post not in done:
            return None
        arrive[src] = max(done[src], done[post] if post is not None else 0.0) + s
        return arrive[src]

    while moved:
        moved = False
        for r in range(p):
            while idx[r] < len(ops[r]):
                kind, k, blocking = ops[r][idx[r]]
                key = keys[r][idx[r]]
                _, _, mb, c = key
                src = _source(kind, r, mb, table[k][1], p, v)[1]
                if (kind == "B" and ("F", r, mb, c) not in done) or (src is not None and src not in done):
                    break
                ready = arrival(src) if src is not None else 0.0
                if ready is None:
                    break
                prev = last_send[r][kind]
                if rendezvous and prev is not None and not blocking and arrival(prev) is None:
                    break
                d = fc(r, c) if kind == "F" else bc(r, c)
                end = max(t[r], ready) + d
                busy[r] += d
                done[key] = end
                sends = not ((kind == "F" and r == p - 1 and c == v - 1) or (kind == "B" and r == 0 and c == 0))
                t[r] = end + ((s if blocking else x * s) if sends else 0.0)
                if rendezvous and prev is not None and not blocking:
                    t[r] = max(t[r], arrival(prev))
                if sends:
                    last_send[r][kind] = key
                idx[r] += 1
                moved = True
    assert all(idx[r] == len(ops[r]) for r in range(p))
    return max(t), busy


def main() -> None:
    compute, host, ep, permute, passes = 6.39, 3.53, 2.07, 0.87, 768
    f = (compute / 3 + host + (ep + permute) / 2) / passes
    b = (2 * compute / 3 + (ep + permute) / 2) / passes
    print(f"25.11 layout: p 2, v 24, m 32, N 2; chunk forward {f * 1e3:.2f} ms, backward {b * 1e3:.2f} ms")
    for rdv in (False, True):
        for scale in (0.0, 1.0, 2.0):
            for s in (0.0, 0.7e-3, 2.8e-3):
                hf, hb = 8e-3 * scale, 17e-3 * scale
                step, busy = interleaved_step(2, 24, 32, 2, lambda r, c: f + (hf if (r, c) == (1, 23) else 0.0),
                                              lambda r, c: b + (hb if (r, c) == (1, 23) else 0.0), s, rendezvous=rdv)
                print(f"{'rendezvous ' if rdv else ''}head x{scale:.0f}, p2p {s * 1e3:.1f} ms: step {step:7.3f} s, "
                      f"busiest rank {max(busy):7.3f} s, step / busiest {step / max(busy):.4f}")
    # the 26.02 layout in the plain interleaved order (its a2a overlap's combined 1F1B: pp_schedule_replay.py
    # megatron-ep), per chunk the 25.11 costs (two layers of half the tokens), the head halved: a schedule check only
    f2, b2 = f, b
    for rdv in (False, True):
        for s in (0.0, 0.35e-3, 1.4e-3):
            step, busy = interleaved_step(2, 12, 128, 2, lambda r, c: f2 + (4e-3 if (r, c) == (1, 11) else 0.0),
                                          lambda r, c: b2 + (8.5e-3 if (r, c) == (1, 11) else 0.0), s, rendezvous=rdv)
            print(f"{'rendezvous ' if rdv else ''}26.02 layout p 2, v 12, m 128, p2p {s * 1e3:.2f} ms: step "
                  f"{step:7.3f} s, busiest {max(busy):7.3f} s, step / busiest {step / max(busy):.4f}")


if __name__ == "__main__":
    main()
