"""Free text in a published run's cell, read by its plain meaning.

People write the cells of a training-runs table as their framework's configuration or their
paper writes them: a number with thousands separators or a binary k ("1,024", "4K"), a
switch as any boolean word ("enabled", "True", "--sequence-parallel"), a cell that is
"none" with a reason after it ("none (no ACT_CKPT set)"), a layer pattern in words ("all
MoE", "every 2nd layer MoE"), a precision in Lightning's or a paper's words ("16-mixed",
"mixed (16-bit)"). Each reader here takes one cell's text and returns what it means, or None
where the text is not of its kind; the callers in :mod:`predictor.data.runs_table` and
:mod:`predictor.data.published` decide what a None refuses. The framework-specific spellings
(NeMo's ``distributed_fused_adam``, DeepSpeed's ``stage 2``) are the frameworks' files'
(``values:`` in ``conf/framework/*.yaml``); what is here is plain language, framework-free.

Imports nothing heavy (``prism --help`` reads the table schema).
"""
from __future__ import annotations

import re

#: Words for a switch that is on / off (a cell's first word decides).
ON = ("on", "yes", "y", "true", "1", "enabled", "enable", "active", "used", "set")
OFF = ("off", "no", "n", "false", "0", "disabled", "disable", "none", "unset", "not")

#: Binary multiples a count may carry ("4K" tokens, "2k" sequences): 1,024 each.
_SUFFIX = {"k": 1 << 10}

_NUMBER = re.compile(r"(\d+(?:\.\d+)?)\s*([kK])")
_GROUPED = re.compile(r"\d{1,3}([,\u202f\u00a0' _])\d{3}(\1\d{3})*(\.0*)?")


#: A count written with its setting's label before it ("TP=8", "tp 8", "PP: 4") or a unit
#: word or remark after it ("4096 tokens", "8 (per node)", "5 (interleaved)"): the number.
#: Not "64 nodes" in a GPU count: a unit that changes the number is not dropped.
_LABELLED = re.compile(r"(?:(?:tp|pp|dp|cp|ep|etp|vp|vpp|mbs|gbs|fsdp)\s*[=:]?\s*)?"
                       r"(\d[\d,\u202f\u00a0' _]*(?:\.\d+)?\s*[kK]?)"
                       r"\s*(?:-?way|x|tokens?|seqs?|sequences?|samples?|gpus?|layers?|heads?|experts?)?"
                       r"\s*(?:\([^()]*\))?", re.IGNORECASE)
#: Dashes that some tables write for "not applicable" in a count column.
DASHES = ("-", "\u2013", "\u2014", "--")


def labelled_number(text: str) -> str | None:
    """The number of a count cell written with a label, unit or remark ("TP=8", "4096 tokens",
    "5 (interleaved)", "8-way"), None where the cell is not one."""
    found = _LABELLED.fullmatch(text.strip())
    return found.group(1).strip() if found and found.group(1).strip() != text.strip() else None


def plain_number(text: str, suffix: bool = True) -> str:
    """A count cell's text with thousands separators dropped ("1,024", "1 024", "1'024") and
    a binary k worked out ("4K" -> "4096", "1.5k" -> "1536"; not where ``suffix`` is false:
    "256K" of a vocabulary is 256,000 in one paper and 262,144 in another); other text as
    it was (the caller refuses what is not a number)."""
    text = text.strip()
    if _GROUPED.fullmatch(text):
        return re.sub(r"[,\u202f\u00a0' _]", "", text)
    found = _NUMBER.fullmatch(text) if suffix else None
    if found:
        value = float(found.group(1)) * _SUFFIX[found.group(2).lower()]
        return str(int(value)) if value.is_integer() else text
    return text


_TOKENS = re.compile(r"\s*((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*([kmb]?)\s*(?:tokens?)?\s*", re.IGNORECASE)
#: A token count's suffixes: binary first, then decimal ("16M" tokens of 8,192-token sequences
#: are 2,048 of them; "2.048M" of 2,000 are 1,024).
_TOKEN_SCALES = {"": (1,), "k": (1 << 10, 1e3), "m": (1 << 20, 1e6), "b": (1 << 30, 1e9)}


def whole_sequences(text: str, seq: int) -> int | None:
    """The sequences of ``seq`` tokens that a token count ("4194304", "4M", "16M tokens") makes,
    a suffix read binary where that makes whole sequences, else decimal; None where the text is
    no positive token count or none of its readings is a whole number of sequences."""
    found = _TOKENS.fullmatch(text)
    if not found:
        return None
    value = float(found.group(1).replace(",", ""))
    counts = [value * scale / seq for scale in _TOKEN_SCALES[found.group(2).lower()]]
    return next((int(c) for c in counts if c > 0 and c.is_integer()), None)


def strip_flag(text: str, flags) -> tuple[str, bool]:
    """``text`` without a leading configuration key of ``flags`` ("--sequence-parallel",
    "sequence_parallel: true", "model.sequence_parallel=False": the rest after ``=`` or
    ``:``), and whether one was there."""
    low = text.strip().lower()
    for flag in sorted(flags, key=len, reverse=True):
        for key in {flag.lower(), flag.lower().lstrip("-"), flag.lower().lstrip("-").replace("-", "_")}:
            found = re.match(rf"(?:[\w.]*\.)?{re.escape(key)}(?![\w-])\s*[=:]?\s*", low)
            if key and found:
                return low[found.end():], True
    return low, False


def switch_word(text: str, flags=()) -> bool | None:
    """True / False for a switch cell ("on (TP > 1)", "enabled", "True", a bare
    "--sequence-parallel", "sequence_parallel=False"); None where its first word is no switch."""
    rest, flagged = strip_flag(text, flags)
    if flagged and not rest.strip():
        return True  # a flag named alone is a flag set
    first = re.match(r"[a-z0-9]+", rest)
    word = first.group(0) if first else ""
    if word in ON:
        return True
    if word in OFF:
        return False
    return None


_NONE_CELL = re.compile(r"(none|no|off|false|disabled|0|n/?a)\s*(\(.*\)|[;,:-].*)?", re.IGNORECASE)


def none_cell(text: str) -> bool:
    """Whether a choice cell says "none" with only a reason after it: "none (no ACT_CKPT set)",
    "off; activations kept", "no - fits in memory"."""
    return bool(_NONE_CELL.fullmatch(text.strip()))


_ORDINAL = {"other": 2, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}


def layer_pattern(text: str) -> int | None:
    """Every how many layers is a MoE layer, from words: "all MoE", "every layer", "all
    layers" -> 1; "every 2nd layer MoE", "every other layer", "alternating", "interleaved
    dense/MoE" -> 2; "every 4th layer", "every 4 layers", "1 in 4" -> 4. None: not a pattern
    in words."""
    low = text.strip().lower()
    if re.fullmatch(r"(all|every)\s*(moe|layers?|moe layers?|layers? moe|layers are moe)?(\s*\(.*\))?", low):
        return 1
    if re.match(r"(alternating|alternate|interleaved)\b", low):
        return 2
    found = re.match(r"every\s+(other|second|third|fourth|\d+(?:st|nd|rd|th))\b", low)
    if found:
        word = found.group(1)
        return _ORDINAL.get(word) or int(re.match(r"\d+", word).group(0))
    found = re.match(r"every\s+(\d+)\s+layers?\b", low) or re.match(r"1\s*(?:in|of|/)\s*(\d+)\b", low)
    if found and int(found.group(1)) >= 1:
        return int(found.group(1))
    return None


#: Precisions in the words of papers, Lightning's ``precision`` and training configs, each
#: the dtype it trains in (what :data:`predictor.data.runs_table.PRECISIONS` does not spell).
PRECISION_WORDS = {
    "bfloat16": ("bf16-mixed", "bf16-true", "bf16 mixed", "mixed bf16", "amp_bf16", "amp bf16", "brain float 16",
                 "bfloat16 mixed"),
    "float16": ("16-mixed", "16-bit", "16 bit", "16-true", "amp_fp16", "amp fp16", "fp16 mixed", "mixed fp16",
                "float16 mixed", "half precision", "apex amp", "apex o1", "apex o2", "amp o1", "amp o2"),
    "float32": ("32-true", "32-bit", "32 bit", "full precision", "single precision"),
}


#: Choice values in plain words, framework-free: a recompute cell's "full AC" or "attention
#: only" (Megatron's selective recompute is the attention core), a sharding cell's "HSDP"
#: (hybrid-sharded FSDP) or "sharded optimizer states" (ZeRO-1).
PLAIN_VALUES = {
    "recompute": {"full": ("full ac", "full layer", "full layers", "whole layer", "whole layers", "full activation",
                           "full recompute", "full recomputation", "full checkpointing"),
                  "selective": ("attention only", "core attention", "core_attn", "attention core", "selective ac")},
    "sharding": {"fsdp": ("hsdp", "hybrid shard", "hybrid sharded", "hybrid_shard", "zero-3 (fsdp)"),
                 "zero1": ("sharded optimizer", "optimizer state sharding", "sharded optimizer states",
                           "optimizer sharding")},
}
