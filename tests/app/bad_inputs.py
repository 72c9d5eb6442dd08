"""Bad command lines and what PRISM answers: exit code 2 (unless a row gives another) and one
line on stderr, ``prism VERB: error: ...``, that holds the row's fragment, never a traceback.

Each row is (argv, fragment) or (argv, fragment, exit code); tests/app/test_bad_inputs.py runs
the rows of each verb. The rows came from the new-user probes (their files: in the comments).
A case that needs files, a model set or checks after the error stays a test of its own.
"""

JOB = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]
G13 = ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]  # a job without its verb

# A bad setting is one line naming it (was tests/test_bad_input.py)
SETTINGS = [
    ([*JOB, "parallel.tp=0"], "parallel.tp=0"),
    ([*JOB, "parallel.tp=-2"], "parallel.tp=-2"),  # not blamed on the dp it would imply
    ([*JOB, "parallel.dp=4"], "parallel.dp=4 disagree"),
    ([*JOB, "seed=abc"], "seed='abc'"),
    ([*JOB, "seed=-1"], "seed=-1"),
    ([*JOB, "target_step_s=abc"], "target_step_s='abc'"),
    ([*JOB, "target_step_s=-1"], "target_step_s=-1"),
    ([*JOB, "train_tokens=inf"], "train_tokens=inf"),
    ([*JOB, "output=xml"], "output=xml"),
    ([*JOB, "model.family=bert"], "model.family='bert'"),
    ([*JOB, "model.num_layers=10000000000000"], "model.num_layers=10000000000000"),  # was a MemoryError
    ([*JOB, "model.num_layers=4096"], "model.num_layers=4096"),
    (["predict", "model=llama3-8b", "hardware=H100", "gpus=8"], "did you mean h100-sxm?"),
    ([*JOB, "parallel.tp=eight"], "parallel.tp: 'eight' is not a whole number"),
    ([*JOB, "parallel.tp=null"], "parallel.tp: null leaves it empty, and it takes a whole number"),  # OmegaConf's words
    ([*JOB, "model.name=null"], "model.name: null leaves it empty, and it takes a text"),
    ([*JOB, "parallel.sequence_parallel=maybe"], "parallel.sequence_parallel: 'maybe' is not true or false"),
    (["predict", "model=llama3-8b", "hardware=DGX B200", "gpus=8"], "did you mean b200?"),
    (["predict", "model=llama3.1-8b", "hardware=h100-sxm", "gpus=8"], "did you mean llama3-8b?"),  # a published name
    (["predict", "model=DeepSeek-V3.1", "hardware=h100-sxm", "gpus=64"], "did you mean deepseek-v3?"),
    (["predict", "model=/tmp/mine.yaml", "hardware=h100-sxm", "gpus=8"], "a file path; model= takes the name"),
    (["search", "model=llama3-8b", "hardware=h100-sxm", "gpus=16", "parallel.tp=8"], "parallel.tp=8"),
    (["search", "model=llama3-8b", "hardware=h100-sxm", "gpus=16", "seed=abc"], "seed='abc'"),
    (["evaluate", "samples=samples/h200", "hardware=a100-sxm4-80gb"], "(they hold: h200)"),
]

# Settings a new user gets wrong: added or deleted keys, numbers for switches, absurd token
# budgets (was tests/test_bad_settings.py)
WRONG_SETTINGS = [
    ([*JOB, "+foo=1"], "+foo=1: foo is no setting of PRISM"),  # was ignored without a word
    ([*JOB, "+paralel.tp=8"], "did you mean parallel?"),
    ([*JOB, "~gpus"], "~gpus: deletes gpus"),  # was a ConfigAttributeError traceback
    ([*JOB, "~seed"], "~seed: deletes seed"),
    ([*JOB, "parallel.overlap_grad_reduce=2"], "parallel.overlap_grad_reduce=2: takes true or false"),  # read as true
    ([*JOB, "hardware.host.asynchronous=5"], "hardware.host.asynchronous=5: takes true or false"),
    ([*JOB, "parallel.moe_capacity_factor=-1"], "parallel.moe_capacity_factor=-1.0"),  # dense: was ignored
    ([*JOB, "train_tokens=1e40"], "train_tokens=1e+40: above 1e+18 tokens"),
    (["variability", *JOB[1:], "train_tokens=1e40"], "train_tokens=1e+40"),  # was numpy's 'lam value too large'
    # an OverflowError traceback in the schedule; 1e18 was priced at 8 trillion days
    ([*JOB, "parallel.global_batch_size=1e30"], "parallel.global_batch_size=1.000e+30: more than 1,073,741,824"),
    ([*JOB, "parallel.global_batch_size=1e18"], "parallel.global_batch_size=1.000e+18: more than"),
    (["search", *JOB[1:], "parallel.global_batch_size=1e30"], "parallel.global_batch_size=1.000e+30"),  # int64 wrap
    ([*JOB[:-1], "parallel.dp=100000000"], "parallel.dp=100,000,000: more than 16,777,216 GPUs"),
    (["predict", "model=llama3-8b", "hardware=[a100-sxm4-80gb,h100-sxm]"], "not a list (prism compare takes several"),
    # its advice was brackets too, which this setting then refused as a list
    ([*JOB, "parallel.recompute_modules=moe,mlp"], "takes one text, so write its commas in quotes: "
                                                   "parallel.recompute_modules='moe,mlp'"),
    ([*JOB, "hardware.price_per_gpu_hour=$2"], "hardware.price_per_gpu_hour: '$2' is not a number"),  # 'of the type'
    (["variability", *JOB[1:], "analysis.thresholds=[abc]"], "analysis.thresholds[0]: 'abc' is not a number"),
    # 21 nodes of 3 and one GPU of a 22nd were priced as a cluster of whole nodes
    (["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "hardware.node.gpus_per_node=3"],
     "gpus=64: not a whole number of nodes of 3 GPUs (hardware.node.gpus_per_node of h100-sxm): 21 nodes and 1 GPU "),
]

# A setting the verb does not read is refused, naming who reads it (was tests/test_bad_settings.py)
NOT_READ = [
    (["compare", "model=llama3-8b", "gpus=8", "confidence=0.95"],  # compare has no confidence: was ignored
     "confidence=0.95: prism compare does not read confidence (prism predict reads it)"),
    (["search", *JOB[1:], "confidence=0.95"], "prism search does not read confidence"),  # ranked by p50 regardless
    ([*JOB, "pue=1.2"], "pue=1.2: prism predict does not read pue (prism compare reads it)"),
    (["train", "samples=samples/h200", "hardware=h200", "analysis.scales=[8]"], "prism train does not read analysis"),
    (["sample", "hardware=local-cpu", "gpus=8"], "prism sample does not read gpus"),
]

# A bad number on the command line is one line naming it (was tests/test_probe4_numbers.py)
NUMBERS = [
    # were numpy's ArrayMemoryError: 2.18 TiB for the draws, 74.5 GiB for the runs
    (["variability", *G13, "analysis.draws=10000000000"], "analysis.draws=10000000000: must be a whole number from 100 "
                                                          "to 1,000,000"),
    (["variability", *G13, "analysis.runs=10000000000"], "analysis.runs=10000000000: must be a whole number from 100"),
    # were priced as 1 token (train 0.0 s, $0) and a pue of 1.0
    (["predict", *G13, "train_tokens=true"], "train_tokens=True: must be a positive finite number, not true or false"),
    (["compare", *G13, "pue=true"], "pue=True: must be a positive finite number, not true or false"),
    (["compare", *G13, "pue=1e308"], "pue=1e+308: power usage effectiveness, from 1 to 3"),  # was energy inf
    # was priced as if userbuffers held no SMs (sms=10 was refused)
    (["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.tp=8", "parallel.sequence_parallel=true",
      "parallel.overlap_tp_comm=true", "hardware.device.sms=0"], "hardware.device.sms=0: a GPU's streaming multiproc"),
    # were priced: 261,382,042 GiB per GPU, a step of 44,836,695,113,680 s
    (["predict", *G13, "model.seq_length=100000000000"], "model.seq_length=100000000000: more than 16,777,216"),
    (["predict", *G13, "model.hidden_size=1000000000", "model.num_heads=1000000", "model.num_kv_heads=1000000",
      "model.ffn_hidden_size=4000000000"], "model.hidden_size=1000000000: more than 262,144"),
]

# validate refuses a setting the other input reads (was tests/test_bad_inputs_probe3.py)
VALIDATE_INPUTS = [
    (["validate", "published=data/e2e/e2e_training_visible.csv", "out=fig.png"], "out=fig.png: not read with "
                                                                                 "published=;"),
    (["validate", "published=data/e2e/e2e_training_visible.csv", "models_dir=models"], "models_dir=models: not read "
                                                                                       "with published=;"),
    (["validate", "published=data/e2e/e2e_training_visible.csv", "measured=m.parquet"], "measured=m.parquet: not read"),
    (["validate", "measured=m.parquet", "plot=fig.png"], "plot=fig.png: not read with measured=; measured= draws its "
                                                         "CDF to out=PATH.png"),
]

# An SM count no GPU has is named (was tests/test_bad_inputs_wider.py)
SMS = [
    ([*JOB, "hardware.device.sms=-5"], "hardware.device.sms=-5: must be a non-negative integer"),
    ([*JOB, "hardware.device.compute_capability=-1"], "hardware.device.compute_capability=-1.0"),  # changed the kernel
    ([*JOB, "hardware.device.sms=16", "parallel.tp=8", "parallel.sequence_parallel=true",
      "parallel.overlap_tp_comm=true"],
     "hardware.device.sms=16: parallel.overlap_tp_comm's collectives hold 16 SMs"),  # was NaN step times
]

# A bare key suggests the setting it ends (was tests/test_probe4_config.py)
BARE_KEYS = [
    (["predict", "tp=8"], "did you mean parallel.tp?"),  # was "did you mean top?", a setting of search
    (["predict", "+tp=8"], "did you mean parallel.tp?"),
    (["predict", "draws=10"], "did you mean analysis.draws?"),
    (["predict", "num_experts=8"], "did you mean model.num_experts?"),  # a setting tiny.yaml does not write
    (["predict", "topp=3"], "did you mean top?"),
]

# A folder named by a number is read as a path (was tests/test_bad_inputs_api.py)
# was TypeError: expected str, bytes or os.PathLike object, not int
PATHS = [
    ([*JOB, "models_dir=5"], "models_dir=5: no such folder"),
    ([*JOB, "models_dir=2024"], "models_dir=2024: no such folder"),
]

# Price, power and capacity have plausible ranges (was tests/test_probe7.py)
RANGES = [
    (["predict", "model=tiny", "hardware=h100-sxm", "hardware.price_per_gpu_hour=1e30"],
     "hardware.price_per_gpu_hour="),
    (["predict", "model=tiny", "hardware=h100-sxm", "hardware.power_w=1e30"], "hardware.power_w="),
    (["predict", "model=tiny", "hardware=h100-sxm", "hardware.power_w=0.001"], "hardware.power_w="),
    (["predict", "model=tiny", "hardware=h100-sxm", "hardware.memory.capacity_gib=1e-9"],
     "hardware.memory.capacity_gib="),
]

# A profile value no device has is named (was tests/test_bad_input.py)
PROFILE_VALUES = [
    (["predict", "model=tiny", "hardware=local-cpu", "hardware.variability.spatial_cv=5"],
     "hardware.variability.spatial_cv=5.0: a coefficient of variation is a share"),
    (["predict", "model=tiny", "hardware=local-cpu", "hardware.device.kind=tpu"],
     "hardware.device.kind='tpu': choose gpu or cpu"),
]

# Settings a dense model or a CPU does not have (was tests/test_bad_input.py and tests/test_probe7.py)
NOT_HERE = [
    ([*JOB, "parallel.moe_dispatcher=foo"], "parallel.moe_dispatcher='foo': unknown; choose one of"),
    # it blamed the global batch ("a multiple of 64"), which was one
    (["search", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.etp=2"],
     "parallel.etp=2: llama3-8b has no experts"),
    (["predict", "model=tiny", "hardware=local-cpu", "parallel.attention=cudnn"],
     "parallel.attention=cudnn: cuDNN's fused attention runs on NVIDIA GPUs"),
]

CASES = [*SETTINGS, *WRONG_SETTINGS, *NOT_READ, *NUMBERS, *VALIDATE_INPUTS, *SMS, *BARE_KEYS, *PATHS, *RANGES,
         *PROFILE_VALUES, *NOT_HERE]


def of_verb(verb: str) -> list[tuple[list[str], int, str]]:
    """The rows of one verb as (argv, exit code, fragment)."""
    rows = [(argv, *rest) for argv, *rest in CASES if argv[0] == verb]
    return [(argv, rest[1] if len(rest) > 1 else 2, rest[0]) for argv, *rest in rows]


VERBS = sorted({argv[0] for argv, *_ in CASES})
