"""One job, one answer (issue 55): ``prism predict``, ``predict-batch`` (its Python function on a
one-row table), ``compare`` (that hardware) and ``variability`` give the same median step, the
same 90% interval of it and the same memory verdict for the same job drawn with the same seed
and draws; ``search`` reports, for a layout it composes, the median ``prism predict`` gives.
A blank framework is the default framework everywhere, and tokens/s times the time to train is
the token budget."""
import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from predictor.analyses.batch import predict_table
from predictor.analyses.compare import compare
from predictor.analyses.predict import SECONDS_PER_DAY, predict
from predictor.analyses.rows import RowLookups
from predictor.analyses.search import search
from predictor.analyses.variability import AnalysisConfig, variability
from predictor.core.errors import PrismError
from predictor.core.framework import default_framework
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.engine.compose import DRAWS

MODELS = ("llama3-8b", "llama2-7b", "gpt3-1.3b", "gpt3-2.7b")
#: the runs table's GPU cell of each profile
HARDWARE = {"a100-sxm4-80gb": "A100-SXM4-80GB", "h100-sxm": "H100-SXM", "b200": "B200"}
#: a framework cell and the framework ``prism predict`` is given for it (blank: none, the default)
#: (NeMo's and Megatron-Bridge's rows run their own files' settings, not their family's)
FRAMEWORKS = {"": None, "Megatron-Core": "megatron-core", "Megatron-LM": "megatron-lm", "NeMo 25.09": "nemo",
              "Megatron-Bridge": "megatron-bridge"}
DRAWN = 400
SEED = 3


def _row(model: str, gpu: str, framework: str, dp: int, tp: int, pp: int, mbs: int, micro: int, recompute: str,
         sharding: str) -> dict:
    m = load_model(model)
    return {"model": m.name, "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
            "kv_heads": m.num_kv_heads, "ffn": m.ffn_hidden_size, "vocab": m.vocab_size, "seq_len": m.seq_length,
            "gbs": dp * mbs * micro * pp, "mbs": mbs, "tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "vp": 1,
            "seq_parallel": "off", "recompute": recompute, "zero_or_distopt": sharding, "precision": "bf16",
            "framework": framework, "gpu": gpu, "num_gpus": dp * tp * pp}


@st.composite
def jobs(draw):
    hardware = draw(st.sampled_from(sorted(HARDWARE)))
    framework = draw(st.sampled_from(sorted(FRAMEWORKS)))
    row = _row(draw(st.sampled_from(MODELS)), HARDWARE[hardware], framework, draw(st.sampled_from([1, 2])),
               draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2])),
               draw(st.sampled_from([1, 2])), draw(st.sampled_from(["none", "selective", "full"])),
               draw(st.sampled_from(["none", "distributed optimizer"])))
    return hardware, FRAMEWORKS[framework], row


def _interval90(predictive: dict) -> list[float]:
    return list(predictive["interval_s"]["90%"])


@settings(deadline=None, max_examples=15, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(jobs())
def test_one_job_one_answer(case):
    name, framework, row = case
    try:
        job = RowLookups().job(row)
    except PrismError:
        assume(False)
    hardware = load_hardware(name)
    model, layout, gpus = job.model, job.parallel, job.gpus
    table = predict_table(pd.DataFrame([row]), draws=DRAWN, seed=SEED)
    batch = table.iloc[0]
    assume(batch["pred_status"] == "ok")
    assert batch["pred_hardware"] == name
    p = predict(model, hardware, layout, gpus, draws=DRAWN, seed=SEED, framework=framework)
    median, interval = p.predictive["median_step_s"]["p50"], _interval90(p.predictive)

    # predict-batch: the job's median step, its 90% interval, the memory verdict
    assert batch["pred_iter_time_s_p50"] == pytest.approx(median, rel=1e-5)
    assert [batch["pred_iter_time_s_p5"], batch["pred_iter_time_s_p95"]] == pytest.approx(interval, rel=1e-5)
    assert bool(batch["pred_fits"]) == p.fits
    assert batch["pred_mem_gib"] == pytest.approx(p.memory_gib["total"], rel=1e-5)
    if not row["framework"]:
        assert f"framework: blank, read as {default_framework().name}" in batch["pred_assumed"]

    # tokens/s, time to train, GPU-hours and cost from one step figure
    days = p.time_to_train_days["p50"]
    assert p.tokens_per_s * days * SECONDS_PER_DAY == pytest.approx(p.train_tokens, rel=1e-3)
    assert p.gpu_hours == pytest.approx(days * 24 * p.gpus, rel=1e-9)

    # compare on that hardware
    c = compare(model, [hardware], layout, gpus, draws=DRAWN, seed=SEED, framework=framework).results[0]
    assert getattr(c, "median_step_s", None) == pytest.approx(median, rel=1e-9)
    assert list(getattr(c, "median_step_90_s", [])) == pytest.approx(interval, rel=1e-9)
    assert c.fits == p.fits and c.memory_gib == pytest.approx(p.memory_gib["total"], rel=1e-9)
    assert c.tokens_per_s == pytest.approx(p.tokens_per_s, rel=1e-9)

    # variability
    v = variability(model, hardware, layout, gpus, seed=SEED, framework=framework,
                    settings=AnalysisConfig(draws=DRAWN, scales=[gpus], runs=200, slow_nodes=0, top_ops=1))
    assert v.predictive["median_step_s"]["p50"] == pytest.approx(median, rel=1e-9)
    assert _interval90(v.predictive) == pytest.approx(interval, rel=1e-9)
    assert getattr(v, "fits", None) == p.fits
    assert getattr(v, "memory_gib", {}).get("total") == pytest.approx(p.memory_gib["total"], rel=1e-9)
    assert v.to_dict().get("fits") == p.fits

    # search: any median it reports for a layout it composed is prism predict's for that layout
    try:
        found = search(model, hardware, gpus, base=ParallelConfig(global_batch_size=layout.global_batch_size),
                       top=1, seed=SEED, framework=framework)
    except PrismError:  # no layout of these GPUs fits
        return
    own = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "mbs": layout.micro_batch_size,
           "recompute": layout.recompute, "sharding": layout.sharding, "vpp": 1}
    rows = [r for r in found.layouts if r["composed"]][:1]
    rows += [r for r in found.layouts if r["composed"] and all(r[k] == v for k, v in own.items())]
    for r in rows:
        par = ParallelConfig(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r["ep"], vpp=r["vpp"],
                             schedule=r["schedule"], sequence_parallel=r["sequence_parallel"],
                             micro_batch_size=r["mbs"], global_batch_size=layout.global_batch_size,
                             recompute=r["recompute"], sharding=r["sharding"])
        q = predict(model, hardware, par, gpus, draws=DRAWS, seed=SEED, framework=framework)
        assert r.get("median_step_s") == pytest.approx(q.predictive["median_step_s"]["p50"], rel=1e-9)
        assert list(r["median_step_80_s"]) == pytest.approx(q.predictive["interval_s"]["80%"], rel=1e-9)
        assert r["tokens_per_s"] == pytest.approx(q.tokens_per_s, rel=1e-9)
        assert math.isfinite(r["p50_s"])
