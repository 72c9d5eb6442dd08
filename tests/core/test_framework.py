"""Frameworks as data: every conf/framework file loads into a checked spec, names resolve
through aliases, an unknown name is refused with the known ones, a spec's fields drive the
workload, and no module of predictor/ but the loader decides anything by a framework's name."""
from __future__ import annotations

import ast
import dataclasses
import io
import re
import shutil
import tokenize
from dataclasses import replace
from pathlib import Path

import pytest

from predictor.core import framework as fw
from predictor.core.errors import PrismError
from predictor.core.framework import FrameworkSpec, known_frameworks, load_framework
from predictor.core.profiles import REPO_ROOT, SHIPPED_CONF, load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.workload.decompose import decompose

#: The framework families the issue names, each a file (or, for hf-accelerate's old name, an alias).
EXPECTED = ("megatron-lm", "megatron-core", "megatron-deepspeed", "nemo", "megatron-bridge", "torchtitan",
            "deepspeed", "llm-foundry", "maxtext", "hf-accelerate", "eager", "other")


def test_every_file_loads_into_a_checked_spec():
    names = known_frameworks()
    assert set(EXPECTED) <= set(names)
    assert names == sorted(p.stem for p in (SHIPPED_CONF / "framework").glob("*.yaml"))
    for name in names:
        spec = load_framework(name)
        assert isinstance(spec, FrameworkSpec) and spec.name == name
        assert spec.host.calls and spec.host.tp_reductions in ("fused", "dtensor")
        assert spec.vocab_multiple >= 1 and spec.loss_kernel in ("vocab_parallel_cross_entropy", "cross_entropy")
        assert spec.attention and spec.attention[0][0] == 0.0
        assert load_framework(spec.family).family == spec.family  # the family mapper answers a framework
        assert fw.uncertainty_features()[spec.uncertainty_code] == spec.uncertainty_feature
        for setting, spellings in spec.spellings.items():
            assert setting and spellings and all(isinstance(s, str) and s for s in spellings)
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.name = "x"
    # the uncertainty model's codes are the shipped model's: never renumbered
    assert fw.uncertainty_features() == ("megatron-core", "megatron-lm", "accelerate", "deepspeed", "torchtitan",
                                         "llm-foundry", "other")
    assert fw.default_framework().name == "megatron-core" and fw.reference_framework().name == "eager"
    assert load_framework(None) is fw.default_framework()


def test_aliases_and_case_read_the_framework_s_file():
    assert load_framework("accelerate") is load_framework("hf-accelerate")  # the name users typed before
    assert load_framework("Megatron-Core") is load_framework("megatron-core")
    assert load_framework("mcore").name == "megatron-core"
    # NeMo and Megatron-Bridge behave as Megatron-Core, a fused loss by default aside
    for name in ("nemo", "megatron-bridge"):
        spec = load_framework(name)
        assert spec.family == "megatron-core" and spec.loss_fusion and spec.userbuffers
        assert spec.attention == load_framework("megatron-core").attention


def test_an_unknown_framework_is_refused_naming_the_known_ones():
    with pytest.raises(PrismError) as err:
        load_framework("jax")
    assert err.value.field == "framework"
    assert str(err.value).startswith("framework=jax: choose the family that runs the job, one of ")
    for name in known_frameworks():
        assert name in str(err.value)


def test_a_bad_file_is_refused_naming_it(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(SHIPPED_CONF / "framework", conf / "framework")
    text = (conf / "framework" / "nemo.yaml").read_text()
    (conf / "framework" / "nemo.yaml").write_text(text.replace("base: megatron-core", "base: nothing"))
    monkeypatch.setattr(fw.profiles, "CONF_DIR", conf)
    with pytest.raises(PrismError) as err:
        load_framework("nemo")
    assert "nemo" in str(err.value) and err.value.field == "framework.base"


def test_prism_conf_dir_s_framework_folder_is_read(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(SHIPPED_CONF / "framework", conf / "framework")
    own = (conf / "framework" / "torchtitan.yaml").read_text().replace("name: torchtitan", "name: mine")
    (conf / "framework" / "mine.yaml").write_text(own.replace("multiple: 1 ", "multiple: 64 "))
    monkeypatch.setattr(fw.profiles, "CONF_DIR", conf)
    assert "mine" in known_frameworks() and load_framework("mine").vocab_multiple == 64
    monkeypatch.setattr(fw.profiles, "CONF_DIR", tmp_path / "elsewhere")  # no framework/ folder: the shipped one
    assert "mine" not in known_frameworks()


H100 = load_hardware("h100-sxm")
GPT = load_model("gpt3-1.3b")


def _calls(work, op):
    return sum(c.count for st in work.stages for c in st.forward + st.backward + st.step if c.op == op)


def test_a_spec_field_drives_the_workload_exactly_where_specs_differ(monkeypatch):
    """megatron-core and nemo differ in a bf16 job's workload by the gradients' dtype alone
    (nemo's grad_reduce_in_fp32: false; its fp8 weight gathers need fp8 GEMMs, its loss fusion
    default is the layout's): the DP reduction moves half the bytes and nothing else changes. A
    copy of megatron-core whose one field differs (its vocabulary padding) decomposes otherwise
    exactly there."""
    par = ParallelConfig(dp=4, tp=2, global_batch_size=8)
    core = decompose(GPT, par, H100, 8, framework="megatron-core")
    nemo = decompose(GPT, par, H100, 8, framework="nemo")
    steps = [(a, b) for sa, sb in zip(core.stages, nemo.stages) for a, b in zip(sa.step, sb.step) if a != b]
    assert [a.op for a, _ in steps] == ["all_reduce"] * len(core.stages)
    assert all(abs(b.shape_dict["message_bytes"] * 2 - a.shape_dict["message_bytes"]) <= 2 for a, b in steps)
    assert [(s.forward, s.backward) for s in core.stages] == [(s.forward, s.backward) for s in nemo.stages]
    unpadded = replace(load_framework("megatron-core"), name="unpadded", vocab_multiple=1)
    real = fw.load_framework

    def load(name):
        return unpadded if name == "unpadded" else real(name)

    for module in ("predictor.workload.decompose", "predictor.workload.host"):
        monkeypatch.setattr(f"{module}.load_framework", load)
    mine = decompose(GPT, par, H100, 8, framework="unpadded")
    differ = [(a, b) for sa, sb in zip(core.stages, mine.stages) for a, b in zip(sa.forward, sb.forward) if a != b]
    assert differ and all(a.op in ("gemm", "embedding", "vocab_parallel_cross_entropy") for a, _ in differ)
    # the host table and master weights: torchtitan's eager table and autocast casts, Megatron's neither
    titan = decompose(GPT, par, H100, 8, framework="torchtitan")
    assert _calls(titan, "master_weights") and not _calls(core, "master_weights")
    assert _calls(titan, "dtensor") and not _calls(core, "dtensor")


def test_refusals_and_notes_are_the_spec_s():
    per_op = ParallelConfig(tp=8, recompute="per_op")
    from predictor.core.layout import framework_layout, framework_note
    for name in known_frameworks():
        refused = [r for r in load_framework(name).refuses if r.holds(per_op)]
        if refused:
            with pytest.raises(PrismError, match=f"framework={name}"):
                framework_layout(per_op, name)
        else:
            assert framework_layout(per_op, name).recompute == "per_op"
    assert framework_layout(ParallelConfig(tp=8, recompute="selective"), "torchtitan").recompute == "per_op"
    assert "per_op" in framework_note(ParallelConfig(tp=8, recompute="selective"), "torchtitan")
    assert framework_note(ParallelConfig(tp=8, sharding="fsdp"), "accelerate").startswith("parallel.sharding=fsdp")


@pytest.mark.parametrize("cell, family, feature", [
    ("NeMo 2.0", "megatron-core", "megatron-core"), ("Megatron-Bridge", "megatron-core", "megatron-core"),
    ("Megatron-DeepSpeed (vTrain data/README.md)", "megatron-lm", "deepspeed"),
    ("llm-foundry (Composer, PyTorch FSDP)", "", "llm-foundry"), ("MaxText", "other", "other"),
    # NVIDIA's MLPerf LLM implementations are NeMo whatever container the cell names; another
    # submitter's MaxText is not
    ("PyTorch NVIDIA Release 23.09 (MLPerf gpt3 implementation)", "megatron-core", "megatron-core"),
    ("PyTorch NVIDIA Release 25.09 (MLPerf llama31_8b implementation)", "megatron-core", "megatron-core"),
    ("MaxText (MLPerf gpt3 implementation)", "other", "other"),
    ("", "", "megatron-core")])  # a blank cell: the default framework's feature, as it is composed (issue 55)
def test_table_cells_read_as_the_files_say(cell, family, feature):
    spec = fw.table_framework(cell)
    assert (spec.family if spec else "") == family
    assert fw.uncertainty_framework(cell) == feature


#: Framework names as code would compare them: a file's name, an alias, or a family.
_WORDS = re.compile(r"megatron|torchtitan|deepspeed|maxtext|nemo\b", re.IGNORECASE)
#: The loader: the one module allowed to know frameworks by name.
_LOADER = REPO_ROOT / "predictor" / "core" / "framework.py"


#: String tokens: literals, and from Python 3.12 the literal parts of f-strings.
_STRINGS = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _names_in_code(path: Path, names: set[str]) -> list[str]:
    """Code (not comments, not docstrings) of ``path`` that names a framework: an identifier
    naming one, a string literal that is a framework's name or alias, or a one-word literal
    or pattern naming one. Prose in a message that cites a framework as a rule's origin
    ("Megatron refuses it") is no decision by name and passes; so does a snake_case data-set
    id such as ``megatronlm_readme_h100``."""
    src = path.read_text(encoding="utf-8")
    docs = _docstring_lines(ast.parse(src))
    hits = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NAME and _WORDS.search(tok.string):
            hits.append(f"{path.relative_to(REPO_ROOT)}:{tok.start[0]}: {tok.string}")
        elif tok.type in _STRINGS and tok.start[0] not in docs:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # an f-string (or, from Python 3.12, a part of one): its text
                value = tok.string
            if not isinstance(value, str):
                continue
            word = value.strip().lower()
            one_word = not re.search(r"\s", word) or "|" in word
            data_id = re.fullmatch(r"[a-z0-9_.]+", word) and "_" in word
            if word in names or (one_word and not data_id and _WORDS.search(word)):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{tok.start[0]}: {tok.string}")
    return hits


def test_no_module_but_the_loader_names_a_framework():
    specs = fw.all_frameworks()
    names = {s.name for s in specs} | {a for s in specs for a in s.aliases} | {s.family for s in specs} | \
        {s.uncertainty_feature for s in specs}
    # the reference's and the unrecognised one's names are everyday words ("eager", "other")
    names -= {fw.reference_framework().name, fw.unrecognised_framework().name, "other"}
    hits = [hit for path in sorted((REPO_ROOT / "predictor").rglob("*.py")) if path != _LOADER
            for hit in _names_in_code(path, names)]
    assert hits == [], "framework names outside predictor/core/framework.py (read a FrameworkSpec field):\n" + \
        "\n".join(hits)


@pytest.mark.parametrize("cell, framework", [
    ("NVIDIA NeMo Framework Release 24.09 (MLPerf gpt3 implementation)", "nemo"),
    ("Megatron-Bridge 0.2", "megatron-bridge"),
    ("Megatron-Core r0.8.0", "megatron-core"),
    ("Megatron-DeepSpeed (vTrain data/README.md)", "deepspeed"),  # DeepSpeed's, read with Megatron-LM's defaults
    ("torchtitan (FSDP+compile)", "torchtitan"),
    ("", fw.default_framework().name),
])
def test_a_row_is_priced_by_the_framework_its_cell_names_within_its_family(cell, framework):
    from predictor.core.framework import row_framework
    assert load_framework(row_framework(cell)).name == framework
