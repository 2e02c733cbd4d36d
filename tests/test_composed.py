"""Composed fine-tuning's estimators (common.composed_loss) on a toy problem small enough to enumerate: REINFORCE's
mean gradient matches the exact gradient of Eq. 1's first term; straight-through's value and gradient are what they
should be; the gradient bench's figures where they are known."""
import argparse
import inspect
import itertools

import pytest
import torch

import bench_gradients  # (tests/ is on the path as pytest runs a test file)
import common
import finetune

VOCAB = 6  # PAD UNK BOS EOS + two words
MAX_LEN = 2
CONTENT = [common.UNK_ID, 4, 5]  # what a decoder may emit besides EOS


def tiny_model(seed):
    torch.manual_seed(seed)
    config = common.TransformerConfig(vocab_size=VOCAB, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1,
                                      d_ff=32, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return common.Transformer(config)


def every_output():
    """All outputs a decoder limited to MAX_LEN tokens can produce, as one decoded batch (as the sampler returns
    them): EOS after fewer than MAX_LEN words, or MAX_LEN words and a cut."""
    outputs = [list(ids) for n in range(MAX_LEN + 1) for ids in itertools.product(CONTENT, repeat=n)]
    tokens = common.pad([ids + [common.EOS_ID] * (len(ids) < MAX_LEN) for ids in outputs])
    return common.Decoded(tokens, torch.tensor([len(ids) for ids in outputs]))


def log_p_theta(model, src, decoded):
    """log p_theta(y'|x) of decoded outputs, f teacher-forced on them (with gradients)."""
    chosen = torch.nn.functional.pad(decoded.tokens, (0, 1), value=common.PAD_ID)
    memory, mask = model.encode(src.expand(len(chosen), -1))
    return common.log_likelihood(model.decode(common.shift_right(common.with_eos(decoded)), memory, mask), chosen)


def log_p_beta(denoiser, decoded, gold):
    """log p_beta(y | y') for each decoded y': the denoiser teacher-forced on the gold program."""
    tgt = common.pad([[common.BOS_ID] + gold + [common.EOS_ID]] * len(decoded.tokens))
    return common.log_likelihood(denoiser.decode(tgt[:, :-1], *denoiser.encode(common.with_eos(decoded))), tgt[:, 1:])


def without_unk(decoded):
    """A toy error detector g: an output holding UNK has an error."""
    return torch.tensor([common.UNK_ID not in ids for ids in common.as_lists(decoded)])


def exact_gradient(model, denoiser, src, gold, gamma, error_free=None):
    """grad of sum over y' of p_theta(y'|x) * max(log p_Pi(y|y'), gamma), by enumeration; with an
    error detector g, log p_Pi(y|y') = log delta_y'(y) where g passes y' (Appendix E)."""
    outputs = every_output()
    model.zero_grad()
    log_p = log_p_theta(model, src, outputs)
    with torch.no_grad():
        reward = log_p_beta(denoiser, outputs, gold)
    assert abs(log_p.exp().sum().item() - 1) < 1e-5  # the enumeration covers every output
    if error_free:
        delta = torch.tensor([0.0 if ids == gold else float("-inf") for ids in common.as_lists(outputs)])
        reward = torch.where(error_free(outputs), delta, reward)
    (log_p.exp() * reward.clamp(min=gamma)).sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def estimated_gradient(model, denoiser, src, gold, gamma, baseline, batch=1000, draws=40, error_free=None):
    """The estimator's mean gradient of the same quantity over batch * draws samples."""
    model.zero_grad()
    tgt = common.pad([[common.BOS_ID] + gold + [common.EOS_ID]] * batch)
    for _ in range(draws):
        loss = common.composed_loss(model, denoiser, src.expand(batch, -1), tgt[:, :-1], tgt[:, 1:], baseline=baseline,
                                    gamma=gamma, weight=1.0, lam=0.0, error_free=error_free, max_len=MAX_LEN)
        loss.backward()
    n_tokens = batch * (len(gold) + 1)  # the loss is per gold token and minimised
    return -torch.cat([p.grad.flatten() for p in model.parameters()]) * n_tokens / batch / draws


def straight_through(model, denoiser, batch, **changes):
    """The straight-through estimator's composed term alone (lambda = 0) at weight 1."""
    return common.composed_loss(model, denoiser, *batch, estimator="straight-through", weight=1.0, lam=0.0,
                                max_len=MAX_LEN, **changes)


def test_the_batch_baseline_is_the_mean_reward_of_the_other_inputs():
    """b_i leaves input i's own reward out (with it, the estimate would be biased): composed_loss's gradient equals
    -sum_i (r_i - b_i) grad log p_theta(y'_i|x) per gold token, worked out here from the same samples."""
    model, denoiser = tiny_model(0).eval(), tiny_model(9).eval()
    src, gold = torch.tensor([[4, 5, common.EOS_ID]]).expand(3, -1), [5, 4]
    tgt = common.pad([[common.BOS_ID] + gold + [common.EOS_ID]] * 3)
    torch.manual_seed(4)
    common.composed_loss(model, denoiser, src, tgt[:, :-1], tgt[:, 1:], weight=1.0, lam=0.0, max_len=MAX_LEN).backward()
    estimated = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.manual_seed(4)
    y_prime = model.generate(src, MAX_LEN, sample=True)  # the same samples
    with torch.no_grad():
        reward = log_p_beta(denoiser, y_prime, gold).clamp(min=-50.0)
    assert len(set(reward.tolist())) == 3  # rewards that differ, so that the baselines do

    def gradient(b):
        model.zero_grad()
        (-((reward - b) * log_p_theta(model, src[:1], y_prime)).sum() / tgt[:, 1:].ne(common.PAD_ID).sum()).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])
    assert torch.allclose(estimated, gradient((reward.sum() - reward) / 2), atol=1e-7)
    assert not torch.allclose(estimated, gradient(reward.mean()), atol=1e-5)  # the batch's mean, its own included


# The paper's estimator (no baseline) is much noisier than the batch baseline's; neither is biased.
@pytest.mark.parametrize("baseline, tolerance", [("none", 0.4), ("batch", 0.05)])
def test_reinforce_estimate_matches_the_enumerated_gradient(baseline, tolerance):
    model, denoiser = tiny_model(0).eval(), tiny_model(9).eval()
    with torch.no_grad():  # a confident denoiser: rewards from -16.6 to -13.0 over the 13 outputs
        denoiser.embed.weight *= 2
    src, gold, gamma = torch.tensor([[4, 5, common.EOS_ID]]), [5, 4], -14.9  # gamma clamps 5 of them
    torch.manual_seed(2)
    exact = exact_gradient(model, denoiser, src, gold, gamma)
    estimate = estimated_gradient(model, denoiser, src, gold, gamma, baseline)
    error = (estimate - exact).norm() / exact.norm()
    assert error < tolerance, f"relative error {error:.3f}"


def test_with_an_error_detector_the_estimate_matches_appendix_e_delta():
    """SPoC's Pi leaves outputs its detector g passes as they are: their reward is 0 if they are the
    gold program and gamma if not, and the estimator follows that distribution, not the denoiser's."""
    model, denoiser = tiny_model(0).eval(), tiny_model(9).eval()
    src, gold, gamma = torch.tensor([[4, 5, common.EOS_ID]]), [5, 4], -14.9
    torch.manual_seed(2)
    exact = exact_gradient(model, denoiser, src, gold, gamma, without_unk)
    estimate = estimated_gradient(model, denoiser, src, gold, gamma, "batch", error_free=without_unk)
    assert (estimate - exact).norm() / exact.norm() < 0.05
    without_detector = exact_gradient(model, denoiser, src, gold, gamma)
    assert (without_detector - exact).norm() / exact.norm() > 0.5  # the detector changes the objective


def test_sampler_never_emits_padding_or_bos():
    """With PAD and BOS by far the likeliest, the sampler draws from the rest, in proportion: the first tokens of
    4000 samples against the model's distribution with PAD and BOS taken out (total variation under 0.05)."""
    model = tiny_model(3)
    with torch.no_grad():  # make PAD and BOS by far the likeliest outputs
        model.embed.weight[common.PAD_ID] *= 50
        model.embed.weight[common.BOS_ID] *= 50
    src = torch.tensor([[4, 5, common.EOS_ID]] * 4000)
    outputs = common.as_lists(model.generate(src, max_len=5, sample=True))
    assert all(common.PAD_ID not in ids and common.BOS_ID not in ids for ids in outputs)
    with torch.no_grad():
        logits = model.decode(torch.full((1, 1), common.BOS_ID), *model.encode(src[:1]))[0, 0]
    expected = torch.softmax(logits.index_fill(0, torch.tensor(common.NEVER_GENERATED), -float("inf")), 0)
    first = torch.tensor([ids[0] if ids else common.EOS_ID for ids in outputs])
    drawn = torch.bincount(first, minlength=len(logits)).float() / len(first)
    assert 0.5 * (drawn - expected).abs().sum() < 0.05


def test_f_draws_y_prime_without_dropout_and_is_left_in_the_mode_it_was_in():
    """y' is drawn as f predicts at test time (eval mode: no dropout); f then trains in the mode it came in."""
    model, denoiser = tiny_model(0), tiny_model(9).eval()
    modes, generate = [], model.generate  # f's mode as each y' is drawn
    model.generate = lambda *args, **kwargs: modes.append(model.training) or generate(*args, **kwargs)
    for training in (True, False):
        common.composed_loss(model.train(training), denoiser, *composed_batch(4))
        assert model.training == training
    assert modes == [False, False]


# The straight-through estimator (common.straight_through_rows): the denoiser reads f's outputs as one-hot rows.

def test_the_denoiser_reads_one_hot_rows_as_it_reads_the_token_ids():
    denoiser = tiny_model(9).eval()
    noisy = torch.tensor([[4, 5, 4, common.EOS_ID], [5, common.EOS_ID, common.PAD_ID, common.PAD_ID]])
    one_hot = torch.nn.functional.one_hot(noisy, VOCAB).float() * (noisy != common.PAD_ID)[..., None]
    tgt_in = torch.tensor([[common.BOS_ID, 5, 4]] * 2)
    assert torch.equal(denoiser.decode(tgt_in, *denoiser.encode(noisy)),
                       denoiser.decode(tgt_in, *denoiser.encode(noisy, one_hot)))


def composed_batch(batch=16):
    src = torch.tensor([[4, 5, common.EOS_ID]] * batch)
    tgt = common.pad([[common.BOS_ID, 5, 4, common.EOS_ID]] * batch)
    return src, tgt[:, :-1], tgt[:, 1:]


def test_straight_through_forward_value_is_the_denoisers_loss_on_the_samples():
    """Forward, the rows are exactly the sampled outputs: the composed term is -log p_beta(y | y')."""
    model, denoiser = tiny_model(0), tiny_model(9).eval()
    src, tgt_in, tgt_out = composed_batch()
    torch.manual_seed(5)
    loss = straight_through(model, denoiser, (src, tgt_in, tgt_out))
    torch.manual_seed(5)
    sampled = model.eval().generate(src, MAX_LEN, sample=True)  # the y' composed_loss draws
    expected = -log_p_beta(denoiser, sampled, [5, 4]).sum() / int((tgt_out != common.PAD_ID).sum())
    assert len({tuple(ids) for ids in common.as_lists(sampled)}) > 1  # several outputs
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_straight_through_gradient_reaches_f_only_through_the_denoisers_input(monkeypatch):
    """With lambda = 0, f's gradient is exactly the denoiser input's gradient carried back through the rows, and
    the frozen denoiser gets none."""
    model, denoiser = tiny_model(0), tiny_model(9).eval().requires_grad_(False)
    rows = []
    straight_through_rows = common.straight_through_rows
    monkeypatch.setattr(common, "straight_through_rows", lambda *args: rows.append(straight_through_rows(*args))
                        or rows[-1])
    torch.manual_seed(5)
    loss = straight_through(model, denoiser, composed_batch())
    weights = list(model.parameters())
    through_input = torch.autograd.grad(loss, rows[0], retain_graph=True)[0]
    direct = torch.autograd.grad(loss, weights, retain_graph=True, allow_unused=True)
    chained = torch.autograd.grad(rows[0], weights, grad_outputs=through_input, allow_unused=True)
    direct, chained = (torch.cat([g.flatten() for g in grads if g is not None]) for grads in (direct, chained))
    assert direct.norm() > 0 and torch.allclose(direct, chained, atol=1e-7)
    assert all(p.grad is None for p in denoiser.parameters())


def expected_denoiser_loss(model, denoiser, src, gold):
    """-sum over y' of p_theta(y'|x) log p_beta(y|y'), by enumeration: the composed term's exact value."""
    outputs = every_output()
    with torch.no_grad():
        log_p, reward = log_p_theta(model, src, outputs), log_p_beta(denoiser, outputs, gold)
    return -(log_p.exp() * reward).sum().item()


def test_straight_through_training_lowers_the_composed_loss_on_a_toy_problem():
    model, denoiser = tiny_model(0).eval(), tiny_model(9).eval().requires_grad_(False)
    with torch.no_grad():
        denoiser.embed.weight *= 2  # a confident denoiser, whose input matters
    batch = composed_batch(64)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = expected_denoiser_loss(model, denoiser, batch[0][:1], [5, 4])
    torch.manual_seed(0)
    for _ in range(40):
        loss = straight_through(model, denoiser, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = expected_denoiser_loss(model, denoiser, batch[0][:1], [5, 4])
    assert after < before - 1.0, (before, after)


def test_the_gradient_bench_sees_no_reinforce_gradient_where_f_always_samples_the_gold(monkeypatch):
    """tests/bench_gradients.py's figures where they are known: an f whose every y' is the gold output gets the same
    reward for every input, so the batch baseline leaves a REINFORCE gradient of zero, but for rounding (the direct
    term's is not); an f that samples freely gets a REINFORCE gradient and samples the gold less often."""
    f, pi = tiny_model(0), tiny_model(1).eval()
    batch = composed_batch(4)
    free = bench_gradients.figures([bench_gradients.term_gradients(f, pi, batch, {}, draws=3, seed=0)])
    gold = common.Decoded(batch[2].clone(), torch.full((4,), 2))  # y' = 5 4 EOS, every sample
    monkeypatch.setattr(common.Transformer, "generate", lambda model, src, max_len, sample=False: gold)
    measured = bench_gradients.term_gradients(f, pi, batch, {}, draws=3, seed=0)
    assert all(r.norm() < 1e-6 * d.norm() for r, d in zip(measured["reinforce"], measured["direct"]))
    figures = bench_gradients.figures([measured])
    assert figures["ratio"] < 1e-6 and figures["gold_samples"] == 1.0 and abs(figures["signal_reinforce"]) < 1e-6
    assert free["ratio"] > 0 and free["gold_samples"] < 1


def test_over_inputs_with_no_gold_the_estimate_matches_the_enumerated_gradient():
    """finetune.py --unlabeled-inputs: a batch of inputs alone (targets of one PAD each, as common.batches makes them)
    trains the first term with Pi's likelihood of leaving y' as it is, log p_beta(y'|y'), as its reward: the mean
    estimate matches the exact gradient of sum_y' p_theta(y'|x) max(log p_beta(y'|y'), gamma), not the labeled one's."""
    model, denoiser = tiny_model(0).eval(), tiny_model(9).eval()
    with torch.no_grad():
        denoiser.embed.weight *= 2
    src, gamma, batch, draws = torch.tensor([[4, 5, common.EOS_ID]]), -14.9, 1000, 40
    outputs = every_output()
    model.zero_grad()
    log_p = log_p_theta(model, src, outputs)
    with torch.no_grad():  # each y' scored as its own gold
        reward = torch.cat([log_p_beta(denoiser, common.Decoded(outputs.tokens[i:i + 1], outputs.lengths[i:i + 1]), ids)
                            for i, ids in enumerate(common.as_lists(outputs))])
    (log_p.exp() * reward.clamp(min=gamma)).sum().backward()
    exact = torch.cat([p.grad.flatten() for p in model.parameters()])

    torch.manual_seed(2)
    model.zero_grad()
    no_gold = torch.full((batch, 1), common.PAD_ID)
    for _ in range(draws):
        common.composed_loss(model, denoiser, src.expand(batch, -1), no_gold, no_gold, gamma=gamma, weight=1.0,
                             max_len=MAX_LEN).backward()
    source_tokens = batch * src.shape[1]  # the loss is per source token and minimised
    estimate = -torch.cat([p.grad.flatten() for p in model.parameters()]) * source_tokens / batch / draws
    assert (estimate - exact).norm() / exact.norm() < 0.05
    labeled = exact_gradient(model, denoiser, src, [5, 4], gamma)
    assert (labeled - exact).norm() / exact.norm() > 0.5


def test_the_defaults_of_eq_1_are_finetunes_settings():
    """composed_loss and composed_validation_loss, copied alone, train as finetune.py does: their defaults are the
    values its PRESETS give a composed run (the benches rely on them too)."""
    values = finetune.preset_values({"dataset": "sanstype"}, argparse.Namespace(preset="cpu", method="composed"))
    loss = inspect.signature(common.composed_loss).parameters
    assert {name: loss[name].default for name in ("estimator", "baseline", "gamma", "weight", "lam")} == {
        "estimator": values["estimator"], "baseline": values["reinforce_baseline"], "gamma": values["gamma"],
        "weight": values["composed_weight"], "lam": values["lam"]}
    assert inspect.signature(common.composed_validation_loss).parameters["gamma"].default == values["gamma"]


def test_composed_loss_refuses_a_pi_in_training_mode():
    """Pi scores y' as it would at test time: a Pi left in train mode (its dropout on) is refused, not used."""
    with pytest.raises(ValueError, match="Pi must be in eval mode"):
        common.composed_loss(tiny_model(0), tiny_model(9), *composed_batch(4))
