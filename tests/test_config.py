import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import group_options, load_model, section
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
    ("hardware=nope", "hardware=nope: no conf/hardware/nope.yaml"),
])
def test_bad_overrides_name_the_field(override, names):
    with pytest.raises(PrismError, match=names.replace("[", r"\[")):
        load_config([override])


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
