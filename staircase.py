"""The paper's motivating example (Section 4.1, Figure 1 bottom, Appendix A) in seconds on a CPU.

    python staircase.py                          # N=6, δ=0.5: a table and runs/staircase.png
    python staircase.py --n 10 --delta 0.25      # another staircase
    python staircase.py --seed 1 --plot /tmp/staircase.png
    python staircase.py --sweep                  # norms, slopes, extrapolation against (N-1)/δ

Nets f(x) = Σ_i a_i relu(w_i x + b_i) + c learn f*(x) = ⌊x⌉ on N intervals of width 1-δ (X): standard
fits f, composed Π∘f with Π(y) = ⌊y⌉. The table: errors on X and on N+1..2N, ‖f‖, f's slope beyond N.
"""
import os
import time

import torch

import common
import harness
from PIL import Image, ImageDraw, ImageFont

HP = dict(
    hidden=128,               # ReLU units of f
    train_per_interval=32,    # training x's, uniform at random in each of the N intervals
    test_per_interval=101,    # test x's, evenly spaced over each interval, ends included
    weight_decay=1e-4,        # λ in  loss + λ·½(‖a‖² + ‖w‖²), the same for both methods
    margin=0.45,              # composed: surrogate zero iff |f(x) - f*(x)| <= margin; 1/2 would be Π∘f = f*,
                              # and a straight f fits only if margin >= (1-δ)/2, the intervals' half-width
    lbfgs_iters=2000,         # full-batch L-BFGS, to get close to the minimum norm. Its line search stalls at
    lbfgs_rounds=20,          # ReLU kinks now and then: restart it, fresh history, round after round, until
    lbfgs_tolerance=1e-6,     # one lowers the objective by less than this fraction
    lbfgs_history=50,
)
SWEEP = dict(n=[3, 6, 12], delta=[0.25, 0.5, 0.75])
COLORS = dict(target=(40, 40, 40), standard=(200, 60, 40), composed=(30, 90, 200), rounded=(240, 150, 0))
round_to_integer = torch.round  # Π(y) = ⌊y⌉, the nearest valid output


def interval_points(first, last, delta, per, generator=None):
    """x's in [i-(1-δ)/2, i+(1-δ)/2] for i = first..last: at random given a generator, else an even grid."""
    u = torch.linspace(0, 1, per).repeat(last - first + 1) if generator is None \
        else torch.rand(per * (last - first + 1), generator=generator)
    return (torch.arange(first, last + 1).repeat_interleave(per) + (u - 0.5) * (1 - delta)).double()


def make_data(n, delta, seed, hp):
    xs = dict(train=interval_points(1, n, delta, hp["train_per_interval"], torch.Generator().manual_seed(seed)),
              test=interval_points(1, n, delta, hp["test_per_interval"]),
              extrapolation=interval_points(n + 1, 2 * n, delta, hp["test_per_interval"]))
    return {split: (x, torch.round(x)) for split, x in xs.items()}      # f*(x) = ⌊x⌉ on X


class TwoLayerReLU(torch.nn.Module):
    """f(x) = Σ_i a_i relu(w_i x + b_i) + c, its kinks spread over the training range, |a_i| = |w_i|."""

    def __init__(self, hidden, x_lo, x_hi, c, generator):
        super().__init__()
        w = torch.randn(hidden, generator=generator, dtype=torch.float64) * hidden ** -0.25
        kinks = x_lo + (x_hi - x_lo) * torch.rand(hidden, generator=generator, dtype=torch.float64)
        sign = torch.randint(0, 2, (hidden,), generator=generator, dtype=torch.float64) * 2 - 1
        self.w, self.b = torch.nn.Parameter(w), torch.nn.Parameter(-w * kinks)
        self.a, self.c = torch.nn.Parameter(sign * w.abs()), torch.nn.Parameter(torch.tensor(float(c)).double())

    def forward(self, x):
        return torch.relu(x[:, None] * self.w + self.b) @ self.a + self.c


def weight_penalty(net):
    # C(θ) = ½(‖w⁽²⁾‖² + ‖W⁽¹⁾‖²) (Appendix A), biases free as in Savarese et al. (2019): its
    # minimum over the nets computing f is 2‖f‖, so weight decay looks for the minimum-norm f that fits.
    return 0.5 * (net.a.square().sum() + net.w.square().sum())


def composed_hinge_loss(f, y, margin):
    # Π∘f has no gradient; this hinge is zero iff |f(x) - y| <= margin < 1/2, so Π(f(x)) = f*(x), and weight
    # decay picks the paper's minimum-norm base predictor argmin {‖f‖ : Π∘f = f* on X}.
    return torch.relu((f - y).abs() - margin).square().mean()


def paper_norm(net):
    """‖f‖ = ½ max(∫|f''|, |f'(-∞) + f'(+∞)|) (Section 4.1, which prints |f''|²) = ½ max(Σ|a_i w_i|,
    |Σ a_i w_i|), since f'' = Σ_i a_i|w_i| δ(x + b_i/w_i) (unless kinks coincide)."""
    aw = (net.a * net.w).detach()
    return 0.5 * max(aw.abs().sum().item(), aw.sum().abs().item())


def fit_two_layer_net(loss, data, seed, hp):
    x, y = data["train"]
    net = TwoLayerReLU(hp["hidden"], x.min(), x.max(), y.mean(), torch.Generator().manual_seed(seed))

    def objective():            # loss + λ·C(θ), and its gradient
        net.zero_grad()
        value = loss(net(x), y) + hp["weight_decay"] * weight_penalty(net)
        value.backward()
        return value
    last = objective().item()
    for _ in range(hp["lbfgs_rounds"]):
        torch.optim.LBFGS(net.parameters(), max_iter=hp["lbfgs_iters"], history_size=hp["lbfgs_history"],
                          tolerance_grad=0, tolerance_change=0, line_search_fn="strong_wolfe").step(objective)
        now = objective().item()
        if last - now < hp["lbfgs_tolerance"] * abs(now):
            break
        last = now
    return net


def min_norm_slope(n, delta, margin):
    # The flattest f with |f - i| <= margin on every interval climbs from 1+margin at x = 1+(1-δ)/2 to
    # N-margin at x = N-(1-δ)/2: slope s* < 1 there, ‖f‖ = s*/2, and beyond N it may bend down for free.
    return (n - 1 - 2 * margin) / (n - 2 + delta)


@torch.no_grad()
def evaluate(name, net, data, n):
    row = dict(method=name, norm=paper_norm(net), first_wrong="-")
    for split, (x, y) in data.items():
        error = (net(x) if name == "standard" else round_to_integer(net(x))) - y
        wrong = error.abs() >= 0.5                                   # rounds to a wrong integer
        row[split] = (error.square().mean().item(), wrong.double().mean().item())
        if split == "extrapolation" and wrong.any():
            row["first_wrong"] = f"N+{int(y[wrong].min()) - n}"
    f_n, f_2n = net(torch.tensor([n, 2 * n], dtype=torch.float64)).tolist()
    return dict(row, slope=(f_2n - f_n) / n)


def run(n, delta, seed, hp=HP):
    data = make_data(n, delta, seed, hp)
    nets = dict(standard=fit_two_layer_net(lambda f, y: (f - y).square().mean(), data, seed, hp),
                composed=fit_two_layer_net(lambda f, y: composed_hinge_loss(f, y, hp["margin"]), data, seed, hp))
    return data, nets, [evaluate(name, net, data, n) for name, net in nets.items()]


def print_table(header, rows):
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(f"{v:>{w}}" for v, w in zip(row, widths)))


@torch.no_grad()
def draw(png, data, nets, rows, n, delta, size=(560, 420), pad=(40, 30, 14, 36)):
    """Standard | composed: f* on all 2N intervals, training points, f, Π∘f, the extrapolation shaded."""
    img = Image.new("RGB", (2 * size[0], size[1]), "white")
    pen, font = ImageDraw.Draw(img), ImageFont.load_default(size=13)    # labels in ASCII: the font has no Greek
    (left, top, right, bottom), x1, y1 = pad, 2 * n + 1.0, 2 * n + 1.5
    w, h = size[0] - left - right, size[1] - top - bottom
    grid = torch.linspace(0, x1, 2 * w, dtype=torch.float64)
    for p, row in enumerate(rows):
        net, ox = nets[row["method"]], p * size[0] + left

        def px(x, y):
            return ox + w * x / x1, top + h * (y1 - min(max(y, -0.5), y1)) / (y1 + 0.5)
        pen.rectangle([px(n + 0.5, y1), px(x1, -0.5)], fill=(236, 236, 236))
        pen.text((px(n + 0.7, 0)[0], px(0, 0)[1] - 16), "extrapolation: no training data", fill="gray", font=font)
        for i in range(1, 2 * n + 1):
            pen.line([px(i - (1 - delta) / 2, i), px(i + (1 - delta) / 2, i)], fill=COLORS["target"], width=3)
        x = torch.cat([data["test"][0], data["extrapolation"][0]])
        for xi, v in zip(x.tolist(), round_to_integer(net(x)).tolist() if p == 1 else []):  # Π∘f, a bit above
            pen.rectangle([px(xi, v + 0.12), px(xi, v + 0.12)], outline=COLORS["rounded"], width=1)
        pen.line([px(x, y) for x, y in zip(grid.tolist(), net(grid).tolist())], fill=COLORS[row["method"]], width=2)
        for cx, cy in (px(x, round(x)) for x in data["train"][0].tolist()):
            pen.ellipse([cx - 2, cy - 2, cx + 2, cy + 2], fill="black")
        pen.rectangle([ox, top, ox + w, top + h], outline="black")
        for t in range(0, 2 * n + 2, 2):
            pen.text((px(t, 0)[0], top + h + 4), str(t), fill="black", font=font, anchor="ma")
            pen.text((ox - 6, px(0, t)[1]), str(t), fill="black", font=font, anchor="rm")
        title = "standard: f fits f*" if p == 0 else "composed: round(f(x)) fits f*"
        pen.text((ox + w / 2, 8), f"{title}      norm of f = {row['norm']:.2f}", fill="black", font=font, anchor="ma")
        legend = [("f*(x) = round(x) on the intervals; dots: training x", "target"), ("f", row["method"])]
        for k, (label, color) in enumerate(legend + [("Pi(f(x)) = round(f(x)), drawn 0.12 higher", "rounded")] * p):
            pen.line([ox + 10, top + 17 + 18 * k, ox + 32, top + 17 + 18 * k], fill=COLORS[color], width=3)
            pen.text((ox + 38, top + 10 + 18 * k), label, fill="black", font=font)
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    img.save(png)


def sweep(seed, hp=HP):
    rows = []
    for n in SWEEP["n"]:
        for delta in SWEEP["delta"]:
            std, comp = run(n, delta, seed, hp)[2]
            rows.append([n, delta, f"{std['train'][0]:.4f}", f"{(n - 1) / delta:.2f}", f"{std['norm']:.2f}",
                         f"{comp['norm']:.3f}", f"{min_norm_slope(n, delta, hp['margin']) / 2:.3f}",
                         f"{comp['slope']:.3f}", f"{std['extrapolation'][0]:.3f}", f"{comp['extrapolation'][0]:.3f}",
                         f"{comp['extrapolation'][1]:.1%}", comp["first_wrong"]])
    print_table(["N", "δ", "train MSE std", "(N-1)/δ", "‖f‖ std", "‖f‖ comp", "s*/2", "comp slope>N",
                 "extrap MSE std", "extrap MSE comp", "comp wrong", "1st wrong"], rows)


def main(argv=None):
    parser = harness.ArgumentParser(prog="staircase.py", description=__doc__)
    parser.add_argument("--n", type=int, default=6, help="number of intervals N, at least 2")
    parser.add_argument("--delta", type=float, default=0.5, help="gap δ between intervals, in (0, 1)")
    parser.add_argument("--seed", type=int, default=0, help="draws the training points and the initial nets")
    parser.add_argument("--plot", default="runs/staircase.png", help="where the PNG goes")
    parser.add_argument("--sweep", action="store_true", help=f"N in {SWEEP['n']} x δ in {SWEEP['delta']}, no PNG")
    args = parser.parse_args(argv)
    n, delta, m = args.n, args.delta, HP["margin"]
    if n < 2 or not 0 < delta < 1:
        parser.error(f"need --n >= 2 and 0 < --delta < 1 (got --n {n} --delta {delta})")
    try:
        harness.check_output_file(args.plot, "--plot")
    except common.UsageError as error:
        parser.error(str(error))
    start = time.time()
    if args.sweep:
        sweep(args.seed)
    else:
        data, nets, rows = run(n, delta, args.seed)
        print(f"N = {n}, δ = {delta}, seed {args.seed}: {HP['hidden']} ReLU units, λ = {HP['weight_decay']}, "
              f"margin {m}; errors are of the prediction")
        print_table(["method", "predicts", "train MSE", "test MSE", "extrap MSE", "extrap wrong", "1st wrong",
                     "‖f‖", "slope>N"], [[r["method"], "f" if r["method"] == "standard" else "Π∘f",
                                          *(f"{r[s][0]:.4f}" for s in data), f"{r['extrapolation'][1]:.1%}",
                                          r["first_wrong"], f"{r['norm']:.2f}", f"{r['slope']:.3f}"] for r in rows])
        s, (x, y) = min_norm_slope(n, delta, m), data["extrapolation"]
        straight = round_to_integer(n - m + s * (x - n + (1 - delta) / 2)) != y  # the least-norm f, kept straight
        print(f"paper: fits of f* on X have ‖f‖ >= (N-1)/δ = {(n - 1) / delta:.2f}; f(x) = x has ‖f‖ = 1\n"
              f"least-norm f with |f - f*| <= {m} on X: slope s* = {s:.3f} there, ‖f‖ = s*/2 = {s / 2:.3f}; "
              f"kept straight beyond N, its Π∘f is wrong on {straight.double().mean():.1%} "
              "of the extrapolation grid")
        draw(args.plot, data, nets, rows, n, delta)
        print(f"wrote {args.plot}")
    print(f"total {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
