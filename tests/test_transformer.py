"""The hand-written Transformer: masks, the decoding cache, sampling, and that it learns."""
import pytest
import torch

import common
from common import BOS_ID, EOS_ID, PAD_ID, Transformer, TransformerConfig


def tiny(vocab=20, **kw):
    torch.manual_seed(0)
    config = dict(vocab_size=vocab, d_model=32, n_heads=2, encoder_layers=2, decoder_layers=2, d_ff=64,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return Transformer(TransformerConfig(**{**config, **kw}))


def test_padding_does_not_change_the_encoding():
    model = tiny().eval()
    src = torch.randint(4, 20, (3, 7))
    padded = torch.cat([src, torch.full((3, 5), PAD_ID)], dim=1)
    memory, _ = model.encode(src)
    memory_padded, _ = model.encode(padded)
    assert torch.allclose(memory, memory_padded[:, :7], atol=1e-5)


def test_decoder_does_not_look_ahead():
    model = tiny().eval()
    src, tgt = torch.randint(4, 20, (3, 6)), torch.randint(4, 20, (3, 9))
    memory, mask = model.encode(src)
    changed = tgt.clone()
    changed[:, 5:] = 4  # future tokens must not change earlier positions' logits
    assert torch.allclose(model.decode(tgt, memory, mask)[:, :5], model.decode(changed, memory, mask)[:, :5], atol=1e-5)


def rerun_decoder(model, src, max_len, sample=False):
    """Decoding without a cache or fixed shapes: the decoder re-run over the whole prefix at every step, rows
    dropped as they finish; one uniform draw per row and step, as common.decode_step draws them. The slow
    reference, as the decoder before the fixed-shape step decoded: token lists without EOS."""
    memory, memory_mask = model.encode(src)
    prefixes, outputs = torch.full((len(src), 1), BOS_ID), [None] * len(src)
    going = list(range(len(src)))
    for _ in range(max_len):
        logits = model.decode(prefixes[going], memory[going], memory_mask[going])[:, -1].float()
        logits[:, common.NEVER_GENERATED] = float("-inf")
        uniform = torch.rand(len(src), 1)[going]
        if sample:
            cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
            chosen = torch.searchsorted(cdf, uniform * cdf[:, -1:]).squeeze(1).clamp(max=logits.shape[-1] - 1)
        else:
            chosen = logits.argmax(dim=-1)
        prefixes = torch.cat([prefixes, torch.full((len(src), 1), PAD_ID)], dim=1)
        prefixes[going, -1] = chosen
        for row, token in zip(list(going), chosen.tolist()):
            if token == EOS_ID:
                outputs[row] = prefixes[row, 1:-1].tolist()
                going.remove(row)
        if not going:
            break
    for row in going:
        outputs[row] = prefixes[row, 1:].tolist()
    return outputs


def likelier_eos(model):
    """EOS's logit raised by ~2.5: rows finish at many different steps, a third never."""
    with torch.no_grad():
        model.decoder_norm.bias.copy_(2.5 * model.embed.weight[EOS_ID])
    return model


def test_decoding_equals_rerunning_the_decoder_over_the_prefix():
    model = likelier_eos(tiny(vocab=30).eval())
    src = torch.randint(4, 30, (64, 6))
    greedy = common.as_lists(model.generate(src, max_len=20))
    assert len(set(map(len, greedy))) > 2
    assert greedy == rerun_decoder(model, src, max_len=20)
    torch.manual_seed(0)
    sampled = common.as_lists(model.generate(src, max_len=20, sample=True))
    torch.manual_seed(0)
    assert sampled == rerun_decoder(model, src, max_len=20, sample=True)


def test_finished_rows_stay_finished_outputs_stop_at_eos_and_the_length_limit_holds():
    model = likelier_eos(tiny(vocab=30).eval())
    src = torch.randint(4, 30, (64, 6))
    for sample in (False, True):
        decoded = model.generate(src, max_len=12, sample=sample)
        tokens, lengths = decoded.tokens, decoded.lengths
        assert tokens.shape[1] <= 12 and (lengths <= 12).all()
        assert 0 < (lengths == 12).sum() < 64  # some rows cut at the limit, most finished
        for row, n in zip(tokens.tolist(), lengths.tolist()):
            assert EOS_ID not in row[:n] and PAD_ID not in row[:n] and BOS_ID not in row[:n]
            if n < 12:  # finished: EOS, then padding to the end
                assert row[n] == EOS_ID and set(row[n + 1:]) <= {PAD_ID}
        alone = [common.as_lists(model.generate(row[None], max_len=12))[0] for row in src[:16]]
        assert sample or alone == common.as_lists(decoded)[:16]  # other rows never change a row


def test_sampled_outputs_follow_their_teacher_forced_probability():
    """Whole outputs of at most 2 tokens (13 of them), drawn 40000 times: each output's share equals its probability
    p(y'|x) as f teacher-forced on it gives it (log_likelihood, the REINFORCE term's log p_theta(y'|x))."""
    torch.manual_seed(0)
    model = likelier_eos(tiny(vocab=6, d_model=16, d_ff=32).eval())
    src = torch.tensor([[4, 5, EOS_ID]])
    decoded = model.generate(src.expand(40000, -1), max_len=2, sample=True)
    outputs, counts = torch.unique(torch.nn.functional.pad(decoded.tokens, (0, 2 - decoded.tokens.shape[1])), dim=0,
                                   return_counts=True)
    eos = outputs == EOS_ID
    y_prime = common.Decoded(outputs, torch.where(eos.any(dim=1), eos.int().argmax(dim=1), 2))
    chosen = torch.nn.functional.pad(outputs, (0, 1), value=PAD_ID)  # y', and EOS where it was chosen
    memory, mask = model.encode(src.expand(len(outputs), -1))
    with torch.no_grad():
        p = common.log_likelihood(model.decode(common.shift_right(common.with_eos(y_prime)), memory, mask),
                                  chosen).exp()
    assert len(outputs) >= 10 and abs(p.sum() - 1) < 0.02  # nearly every possible output was drawn
    assert 0.5 * (counts / 40000 - p).abs().sum() < 0.02  # total variation distance


def test_the_decoding_step_never_waits_for_the_device():
    """decode_step as CUDA captures it: on the meta device, which holds no values, any host synchronisation (.item(),
    a Python bool of a tensor, a shape that depends on values) or a tensor made on the host fails."""
    model = tiny(vocab=30).eval().to("meta")
    src = torch.randint(4, 30, (8, 6), device="meta")
    for sample in (False, True):
        state = common.start_decoding(model, *model.encode(src), max_len=10, sample=sample)
        for _ in range(3):
            common.decode_step(model, state)
        assert state.tokens.shape == (8, 11) and state.caches[0]["self"]["k"].shape == (8, 10, 32)


def test_layers_normalise_before_each_sublayer():
    """Pre-norm, as the authors' fairseq models: with both sublayers' outputs a constant c, an encoder layer
    adds c to its input as it is (a post-norm layer would return LayerNorm(x + c))."""
    layer = tiny().encoder[0]
    with torch.no_grad():
        for sublayer_output in (layer.self_attention.out, layer.ffn[-1]):
            sublayer_output.weight.zero_()
            sublayer_output.bias.fill_(0.5)
    x = 3 * torch.randn(2, 5, 32)
    assert torch.allclose(layer(x, None), x + 1.0)


def test_sampling_follows_the_model_distribution():
    model = tiny().eval()
    src = torch.randint(4, 20, (1, 6)).repeat(4000, 1)
    memory, mask = model.encode(src[:1])
    logits = model.decode(torch.tensor([[BOS_ID]]), memory, mask)[0, 0]
    logits[common.NEVER_GENERATED] = float("-inf")  # padding and BOS are never sampled
    probs = torch.softmax(logits, dim=-1)
    torch.manual_seed(1)
    first = model.generate(src, max_len=1, sample=True).tokens[:, 0].tolist()
    empirical = torch.bincount(torch.tensor(first), minlength=20).float() / len(first)
    assert 0.5 * (empirical - probs).abs().sum() < 0.05  # total variation distance



def test_a_uniform_of_zero_draws_no_token_of_probability_zero(monkeypatch):
    """torch.rand may return exactly 0: the inverse-CDF draw then takes the first id of positive probability, never
    PAD, whose cdf is 0 (the REINFORCE log-probability skips PAD, so it would not be the sample's)."""
    model = tiny().eval()
    monkeypatch.setattr(torch, "rand", lambda *size, device=None: torch.zeros(*size, device=device))
    drawn = model.generate(torch.randint(4, 20, (3, 6)), max_len=5, sample=True)
    assert not any(set(row) & set(common.NEVER_GENERATED) for row in common.as_lists(drawn))


def test_learns_to_reverse_sequences():
    """A falling loss, then greedy decoding that reverses unseen sequences, exactly as the slow reference decodes."""
    torch.manual_seed(0)
    model = tiny(vocab=14, d_model=64, d_ff=128)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def batch(n):
        src = torch.randint(4, 14, (n, 5))
        tgt = torch.cat([torch.full((n, 1), BOS_ID), src.flip(1), torch.full((n, 1), EOS_ID)], dim=1)
        return src, tgt

    losses = []
    for _ in range(200):
        src, tgt = batch(32)
        loss = common.sequence_loss(model(src, tgt[:, :-1]), tgt[:, 1:], label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20
    model.eval()
    src, _ = batch(100)
    greedy = common.as_lists(model.generate(src, max_len=10))
    exact = sum(p == s.flip(0).tolist() for p, s in zip(greedy, src))
    assert exact >= 90, exact
    assert greedy == rerun_decoder(model, src, max_len=10)


def test_sequence_loss_ignores_padding():
    logits = torch.randn(2, 3, 10)
    targets = torch.tensor([[5, 6, PAD_ID], [7, PAD_ID, PAD_ID]])
    expected = torch.nn.functional.cross_entropy(torch.stack([logits[0, 0], logits[0, 1], logits[1, 0]]),
                                                 torch.tensor([5, 6, 7]))
    assert torch.allclose(common.sequence_loss(logits, targets), expected)


def test_dropout_zeroes_a_share_p_of_the_values_and_scales_the_rest_on_the_cpu():
    """common.dropout (the Transformer's, on the CPU): each value zeroed with probability p, the others scaled by
    1 / (1 - p), the gradient the same mask; in eval mode the input as it is."""
    torch.manual_seed(0)
    x = torch.ones(200, 1000, requires_grad=True)
    y = common.dropout(x, 0.4, True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.6) < 0.005  # 200,000 draws: 0.0011 is one standard deviation
    assert torch.allclose(y[kept], torch.tensor(1 / 0.6))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())
    assert common.dropout(x, 0.4, False) is x
    ffn = Transformer(TransformerConfig(vocab_size=8, d_model=8, d_ff=16, activation_dropout=0.5)).decoder[0].ffn
    assert ffn[2](torch.ones(10_000)).eq(0).float().mean().item() == pytest.approx(0.5, abs=0.02)


def test_cpu_dropout_keeps_where_a_uniform_draw_reaches_p():
    """The CPU's mask is uniform draws >= p from torch's generator, not F.dropout's Bernoulli draws: the same seed
    gives the same mask as this one line (a run's losses, and its resume bit for bit, rest on it)."""
    x = torch.randn(50, 40)
    torch.manual_seed(1)
    y = common.dropout(x, 0.3, True)
    torch.manual_seed(1)
    assert torch.equal(y, x * ((torch.rand(x.shape) >= 0.3) / 0.7))


def test_dropout_keeps_bf16_and_zeroes_everything_at_p_1_as_f_dropout_does():
    """Under CPU bf16 autocast the activations stay bfloat16 (as F.dropout keeps them on a GPU); p = 1 gives zeros,
    not 0 / 0; the module has no inplace flag to ignore."""
    x = torch.randn(64, 64, dtype=torch.bfloat16)
    assert common.dropout(x, 0.4, True).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert common.Dropout(0.4).train()(torch.nn.Linear(64, 64)(x.float())).dtype == torch.bfloat16
    for x in (torch.randn(8, 8), torch.randn(8, 8, dtype=torch.bfloat16)):
        assert torch.equal(common.dropout(x, 1.0, True), torch.nn.functional.dropout(x, 1.0, True))
    with pytest.raises(TypeError):
        common.Dropout(0.5, inplace=True)


def test_each_epochs_batch_order_is_the_seeds_and_the_epochs_as_recorded():
    """common.epoch_batches' order, recorded: a change to how it draws (its generator's seed string) would change every
    run's numbers and a resume of an older run, unnoticed by any test that compares two runs of the same code."""
    pairs = [([10 + i], [5] * (1 + i // 4)) for i in range(12)]
    order = {(seed, epoch): [src[:, 0].tolist() for src, _, _ in common.epoch_batches(pairs, 2, seed, epoch)]
             for seed, epoch in ((0, 1), (0, 2), (1, 1))}
    assert order == {(0, 1): [[17, 14], [18, 20], [12, 13], [11, 10], [15, 16], [19, 21]],
                     (0, 2): [[21, 18], [20, 19], [10, 11], [17, 16], [15, 14], [12, 13]],
                     (1, 1): [[11, 10], [20, 18], [21, 19], [14, 16], [12, 13], [17, 15]]}
