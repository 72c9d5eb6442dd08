"""The third new-user probe: profiles a user writes, specs built by hand, settings that
replace a section, a search nothing can run, folders a save would wipe, values Hydra reads
only in quotes, and a signal after the work is done. Each case: one line naming the field
and the fix, exit code 2, and nothing stored lost."""
from __future__ import annotations

import json
import shutil
import signal
from dataclasses import replace

import pytest

from predictor.analyses.search import search
from predictor.app import cli, config
from predictor.core import profiles
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model
from predictor.latency.artifacts import MANIFEST, whole_folder

H100 = load_hardware("h100-sxm")
CPU = load_hardware("local-cpu")
TINY = load_model("tiny")


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def conf(tmp_path, monkeypatch):
    """A copy of conf/ that the command line and the API read, as PRISM_CONF_DIR would give."""
    root = tmp_path / "conf"
    shutil.copytree(profiles.CONF_DIR, root)
    monkeypatch.setattr(profiles, "CONF_DIR", root)
    monkeypatch.setattr(config, "CONF_DIR", root)
    monkeypatch.setattr(config, "ROOT_FILE", root / "config.yaml")
    profiles._device_names.cache_clear()
    yield root
    profiles._device_names.cache_clear()


def test_a_copied_profile_that_keeps_the_original_s_name_is_refused(conf, capsys):
    # h100-sxm.yaml saved as h100-pcie.yaml, its name left: it would report (and train into) h100-sxm
    text = (conf / "hardware" / "h100-sxm.yaml").read_text().replace("bandwidth: 3.35e+12", "bandwidth: 2.0e+12")
    (conf / "hardware" / "h100-pcie.yaml").write_text(text)
    code, out, err = _run(capsys, "predict", "model=tiny", "hardware=h100-pcie", "--json")
    assert code == 2 and json.loads(out)["field"] == "hardware.name"  # no prediction: the error, as JSON
    assert "h100-pcie.yaml: name: h100-sxm is not the file's name; write name: h100-pcie" in err
    code, _, err = _run(capsys, "compare", "model=tiny", "hardware=[h100-sxm,h100-pcie]")
    assert code == 2 and "write name: h100-pcie" in err  # not "h100-sxm given twice"
    with pytest.raises(PrismError, match="write name: h100-pcie") as error:
        load_hardware("h100-pcie")
    assert error.value.field == "hardware.name"
    (conf / "hardware" / "h100-pcie.yaml").write_text(text.replace("name: h100-sxm", "name: h100-pcie", 1))
    assert load_hardware("h100-pcie").memory.bandwidth == 2.0e12


@pytest.mark.parametrize("key, value, unit", [
    ("memory.bandwidth", 3.35, "bytes/s"),  # TB/s
    ("memory.capacity_gib", 80e9, "GiB"),  # bytes
    ("peak_flops.bfloat16", 989.5, "FLOP/s"),  # TFLOP/s
    ("network.inter_node.bandwidth", 400.0, "bytes/s per GPU"),  # Gb/s
    ("network.inter_node.latency_us", 5e-6, "microseconds"),  # seconds
])
def test_a_profile_figure_in_another_unit_is_named(key, value, unit):
    section, _, leaf = key.partition(".")
    with pytest.raises(PrismError) as error:
        if section == "peak_flops":
            replace(H100, peak_flops={**H100.peak_flops, leaf: value})
        elif section == "memory":
            replace(H100, memory=replace(H100.memory, **{leaf: value}))
        else:
            link = replace(H100.network.inter_node, **{key.rpartition(".")[2]: value})
            replace(H100, network=replace(H100.network, inter_node=link))
    assert error.value.field == f"hardware.{key}" and f"give it in {unit}" in str(error.value)


def test_a_profile_figure_in_another_unit_is_named_on_the_command_line(capsys):
    code, _, err = _run(capsys, "predict", "model=tiny", "hardware=h100-sxm", "hardware.peak_flops.bfloat16=989.5")
    assert code == 2 and "hardware.peak_flops.bfloat16=989.5: outside" in err and "989.5e+12" in err


@pytest.mark.parametrize("build, field", [
    (lambda: replace(TINY, tied_embeddings="no"), "model.tied_embeddings"),  # read as true before
    (lambda: replace(TINY, name=3), "model.name"),
    (lambda: replace(H100, host=replace(H100.host, asynchronous="false")), "hardware.host.asynchronous"),
    (lambda: replace(H100, name=5), "hardware.name"),
    (lambda: replace(H100, name="../elsewhere"), "hardware.name"),  # the folder its models go to
    (lambda: replace(H100, memory=None), "hardware.memory"),
    (lambda: replace(H100, peak_flops=989.5e12), "hardware.peak_flops"),
])
def test_a_spec_built_by_hand_names_its_field(build, field):
    with pytest.raises(PrismError) as error:
        build()
    assert error.value.field == field and str(error.value).startswith(field)


def test_a_section_replaced_by_one_value_is_named(capsys):
    code, out, err = _run(capsys, "variability", "model=tiny", "hardware=local-cpu", "analysis=foo", "--json")
    assert code == 2 and json.loads(out)["field"] == "analysis"
    assert "analysis=foo: analysis is a section of settings, not one value" in err and "analysis.draws=" in err


def test_a_search_where_no_layout_is_valid_says_so_not_use_more_gpus():
    with pytest.raises(PrismError) as error:
        search(TINY, CPU, 16, base={"global_batch_size": 2})
    message = str(error.value)
    assert error.value.field == "parallel.global_batch_size"
    assert "is valid (refused for parallel.global_batch_size 144)" in message and "a multiple of 16" in message
    assert "use more GPUs" not in message


def test_train_refuses_to_replace_a_folder_that_is_no_model_set(tmp_path, capsys):
    store = tmp_path / "local-cpu"  # the sample store, where models_dir=tmp_path puts local-cpu's models
    shutil.copytree(profiles.REPO_ROOT / "samples" / "local-cpu", store)
    before = sorted(p.name for p in store.iterdir())
    code, _, err = _run(capsys, "train", f"samples={store}", "hardware=local-cpu", f"models_dir={tmp_path}")
    assert code == 2 and f"{store}: holds files that are no saved model set (no {MANIFEST})" in err
    assert sorted(p.name for p in store.iterdir()) == before
    with pytest.raises(PrismError, match="would be lost"), whole_folder(store):  # the API's save, too
        pass
    assert sorted(p.name for p in store.iterdir()) == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "local-cpu").write_text("a file")
    code, _, err = _run(capsys, "train", f"samples={store}", "hardware=local-cpu", f"models_dir={tmp_path / 'other'}")
    assert code == 2 and "local-cpu: a file, where the set's folder goes" in err


def test_a_value_hydra_reads_only_in_quotes_gets_the_quoted_form(capsys, tmp_path):
    code, _, err = _run(capsys, "predict", "plot=/tmp/ünï.png")
    assert code == 2 and "write plot='/tmp/ünï.png' (in the shell, quoted once more: \"plot='/tmp/ünï.png'\")" in err
    code, _, err = _run(capsys, "predict", "plot=~/step.png")
    assert code == 2 and "write plot=$HOME/step.png" in err
    assert config.compose([f"plot='{tmp_path}/ünï cødé.png'"]).cfg.plot == f"{tmp_path}/ünï cødé.png"


def test_the_sigterm_handler_is_given_back_when_the_verb_is_done(capsys):
    # left in place, a SIGTERM while the interpreter shuts down (joblib joining its threads after
    # prism train) raised KeyboardInterrupt there and printed a traceback
    def mine(signum, frame):
        pass
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        code, _, _ = _run(capsys, "predict", "gpus=0")
        assert code == 2 and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_folder_without_sample_runs_says_how_it_gets_them(capsys, tmp_path):
    # data/microbench is a folder of published tables: read as a store it held "nothing"
    tables = profiles.REPO_ROOT / "data" / "microbench"
    code, _, err = _run(capsys, "train", f"samples={tables}", "hardware=h100-sxm", f"models_dir={tmp_path}")
    assert code == 2 and "holds no sample runs (.parquet) but 6 table(s) (.csv)" in err
    assert f"prism import-microbench {tables} out=" in err
    code, _, err = _run(capsys, "evaluate", f"samples={tmp_path}", "hardware=local-cpu")
    assert code == 2 and f"fill it with prism sample output_dir={tmp_path}" in err
    code, _, err = _run(capsys, "samples", f"samples={tables}")  # train's way of naming it
    assert code == 2 and f"prism samples takes the folder itself: prism samples {tables}" in err
