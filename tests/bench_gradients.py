"""What Eq. 1's first term adds to the direct one, at a given f and Pi: the gradient of each, as finetune.py trains
composed fine-tuning (finetune.py's Eq. 1 settings: REINFORCE, its baseline and weight; lambda for the direct term), on --batches
training batches (finetune.py's batch size and order) with --draws draws of y' ~ p_theta(.|x) each:

  ratio         |g_reinforce| / |g_direct| per draw: median, quartiles, and the share of draws under 1%
  cosine        between the two per draw (median), and between their means over a batch's draws (median)
  signal        |E g|^2 / E|g|^2 over a batch's draws, of each term: 1 where every draw gives the same gradient,
                about 1/draws where the draws are noise around a mean near 0 (medians over batches)
  gold samples  the share of the sampled y' that are the gold output exactly: where f samples the gold, every reward
                of a batch is alike and the baseline leaves little of the term
  gold-free     the reward finetune.py --unlabeled-inputs trains with where there is no gold, log p_beta(y'|y') (Pi's
                likelihood of leaving y' as it is), on one y' ~ p_theta(.|x) per val input: how often it ranks a y'
                equal to the gold above one that is not (AUC; 0.5: it cannot tell them apart)

    python tests/bench_gradients.py --data data/sanstype --init runs/standard/model.pt --denoiser runs/denoiser/model.pt
    python tests/bench_gradients.py --data data/dates --init runs/dates/standard_0/model.pt \\
        --denoiser runs/dates/denoiser/model.pt --batches 20 --draws 10

Last line: reinforce_vs_direct=X (median ratio) cosine=Y (of the means) signal_reinforce=Z signal_direct=W
gold_samples=V val_gold_samples=U gold_free_auc=T.
"""
import argparse
import os
import random
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402
import harness  # noqa: E402
import finetune  # noqa: E402


def flat_gradient(model, loss) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])


def term_gradients(f, denoiser, batch, eq1: dict, draws: int, seed: int) -> dict:
    """For one batch, `draws` times: the gradient of Eq. 1's first term alone (lam 0) and of the direct term alone
    (weight 0), each as composed_loss computes it with the run's settings eq1, from the same y' (the same seed before
    each), and whether each y' is the gold output."""
    src, tgt_in, tgt_out = batch
    out = {"reinforce": [], "direct": [], "gold": []}
    for draw in range(draws):
        torch.manual_seed(seed + draw)
        y_prime = f.eval().generate(src, common.output_length_limit(f, src, tgt_out), sample=True)  # composed_loss's
        f.train()
        out["gold"] += common.same_sequences(common.with_eos(y_prime), tgt_out).tolist()
        for name, changes in (("reinforce", {"lam": 0.0}), ("direct", {"weight": 0.0})):
            torch.manual_seed(seed + draw)
            loss = common.composed_loss(f, denoiser, src, tgt_in, tgt_out, **{**eq1, **changes})
            out[name].append(flat_gradient(f, loss))
    return out


def figures(batches_of_gradients: list[dict]) -> dict:
    """The figures of the docstring, over batches (each a term_gradients result)."""
    ratios, cosines, mean_cosines, signal = [], [], [], {"reinforce": [], "direct": []}
    for g in batches_of_gradients:
        for r, d in zip(g["reinforce"], g["direct"]):
            ratios.append((r.norm() / d.norm()).item())
            cosines.append(torch.nn.functional.cosine_similarity(r, d, dim=0).item())
        means = {name: torch.stack(g[name]).mean(0) for name in signal}
        mean_cosines.append(torch.nn.functional.cosine_similarity(means["reinforce"], means["direct"], dim=0).item())
        for name in signal:
            second_moment = torch.stack(g[name]).pow(2).sum(1).mean()
            signal[name].append((means[name].pow(2).sum() / second_moment).item() if second_moment > 0 else 0.0)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    gold = [x for g in batches_of_gradients for x in g["gold"]]
    return {"ratio": statistics.median(ratios), "ratio_q1": quartiles[0], "ratio_q3": quartiles[-1],
            "ratio_under_1pct": sum(r < 0.01 for r in ratios) / len(ratios),
            "cosine_per_draw": statistics.median(cosines), "cosine": statistics.median(mean_cosines),
            "signal_reinforce": statistics.median(signal["reinforce"]),
            "signal_direct": statistics.median(signal["direct"]), "gold_samples": sum(gold) / len(gold)}


@torch.no_grad()
def gold_free_reward(f, denoiser, pairs, batch_size: int, device) -> dict:
    """The gold-free reward of composed_loss's batches of inputs alone, log p_beta(y'|y'), on one sample y' per input
    of `pairs`, against the gold it does without: the share of y' equal to the gold, and the reward's AUC between those
    and the others."""
    right, wrong = [], []
    for src, _, tgt_out in common.batches(pairs, batch_size):
        src, tgt_out = src.to(device), tgt_out.to(device)
        noisy = common.with_eos(f.eval().generate(src, common.output_length_limit(f, src), sample=True))
        reward = common.log_likelihood(denoiser.decode(common.shift_right(noisy), *denoiser.encode(noisy)), noisy)
        for r, is_gold in zip(reward.tolist(), common.same_sequences(noisy, tgt_out).tolist()):
            (right if is_gold else wrong).append(r)
    pairs_compared = len(right) * len(wrong)
    ranked_above = sum((a > b) + 0.5 * (a == b) for a in right for b in wrong)
    auc = ranked_above / pairs_compared if pairs_compared else float("nan")
    return {"val_gold_samples": len(right) / (len(right) + len(wrong)), "gold_free_auc": auc}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/sanstype")
    parser.add_argument("--init", default="runs/standard/model.pt", help="f: a predictor's checkpoint, or a "
                        "denoiser's (f starting from Pi's weights)")
    parser.add_argument("--denoiser", default="runs/denoiser/model.pt")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--preset", default="cpu", help="whose batch size and settings (finetune.py's composed)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    args = parser.parse_args(argv)
    settings = finetune.parse_args(["--method", "composed", "--data", args.data, "--preset", args.preset])
    device = harness.pick_device(args.device)
    spm = harness.read_data_folder(args.data)["spm"]
    tokenizer = common.load_tokenizer(spm)
    f = harness.model_from_checkpoint(harness.load_checkpoint(args.init))  # a predictor, or Pi's weights as f's start
    denoiser, _ = harness.load_model(args.denoiser, spm, f"{args.data}/spm.model", "denoiser")
    f, denoiser = harness.to_device(f, device).train(), harness.to_device(denoiser, device).eval().requires_grad_(False)
    pairs = finetune.load_pairs(args.data, "train", tokenizer)
    chosen = common.batches(pairs, settings.batch_size, random.Random(f"{settings.seed}-batch order-1"))[:args.batches]
    eq1 = dict(estimator=settings.estimator, baseline=settings.reinforce_baseline, gamma=settings.gamma,
               weight=settings.composed_weight, lam=settings.lam)
    measured = [term_gradients(f, denoiser, [t.to(device) for t in batch], eq1, args.draws, 1000 * i)
                for i, batch in enumerate(chosen)]
    torch.manual_seed(0)
    x = {**figures(measured), **gold_free_reward(f, denoiser, finetune.load_pairs(args.data, "val", tokenizer),
                                                 settings.batch_size, device)}
    print(f"{len(chosen)} batches of {settings.batch_size}, {args.draws} draws each; {settings.estimator}, baseline "
          f"{settings.reinforce_baseline}, composed_weight {settings.composed_weight}, lam {settings.lam}")
    print(f"|g_reinforce| / |g_direct|: median {x['ratio']:.4f} (quartiles {x['ratio_q1']:.4f}-{x['ratio_q3']:.4f}), "
          f"{100 * x['ratio_under_1pct']:.0f}% of draws under 1%; cosine per draw {x['cosine_per_draw']:.3f}")
    print(f"reinforce_vs_direct={x['ratio']:.4f} cosine={x['cosine']:.3f} signal_reinforce={x['signal_reinforce']:.3f} "
          f"signal_direct={x['signal_direct']:.3f} gold_samples={x['gold_samples']:.3f} "
          f"val_gold_samples={x['val_gold_samples']:.3f} gold_free_auc={x['gold_free_auc']:.3f}")
    return x


if __name__ == "__main__":
    main()
