import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from predictor.analyses.variability import AnalysisConfig
from predictor.app.cli import main
from predictor.app.config import _PLAIN, _parse, compose, load_config
from predictor.app.config_text import read_comments
from predictor.core.errors import PrismError
from predictor.core.profiles import CONF_DIR, GROUPS, group_options, load_model, section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, SamplingConfig
from predictor.workload.layers import parameter_count

# Published sizes (billions) the model configs must reproduce.
PUBLISHED_B = {"gpt3-1.3b": 1.3, "gpt3-2.7b": 2.7, "gpt3-6.7b": 6.7, "gpt3-13b": 13, "gpt3-175b": 175,
               "llama3-8b": 8.0, "llama3-70b": 70.6, "llama3-405b": 405,
               "llama2-7b": 6.7, "llama2-13b": 13.0, "llama2-70b": 69.0}


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_model_configs_match_published_parameter_counts(name):
    model = load_model(name)
    assert model.num_heads * model.head_dim == model.hidden_size
    assert model.num_heads % model.num_kv_heads == 0
    assert parameter_count(model) / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.04)


@pytest.mark.parametrize("name", group_options("hardware"))
def test_every_hardware_profile_validates(name):
    hw = section(load_config([f"hardware={name}"]), "hardware", HardwareConfig)
    assert hw.name == name
    assert hw.peak("float32") > 0 and hw.memory.bandwidth > 0


def test_required_groups_and_defaults_compose():
    cfg = load_config([])
    for group in ("model", "hardware", "parallel", "sampling", "regressor"):
        assert group in cfg
    assert section(cfg, "model", ModelConfig).name == "tiny"
    assert section(cfg, "sampling", SamplingConfig).repeats >= 10


@pytest.mark.parametrize("override, names", [
    ("sampling.budget_s", "malformed override 'sampling.budget_s'"),
    ("sampling.ops=[gemm,", "malformed override"),
    ("sampling.bogus=1", "sampling.bogus: no such setting"),
    ("parallel.tpp=2", "parallel.tpp: no such setting; did you mean parallel.tp?"),
    ("=8", "a setting without its key"),
    ("hardware=nope", "hardware=nope: no conf/hardware/nope.yaml"),
    ("gpus=６４", "digits of another script; write them as 0-9: gpus=64"),  # not quoting, which fails next
])
def test_bad_overrides_name_the_field(override, names):
    with pytest.raises(PrismError, match=names.replace("[", r"\[")):
        load_config([override])


@pytest.mark.parametrize("override, schema, message", [
    ("+parallel.tpp=2", "parallel", "parallel.tpp: no such setting; did you mean parallel.tp?"),
    ("hardware.memory.capacity_gib=abc", "hardware", "hardware.memory.capacity_gib: 'abc' is not a number"),
    ("analysis.thresholds=abc", "analysis", "analysis.thresholds: 'abc' is not a list"),
])
def test_a_section_names_the_nested_setting_and_what_it_takes(override, schema, message):
    with pytest.raises(PrismError, match=re.escape(message)):
        section(load_config([override]), schema,
                {"parallel": ParallelConfig, "hardware": HardwareConfig, "analysis": AnalysisConfig}[schema])


def test_a_whole_number_written_with_a_point_is_that_number():
    whole = section(load_config(["parallel.tp=8.0"]), "parallel", ParallelConfig)
    assert whole.tp == 8 and isinstance(whole.tp, int)
    hw = section(load_config(["hardware=h100-sxm", "+hardware.node.nvlink_domain=16.0"]), "hardware", HardwareConfig)
    assert hw.node.nvlink_domain == 16 and isinstance(hw.node.nvlink_domain, int)  # an optional whole number
    with pytest.raises(PrismError, match=re.escape("parallel.tp: 8.5 is not a whole number")):
        section(load_config(["parallel.tp=8.5"]), "parallel", ParallelConfig)


def test_wrong_type_names_the_key():
    cfg = load_config(["sampling.budget_s=abc"])
    with pytest.raises(PrismError, match="sampling.budget_s"):
        section(cfg, "sampling", SamplingConfig)


def test_unknown_model_lists_choices():
    with pytest.raises(PrismError, match="choose one of: .*llama3-70b"):
        load_model("llama9")


def test_errors_carry_their_field():
    """The field of a bad setting travels as an attribute: nothing parses message text."""
    with pytest.raises(PrismError) as err:
        section(load_config(["parallel.tp=abc"]), "parallel", ParallelConfig)
    assert err.value.field == "parallel.tp"
    with pytest.raises(PrismError) as err:
        load_config(["parallel.tpp=2"])
    assert err.value.field == "parallel.tpp"


@pytest.mark.parametrize("overrides", [
    [], *([f"{group}={option}"] for group in GROUPS for option in group_options(group)),
    ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"],
    ["sampling=full", "sampling.budget_s=5", "+extra.key=1", "~top", "++seed=3", "sampling.ops=[gemm,attention]",
     "train_tokens=15e12", "hardware.network.intra_node.bandwidth=1e9", "model.name='a b'"],
], ids=str)
def test_composes_what_hydra_composes(overrides):
    """predictor.app.config composes conf/ itself (Hydra's compose costs 90 ms a command):
    the same configuration, key order and struct flag included, as hydra.compose."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        expected = hydra_compose("config", overrides=overrides)
    composed = load_config(overrides)
    assert OmegaConf.to_yaml(composed) == OmegaConf.to_yaml(expected)
    assert OmegaConf.is_struct(composed) and OmegaConf.is_struct(expected)


@pytest.mark.parametrize("override, names", [
    ("parallel.tp=1,2", "parallel.tp=1,2: one value per key"),
    ("+model=tiny", "model is a config group; pick one of its files with model=NAME"),
    ("~hardware", "hardware is a config group"),
    ("+parallel.tp=2", "Could not append to config. An item is already at 'parallel.tp'"),
])
def test_what_hydra_refuses_is_refused_with_one_line(override, names):
    with pytest.raises(PrismError, match=names):
        load_config([override])


@pytest.mark.parametrize("name", group_options("hardware"))
def test_gemm_dtype_is_set_without_a_plus(name):
    """docs/method.md's hardware.gemm_dtype=float8: every profile has the key (null = train_dtype)."""
    assert "float8" in read_comments(CONF_DIR / "hardware" / f"{name}.yaml").beside[("gemm_dtype",)][0]
    hw = section(load_config([f"hardware={name}", "hardware.gemm_dtype=float8"]), "hardware", HardwareConfig)
    assert hw.gemm_dtype == "float8"
    assert section(load_config([f"hardware={name}"]), "hardware", HardwareConfig).gemm_dtype is None


def test_float8_gemms_make_an_h100_step_faster(capsys):
    job = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]
    p50 = []
    for extra in ([], ["hardware.gemm_dtype=float8"]):
        assert main([*job, *extra, "--json"]) == 0
        p50.append(json.loads(capsys.readouterr().out)["step_time_s"]["p50"])
    assert p50[1] < p50[0]


def _show_config(overrides, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(["predict", "--show-config", *overrides])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("overrides", [[], ["sampling=full", "hardware=h100-sxm", "parallel.tp=8", "+extra.key=1"]],
                         ids=str)
def test_show_config_prints_the_composed_configuration_with_the_comments_of_conf(overrides, capsys):
    text = _show_config(overrides, capsys)
    composition = compose(overrides)
    assert OmegaConf.create(text) == composition.cfg  # the YAML printed is the configuration composed
    for files in composition.files.values():
        assert "\n".join(read_comments(files[-1]).header) in text  # the opening comment of the file chosen
        # each key's comment, from the last file of its group that comments it
        commented = {}
        for path in files:
            commented.update({key: notes for key, notes in read_comments(path).beside.items() if notes})
        for key, notes in commented.items():
            assert all(note.lstrip("# ") in text for note in notes), (files, key)


def test_show_config_marks_what_the_command_line_set(capsys):
    lines = _show_config(["hardware=h100-sxm", "parallel.tp=8", "gpus=64"], capsys).splitlines()
    assert "# hardware: conf/hardware/h100-sxm.yaml  <- hardware=h100-sxm" in lines
    tp = next(line for line in lines if line.strip().startswith("tp:"))
    assert tp.split("#")[0].strip() == "tp: 8" and tp.rstrip().endswith("# <- parallel.tp=8")
    gpus = next(line for line in lines if line.startswith("gpus:"))
    assert "# <- gpus=64 | total GPUs of the job" in gpus  # the mark, then the key's own comment


def test_other_forms_go_to_hydra():
    for text in ["a.b=[1,2]", "a='x y'", "+a=1", "~a", "a=${b}", "a=x:y", "aª=1", "a.0=1", "a="]:
        assert not _PLAIN.fullmatch(text), text


def _read_as_hydra_reads_it(text: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    assert _PLAIN.fullmatch(text)
    ours, theirs = _parse(text), OverridesParser.create().parse_override(text)
    assert ours.hydra is None and ours.key == theirs.key_or_group
    expected = theirs.value()
    assert type(ours.value) is type(expected), (text, ours.value, expected)
    assert ours.value == expected or (isinstance(expected, float) and math.isnan(expected) and math.isnan(ours.value))


@pytest.mark.parametrize("value", ["08", "1_000", "-3", "1.", ".5", "1e5", "5.e3", "1_0.5_5e1_0", "-inf", "+NaN",
                                   "TRUE", "False", "Null", "1__0", "0x10", "1e", "e5", "._5", "gpt3-13b",
                                   "runs/m.parquet"])
def test_plain_values_read_as_hydra_reads_them(value):
    """A plain key=value is read without Hydra (predictor.app.config._plain): the same key,
    value and type as Hydra's grammar gives."""
    _read_as_hydra_reads_it(f"a.b={value}")


_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,5}(\.[A-Za-z_][A-Za-z0-9_-]{0,5}){0,2}", fullmatch=True)
_VALUES = st.text(alphabet="0123456789_.+-/eEinfaINFtrueFALSnlxyz", min_size=1, max_size=9)


@settings(max_examples=300, deadline=None)
@given(key=_KEYS, value=_VALUES)
def test_any_plain_override_reads_as_hydra_reads_it(key, value):
    _read_as_hydra_reads_it(f"{key}={value}")


@pytest.mark.parametrize("name", group_options("hardware"))
def test_train_dtype_is_set_without_a_plus(name):
    """Every profile has train_dtype, so hardware.train_dtype=float16 needs no leading +."""
    hw = section(load_config([f"hardware={name}", "hardware.train_dtype=float16"]), "hardware", HardwareConfig)
    assert hw.train_dtype == "float16"
