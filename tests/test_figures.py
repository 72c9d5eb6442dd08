"""Plots are written atomically: a complete image or nothing."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from predictor.figures import save_figure  # noqa: E402


def test_save_writes_a_png_and_no_temporary_file(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    path = save_figure(fig, tmp_path / "sub" / "cdf.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["cdf.png"]


def test_a_failed_save_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "cdf.png"
    path.write_bytes(b"old")
    fig, _ = plt.subplots()
    with pytest.raises(ValueError):
        save_figure(fig, tmp_path / "cdf.notaformat")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["cdf.png"]
