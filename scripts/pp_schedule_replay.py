"""Dependency replays of two pipeline schedules' code, for the derivations of planner/step.py's pp_warmup_flush and
[31] (issue 22, ppedges). Nothing here is imported by the planner; it prints the figures those docstrings quote.

megatron: Megatron-LM @d98e8a64 megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_
    interleaving: rank r's warm-up count (get_pp_rank_microbatches l. 964-978), its ops in the schedule's order
    (warm-up forwards l. 1572, steady forward / backward pairs l. 1730, cool-down backwards l. 1971), the chunk of
    each from get_schedule_table's groups of N micro-batches. A forward waits its input (the previous virtual stage's
    output, S after that forward ends), a backward its gradient; a warm-up / cool-down send is waited whole on the
    sender's stream (S, without --overlap-p2p-communication-warmup-flush), a steady one at the share x. Rendezvous of
    the blocking sends with the receiver's post is not modelled.
dualpipe: deepseek-ai/DualPipe @bb214e82 dualpipe/dualpipe.py DualPipe.step (l. 294-440, steps 1-8 l. 358-425):
    each rank's ops from the code's control flow (phases XOR is_in_second_half, as _forward_compute_chunk), a
    forward-backward pair one op of F + B + W (both outputs at its end), zero-bubble backwards deferring W to a later
    _weight_chunk; a transfer arrives S after the op that makes it, the sender not held.

    PYTHONPATH=. python scripts/pp_schedule_replay.py megatron
    PYTHONPATH=. python scripts/pp_schedule_replay.py megatron-ep   (moe.alone_pass_share: megatron_ep_step)
    PYTHONPATH=. python scripts/pp_schedule_replay.py dualpipe
"""

from __future__ import annotations

import collections
import sys


def _chunk_table(m, v, n) -> list:
    """Megatron's interleaved order: a rank's k-th forward is (micro-batch, model chunk) table[k], groups of n
    micro-batches through each chunk in turn (get_model_chunk_id / get_microbatch_id)."""
    table = []
    for g in range(0, m, n):
        for c in range(v):
            table += [(mb, c) for mb in range(g, min(g + n, m))]
    return table


def _source(kind, r, mb, c, p, v) -> tuple:
    """(chunk, the op it waits for or None) of rank r's forward / backward of micro-batch mb at table chunk c: a
    forward takes the previous rank's output (rank 0 the last rank's of the previous chunk), a backward the next
    rank's gradient (the last rank the first rank's of the next chunk; backward chunks run in reverse)."""
    if kind == "F":
        return c, None if (r == 0 and c == 0) else (("F", r - 1, mb, c) if r else ("F", p - 1, mb, c - 1))
    c = v - 1 - c
    return c, None if (r == p - 1 and c == v - 1) else (("B", r + 1, mb, c) if r < p - 1 else ("B", 0, mb, c + 1))


def megatron_step(p, v, m, n, f, b, s, x, warm_blocking=True) -> float:
    """The step (the last rank's op end) of the interleaved schedule, f / b: each rank's chunk forward / backward."""
    table = _chunk_table(m, v, n)
    total = m * v
    ops = []
    for r in range(p):
        w = min(2 * (p - r - 1) + (v - 1) * n, total)
        seq = [("F", k, warm_blocking) for k in range(w)]
        for k in range(total - w):
            seq += [("F", k + w, False), ("B", k, False)]
        ops.append(seq + [("B", k, warm_blocking) for k in range(total - w, total)])
    done, t, idx, moved = {}, [0.0] * p, [0] * p, True
    while moved:
        moved = False
        for r in range(p):
            while idx[r] < len(ops[r]):
                kind, k, blocking = ops[r][idx[r]]
                mb, c = table[k]
                c, src = _source(kind, r, mb, c, p, v)
                if kind == "B" and ("F", r, mb, c) not in done:
                    break
                if src is not None and src not in done:
                    break
                end = max(t[r], done[src] + s if src is not None else 0.0) + (f[r] if kind == "F" else b[r])
                done[(kind, r, mb, c)] = end
                sends = not ((kind == "F" and r == p - 1 and c == v - 1) or (kind == "B" and r == 0 and c == 0))
                t[r] = end + ((s if blocking else x * s) if sends else 0.0)
                idx[r] += 1
                moved = True
    assert all(idx[r] == len(ops[r]) for r in range(p))
    return max(t)


def megatron_ep_step(p, v, m, n, f, b, a) -> float:
    """The step of the interleaved schedule under --overlap-moe-expert-parallel-comm (moe.alone_pass_share): rank r's
    warm-up count + 1 (get_pp_rank_microbatches l. 969-970), each steady step one combined op (the forward of k + W
    and the backward of k, combined_1f1b.py combined_1f1b_schedule_for_interleaved_pipelining: both inputs before it,
    both outputs at its end, f + b with its all-to-alls hidden), a warm-up forward alone f + a, a cool-down backward
    alone b + a; no p2p time."""
    table = _chunk_table(m, v, n)
    total = m * v
    ops = []
    for r in range(p):
        w = min(2 * (p - r - 1) + (v - 1) * n + 1, total)
        ops.append([(("F", k),) for k in range(w)] + [(("F", k + w), ("B", k)) for k in range(total - w)]
                   + [(("B", k),) for k in range(total - w, total)])
    done, t, idx, moved = {}, [0.0] * p, [0] * p, True
    while moved:
        moved = False
        for r in range(p):
            while idx[r] < len(ops[r]):
                op, ready, keys = ops[r][idx[r]], 0.0, []
                for kind, k in op:
                    mb, c = table[k]
                    c, src = _source(kind, r, mb, c, p, v)
                    if src is not None and src not in done:
                        break
                    ready = max(ready, done[src]) if src is not None else ready
                    keys.append((kind, r, mb, c))
                else:
                    dur = f[r] + b[r] if len(op) == 2 else (f[r] + a if op[0][0] == "F" else b[r] + a)
                    end = max(t[r], ready) + dur
                    for key in keys:
                        done[key] = end
                    t[r], idx[r], moved = end, idx[r] + 1, True
                    continue
                break
    assert all(idx[r] == len(ops[r]) for r in range(p))
    return max(t)


def dualpipe_ops(rank, p, n) -> list:
    """DualPipe.step's ops on one rank, in order (internal phases: 0 runs rank 0 -> p - 1, 1 the reverse)."""
    half, hr = p // 2, min(rank, p - 1 - rank)
    second, middle = rank >= half, rank in (half - 1, half)
    out = []
    fwd = lambda ph: out.append(("F", ph ^ second))
    bwd = lambda ph, zb=False: out.append(("B", ph ^ second, zb))
    pair = lambda a, b: out.append(("FB", a ^ second, b ^ second))
    for _ in range((half - hr - 1) * 2):                          # step 1
        fwd(0)
    for _ in range(hr + 1):                                       # step 2
        fwd(0)
        fwd(1)
    for _ in range(half - hr - 1):                                # step 3
        bwd(1, True)
        out.append(("W",))
        fwd(1)
    for i in range(n // 2 - p + hr + 1):                          # step 4
        if i == 0 and middle:
            fwd(0)
            bwd(1)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(half - hr - 1):                                # step 5
        bwd(1)
        pair(1, 0)
    zb, s6 = False, hr + 1                                        # step 6
    for i in range(s6):
        zb = zb or (i == s6 // 2 and hr % 2 == 1)
        bwd(1, zb)
        zb = zb or (i == s6 // 2 and hr % 2 == 0)
        bwd(0, zb)
    for _ in range(half - hr - 1):                                # step 7
        out.append(("W",))
        bwd(0, True)
    out += [("W",)] * (hr + 1)                                    # step 8
    return out


def dualpipe_step(p, n, f, bi, w, s) -> float:
    seqs = [dualpipe_ops(r, p, n) for r in range(p)]
    done, t, idx = {}, [0.0] * p, [0] * p
    fc, bc, wq = [[0, 0] for _ in range(p)], [[0, 0] for _ in range(p)], [collections.deque() for _ in range(p)]

    def fdep(r, ph, k):
        return (None if r == 0 else ("F", r - 1, 0, k)) if ph == 0 else (None if r == p - 1 else ("F", r + 1, 1, k))

    def bdep(r, ph, k):
        if ph == 0:
            return ("F", r, 0, k) if r == p - 1 else ("B", r + 1, 0, k)
        return ("F", r, 1, k) if r == 0 else ("B", r - 1, 1, k)

    def ready(key, r):
        if key is None:
            return 0.0
        return None if key not in done else done[key] + (0.0 if key[1] == r else s)

    moved = True
    while moved:
        moved = False
        for r in range(p):
            while idx[r] < len(seqs[r]):
                op = seqs[r][idx[r]]
                if op[0] == "W":
                    t[r] += wq[r].popleft()
                elif op[0] == "F":
                    ph, k = op[1], fc[r][op[1]]
                    a = ready(fdep(r, ph, k), r)
                    if a is None:
                        break
                    t[r] = done[("F", r, ph, k)] = max(t[r], a) + f
                    fc[r][ph] += 1
                elif op[0] == "B":
                    ph, zb, k = op[1], op[2], bc[r][op[1]]
                    a = ready(bdep(r, ph, k), r)
                    if a is None or ("F", r, ph, k) not in done:
                        break
                    start = max(t[r], a)
                    t[r] = start + bi + (0.0 if zb else w)
                    # its gradient sent after the whole backward compute (_backward_chunk l. 195-203), W deferred by zb
                    done[("B", r, ph, k)] = start + bi if zb else t[r]
                    if zb:
                        wq[r].append(w)
                    bc[r][ph] += 1
                else:
                    p0, p1 = op[1], op[2]
                    k0, k1 = fc[r][p0], bc[r][p1]
                    a0, a1 = ready(fdep(r, p0, k0), r), ready(bdep(r, p1, k1), r)
                    if a0 is None or a1 is None or ("F", r, p1, k1) not in done:
                        break
                    t[r] = done[("F", r, p0, k0)] = done[("B", r, p1, k1)] = max(t[r], a0, a1) + f + bi + w
                    fc[r][p0] += 1
                    bc[r][p1] += 1
                idx[r] += 1
                moved = True
    assert all(idx[r] == len(seqs[r]) for r in range(p))
    return max(t)


def main(which: str) -> None:
    x = 0.189
    if which == "megatron":
        print("warm-up / flush waited beyond the steady share x S and the 2 (p - 1) whole hops, in (1 - x) S; "
              "stage chunk forward 10, backward 20 (x 1.2 where heavier), S = 1")
        for p, v, m, n in [(4, 2, 8, 4), (4, 2, 16, 4), (8, 2, 16, 8), (8, 4, 16, 8), (4, 4, 8, 4), (4, 2, 8, 8),
                           (16, 2, 32, 16), (8, 2, 16, 16)]:
            for name, crit, fr in [("balanced", "mid", [1.0] * p), ("last", "last", [1.0] * (p - 1) + [1.2]),
                                   ("middle", "mid", [1.0] + [1.2] * (p - 2) + [1.0]),
                                   ("first", "first", [1.2] + [1.0] * (p - 1))]:
                f, b = [10 * a for a in fr], [20 * a for a in fr]
                comm = megatron_step(p, v, m, n, f, b, 1.0, x) - megatron_step(p, v, m, n, f, b, 0.0, x)
                count = 2 * v if crit == "mid" else 2 * v - 1
                need = (comm - m * count * x - (p - 1) / v * 2 * v) / (1 - x)
                print(f"p {p:2d} v {v} m {m:2d} N {n:2d} {name:8s} replay {need:6.2f}   2 W_(p-1) {2 * (v - 1) * n:3d}"
                      f"   2 W_0 {2 * min(2 * (p - 1) + (v - 1) * n, m * v):3d}")
    elif which == "megatron-ep":
        print("EP overlap: the all-to-all passes alone on the step ((step(a) - step(0)) / 2a), chunk forward 1, "
              "backward 2 (x 1.2 where heavier), a = 0.3; W_(p-1) + p - 1 (moe.alone_pass_share) and the first "
              "stage's W_0 x (1 + (p - 1) / (m v)) (before)")
        for p, v, m, n in [(4, 2, 8, 4), (4, 2, 16, 4), (4, 2, 32, 4), (4, 4, 16, 4), (8, 2, 16, 8), (8, 4, 32, 8),
                           (4, 2, 12, 6), (4, 2, 4, 4), (2, 2, 8, 2)]:
            for name, fr in [("balanced", [1.0] * p), ("last", [1.0] * (p - 1) + [1.2]),
                             ("middle", [1.0] + [1.2] * (p - 2) + [1.0]), ("first", [1.2] + [1.0] * (p - 1))]:
                f, b = list(fr), [2 * a for a in fr]
                alone = (megatron_ep_step(p, v, m, n, f, b, 0.3) - megatron_ep_step(p, v, m, n, f, b, 0.0)) / 0.6
                w_last, w_0 = min((v - 1) * n + 1, m * v), min(2 * (p - 1) + (v - 1) * n + 1, m * v)
                print(f"p {p:2d} v {v} m {m:2d} N {n:2d} {name:8s} replay {alone:6.2f}   W_(p-1) + p - 1 "
                      f"{w_last + p - 1:3d}   before {w_0 * (1 + (p - 1) / (m * v)):6.2f}")
    else:
        print("DualPipe: step, bubble (step - n (F + B + W)), [8] Table 2's (p/2 - 1)(F&B + B - 3W), and d step / d S "
              "(the hops on the step's path) of the replay")
        for p, n in [(4, 8), (8, 16), (8, 40), (16, 32), (16, 120)]:
            for f, bi, w in [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.0, 0.8, 1.2)]:
                t0 = dualpipe_step(p, n, f, bi, w, 0.0)
                hops = (dualpipe_step(p, n, f, bi, w, 1e-3) - t0) / 1e-3
                table2 = (p / 2 - 1) * ((f + bi + w) + (bi + w) - 3 * w)
                print(f"p {p:2d} n {n:3d} F/B/W {f}/{bi}/{w}: bubble {t0 - n * (f + bi + w):6.2f} (Table 2 {table2:6.2f})"
                      f"  hops on the path {hops:6.1f}  2 (p - 1) {2 * (p - 1)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "megatron")
