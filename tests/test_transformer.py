"""The hand-written Transformer: masks, the decoding cache, sampling, and that it learns."""
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


def test_decoder_does_not_look_ahead_and_cache_matches_teacher_forcing():
    model = tiny().eval()
    src, tgt = torch.randint(4, 20, (3, 6)), torch.randint(4, 20, (3, 9))
    memory, mask = model.encode(src)
    full = model.decode(tgt, memory, mask)
    changed = tgt.clone()
    changed[:, 5:] = 4  # future tokens must not change earlier positions' logits
    assert torch.allclose(full[:, :5], model.decode(changed, memory, mask)[:, :5], atol=1e-5)
    cache = [{} for _ in model.decoder]
    stepwise = torch.cat([model.decode(tgt[:, i:i + 1], memory, mask, cache, start=i) for i in range(9)], dim=1)
    assert torch.allclose(full, stepwise, atol=1e-5)


def test_a_cache_with_rows_selected_mid_decode_matches_teacher_forcing():
    model = tiny().eval()
    src, tgt = torch.randint(4, 20, (4, 6)), torch.randint(4, 20, (4, 9))
    memory, mask = model.encode(src)
    rows = torch.tensor([2, 0, 3])  # finished rows leave the batch: row 1 dropped
    full = model.decode(tgt[rows], memory[rows], mask[rows])
    cache = [{} for _ in model.decoder]
    before = torch.cat([model.decode(tgt[:, i:i + 1], memory, mask, cache, start=i) for i in range(5)], dim=1)
    common.select_rows(cache, rows)  # after 5 of 9 positions: the buffers must grow again after it
    after = [model.decode(tgt[rows, i:i + 1], memory[rows], mask[rows], cache, start=i) for i in range(5, 9)]
    assert torch.allclose(full, torch.cat([before[rows], *after], dim=1), atol=1e-5)


def test_layers_normalise_before_each_sublayer():
    """Pre-norm, as the authors' fairseq models: with both sublayers' outputs a constant c, an encoder layer
    adds c to its input as it is (a post-norm layer would return LayerNorm(x + c))."""
    layer = tiny().encoder[0]
    with torch.no_grad():
        for sublayer_output in (layer.attention.out, layer.ffn.fc2):
            sublayer_output.weight.zero_()
            sublayer_output.bias.fill_(0.5)
    x = 3 * torch.randn(2, 5, 32)
    assert torch.allclose(layer(x, None), x + 1.0)


def test_cached_greedy_decoding_equals_uncached():
    model = tiny(vocab=50).eval()
    src = torch.randint(4, 50, (4, 10))
    assert model.generate(src, max_len=30) == model.generate(src, max_len=30, use_cache=False)


def test_finished_rows_leave_the_batch_without_changing_the_others():
    model = tiny(vocab=30).eval()
    with torch.no_grad():
        # a likelier EOS (its logit + ~2.5): rows finish at many different steps, a third never
        model.decoder_norm.bias.copy_(2.5 * model.embed.weight[EOS_ID])
    src = torch.randint(4, 30, (64, 6))
    together = model.generate(src, max_len=20)
    assert len(set(map(len, together))) > 2
    assert together == [model.generate(row[None], max_len=20)[0] for row in src]
    torch.manual_seed(0)
    cached = model.generate(src, max_len=20, sample=True)
    torch.manual_seed(0)
    assert cached == model.generate(src, max_len=20, sample=True, use_cache=False)


def test_sampling_follows_the_model_distribution():
    model = tiny().eval()
    src = torch.randint(4, 20, (1, 6)).repeat(4000, 1)
    memory, mask = model.encode(src[:1])
    logits = model.decode(torch.tensor([[BOS_ID]]), memory, mask)[0, 0]
    logits[common.NEVER_GENERATED] = float("-inf")  # padding and BOS are never sampled
    probs = torch.softmax(logits, dim=-1)
    torch.manual_seed(1)
    first = [seq[0] if seq else EOS_ID for seq in model.generate(src, max_len=1, sample=True)]
    empirical = torch.bincount(torch.tensor(first), minlength=20).float() / len(first)
    assert 0.5 * (empirical - probs).abs().sum() < 0.05  # total variation distance


def test_learns_to_reverse_sequences():
    """A falling loss, then greedy decoding that reverses unseen sequences."""
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
    exact = sum(p == s.flip(0).tolist() for p, s in zip(model.generate(src, max_len=10), src))
    assert exact >= 90, exact


def test_sequence_loss_ignores_padding():
    logits = torch.randn(2, 3, 10)
    targets = torch.tensor([[5, 6, PAD_ID], [7, PAD_ID, PAD_ID]])
    expected = torch.nn.functional.cross_entropy(torch.stack([logits[0, 0], logits[0, 1], logits[1, 0]]),
                                                 torch.tensor([5, 6, 7]))
    assert torch.allclose(common.sequence_loss(logits, targets), expected)
