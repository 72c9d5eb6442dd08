"""The string choices as enumerations (predictor.core.choices): a member is its string, and the
one check refuses anything else in the words each setting always used."""
import pytest

from predictor.core.choices import (
    Attention,
    DeviceKind,
    Output,
    Recompute,
    Schedule,
    Sharding,
    StrEnum,
    choice,
    options,
    values,
)
from predictor.core.errors import PrismError
from predictor.core.layout import RECOMPUTES, SCHEDULES, SHARDINGS


def test_a_member_is_its_string():
    assert Recompute.FULL == "full" and hash(Recompute.FULL) == hash("full")
    assert f"{Schedule.GPIPE}" == "gpipe" and str(Sharding.ZERO3) == "zero3"
    assert {"none": 1}[Sharding.NONE] == 1
    assert all(type(v) is str for v in values(Recompute))
    assert issubclass(Recompute, StrEnum)


def test_the_layout_tuples_are_the_enumerations():
    assert RECOMPUTES == values(Recompute) and SCHEDULES == values(Schedule) and SHARDINGS == values(Sharding)


def test_choice_returns_the_member():
    assert choice(Schedule, "1f1b", "parallel.schedule") is Schedule.ONE_F_ONE_B


@pytest.mark.parametrize("kind, value, field, say, quoted, message", [
    (Schedule, "zb", "parallel.schedule", None, True,
     "parallel.schedule='zb': unknown; choose one of: 1f1b, interleaved, gpipe"),
    (DeviceKind, "tpu", "hardware.device.kind", "choose {or_options}", True,
     "hardware.device.kind='tpu': choose gpu or cpu"),
    (Attention, "sdpa", "parallel.attention", "unknown; choose {or_options}", True,
     "parallel.attention='sdpa': unknown; choose auto, flash, cudnn, flash_triton or unfused"),
    (Output, "xml", "output", "choose {or_options} (--json is output=json)", False,
     "output=xml: choose table or json (--json is output=json)"),
    (Recompute, 3, "parallel.recompute", None, True,
     "parallel.recompute=3: unknown; choose one of: none, selective, per_op, full"),
    (Recompute, None, "parallel.recompute", None, True,
     "parallel.recompute=None: unknown; choose one of: none, selective, per_op, full"),
])
def test_choice_refuses_in_the_settings_words(kind, value, field, say, quoted, message):
    with pytest.raises(PrismError) as info:
        choice(kind, value, field, *([say] if say else []), quoted=quoted)
    assert str(info.value) == message and info.value.field == field


def test_options_in_words():
    assert options(Output) == "table, json" and options(Output, " or ") == "table or json"
    assert options(Attention, " or ") == "auto, flash, cudnn, flash_triton or unfused"
