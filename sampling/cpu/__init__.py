"""Measuring code only the CPU testbed needs: a rank's ops beside a neighbouring rank
(:mod:`sampling.cpu.co_run`), a collective's rounds after shorter compute gaps
(:mod:`sampling.cpu.collective_gap`), and the hypervisor's steal time (:mod:`sampling.cpu.steal`).
The corrections they feed are in ``predictor/latency/adjustments/``: the CPU testbed is a
smoke test, and what only it needs stays apart from the core."""
