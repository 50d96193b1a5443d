"""Megatron-Bridge's Qwen3-Next 80B-A3B pre-training recipe as shipped (TP 1, PP 4, EP 8:
tests/data/trainer_configs/bridge_qwen3_next_h100.sh) does not fit 4 nodes of H100, and why: at
32 GPUs DP is 8 = EP, so the expert data-parallel group has one rank and the distributed
optimizer shards none of the experts' fp32 state. It fits on 8 nodes (expert DP 2).

By hand, the last stage (layers 36-47: 9 Gated DeltaNet + 3 gated-attention layers, the MTP
layer, the output layer and the embedding copy MTP reads), the planner's per-layer counts
(`explain --format json` params.layer_kinds): a routed-expert set is 512 x 3 x 2,048 x 512 =
1,610,612,736 parameters, a Gated DeltaNet layer's other parameters 1,648,531,648 - 1,610,612,736
= 37,918,912, a gated-attention layer's 31,463,936, the MTP layer's 39,858,688; vocab 151,936 x
2,048 = 311,164,928 each for output and embedding; final norm 2,048.
  experts on a rank: 13 x 1,610,612,736 / 8 = 2,617,245,696
  the rest: 9 x 37,918,912 + 3 x 31,463,936 + 39,858,688 + 2 x 311,164,928 + 2,048 = 1,097,852,608
Adam's m and v (fp32, sharded over the distributed optimizer's group: expert DP 1 for the experts,
DP 8 for the rest): 8 x 2,617,245,696 + 8 x 1,097,852,608 / 8 = 22,035,818,176 B; the fp32 master
weights 4 x 2,617,245,696 + 4 x 1,097,852,608 / 8 = 11,017,909,088 B. On 64 GPUs (DP 16, expert
DP 2) each half: Adam 11,017,909,088 B.
"""

from __future__ import annotations

import json

LAUNCH = "tests/data/trainer_configs/bridge_qwen3_next_h100.sh"


def _memory(cli, *extra):
    r = cli("explain", LAUNCH, "--format", "json", *extra)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["memory"]


def test_the_recipe_on_four_nodes_holds_every_expert_state_whole(cli):
    m = _memory(cli)
    assert m["heaviest_stage"] == "last"
    assert m["terms"]["adam"] == 22_035_818_176
    assert m["terms"]["master_weights"] == 11_017_909_088
    assert m["terms"]["weights"] == 2 * (2_617_245_696 + 1_097_852_608)
    r = cli("check", LAUNCH)
    assert r.exit_code == 1, r.stderr
    assert "FAIL" in r.stdout and "on 32 x h100-sxm" in r.stdout


def test_eight_nodes_halve_the_expert_states_and_fit(cli):
    m = _memory(cli, "--gpus", "64")
    assert m["terms"]["adam"] == 11_017_909_088
    r = cli("check", LAUNCH, "--gpus", "64")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "on 64 x h100-sxm" in r.stdout
