"""Exported torchtitan TOMLs through torchtitan's own config manager (issue 22).

Skipped where torchtitan is absent (CI does not install it: it needs torch). The manual check
that ran it (README "Checking exports with the trainers' own code"):

    python -m venv /tmp/tt && . /tmp/tt/bin/activate
    pip install torch==2.13.0 numpy && pip install torchtitan==0.2.2 --no-deps
    pip install tyro tokenizers triton && pip install -e /path/to/planner'[test]'
    python -m pytest tests/test_torchtitan_config_manager.py

What torchtitan checks here, at torchtitan 0.2.2 (PyPI):
- torchtitan/config/manager.py ConfigManager.parse_args -> _dict_to_dataclass raises
  ValueError("Invalid field names in ...") for any key JobConfig does not have, and tyro
  checks each value's type against JobConfig's annotations;
- torchtitan/distributed/parallel_dims.py ParallelDims._validate: dp_replicate x dp_shard x cp
  x tp x pp == WORLD_SIZE, and ETP = TP or 1 under EP.
"""

import pytest

from tests.test_runnable_plans import CASES

config = pytest.importorskip("torchtitan.config", reason="torchtitan is not installed (see the module docstring)")
parallel_dims = pytest.importorskip("torchtitan.distributed.parallel_dims")

# and the fp8 exports (issue 22: they wrote [float8] / converters "float8", which torchtitan since
# 8a2686c4a refuses; tests/test_torchtitan_quantize_layout.py checks the text against @e347b1e5e's dataclasses)
FP8 = [("f1-llama3-8b-32-h200-fp8-tensorwise", ["--model", "llama3-8b", "--gpus", "32", "--hardware", "h200-sxm",
                                                "--stack", "torchtitan", "--precision", "fp8", "--fp8-recipe", "tensorwise"]),
       ("f2-llama3-8b-32-h200-fp8-rowwise", ["--model", "llama3-8b", "--gpus", "32", "--hardware", "h200-sxm",
                                             "--stack", "torchtitan", "--precision", "fp8", "--fp8-recipe", "rowwise"]),
       ("f3-llama3-8b-8-b200-mxfp8", ["--model", "llama3-8b", "--gpus", "8", "--hardware", "b200", "--stack", "torchtitan",
                                      "--precision", "fp8", "--fp8-recipe", "mxfp8"])]
TT = [(name, args) for name, fmt, args in CASES if fmt == "torchtitan"] + FP8


def _parse(path):
    return config.ConfigManager().parse_args(["--job.config_file", str(path)])


@pytest.mark.parametrize("name,args", TT, ids=[c[0] for c in TT])
def test_exported_toml_parses_and_validates_in_torchtitan(cli, tmp_path, name, args):
    import json

    r = cli("fit", *args, "--top", "1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)[0]["plan"]
    r = cli("fit", *args, "--top", "1", "--export", "torchtitan")
    assert r.exit_code == 0, r.stderr
    path = tmp_path / f"{name}.toml"
    path.write_text(r.stdout, encoding="utf-8")
    job = _parse(path)
    p = job.parallelism
    dims = parallel_dims.ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                                      cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                                      pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
                                      etp=p.expert_tensor_parallel_degree, world_size=plan["gpus"])
    assert (dims.tp, dims.cp, dims.pp) == (plan["tp"], plan["cp"], plan["pp"])
    assert dims.dp_replicate * dims.dp_shard == plan["dp"]
    assert job.training.seq_len == plan["seq_len"]
    assert job.training.global_batch_size == plan["global_batch"]
    if p.enable_async_tensor_parallel:  # torchtitan: "Async TP requires --compile.enable" (parallelize.py)
        assert job.compile.enable
    if job.model.converters:  # each a registered name (protocols/model_converter.py: any other is a KeyError)
        import torchtitan.components.quantization  # noqa: F401  (registers the converters)
        from torchtitan.protocols.model_converter import _registry_model_converter_cls

        assert set(job.model.converters) <= set(_registry_model_converter_cls), job.model.converters


def test_the_config_manager_refuses_a_key_torchtitan_lacks(tmp_path):
    """The check above can fail: a key JobConfig does not have is an error, not ignored."""
    path = tmp_path / "bad.toml"
    path.write_text('[parallelism]\ntensor_parallel_degree = 2\npipeline_parallel_virtual_degree = 4\n', encoding="utf-8")
    with pytest.raises(ValueError, match="Invalid field names"):
        _parse(path)
