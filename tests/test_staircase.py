"""Tests for staircase.py, Section 4.1's staircase: small N, few units and L-BFGS rounds, so a few seconds in all."""
import numpy as np
import pytest
import torch
from PIL import Image

import staircase

SMALL = dict(staircase.HP, hidden=64, lbfgs_iters=500, lbfgs_rounds=3)
N, DELTA = 4, 0.5


@pytest.fixture(scope="module")
def small_run():
    return staircase.run(N, DELTA, 0, SMALL)


def net(w, b, a, c=0.0):
    """f(x) = Σ_i a_i relu(w_i x + b_i) + c with the given weights."""
    f = staircase.TwoLayerReLU(len(w), 0.0, 1.0, c, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for p, v in [(f.w, w), (f.b, b), (f.a, a)]:
            p.copy_(torch.tensor(v, dtype=torch.float64))
    return f


def test_paper_norm_matches_the_papers_values():
    x = staircase.make_data(N, DELTA, 0, SMALL)["test"][0]
    half = (1 - DELTA) / 2     # the staircase spline: flat on each interval, slope 1/δ across each gap
    kinks = [k for i in range(1, N) for k in (i + half, i + 1 - half)]
    spline = net([1.0] * len(kinks), [-k for k in kinks], [1 / DELTA, -1 / DELTA] * (N - 1), c=1.0)
    assert torch.allclose(spline(x), torch.round(x))
    assert staircase.paper_norm(spline) == pytest.approx((N - 1) / DELTA)       # ‖f_std‖ = (N-1)/δ
    identity = net([1.0, -1.0], [0.0, 0.0], [1.0, -1.0])                        # x = relu(x) - relu(-x)
    assert torch.allclose(identity(x), x) and staircase.paper_norm(identity) == pytest.approx(1.0)
    assert staircase.paper_norm(net([1.0], [0.0], [1.0])) == pytest.approx(0.5)   # relu(x): ½ max(1, 1)
    assert staircase.paper_norm(net([2.0], [0.0], [3.0])) == pytest.approx(3.0)   # 3 relu(2x) = 6 relu(x)


def test_composed_fits_extrapolates_better_and_is_simpler(small_run):
    _, _, (standard, composed) = small_run
    assert standard["method"] == "standard" and composed["method"] == "composed"
    assert standard["train"][0] < 0.01 and composed["train"][1] == 0.0           # both fit the training points
    assert composed["extrapolation"][0] < standard["extrapolation"][0]          # MSE of Π∘f vs of f on N+1..2N
    assert composed["slope"] > 0.3 > standard["slope"]                           # f keeps climbing beyond N
    assert composed["norm"] < standard["norm"] / 4
    # weight decay found (close to) the least norm: s*/2, measured on X; the training points lie inside X
    assert composed["norm"] == pytest.approx(staircase.min_norm_slope(N, DELTA, SMALL["margin"]) / 2, rel=0.1)


def test_run_is_deterministic(small_run):
    assert staircase.run(N, DELTA, 0, SMALL)[2] == small_run[2]


def colour_share(img, colour):
    return (np.asarray(img) == colour).all(-1).mean()


def test_plot_has_both_panels_with_their_lines(small_run, tmp_path):
    png = tmp_path / "deep" / "staircase.png"
    staircase.draw(str(png), *small_run, N, DELTA)
    img = Image.open(png)
    assert img.format == "PNG" and img.size == (1120, 420)
    img = img.convert("RGB")
    left, right = img.crop((0, 0, 560, 420)), img.crop((560, 0, 1120, 420))
    c = staircase.COLORS
    assert colour_share(left, c["standard"]) > 0.001 and colour_share(right, c["standard"]) == 0
    assert colour_share(right, c["composed"]) > 0.001 and colour_share(left, c["composed"]) == 0
    assert colour_share(right, c["rounded"]) > 0.001 and colour_share(left, c["rounded"]) == 0
    assert colour_share(left, c["target"]) > 0.001 and colour_share(right, c["target"]) > 0.001


@pytest.mark.parametrize("argv, flag", [(["--n", "1"], "--n"), (["--delta", "1"], "--delta"),
                                        (["--delta", "0"], "--delta"), (["--n", "x"], "--n")])
def test_bad_flag_is_one_line_and_exit_2(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        staircase.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and flag in err[0] and err[0].startswith("staircase.py: error:")
