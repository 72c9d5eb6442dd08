"""Plots are written atomically (a complete image or nothing) and drawn without switching the
caller's matplotlib backend."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from predictor.app.plots import cdf_figure, new_figure, save_figure  # noqa: E402


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


def test_the_verbs_figures_leave_the_callers_backend_alone(tmp_path):
    """A notebook keeps its inline backend: figures are drawn without pyplot (new_figure)."""
    import numpy as np

    from predictor.analyses.validate import Validation, score

    rng = np.random.default_rng(0)
    measured, predicted = rng.lognormal(0, 0.1, 30), rng.lognormal(0.05, 0.1, 500)
    v = Validation([score("layout", predicted, measured)], {"layout": measured}, {"layout": predicted})
    plt.switch_backend("svg")  # any backend but Agg, as a notebook's inline one
    try:
        path = save_figure(cdf_figure(v), tmp_path / "cdf.png")
        fig, axes = new_figure(1, 2)
        assert len(axes) == 2 and matplotlib.get_backend() == "svg"
    finally:
        plt.switch_backend("Agg")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in tmp_path.iterdir()] == ["cdf.png"]
