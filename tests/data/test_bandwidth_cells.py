"""The inter_node cell as published tables write it: the network collectives run on, per GPU.

The texts are those of MLPerf Training's system descriptions (results/<system>.json's
host_networking fields) and of papers' cluster descriptions, as data/e2e carries them."""
import pytest

from predictor.core.errors import PrismError
from predictor.data.runs_table import bandwidth

GBPS = 1e9 / 8  # bytes/s in one Gb/s


@pytest.mark.parametrize("text, gpus_per_node, per_gpu_gbps", [
    ("400 Gb/s per GPU backend RDMA", 8, 400),
    ("8x 200 Gb/s HDR InfiniBand per node", 8, 200),
    ("800 Gb/s per node (vTrain config value)", 8, 100),
    ("1600 Gbps node-node RoCE", 8, 200),
    # the compute fabric, not the storage or management NICs listed beside it
    ("Storage: 2x ConnectX-7 IB NDR 400Gb/s, Compute: 8x ConnectX-7 IB NDR 400Gb/s, "
     "Management: 100Gb/s Ethernet NIC", 8, 400),
    ("Storage+Management: 1x NVIDIA BlueField 2 DPU 100Gb/s, Compute: 8x NVIDIA ConnectX-7 IB NDR 400Gb/s", 8, 400),
    ("Management: 1x Bluefield-2 DPU Ethernet 100Gb/Sec, Compute: 8x ConnectX-7 InfiniBand NDR 400Gb/Sec", 8, 400),
    # a count of NICs is the node's: four 800 Gb/s NICs shared by four GPUs
    ("4x ConnectX-8 IB XDR 800 Gb/s", 4, 800),
    ("4x ConnectX-7 IB NDR 400Gb/s", 4, 400),
    ("1x Ethernet 100Gb/Sec, 8x NVIDIA Quantum-2 CX7 InfiniBand (400Gb/s)", 8, 400),
    ("8x ConnectX-7 IB NDR 400Gb/s + 200Gb/s Ethernet NIC", 8, 400),
    ("InfiniBand 8x50 GB/s per node (as stated)", 8, 400),
])
def test_reads_the_collectives_network_per_gpu(text, gpus_per_node, per_gpu_gbps):
    bw, _ = bandwidth({"inter_node": text}, "inter_node", gpus_per_node)
    assert bw == pytest.approx(per_gpu_gbps * GBPS)


@pytest.mark.parametrize("text", [
    "ROCE2; Data bandwidth for GPU-PCIe: 504 GB/s; PCIe-NIC: 500 GB/s",  # the host's PCIe, not a network
    "InfiniBand (details not given)",
])
def test_no_network_figure_leaves_the_profiles(text):
    bw, note = bandwidth({"inter_node": text}, "inter_node", 8)
    assert bw is None and "the profile's network" in note


def test_an_assumption_is_said():
    _, note = bandwidth({"inter_node": "4x ConnectX-8 IB XDR 800 Gb/s"}, "inter_node", 4)
    assert "3200 Gb/s a node" in note and "800 Gb/s a GPU" in note
    _, note = bandwidth({"inter_node": "400 Gb/s"}, "inter_node", 8)
    assert "read per GPU" in note


def test_unreadable_figure_names_the_column():
    with pytest.raises(PrismError) as err:
        bandwidth({"inter_node": "Compute: -400 Gb/s"}, "inter_node", 8)
    assert err.value.field == "inter_node"
